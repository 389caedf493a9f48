"""A hypothesis state machine over the FIFO against a simple model.

Rules: admit (two agent sessions per issue), claim, finalise, fail, crash (recover),
reset, a Linear stop of one session, retry, abandon, over three conversations. After
every step: never two claims in a conversation, claims are always the oldest
unfinished deliveries (no order inversion), nothing completed returns, and nothing is
lost.
"""

from __future__ import annotations

import hashlib
import tempfile
import uuid
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from wakeline.clock import SystemClock
from wakeline.models.envelopes import AgentSession, InboundDelivery, IssueInfo, Subject, parse_envelope
from wakeline.models.plans import AdmissionPlan, Decision, NewConversation
from wakeline.models.states import DeliveryState, Outcome, Ownership, TurnResultKind, TurnState
from wakeline.models.store import Store
from wakeline.providers.linear.replies import RESET_REPLY

ISSUES = ("i-a", "i-b", "i-c")
SESSIONS = ("one", "two")  # two agent sessions per issue, so a Linear stop can split a turn
BACKOFF = (0, 0)


def plan_for(issue: str, now: int, session: str | None = None) -> AdmissionPlan:
    delivery_id = str(uuid.uuid4())
    envelope = AgentSession(action="prompted", session_id=session or f"s-{issue}",
                            issue=IssueInfo(id=issue, identifier=f"ENG-{issue}", team_key="ENG"))
    subject = Subject(namespace="linear:org:issue", key=issue)
    parsed = InboundDelivery(delivery_id=delivery_id, body_sha256=hashlib.sha256(delivery_id.encode()).hexdigest(),
                             event_type="AgentSessionEvent", action="prompted", webhook_ms=now,
                             envelope=envelope, subject=subject, headline="h", inbox_event=None)
    return AdmissionPlan.fixed(parsed, now, routed(issue, session=envelope.session_id))


def routed(issue: str, session: str | None = None) -> Decision:
    """Accepted into the issue's conversation of route `eng` (created if new)."""
    return Decision(Outcome.ACCEPTED, create=NewConversation("eng", issue, False, Ownership.OWNED),
                    to_fifo=True, session_id=session, reset_reply=RESET_REPLY)


class FifoMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.store = Store.open(Path(self.dir.name) / "db.sqlite", SystemClock())
        self.now = 1_000
        self.conv: dict[str, str] = {}          # issue -> conversation id
        self.completed: dict[int, str] = {}     # seq -> completion, never changes once set
        self.admitted: list[int] = []

    def teardown(self) -> None:
        self.store.close()
        self.dir.cleanup()

    def tick(self) -> int:
        self.now += 10
        return self.now

    def turn(self, issue: str):  # type: ignore[no-untyped-def]
        cid = self.conv.get(issue)
        t = self.store.t.turns
        return t.get_or_none(t.conversation_id == cid) if cid else None

    def claimed_by(self, turn_id: str) -> list[int]:
        d = self.store.t.deliveries
        return [r.id for r in d.select(d.id).where(
            (d.turn_id == turn_id) & (d.state == DeliveryState.CLAIMED.value))]

    @rule(issue=st.sampled_from(ISSUES), session=st.sampled_from(SESSIONS))
    def admit(self, issue: str, session: str) -> None:
        [result] = self.store.admit([plan_for(issue, self.tick(), session=f"s-{issue}-{session}")])
        assert result.outcome is Outcome.ACCEPTED and result.conversation_id
        self.conv[issue] = result.conversation_id
        d = self.store.t.deliveries
        self.admitted.append(d.select(d.id).order_by(d.id.desc()).scalar())

    @precondition(lambda self: self.conv)
    @rule(issue=st.sampled_from(ISSUES))
    def claim(self, issue: str) -> None:
        if issue not in self.conv:
            return
        before = self.turn(issue)
        claimed = self.store.fifo.claim(self.conv[issue], self.tick(), max_deliveries=3)
        if before is not None and before.stop_requested:
            assert claimed is None or claimed.turn_id != before.id  # it ended, stopped
        elif before is not None:
            if before.state == TurnState.STALLED:
                assert claimed is None
            else:
                assert claimed is not None and claimed.turn_id == before.id
        if claimed is not None:
            assert 1 <= len(claimed.entries) <= 3

    @precondition(lambda self: self.conv)
    @rule(issue=st.sampled_from(ISSUES), result=st.sampled_from(list(TurnResultKind)[:3]))
    def finalise(self, issue: str, result: TurnResultKind) -> None:
        turn = self.turn(issue)
        if turn is None or turn.state != TurnState.RUNNING:
            return
        seqs = self.claimed_by(turn.id)
        assert self.store.fifo.finalise(turn.id, result, self.tick())
        for seq in seqs:
            assert seq not in self.completed
            self.completed[seq] = result.value
        assert not self.store.fifo.finalise(turn.id, result, self.tick()), "finalised twice"

    @precondition(lambda self: self.conv)
    @rule(issue=st.sampled_from(ISSUES))
    def fail(self, issue: str) -> None:
        turn = self.turn(issue)
        if turn is not None and turn.state == TurnState.RUNNING:
            self.store.fifo.fail(turn.id, "boom", self.tick(), BACKOFF)

    @rule()
    def crash_and_recover(self) -> None:
        self.store.close()
        self.store = Store.open(Path(self.dir.name) / "db.sqlite", SystemClock())
        self.store.fifo.recover(self.tick())

    @precondition(lambda self: self.conv)
    @rule(issue=st.sampled_from(ISSUES))
    def reset(self, issue: str) -> None:
        if issue not in self.conv:
            return
        now = self.tick()
        d = self.store.t.deliveries
        open_before = [r.id for r in d.select(d.id).where(
            (d.conversation_id == self.conv[issue]) & (d.state != DeliveryState.COMPLETED.value))]
        self.store.fifo.reset(self.conv[issue], now)
        for seq in open_before:
            assert seq not in self.completed
            self.completed[seq] = "reset"

    @precondition(lambda self: self.conv)
    @rule(issue=st.sampled_from(ISSUES), session=st.sampled_from(SESSIONS))
    def linear_stop(self, issue: str, session: str) -> None:
        if issue not in self.conv:
            return
        d = self.store.t.deliveries
        session_id = f"s-{issue}-{session}"
        mine = [r.id for r in d.select().where(
            (d.conversation_id == self.conv[issue]) & (d.state != DeliveryState.COMPLETED.value))
            if parse_envelope(r.envelope).session_id == session_id]  # type: ignore[union-attr]
        with self.store.db.atomic():
            self.store.fifo.stop_session(self.conv[issue], session_id, self.tick())
        for seq in mine:
            assert seq not in self.completed
            self.completed[seq] = "stopped"

    @precondition(lambda self: self.conv)
    @rule(issue=st.sampled_from(ISSUES), give_up=st.booleans())
    def operator(self, issue: str, give_up: bool) -> None:
        turn = self.turn(issue)
        if turn is None or turn.state != TurnState.STALLED:
            return
        seqs = self.claimed_by(turn.id)
        if give_up:
            assert self.store.fifo.abandon(self.conv[issue], self.tick())
            for seq in seqs:
                self.completed[seq] = "abandoned"
        else:
            assert self.store.fifo.retry(self.conv[issue], self.tick())

    @invariant()
    def fifo_rules_hold(self) -> None:
        d, t = self.store.t.deliveries, self.store.t.turns
        rows = list(d.select().order_by(d.id))
        assert [r.id for r in rows] == sorted(self.admitted), "a delivery was lost or invented"
        turns = {r.id: r for r in t.select()}
        by_conv: dict[str, list] = {}
        for r in rows:
            by_conv.setdefault(r.conversation_id, []).append(r)
            if r.id in self.completed:
                assert r.state == DeliveryState.COMPLETED and r.completion == self.completed[r.id]
            else:
                assert r.state != DeliveryState.COMPLETED, f"{r.id} completed outside the model"
        for cid, items in by_conv.items():
            claimed = [r for r in items if r.state == DeliveryState.CLAIMED]
            assert len({r.turn_id for r in claimed}) <= 1, "two claims in one conversation"
            for r in claimed:
                assert r.turn_id in turns, "a claim without its turn"
            unfinished = [r for r in items if r.state != DeliveryState.COMPLETED]
            states = [r.state for r in unfinished]
            assert states == sorted(states, key=lambda s: s != DeliveryState.CLAIMED), "order inversion"


TestFifo = FifoMachine.TestCase
TestFifo.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])
