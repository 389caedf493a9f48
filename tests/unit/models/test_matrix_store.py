"""Matrix pages with their cursor, and approvals: what the store records, and how atomically."""

from __future__ import annotations

from typing import Any

import pytest

from wakeline.models.approvals import DAY_MS, ApprovalStatus, body_digest
from wakeline.models.envelopes import MatrixMessage, parse_envelope
from wakeline.models.rooms import RoomAdmissions, RoomEvent
from wakeline.models.store import Store


def event(n: int, room: str = "!room", wakes: bool = True, now: int = 1000) -> RoomEvent:
    message = MatrixMessage(connection="me", route="alice", room_id=room, event_id=f"$e{n}",
                            sender="@alice:x", body=f"text {n}")
    return RoomEvent(message, "Matrix message · alice · @alice:x", "Matrix room alice",
                     wakes=wakes, received_ms=now, sent_ms=now - 10)


def rows(store: Store, sql: str) -> list[Any]:
    return store.db.execute_sql(sql).fetchall()


def test_a_page_and_its_cursor_are_one_transaction(store: Store) -> None:
    admitted = store.rooms.admit_page("me", [event(1), event(2)], "cursor-1", 1000)

    assert [(a.duplicate, a.joined) for a in admitted] == [(False, True), (False, True)]
    assert store.rooms.cursor("me") == "cursor-1"
    conv = admitted[0].conversation_id
    assert admitted[1].conversation_id == conv
    assert rows(store, "SELECT namespace, key, kind, route, tainted, issue_id FROM conversations"
                       " WHERE id = '%s'" % conv) == [("matrix:me", "!room", "issue", "alice", 1, None)]
    assert rows(store, "SELECT delivery_id, outcome, conversation_id FROM receipts ORDER BY id") == [
        ("matrix:me:$e1", "accepted", conv), ("matrix:me:$e2", "accepted", conv)]
    fifo = rows(store, "SELECT state, envelope FROM deliveries ORDER BY id")
    assert [(s, parse_envelope(e).body) for s, e in fifo] == [("pending", "text 1"),
                                                               ("pending", "text 2")]


