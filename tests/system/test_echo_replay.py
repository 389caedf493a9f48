"""A 25-hour session replayed on the frozen clock: no write of ours ever wakes a turn.

542 human comments (a third of them from the owner's own account, which wakeline also
writes with) land on six routed issues over 25 hours. Each turn the agent answers with
a reply comment (an outbox write with a client-chosen id) and moves its issue's state
through `linear graphql` (an intent). Linear sends every one of those writes back as a
signed webhook, at random moments: before the write has answered, or after. Time is
frozen and moved from event to event; webhooks go through the real ingress, admission
writer and store, echo memory is the real actor, and turns are claimed and finalised
on the real FIFO. In the end every human comment rode exactly one turn, every turn
carried human work, and no echo reached a FIFO as work or the inbox.
"""

from __future__ import annotations

import heapq
import itertools
import random
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest
from falcon import testing
from freezegun import freeze_time

from tests.conftest import WEBHOOK_SECRET, comment_event, issue_event, signed
from wakeline.actors.echo_memory import EchoMemory
from wakeline.actors.tracker import SettledWrite
from wakeline.admission.writer import AdmissionWriter
from wakeline.clock import SystemClock, to_ms
from wakeline.config import Config
from wakeline.http.ingress import create_ingress_app
from wakeline.service.metrics import Metrics
from wakeline.models.outbox import EffectKind, EffectState
from wakeline.models.states import TurnResultKind
from wakeline.models.store import Store
from wakeline.providers.linear import replies
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.providers.linear.intents import write_intents

pytestmark = pytest.mark.slow

ME = "app-user-1"
HUMAN_COMMENTS, HOURS, ISSUES = 542, 25, 6
START = datetime(2026, 11, 29, 0, 0, tzinfo=timezone.utc)
STATES = ("s-doing", "s-review")


class Replay:
    """The session's moving parts and what they recorded."""

    def __init__(self, config: Config, store: Store, clock: SystemClock) -> None:
        self.rng = random.Random(20261201)
        self.store, self.clock = store, clock
        self.writer = AdmissionWriter(store)
        self.writer.start()
        webhooks = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=60)
        self.ingress = testing.TestClient(
            create_ingress_app(config, webhooks, self.writer, clock, Metrics()))
        self.echo = EchoMemory.start(store, clock, lambda ids: None).proxy()
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.running: dict[str, Any] = {}  # conversation id -> claimed turn
        self.state = {f"issue-{i}": "s-todo" for i in range(ISSUES)}
        self.outcomes: dict[str, int] = {}
        self.human: dict[str, str] = {}  # delivery id -> issue
        self.turn_batches: list[list[str]] = []  # headlines of each turn's batch

    def at(self, seconds: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (seconds, next(self.order), action))

    def deliver(self, body: dict[str, Any], delivery: str | None = None) -> str:
        body["webhookTimestamp"] = to_ms(self.clock.now())
        raw, headers = signed(body, delivery=delivery)
        outcome = self.ingress.simulate_post("/webhooks/linear", body=raw, headers=headers).json["outcome"]
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        return str(outcome)

    # --- what people do -------------------------------------------------------------------

    def human_comment(self, n: int) -> None:
        issue = f"issue-{n % ISSUES}"
        body = comment_event(issue, f"OPS-{n % ISSUES}")
        body["data"]["issue"]["team"] = {"key": "OPS"}
        body["data"]["body"] = f"human-{n}"
        if n % 3 == 0:  # the owner, on the account wakeline writes with: still a person
            body["actor"] = {"id": ME, "name": "Owner", "type": "user"}
        delivery = f"human-{n}"
        assert self.deliver(body, delivery) == "accepted"
        self.human[delivery] = issue

    # --- what the agent does ----------------------------------------------------------------

    def start_turns(self, now: float) -> None:
        fifo = self.store.fifo
        for cid in fifo.conversations_with_work(to_ms(self.clock.now())):
            if cid in self.running:
                continue
            turn = fifo.claim(cid, to_ms(self.clock.now()))
            if turn is None:
                continue
            self.running[cid] = turn
            self.turn_batches.append([e.headline for e in turn.entries])
            self.at(now + self.rng.uniform(20, 300), lambda turn=turn: self.finish(turn))

    def finish(self, turn: Any) -> None:
        """The agent answers (a reply comment) and moves its issue (an update through graphql)."""
        now_s = (self.clock.now() - START).total_seconds()
        now = to_ms(self.clock.now())
        effects = replies.turn_result(turn, TurnResultKind.RESPONSE, "done", "comment")
        assert self.store.fifo.finalise(turn.turn_id, TurnResultKind.RESPONSE, now, effects=effects)
        del self.running[turn.conversation_id]
        [reply] = [e for e in self.store.outbox.prepared() if e.target == turn.issue_id]
        self.store.outbox.mark_dispatched(reply.id, now)
        self.at(now_s + self.rng.uniform(0.1, 3), lambda: self.settle_reply(reply.id))
        self.at(now_s + self.rng.uniform(0.1, 8), lambda: self.comment_echo(reply.id, turn.issue_id))
        issue = turn.issue_id
        target = STATES[0] if self.state[issue] != STATES[0] else STATES[1]
        query = f'mutation {{ issueUpdate(id: "{issue}", input: {{stateId: "{target}"}}) {{ success }} }}'
        intents = self.store.echoes.record_intents(write_intents(query), ME, now, turn.conversation_id)
        self.store.outbox.mark_all_dispatched(intents, now)
        before, self.state[issue] = self.state[issue], target
        self.at(now_s + self.rng.uniform(0.2, 5), lambda: self.settle_move(intents))
        self.at(now_s + self.rng.uniform(0.05, 10), lambda: self.state_echo(issue, before, target))

    # --- what Linear does -------------------------------------------------------------------

    def settle_reply(self, effect_id: str) -> None:
        self.store.outbox.settle(effect_id, EffectState.CONFIRMED, to_ms(self.clock.now()))

    def settle_move(self, intents: list[str]) -> None:
        for effect_id in intents:
            self.store.outbox.settle(effect_id, EffectState.CONFIRMED, to_ms(self.clock.now()))
            self.echo.settled(SettledWrite(effect_id, EffectKind.MUTATION, "", EffectState.CONFIRMED,
                                           ())).get(timeout=10)

    def comment_echo(self, effect_id: str, issue: str) -> None:
        body = comment_event(issue, "OPS-x")
        body["actor"] = {"id": ME, "name": "wakeline"}
        body["data"]["id"] = effect_id  # the id wakeline chose before the write left
        assert self.deliver(body) == "self_echo"

    def state_echo(self, issue: str, before: str, after: str) -> None:
        body = issue_event(issue, "OPS-x", "update")
        body["actor"] = {"id": ME, "name": "wakeline"}
        body["data"].update(stateId=after, state={"id": after, "name": after, "type": "started"})
        body["updatedFrom"] = {"stateId": before, "updatedAt": "x", "startedAt": None}
        assert self.deliver(body) in ("held", "self_echo")


