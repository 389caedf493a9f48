"""Echo memory's store rules: holds, resolution, and how long evidence is remembered."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from tests.conftest import WEBHOOK_SECRET, issue_event, now_ms, signed
from wakeline.config import Config
from wakeline.models.echoes import CANDIDATE_WINDOW_MS, EVIDENCE_KEPT_MS
from wakeline.models.outbox import EffectState
from wakeline.models.states import Outcome
from wakeline.models.store import Store
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.providers.linear.intents import write_intents
from wakeline.admission.router import Router

ME = "app-user-1"
T0 = 1_800_000_000_000
MOVE = 'mutation { issueUpdate(id: "issue-7", input: {stateId: "s-doing"}) { success } }'


@pytest.fixture
def router(make_config: Callable[..., Config]) -> Router:
    return Router(make_config(routes=[{"name": "ops", "teams": ["OPS"], "mode": "issue"}]))


def moved(actor: str = ME, state: str = "s-doing", **changed: Any) -> dict[str, Any]:
    body = issue_event("issue-7", "OPS-7", "update")
    body["actor"] = {"id": actor, "name": "Owner"}
    body["data"].update(stateId=state, state={"id": state, "name": "Doing", "type": "started"})
    body["updatedFrom"] = changed or {"stateId": "s-todo", "updatedAt": "x"}
    return body


def admit(store: Store, router: Router, body: dict[str, Any], at: int) -> Any:
    raw, headers = signed(body)
    parsed = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=60).read(
        raw, signature=headers["Linear-Signature"], delivery_id=headers["Linear-Delivery"],
        now_ms=now_ms())
    [result] = store.admit([router.plan(parsed, at)])
    return result


def intent(store: Store, at: int, state: EffectState | None = None) -> str:
    [effect_id] = store.echoes.record_intents(write_intents(MOVE), ME, at)
    if state is not None:
        store.outbox.settle(effect_id, state, at)
    return effect_id


def fifo(store: Store) -> list[tuple[str, str | None]]:
    d = store.t.deliveries
    return [(r.state, r.completion) for r in d.select().order_by(d.id)]


def test_a_hold_waits_for_the_write_then_resolves_as_ours(store: Store, router: Router) -> None:
    admit(store, router, issue_event("issue-7", "OPS-7", "create"), T0)
    effect = intent(store, T0 + 10)
    held = admit(store, router, moved(), T0 + 20)
    assert held.outcome is Outcome.HELD and held.wake_ids == ()
    assert store.echoes.resolve(T0 + 30).echoes == 0  # still in flight
    store.outbox.settle(effect, EffectState.CONFIRMED, T0 + 40)
    result = store.echoes.resolve(T0 + 50)
    assert (result.echoes, result.released, result.wake_ids) == (1, 0, [])
    assert fifo(store) == [("pending", None), ("completed", "self_echo")]
    assert store.inbox.unread_count() == 1  # our echo never reaches the inbox


def test_a_mismatch_is_released_in_place_and_into_the_inbox(store: Store, router: Router) -> None:
    created = admit(store, router, issue_event("issue-7", "OPS-7", "create"), T0)
    effect = intent(store, T0 + 10)
    admit(store, router, moved(state="s-other"), T0 + 20)  # same account, another state
    store.outbox.settle(effect, EffectState.CONFIRMED, T0 + 40)
    result = store.echoes.resolve(T0 + 50)
    assert (result.echoes, result.released) == (0, 1)
    assert result.wake_ids == [created.conversation_id]
    assert fifo(store) == [("pending", None), ("pending", None)]
    assert store.inbox.unread_count() == 2


def test_a_rejected_write_releases_what_it_held(store: Store, router: Router) -> None:
    effect = intent(store, T0)
    assert admit(store, router, moved(), T0 + 20).outcome is Outcome.HELD
    store.outbox.settle(effect, EffectState.REJECTED, T0 + 40)
    assert store.echoes.resolve(T0 + 50).released == 1


def test_candidates_match_within_24_hours_of_the_attempt(store: Store, router: Router) -> None:
    intent(store, T0, EffectState.OUTCOME_UNKNOWN)
    assert admit(store, router, moved(), T0 + CANDIDATE_WINDOW_MS).outcome is Outcome.HELD
    late = admit(store, router, moved(state="s-late"), T0 + CANDIDATE_WINDOW_MS + 1)
    assert late.outcome is Outcome.ACCEPTED


def test_confirmed_evidence_is_an_echo_only_inside_the_window(store: Store, router: Router) -> None:
    intent(store, T0, EffectState.CONFIRMED)
    assert admit(store, router, moved(), T0 + 90_000).outcome is Outcome.SELF_ECHO
    assert admit(store, router, moved(updatedAt="y", stateId="s-x"), T0 + 90_001).outcome \
        is Outcome.ACCEPTED


def test_overlapping_writes_an_answered_ones_echo_is_ours_at_admission(
        store: Store, router: Router) -> None:
    intent(store, T0, EffectState.CONFIRMED)  # the first move answered
    intent(store, T0 + 10)  # the second is in flight
    assert admit(store, router, moved(), T0 + 20).outcome is Outcome.SELF_ECHO
    assert admit(store, router, moved(state="s-review"), T0 + 30).outcome is Outcome.HELD


def test_proof_from_any_answered_write_of_the_subject_completes_a_hold(
        store: Store, router: Router) -> None:
    admit(store, router, issue_event("issue-7", "OPS-7", "create"), T0)
    first = intent(store, T0 + 10)
    second = intent(store, T0 + 10)
    assert admit(store, router, moved(), T0 + 20).outcome is Outcome.HELD
    assert sorted(json.loads(store.t.held.get().intents)) == sorted([first, second])
    # As a hold admitted before this rule left it: waiting on the second write only.
    store.t.held.update(intents=json.dumps([second])).execute()
    store.outbox.settle(first, EffectState.CONFIRMED, T0 + 30)
    result = store.echoes.resolve(T0 + 40)  # the second still in flight: the proof is enough
    assert (result.echoes, result.released) == (1, 0)
    assert fifo(store) == [("pending", None), ("completed", "self_echo")]


def test_an_answer_outside_the_window_proves_nothing_at_resolution(
        store: Store, router: Router) -> None:
    admit(store, router, issue_event("issue-7", "OPS-7", "create"), T0)
    intent(store, T0, EffectState.CONFIRMED)  # the same write, answered long before
    pending = intent(store, T0 + 100_000)
    assert admit(store, router, moved(), T0 + 100_010).outcome is Outcome.HELD
    store.outbox.settle(pending, EffectState.REJECTED, T0 + 100_020)
    assert store.echoes.resolve(T0 + 100_030, echo_window_ms=90_000).released == 1


def test_unknown_outcomes_are_never_pruned_answered_ones_after_7_days(store: Store, router: Router) -> None:
    unknown = intent(store, T0, EffectState.OUTCOME_UNKNOWN)
    confirmed = intent(store, T0, EffectState.CONFIRMED)
    # Another state than the confirmed write's: no proof, so held by the unknown one.
    assert admit(store, router, moved(state="s-other"), T0 + 10).outcome is Outcome.HELD
    store.echoes.prune(T0 + EVIDENCE_KEPT_MS)
    ids = {r.id for r in store.t.effects.select()}
    assert ids == {unknown, confirmed}
    store.echoes.prune(T0 + EVIDENCE_KEPT_MS + 1)
    assert {r.id for r in store.t.effects.select()} == {unknown}
    assert [r.state for r in store.t.held.select()] == ["held"]
    assert json.loads(store.t.held.get().intents) == [unknown]  # it waits on the unknown one only


def test_intents_that_never_left_are_released(store: Store) -> None:
    prepared = intent(store, T0)
    dispatched = intent(store, T0)
    store.outbox.mark_all_dispatched([dispatched], T0)
    assert store.echoes.release_unsent(T0 + 1) == 1
    states = {r.id: r.state for r in store.t.effects.select()}
    assert states == {prepared: "released", dispatched: "dispatched"}
    assert store.outbox.prepared() == []  # intents are never the outbox's to send
