"""FIFO rules that need no actors: waiting turns, Linear stops, resets racing admission, restarts."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.unit.models.test_fifo_state_machine import plan_for, routed
from wakeline.models.envelopes import DataChange, IssueInfo
from wakeline.models.fifo import MAX_INTERRUPTED_ATTEMPTS
from wakeline.models.outbox import EffectKind, EffectSpec, EffectState
from wakeline.models.plans import AdmissionPlan
from wakeline.models.states import DeliveryState, TurnResultKind, TurnState
from wakeline.models.store import Store
from wakeline.providers.linear.replies import INTERRUPTED_REPLY, RERUN_REPLY, RESET_REPLY


def admit(store: Store, issue: str, now: int) -> str:
    [result] = store.admit([plan_for(issue, now)])
    assert result.conversation_id
    return result.conversation_id


def test_a_waiting_turn_is_not_resumed_before_its_backoff(store: Store) -> None:
    cid = admit(store, "i-1", 1_000)
    turn = store.fifo.claim(cid, 1_000)
    assert turn is not None
    store.fifo.fail(turn.turn_id, "boom", 2_000, (60,))
    assert store.fifo.claim(cid, 30_000) is None
    assert not store.fifo.runnable(cid, 30_000)
    assert store.fifo.claim(cid, 62_000) is not None


def comment_plan(issue: str, now: int):  # type: ignore[no-untyped-def]
    """A comment on the issue, routed into its FIFO (an issue-mode route)."""
    plan = plan_for(issue, now)
    envelope = DataChange(event_type="Comment", action="create", object_id=f"c-{now}",
                          issue=IssueInfo(id=issue, identifier=f"ENG-{issue}", team_key="ENG"))
    delivery = replace(plan.delivery, envelope=envelope, event_type="Comment", action="create")
    return AdmissionPlan.fixed(delivery, now, routed(issue))


def states(store: Store) -> list[tuple[str, str | None]]:
    d = store.t.deliveries
    return [(r.state, r.completion) for r in d.select().order_by(d.id)]


def test_a_linear_stop_gives_back_the_other_work_its_running_turn_carried(store: Store) -> None:
    cid = admit(store, "i-1", 1_000)  # session s-i-1
    store.admit([plan_for("i-1", 1_100, session="s-other"), comment_plan("i-1", 1_200)])
    turn = store.fifo.claim(cid, 1_300)
    assert turn is not None and len(turn.entries) == 3
    with store.db.atomic():
        assert store.fifo.stop_session(cid, "s-i-1", 2_000) is True  # its actor stops the process
    store.fifo.finalise(turn.turn_id, TurnResultKind.STOPPED, 2_500)
    assert states(store) == [("completed", "stopped"), ("pending", None), ("pending", None)]
    again = store.fifo.claim(cid, 3_000)
    assert again is not None
    assert [e.seq for e in again.entries] == [e.seq for e in turn.entries[1:]]


def test_a_stopped_turn_that_a_crash_interrupted_ends_at_recovery(store: Store) -> None:
    cid = admit(store, "i-1", 1_000)
    store.admit([plan_for("i-1", 1_100, session="s-other")])
    turn = store.fifo.claim(cid, 1_300)
    assert turn is not None
    with store.db.atomic():
        assert store.fifo.stop_session(cid, "s-i-1", 2_000) is True
    # The process died before its actor finalised the turn: it is not re-run.
    assert store.fifo.recover(3_000) == [cid]
    assert store.fifo.turn_status(turn.turn_id) == (False, None)
    again = store.fifo.claim(cid, 3_000)
    assert again is not None and again.turn_id != turn.turn_id  # the other session's request
    results = store.t.turn_results
    assert [r.result for r in results.select()] == ["stopped"]


def test_a_linear_stop_ends_a_waiting_turn_and_gives_back_its_other_work(store: Store) -> None:
    cid = admit(store, "i-1", 1_000)
    store.admit([plan_for("i-1", 1_100, session="s-other")])
    turn = store.fifo.claim(cid, 1_300)
    assert turn is not None
    store.fifo.fail(turn.turn_id, "boom", 1_400, (60,))
    with store.db.atomic():
        assert store.fifo.stop_session(cid, "s-i-1", 2_000) is False
    assert store.fifo.turn_status(turn.turn_id) == (False, None)
    assert states(store) == [("completed", "stopped"), ("pending", None)]
    assert store.fifo.claim(cid, 3_000) is not None  # the other session's request runs now


def test_a_delivery_received_before_a_committed_reset_belongs_to_the_old_context(store: Store) -> None:
    cid = admit(store, "i-1", 1_000)
    store.fifo.reset(cid, 5_000, RESET_REPLY)
    [late] = store.admit([plan_for("i-1", 4_000)])  # arrived before the reset, committed after
    assert late.wake_ids == ()
    d = store.t.deliveries
    rows = list(d.select().order_by(d.id))
    assert [(r.state, r.completion) for r in rows] == [("completed", "reset"), ("completed", "reset")]
    answers = [(e.target, json.loads(e.body)["type"]) for e in store.t.effects.select()]
    assert answers.count(("s-i-1", "response")) == 2  # the reset's, and the late delivery's own


def test_a_turn_that_keeps_ending_with_the_process_stalls(store: Store) -> None:
    cid = admit(store, "i-1", 1_000)
    assert store.fifo.claim(cid, 1_000) is not None
    now = 2_000
    for _ in range(MAX_INTERRUPTED_ATTEMPTS):
        store.fifo.recover(now)
        store.fifo.claim(cid, now)  # runs again, and the process dies again
        now += 1_000
    store.fifo.recover(now)
    t = store.t.turns
    assert t.get(t.conversation_id == cid).state == TurnState.STALLED
    assert store.t.deliveries.get().state == DeliveryState.CLAIMED  # kept for the operator


def test_envelope_sizes_count_bytes(store: Store) -> None:
    cid = admit(store, "i-é-日本", 1_000)  # non-ASCII: bytes and characters differ
    d = store.t.deliveries
    row = d.get(d.conversation_id == cid)
    assert len(row.envelope.encode("utf-8")) > len(row.envelope)
    assert row.size_bytes == len(row.envelope.encode("utf-8"))


def test_an_inbox_retry_waits_while_following_is_off(store: Store) -> None:
    from wakeline.models.schema import INBOX_CONVERSATION_ID

    store.set_following(True)
    t = store.t.turns
    t.insert(id="turn_inbox", conversation_id=INBOX_CONVERSATION_ID, state=TurnState.RETRY.value,
             attempt=2, created_at=1, next_attempt_at=1).execute()
    assert store.fifo.due_retries(10) == [INBOX_CONVERSATION_ID]
    store.set_following(False)
    assert store.fifo.due_retries(10) == []
    assert not store.fifo.runnable(INBOX_CONVERSATION_ID, 10)


def test_a_turn_stalled_by_restarts_answers_its_sessions(store: Store) -> None:
    cid = admit(store, "i-1", 1_000)
    store.fifo.claim(cid, 1_000)
    store.t.turns.update(attempt=MAX_INTERRUPTED_ATTEMPTS).execute()
    store.fifo.recover(2_000, RERUN_REPLY, INTERRUPTED_REPLY)
    errors = [e for e in store.outbox.listing() if e["summary"].startswith("error")]
    assert len(errors) == 1 and errors[0]["target"] == "s-i-1"


def test_a_claim_says_whether_the_conversations_replies_are_still_unsettled(store: Store) -> None:
    """The runner waits for them before the agent starts, and skips that wait when none are."""
    cid = admit(store, "i-1", 1_000)
    turn = store.fifo.claim(cid, 1_100)
    assert turn is not None and not turn.replies_waiting
    ack = EffectSpec(EffectKind.AGENT_ACTIVITY, "s-i-1", "Picked up", activity_type="thought",
                     conversation_id=cid)
    with store.db.atomic():
        [effect_id] = store.outbox.prepare([ack], 1_200)
    store.fifo.finalise(turn.turn_id, TurnResultKind.RESPONSE, 1_300)
    store.admit([comment_plan("i-1", 1_400)])
    again = store.fifo.claim(cid, 1_500)
    assert again is not None and again.replies_waiting
    store.outbox.settle_all([effect_id], EffectState.REJECTED, 1_600)
    store.fifo.fail(again.turn_id, "boom", 1_700, (0,))  # its retry takes the slower claim
    retried = store.fifo.claim(cid, 1_800)
    assert retried is not None and retried.turn_id == again.turn_id and not retried.replies_waiting
