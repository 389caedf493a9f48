"""The store's retention (`[store] keep_days`): what goes, what always stays, in small batches.

Store-level, on a real store (SQLite in tmp_path, or PostgreSQL under
`WAKELINE_TEST_DATABASE=postgres`), with explicit instants: a pass is run at a chosen `now`
(the frozen clock's, for the retries through the ingress).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import issue_event, now_ms, on_postgres, session_event, signed
from tests.unit.models.test_echoes import (  # noqa: F401 (router: a fixture)
    T0, admit as admit_event, intent, moved, router)
from tests.unit.models.test_fifo_state_machine import plan_for
from wakeline.config import Config
from wakeline.models.bindings import Binding
from wakeline.models.envelopes import InboundDelivery
from wakeline.models.outbox import EffectKind, EffectSpec, EffectState
from wakeline.models.plans import AdmissionPlan, Decision
from wakeline.models.retention import DAY_MS, HOUR_MS, Retention
from wakeline.models.states import Outcome, TurnResultKind
from wakeline.models.store import Store
from wakeline.admission.router import Router

KEEP = DAY_MS  # keep_days = 1 in these tests; the dedupe window is 24 h unless said


def retention(store: Store, keep_ms: int = KEEP, dedupe_ms: int = 24 * HOUR_MS,
              **kw: Any) -> Retention:
    return Retention(store.db, keep_ms, dedupe_ms, **kw)


def other(now: int, *, inbox: bool = False) -> AdmissionPlan:
    """A delivery that joins no FIFO: ignored (a receipt only), or an unread inbox message."""
    delivery_id = str(uuid.uuid4())
    parsed = InboundDelivery(
        delivery_id=delivery_id, body_sha256=hashlib.sha256(delivery_id.encode()).hexdigest(),
        event_type="Comment", action="create", webhook_ms=now, envelope=None, subject=None,
        headline="a comment", inbox_event={"type": "Comment"} if inbox else None)
    decision = Decision(Outcome.ACCEPTED) if inbox else Decision(Outcome.IGNORED,
                                                                 reason="team_not_routed")
    return AdmissionPlan.fixed(parsed, now, decision, needs_conversation=False)


def admit(store: Store, issue: str, now: int, session: str | None = None) -> str:
    [result] = store.admit([plan_for(issue, now, session=session)])
    assert result.conversation_id
    return result.conversation_id


def run_turn(store: Store, cid: str, now: int) -> str:
    turn = store.fifo.claim(cid, now)
    assert turn is not None
    assert store.fifo.finalise(turn.turn_id, TurnResultKind.RESPONSE, now + 10, output="done")
    return turn.turn_id


def terminal(store: Store, cid: str) -> None:
    with store.db.atomic():
        store.db.execute_sql("UPDATE conversations SET terminal = 1, outcome = 'completed'"
                             " WHERE id = ?", (cid,))


def rows(store: Store, table: str, key: str = "id") -> set[Any]:
    """The keys of a table's rows."""
    return {r[0] for r in store.db.execute_sql(f"SELECT {key} FROM {table}").fetchall()}


def deliveries_of(store: Store, cid: str) -> set[int]:
    d = store.t.deliveries
    return {r.id for r in d.select(d.id).where(d.conversation_id == cid)}


def results_of(store: Store, cid: str) -> list[int]:
    r = store.t.turn_results
    return [row.id for row in r.select(r.id).where(r.conversation_id == cid).order_by(r.id)]


def effect(store: Store, now: int, kind: EffectKind = EffectKind.COMMENT) -> str:
    spec = EffectSpec(kind, "issue-x", "a reply") if kind is not EffectKind.UPDATE else EffectSpec(
        kind, "issue-x", "", update_field="issueUpdate", update_input={"stateId": "s"})
    with store.db.atomic():
        [effect_id] = store.outbox.prepare([spec], now)
    return effect_id


