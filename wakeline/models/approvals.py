"""Approvals of Matrix sends: an agent proposes, a human decides, wakeline sends once.

An approval is bound to its connection, route, conversation, room and body: the body is
kept to show the approver, with its SHA-256, and nothing about it changes after it is
made. Each transition is one transaction, and only these happen:

    pending --approve--> approved --sent--> sent (the event id)
       |                    |
       |                    +--refused, or not confirmed in time--> failed
       +--deny--> denied
       +--a day passes--> expired

A second approve of an approved (or sent) approval changes nothing, so two humans (or
one double click) cannot send twice; what leaves is decided by the sender, which sends an
`approved` one with a transaction id derived from its id, so a retry after a crash is the
same Matrix event. The store records; who may decide, and the send, live above it.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from peewee import Database

from wakeline.clock import iso

DAY_MS = 86_400_000


class ApprovalStatus(StrEnum):
    """Where a proposed send stands (CONTRACT section 9)."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    SENT = "sent"
    EXPIRED = "expired"
    FAILED = "failed"


FINAL = frozenset({ApprovalStatus.DENIED, ApprovalStatus.SENT, ApprovalStatus.EXPIRED,
                   ApprovalStatus.FAILED})


def body_digest(body: str) -> str:
    """The SHA-256 (hex) an approval keeps of its body."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Approval:
    """One approval row."""

    id: str
    connection: str
    route: str
    conversation_id: str
    room_id: str
    body: str
    body_sha256: str
    status: ApprovalStatus
    turn_id: str | None
    created_at: int
    expires_at: int
    decided_by: str | None
    decided_at: int | None
    attempts: int
    event_id: str | None
    error: str | None
    settled_at: int | None

    @property
    def intact(self) -> bool:
        """True when the body is the one whose hash was recorded when it was proposed."""
        return body_digest(self.body) == self.body_sha256

    def to_json(self) -> dict[str, Any]:
        """The API's shape: the contract's keys, then what else helps the approver."""
        return {
            "id": self.id, "route": self.route, "conversation": self.conversation_id,
            "room": self.room_id, "body": self.body, "status": self.status.value,
            "eventId": self.event_id, "createdAt": iso(self.created_at),
            "connection": self.connection, "bodySha256": self.body_sha256,
            "expiresAt": iso(self.expires_at), "decidedBy": self.decided_by,
            "decidedAt": iso(self.decided_at) if self.decided_at is not None else None,
            "error": self.error,
        }


_COLUMNS = ("id, connection, route, conversation_id, room_id, body, body_sha256, status,"
            " turn_id, created_at, expires_at, decided_by, decided_at, attempts, event_id, error,"
            " settled_at")


def _row(row: tuple[Any, ...]) -> Approval:
    values = list(row)
    values[7] = ApprovalStatus(values[7])
    return Approval(*values)


class Approvals:
    """Approval rows over one database; every method is one transaction."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, *, connection: str, route: str, conversation_id: str, room_id: str,
               body: str, turn_id: str | None, now: int, ttl_ms: int = DAY_MS) -> Approval:
        """Record a proposed send, `pending` until a human decides or `ttl_ms` passes."""
        approval_id = "apr_" + secrets.token_hex(8)
        with self._db.atomic():
            self._db.execute_sql(
                f"INSERT INTO approvals ({_COLUMNS}, seq) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, 0, NULL, NULL, NULL,"
                " (SELECT COALESCE(MAX(seq), 0) + 1 FROM approvals))",
                (approval_id, connection, route, conversation_id, room_id, body,
                 body_digest(body), ApprovalStatus.PENDING.value, turn_id, now, now + ttl_ms))
        found = self.get(approval_id)
        assert found is not None
        return found

    def get(self, approval_id: str) -> Approval | None:
        """One approval, or None."""
        row = self._db.execute_sql(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?",
                                   (approval_id,)).fetchone()
        return _row(row) if row else None

    def recent(self, *, status: ApprovalStatus | None = None, limit: int = 100) -> list[Approval]:
        """Approvals, newest first (pending ones first of all: they wait for someone)."""
        where, args = ("WHERE status = ?", [status.value]) if status else ("", [])
        rows = self._db.execute_sql(
            f"SELECT {_COLUMNS} FROM approvals {where} ORDER BY status = 'pending' DESC,"
            " created_at DESC, seq DESC LIMIT ?", (*args, limit)).fetchall()
        return [_row(r) for r in rows]

    def decide(self, approval_id: str, status: ApprovalStatus, who: str, now: int
               ) -> tuple[Approval | None, bool]:
        """Approve or deny a pending approval that has not expired: (the approval, whether this
        call changed it). Anything else is left as it is and returned unchanged."""
        assert status in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED)
        with self._db.atomic():
            # A denial is final at once; an approval settles when it is sent (or fails).
            settled = now if status is ApprovalStatus.DENIED else None
            changed = self._db.execute_sql(
                "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, settled_at = ?"
                " WHERE id = ? AND status = 'pending' AND expires_at > ?",
                (status.value, who, now, settled, approval_id, now)).rowcount == 1
        return self.get(approval_id), changed

    def expire(self, now: int) -> list[Approval]:
        """Pending approvals whose day is over become `expired`; returns them."""
        with self._db.atomic():
            rows = self._db.execute_sql(
                f"SELECT {_COLUMNS} FROM approvals WHERE status = 'pending' AND expires_at <= ?",
                (now,)).fetchall()
            self._db.execute_sql(
                "UPDATE approvals SET status = 'expired', settled_at = ?"
                " WHERE status = 'pending' AND expires_at <= ?", (now, now))
        return [_row(r) for r in rows]

    def to_send(self, connection: str) -> list[Approval]:
        """The connection's approved approvals not sent yet (a restart may have left some)."""
        rows = self._db.execute_sql(
            f"SELECT {_COLUMNS} FROM approvals WHERE status = 'approved' AND connection = ?"
            " ORDER BY decided_at, seq", (connection,)).fetchall()
        return [_row(r) for r in rows]

    def attempted(self, approval_id: str) -> None:
        """Count one send attempt (recorded before the request leaves)."""
        with self._db.atomic():
            self._db.execute_sql("UPDATE approvals SET attempts = attempts + 1 WHERE id = ?",
                                 (approval_id,))

    def settle(self, approval_id: str, status: ApprovalStatus, now: int, *,
               event_id: str | None = None, error: str | None = None) -> bool:
        """An approved approval was sent (with its event id) or failed (with why); False when it
        was not `approved` (settled already)."""
        assert status in (ApprovalStatus.SENT, ApprovalStatus.FAILED)
        with self._db.atomic():
            return self._db.execute_sql(
                "UPDATE approvals SET status = ?, event_id = ?, error = ?, settled_at = ?"
                " WHERE id = ? AND status = 'approved'",
                (status.value, event_id, error[:2000] if error else None, now,
                 approval_id)).rowcount == 1

    def prune(self, before: int) -> int:
        """Forget settled approvals settled before `before`; pending and approved ones stay."""
        with self._db.atomic():
            return self._db.execute_sql(
                "DELETE FROM approvals WHERE status IN ('denied', 'sent', 'expired', 'failed')"
                " AND settled_at < ?", (before,)).rowcount
