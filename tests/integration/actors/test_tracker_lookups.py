"""The tracker's ownership lookups: one call per question, cached until a mutation goes out."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import LINEAR_KEY
from tests.fakes.linear import FakeLinear
from tests.helpers import wait_until
from tests.unit.models.test_fifo_state_machine import plan_for
from wakeline.actors.tracker import Tracker
from wakeline.clock import SystemClock
from wakeline.models.plans import AdmissionPlan, Decision, NewConversation
from wakeline.models.states import Outcome, Ownership
from wakeline.models.store import Store
from wakeline.providers.linear.credentials import StaticCredential
from wakeline.providers.linear.client import LinearClient, RequestBudget


@pytest.fixture
def fake() -> Iterator[FakeLinear]:
    linear = FakeLinear(issues={"i-7": {"project": "project-p", "team": "OPS"}}).start()
    yield linear
    linear.stop()


def pending(store: Store, issue: str) -> str:
    """A conversation created by a comment whose project is not known yet."""
    plan = plan_for(issue, 1_000)
    decision = Decision(Outcome.ACCEPTED, to_fifo=True,
                        create=NewConversation("ops", issue, False, Ownership.PENDING))
    [result] = store.admit([AdmissionPlan.fixed(plan.delivery, 1_000, decision)])
    assert result.conversation_id and result.lookup_ids == (result.conversation_id,)
    return result.conversation_id


def ownership(store: Store, cid: str) -> str:
    c = store.t.conversations
    return str(c.get(c.id == cid).ownership)


def start(store: Store, fake: FakeLinear, clock: SystemClock, budget: int = 100) -> Any:
    client = LinearClient(fake.url, StaticCredential(LINEAR_KEY), RequestBudget(budget, clock), [])
    owners = {"project-p": ("ops", False)}
    return Tracker.start(store, client, clock, owner_of=lambda team, project: owners.get(project or ""),
                         ownership_backoff_seconds=(0.05,)).proxy()


def test_an_answer_is_cached_until_a_mutation_retires_it(store: Store, clock: SystemClock,
                                                         fake: FakeLinear) -> None:
    cid = pending(store, "i-7")
    woken: list[str] = []
    told = threading.Event()
    tracker = start(store, fake, clock)
    tracker.subscribe_ownership(lambda c, owned: (woken.append(c), told.set())).get(timeout=5)
    tracker.check_ownership().get(timeout=5)
    wait_until(lambda: ownership(store, cid) == "owned")
    assert told.wait(5) and woken == [cid]
    c = store.t.conversations

    def ask_again() -> None:
        c.update(ownership="pending").where(c.id == cid).execute()
        tracker.check_ownership().get(timeout=5)
        wait_until(lambda: ownership(store, cid) == "owned")

    ask_again()
    assert len(fake.lookups()) == 1  # the cached answer
    tracker.call("query Q { viewer { id } }").get(timeout=5).result(timeout=5)
    ask_again()
    assert len(fake.lookups()) == 1  # a query keeps the cache
    tracker.call("mutation M { issueUpdate(id: \"i-7\", input: {}) { success } }",
                 mutation=True).get(timeout=5).result(timeout=5)
    ask_again()
    assert len(fake.lookups()) == 2  # a mutation retired it


def test_a_spent_budget_waits_and_retries(store: Store, clock: SystemClock, fake: FakeLinear) -> None:
    tracker = start(store, fake, clock, budget=1)
    tracker.call("query Q { viewer { id } }").get(timeout=5).result(timeout=5)  # spends it
    cid = pending(store, "i-7")
    tracker.check_ownership().get(timeout=5)
    c = store.t.conversations
    row = wait_until(lambda: (r := c.get(c.id == cid)).ownership_error and r)
    assert row.ownership == "pending" and row.ownership_error.startswith("budget_exhausted")
    assert row.ownership_attempts == 1 and fake.lookups() == []