def test_finished_work_past_keep_days_goes_and_open_work_stays(store: Store) -> None:
    # An open conversation: an earlier agent session's turn, then the current session's. The
    # newest entry of the current session stays: a follow-up prompt is known by it.
    a = admit(store, "a", T0, session="s-old")
    admit(store, "a", T0 + 1, session="s-old")
    run_turn(store, a, T0 + 2)
    admit(store, "a", T0 + 100, session="s-new")
    run_turn(store, a, T0 + 101)
    admit(store, "a", T0 + 200, session="s-new")
    run_turn(store, a, T0 + 201)
    current_a = {max(deliveries_of(store, a))}
    # A closed conversation: everything of it may go.
    b = admit(store, "b", T0)
    run_turn(store, b, T0 + 1)
    terminal(store, b)
    # Open work: pending; claimed by a turn in flight; completed early while its turn runs.
    c = admit(store, "c", T0)
    e = admit(store, "e", T0)
    assert store.fifo.claim(e, T0 + 1) is not None
    d = admit(store, "d", T0, session="s-d1")
    admit(store, "d", T0 + 1, session="s-d2")
    assert store.fifo.claim(d, T0 + 2) is not None
    with store.db.atomic():
        assert store.fifo.stop_session(d, "s-d1", T0 + 3)  # s-d1 completed, its turn still runs
    store.admit([other(T0), other(T0, inbox=True)])
    inbox_receipt = store.t.inbox.get().receipt_id
    store.gates.request(a, T0)
    receipts_before = len(rows(store, "receipts"))
    kept_receipts = {r.receipt_id for r in store.t.deliveries.select().where(
        store.t.deliveries.id.in_(current_a | deliveries_of(store, c) | deliveries_of(store, d)
                                  | deliveries_of(store, e)))} | {inbox_receipt}

    report = retention(store).run(T0 + 2 * DAY_MS)

    assert deliveries_of(store, a) == current_a
    assert store.fifo.knows_session(a, "s-new") and not store.fifo.knows_session(a, "s-old")
    assert deliveries_of(store, b) == set()
    assert len(deliveries_of(store, c)) == 1 and len(deliveries_of(store, e)) == 1
    assert len(deliveries_of(store, d)) == 2
    assert len(results_of(store, a)) == 1 and results_of(store, b) == []
    assert rows(store, "receipts") == kept_receipts
    assert report.rows == {"deliveries": 4, "turn_results": 3, "effects": 0,
                           "receipts": receipts_before - len(kept_receipts)}
    assert store.t.conversations.select().count() == 6  # five issues and the inbox
    assert store.gates.get(a).phase.value == "planning"
    assert store.fifo.turn_status(store.t.turns.get(store.t.turns.conversation_id == d).id)[0]


def test_a_retry_inside_the_dedupe_window_is_a_duplicate_however_short_keep_days_is(
        frozen: Any, ingress: Any, store: Store) -> None:
    def linear_sends() -> Any:
        """Delivery `d-1`, as Linear retries it: the same id, signed again now."""
        raw, headers = signed(session_event(identifier="XYZ-1"), delivery="d-1")
        return ingress.simulate_post("/webhooks/linear", body=raw, headers=headers).json

    assert linear_sends() == {"outcome": "ignored", "reason": "team_not_routed"}
    tiny = retention(store, keep_ms=60_000)  # keep_days: one minute; dedupe_hours: 24
    frozen.tick(timedelta(hours=7))  # Linear's last retry comes about 6 h after a failure
    assert tiny.run(now_ms()).rows["receipts"] == 0
    assert linear_sends() == {"outcome": "duplicate", "first_outcome": "ignored"}
    frozen.tick(timedelta(hours=18))
    assert tiny.run(now_ms()).rows["receipts"] == 1
    assert linear_sends()["outcome"] == "ignored"  # past the window, it would be new again


def test_settled_effects_go_by_their_windows_and_unsettled_ones_never(store: Store) -> None:
    prepared = effect(store, T0)
    unknown = effect(store, T0)
    store.outbox.mark_dispatched(unknown, T0)
    store.outbox.recover(T0)  # a crash while it was on the wire: outcome_unknown
    dispatched = effect(store, T0)
    store.outbox.mark_dispatched(dispatched, T0)
    confirmed = effect(store, T0)
    rejected = effect(store, T0)
    update = effect(store, T0, EffectKind.UPDATE)  # an intent: echo memory's evidence window
    for effect_id, state in ((confirmed, EffectState.CONFIRMED), (rejected, EffectState.REJECTED),
                             (update, EffectState.CONFIRMED)):
        store.outbox.settle(effect_id, state, T0)
    prepared_late = effect(store, T0 + DAY_MS)
    short = retention(store, keep_ms=60_000, dedupe_ms=12 * HOUR_MS)

    short.run(T0 + 6 * HOUR_MS)
    assert rows(store, "effects") == {prepared, dispatched, unknown, confirmed, update,
                                      prepared_late}  # a confirmed create: the dedupe window
    short.run(T0 + 2 * DAY_MS)
    assert rows(store, "effects") == {prepared, dispatched, unknown, update, prepared_late}
    short.run(T0 + 8 * DAY_MS)
    assert rows(store, "effects") == {prepared, dispatched, unknown, prepared_late}
    assert store.outbox.get(unknown)["state"] == "outcome_unknown"