def test_a_page_that_fails_keeps_nothing_and_the_old_cursor(store: Store,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    store.rooms.admit_page("me", [], "cursor-0", 1000)
    real = RoomAdmissions._admit
    calls = []

    def second_fails(self: RoomAdmissions, *args: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        return real(self, *args)

    monkeypatch.setattr(RoomAdmissions, "_admit", second_fails)
    with pytest.raises(RuntimeError):
        store.rooms.admit_page("me", [event(1), event(2)], "cursor-1", 1000)

    assert store.rooms.cursor("me") == "cursor-0"
    assert rows(store, "SELECT COUNT(*) FROM receipts") == [(0,)]
    assert rows(store, "SELECT COUNT(*) FROM conversations WHERE namespace = 'matrix:me'") == [(0,)]


def test_an_event_seen_again_is_a_duplicate_and_changes_nothing(store: Store) -> None:
    store.rooms.admit_page("me", [event(1)], "c1", 1000)
    again = store.rooms.admit_page("me", [event(1), event(2)], "c2", 2000)

    assert [a.duplicate for a in again] == [True, False]
    assert rows(store, "SELECT COUNT(*) FROM deliveries") == [(2,)]
    assert store.rooms.cursor("me") == "c2"


def test_on_demand_is_recorded_without_a_fifo_entry(store: Store) -> None:
    admitted = store.rooms.admit_page("me", [event(1, wakes=False)], "c1", 1000)

    assert admitted[0].joined is False and admitted[0].conversation_id
    assert rows(store, "SELECT outcome, reason FROM receipts") == [("ignored", "on_demand")]
    assert rows(store, "SELECT COUNT(*) FROM deliveries") == [(0,)]


def test_a_held_page_keeps_the_cursor(store: Store) -> None:
    store.rooms.admit_page("me", [], "c0", 1000)
    store.rooms.admit_page("me", [event(1)], None, 1000)
    assert store.rooms.cursor("me") == "c0"
    assert rows(store, "SELECT COUNT(*) FROM deliveries") == [(1,)]


def test_an_event_before_a_committed_reset_belongs_to_the_old_context(store: Store) -> None:
    conv = store.rooms.admit_page("me", [event(1, now=1000)], "c1", 1000)[0].conversation_id
    store.db.execute_sql("UPDATE conversations SET reset_at = 5000 WHERE id = ?", (conv,))
    late = store.rooms.admit_page("me", [event(2, now=4000), event(3, now=6000)], "c2", 6000)

    assert [a.joined for a in late] == [False, True]
    assert rows(store, "SELECT state, completion FROM deliveries ORDER BY id")[1:] == [
        ("completed", "reset"), ("pending", None)]


def test_rooms_of_a_connection_are_each_their_own_conversation(store: Store) -> None:
    a, b = store.rooms.admit_page("me", [event(1, "!a"), event(2, "!b")], "c", 1)
    assert a.conversation_id != b.conversation_id
    assert store.rooms.conversation_of(a.event.subject) == a.conversation_id
    assert store.rooms.subject_of(b.conversation_id) == b.event.subject


# --- approvals ---------------------------------------------------------------------------------


def propose(store: Store, body: str = "hello", now: int = 1000) -> Any:
    conv = store.rooms.admit_page("me", [event(1)], "c", now)[0].conversation_id or \
        store.rooms.conversation_of(event(1).subject)
    return store.approvals.create(connection="me", route="alice", conversation_id=conv,
                                  room_id="!room", body=body, turn_id="turn_1", now=now)


def test_an_approval_is_pending_bound_and_hashed(store: Store) -> None:
    approval = propose(store, "the body")
    assert approval.status is ApprovalStatus.PENDING
    assert approval.body_sha256 == body_digest("the body") and approval.intact
    assert approval.expires_at == 1000 + DAY_MS
    shown = approval.to_json()
    assert {k: shown[k] for k in ("route", "room", "body", "status", "eventId")} == {
        "route": "alice", "room": "!room", "body": "the body", "status": "pending",
        "eventId": None}


def test_approve_once_then_idempotent_deny_loses(store: Store) -> None:
    approval = propose(store)
    first, changed = store.approvals.decide(approval.id, ApprovalStatus.APPROVED, "operator", 2000)
    again, changed_again = store.approvals.decide(approval.id, ApprovalStatus.APPROVED, "x", 2001)
    denied, changed_deny = store.approvals.decide(approval.id, ApprovalStatus.DENIED, "y", 2002)

    assert (changed, changed_again, changed_deny) == (True, False, False)
    assert again.status is denied.status is ApprovalStatus.APPROVED
    assert again.decided_by == "operator"
    assert [a.id for a in store.approvals.to_send("me")] == [approval.id]
    assert store.approvals.settle(approval.id, ApprovalStatus.SENT, 3000, event_id="$sent")
    assert not store.approvals.settle(approval.id, ApprovalStatus.FAILED, 3001, error="late")
    assert store.approvals.get(approval.id).event_id == "$sent"
    assert store.approvals.to_send("me") == []


def test_a_day_later_a_pending_approval_expires_and_cannot_be_decided(store: Store) -> None:
    approval = propose(store, now=1000)
    assert store.approvals.decide(approval.id, ApprovalStatus.APPROVED, "op",
                                  1000 + DAY_MS)[1] is False
    assert [a.id for a in store.approvals.expire(1000 + DAY_MS)] == [approval.id]
    assert store.approvals.get(approval.id).status is ApprovalStatus.EXPIRED
    assert store.approvals.expire(1000 + 2 * DAY_MS) == []


def test_settled_approvals_are_pruned_pending_ones_never(store: Store) -> None:
    done, waiting = propose(store, "a"), propose(store, "b")
    store.approvals.decide(done.id, ApprovalStatus.DENIED, "op", 2000)
    assert store.approvals.prune(before=10_000) == 1
    assert store.approvals.get(done.id) is None and store.approvals.get(waiting.id) is not None


def test_listing_puts_pending_first(store: Store) -> None:
    old, new = propose(store, "old", now=1000), propose(store, "new", now=2000)
    store.approvals.decide(new.id, ApprovalStatus.DENIED, "op", 3000)
    assert [a.id for a in store.approvals.recent()] == [old.id, new.id]
    assert [a.id for a in store.approvals.recent(status=ApprovalStatus.DENIED)] == [new.id]


def test_a_crash_between_the_admissions_and_the_cursor_keeps_neither(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cursor is the page's last write: failing there rolls back its events too, and the
    page admitted again (from the old cursor) is admitted once."""
    import wakeline.models.rooms as rooms

    store.rooms.admit_page("me", [], "cursor-0", 1000)
    monkeypatch.setattr(rooms, "_CURSOR", "INSERT INTO no_such_table VALUES (?, ?, ?)")
    with pytest.raises(Exception):
        store.rooms.admit_page("me", [event(1), event(2)], "cursor-1", 1000)
    assert rows(store, "SELECT COUNT(*) FROM receipts") == [(0,)]
    assert store.rooms.cursor("me") == "cursor-0"

    monkeypatch.undo()
    again = store.rooms.admit_page("me", [event(1), event(2)], "cursor-1", 2000)
    assert [a.duplicate for a in again] == [False, False]
    assert rows(store, "SELECT COUNT(*) FROM deliveries") == [(2,)]
    assert store.rooms.cursor("me") == "cursor-1"