def test_twenty_five_hours_of_comments_wake_no_turn_for_our_own_writes(
        make_config: Callable[..., Config], tmp_path: Any) -> None:
    config = make_config(routes=[{"name": "ops", "teams": ["OPS"], "mode": "issue"}])
    with freeze_time(START) as frozen:
        clock = SystemClock()
        store = Store.open(config.database_path, clock)
        replay = Replay(config, store, clock)
        try:
            span = HOURS * 3600
            for n, when in enumerate(sorted(replay.rng.uniform(0, span) for _ in range(HUMAN_COMMENTS))):
                replay.at(when, lambda n=n: replay.human_comment(n))
            while replay.events:
                when, _, action = heapq.heappop(replay.events)
                frozen.move_to(START + timedelta(seconds=when))
                action()
                replay.start_turns(when)
            assert (clock.now() - START) >= timedelta(hours=HOURS - 1)
        finally:
            replay.writer.stop()
            replay.echo.actor_ref.stop()

        d, r = store.t.deliveries, store.t.receipts
        rows = list(d.select(d.state, d.completion, d.turn_id, r.delivery_id, r.outcome)
                    .join(r, on=(d.receipt_id == r.id)).dicts())
        human = [row for row in rows if row["delivery_id"] in replay.human]
        echoes = [row for row in rows if row["delivery_id"] not in replay.human]
        # Every human comment rode exactly one turn, and completed with its answer.
        assert len(human) == HUMAN_COMMENTS
        assert {(row["state"], row["completion"]) for row in human} == {("completed", "response")}
        assert all(row["turn_id"] for row in human)
        # Our own writes never became work: held ones completed as ours, none ever claimed.
        assert echoes and {(row["state"], row["completion"], row["turn_id"]) for row in echoes} == {
            ("completed", "self_echo", None)}
        # Zero turns caused by wakeline's own writes: every turn carried human comments only.
        assert all(batch and all(h.startswith("Comment create") for h in batch)
                   for batch in replay.turn_batches)
        turns = {row["turn_id"] for row in human}
        assert len(turns) == len(replay.turn_batches)
        # Both echo paths were exercised, and nothing of ours reached the inbox.
        assert replay.outcomes["held"] > 50 and replay.outcomes["self_echo"] > 500
        assert store.inbox.unread_count() == HUMAN_COMMENTS
        assert store.echoes.held_count() == 0
        store.close()
