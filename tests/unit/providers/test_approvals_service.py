"""The approvals service: decisions with a word on whether they changed anything, and the
watchers that hear of every change (what a Discord control thread shows)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.models.test_matrix_store import event, propose
from wakeline.clock import SystemClock
from wakeline.errors import Conflict, NotFound
from wakeline.models.approvals import DAY_MS, Approval, ApprovalStatus, body_digest
from wakeline.models.store import Store
from wakeline.providers.matrix.approvals import ApprovalsService


class Heard:
    """What the watcher and the sender were told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def watch(self, approval: Approval) -> None:
        self.events.append(("changed", approval.status.value))

    def send(self, approval: Approval) -> None:
        self.events.append(("send", approval.status.value))


@pytest.fixture
def service(store: Store, frozen: Any) -> tuple[ApprovalsService, Heard]:
    heard = Heard()
    approvals = ApprovalsService(store, SystemClock(), heard.send)
    approvals.watch(heard.watch)
    return approvals, heard


def now_ms() -> int:
    from tests.conftest import now_ms as now

    return now()


def test_decide_says_whether_it_changed_anything(store: Store,
                                                 service: tuple[ApprovalsService, Heard]) -> None:
    approvals, heard = service
    a = propose(store, "hello", now=now_ms())

    first = approvals.decide(a.id, True, "discord:42", body_sha256=body_digest("hello"))
    again = approvals.decide(a.id, True, "operator")

    assert (first[1], again[1]) == (True, False)
    assert first[0].status is again[0].status is ApprovalStatus.APPROVED
    assert again[0].decided_by == "discord:42"
    # The watchers hear of the decision before the send is asked for, and only once.
    assert heard.events == [("changed", "approved"), ("send", "approved")]
    with pytest.raises(Conflict, match="cannot be denied"):
        approvals.decide(a.id, False, "operator")


def test_a_hash_that_is_not_the_body_s_approves_nothing(
        store: Store, service: tuple[ApprovalsService, Heard]) -> None:
    approvals, heard = service
    a = propose(store, "hello", now=now_ms())
    with pytest.raises(Conflict, match="differs from the one you were shown"):
        approvals.decide(a.id, True, "discord:42", body_sha256=body_digest("hullo"))
    assert approvals.get(a.id).status is ApprovalStatus.PENDING and heard.events == []
    with pytest.raises(NotFound):
        approvals.decide("apr_0000000000000000", True, "discord:42")


def test_watchers_hear_of_proposals_denials_expiries_and_settled_sends(
        store: Store, service: tuple[ApprovalsService, Heard], frozen: Any) -> None:
    approvals, heard = service
    conversation = store.rooms.admit_page("me", [event(1)], "c", now_ms())[0].conversation_id
    assert conversation is not None
    proposed = approvals.propose(connection="me", route="alice", conversation_id=conversation,
                                 room_id="!room", body="hello", turn_id=None)
    denied = approvals.propose(connection="me", route="alice", conversation_id=conversation,
                               room_id="!room", body="no", turn_id=None)
    assert approvals.decide(denied.id, False, "discord:42")[1] is True
    assert approvals.decide(denied.id, False, "discord:42")[1] is False  # twice is once
    frozen.tick(DAY_MS / 1000 + 1)
    assert [a.id for a in approvals.sweep()] == [proposed.id]
    approvals.changed(approvals.get(proposed.id))

    assert heard.events == [("changed", "pending"), ("changed", "pending"),
                            ("changed", "denied"), ("changed", "expired"),
                            ("changed", "expired")]


def test_a_failing_watcher_fails_nothing(store: Store, frozen: Any) -> None:
    approvals = ApprovalsService(store, SystemClock(), lambda approval: None)

    def broken(approval: Approval) -> None:
        raise RuntimeError("boom")

    approvals.watch(broken)
    a = propose(store, "hello", now=now_ms())
    assert approvals.approve(a.id, "operator").status is ApprovalStatus.APPROVED