def test_a_conversation_keeps_its_latest_result_and_what_its_thread_still_owes(
        store: Store) -> None:
    a = admit(store, "a", T0)
    run_turn(store, a, T0 + 1)
    for n in (1, 2):
        admit(store, "a", T0 + 10 * n)
        run_turn(store, a, T0 + 10 * n + 1)
    first, second, third = results_of(store, a)
    store.bindings.bind(Binding(a, "discord", "1", "2", "ENG-a", False, False), T0)
    store.bindings.answered(a, first)
    later = T0 + 2 * DAY_MS

    retention(store).run(later)
    assert results_of(store, a) == [second, third]  # the thread has not shown them yet
    store.bindings.answered(a, third)
    retention(store).run(later)
    assert results_of(store, a) == [third]  # the latest: GET /v1/conversations/{id} shows it
    terminal(store, a)
    retention(store).run(later)
    assert results_of(store, a) == []


def test_a_held_delivery_and_the_write_it_waits_for_stay(store: Store, router: Router) -> None:
    admit_event(store, router, issue_event("issue-7", "OPS-7", "create"), T0)
    pending_write = intent(store, T0)
    held = admit_event(store, router, moved(), T0 + 1_000)
    assert held.outcome is Outcome.HELD
    holds = rows(store, "held_deliveries", "receipt_id")

    retention(store, keep_ms=60_000, dedupe_ms=60_000).run(T0 + 30 * DAY_MS)

    assert pending_write in rows(store, "effects")
    assert rows(store, "held_deliveries", "receipt_id") == holds
    d = store.t.deliveries
    assert d.select().where(d.state == "held").count() == 1
    assert rows(store, "receipts") >= holds


def test_a_step_deletes_at_most_one_batch(store: Store) -> None:
    store.admit([other(T0) for _ in range(35)])
    small = retention(store, batch=10)
    later = T0 + 2 * DAY_MS

    assert [small.prune("receipts", later) for _ in range(5)] == [10, 10, 10, 5, 0]
    store.admit([other(T0) for _ in range(25)])
    small.begin(later)
    steps = 1
    while small.step(later):
        steps += 1
    assert small.last is not None and small.last.rows["receipts"] == 25
    assert steps >= 3 + len(("deliveries", "turn_results", "effects"))


def test_turn_results_go_a_sixth_of_a_batch_at_a_time(store: Store) -> None:
    """A result carries up to 64 KB of output: fewer of them make as short a step."""
    cid = admit(store, "a", T0)
    for n in range(5):
        run_turn(store, cid, T0 + 100 * n)
        admit(store, "a", T0 + 100 * n + 50)
    terminal(store, cid)
    small = retention(store, batch=12)
    assert [small.prune("turn_results", T0 + 2 * DAY_MS) for _ in range(4)] == [2, 2, 1, 0]


@pytest.mark.skipif(not on_postgres(), reason="hosts share a database only on PostgreSQL")
def test_a_host_skips_its_pass_while_another_prunes(store: Store, config: Config) -> None:
    import psycopg

    from wakeline.models.dialect import _lock_key
    from wakeline.models.retention import RETENTION_LOCK

    store.admit([other(T0) for _ in range(3)])
    with psycopg.connect(config.scale.database_url) as other_host:
        other_host.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(RETENTION_LOCK),))
        report = retention(store).run(T0 + 2 * DAY_MS)
        assert report.stopped == "another host is pruning" and report.rows == {}
    assert retention(store).run(T0 + 2 * DAY_MS).rows["receipts"] == 3


def test_doctor_shows_the_windows_and_the_last_pass(store: Store) -> None:
    store.admit([other(T0) for _ in range(4)])
    keeper = retention(store)
    [before] = keeper.checks()
    assert before.ok and "keep_days 1, dedupe_hours 24; no pass yet" in before.detail
    keeper.run(T0 + 2 * DAY_MS)
    [after] = keeper.checks()
    assert after.ok and "4 rows (receipts 4)" in after.detail
    assert "MB on disk" in after.detail


@pytest.mark.skipif(on_postgres(), reason="the fault is a SQLite trigger")
def test_a_failed_pass_deletes_nothing_more_and_doctor_says_so(store: Store) -> None:
    store.admit([other(T0) for _ in range(4)])
    store.db.execute_sql("CREATE TRIGGER refuse BEFORE DELETE ON receipts"
                         " BEGIN SELECT RAISE(ABORT, 'refused'); END")
    keeper = retention(store)

    report = keeper.run(T0 + 2 * DAY_MS)
    assert report.stopped is not None and report.stopped.startswith("failed")
    assert len(rows(store, "receipts")) == 4
    [check] = keeper.checks()
    assert not check.ok and check.fix and "pruning the store failed" in check.fix
    store.db.execute_sql("DROP TRIGGER refuse")
    assert keeper.run(T0 + 2 * DAY_MS).rows["receipts"] == 4 and keeper.checks()[0].ok
