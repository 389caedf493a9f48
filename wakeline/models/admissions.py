"""The admission transaction: a group of deliveries, one IMMEDIATE transaction.

This is the ingress's hot path, run on the single admission writer thread, so
its frequent statements are fixed SQL on the connection: building a peewee
query costs several times what SQLite spends running it. Each delivery runs in
its own savepoint, so one that fails is rolled back alone. Rare paths (agent
sessions' bookkeeping, lifecycle changes, stops) reuse the FIFO's methods inside
the same transaction.
"""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
from dataclasses import dataclass, replace
from typing import Sequence

from peewee import DatabaseError, SqliteDatabase

from wakeline.errors import Unavailable
from wakeline.models.envelopes import AgentSession, DataChange, dump_envelope
from wakeline.models.fifo import Fifo
from wakeline.models.outbox import Outbox
from wakeline.models.schema import INBOX_CONVERSATION_ID
from wakeline.models.states import ConversationKind, DeliveryState, Outcome, TurnResultKind
from wakeline.providers.linear import replies
from wakeline.routing import AdmissionPlan

log = logging.getLogger(__name__)

FOLLOWING_KEY = "inbox.following"

_FIRST = "SELECT outcome FROM receipts WHERE delivery_id = ? OR body_sha256 = ? LIMIT 1"
_OWN_EFFECT = "SELECT created_at FROM effects WHERE id = ?"
_RECEIPT = (
    "INSERT INTO receipts (delivery_id, body_sha256, event_type, action, received_at, webhook_at,"
    " outcome, reason, conversation_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INBOX = (
    "INSERT INTO inbox_messages (receipt_id, received_at, headline, event, size_bytes, wakes)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_DELIVERY = (
    "INSERT INTO deliveries (conversation_id, receipt_id, state, completion, completed_at, envelope,"
    " headline, received_at, size_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_FIND_CONVERSATION = (
    "SELECT id, title, terminal, reset_at FROM conversations WHERE namespace = ? AND key = ?"
)
_NEW_CONVERSATION = (
    "INSERT INTO conversations (id, namespace, key, kind, title, route, created_at, updated_at,"
    " issue_id, issue_identifier, tainted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_FOLLOWING = "SELECT value FROM settings WHERE key = ?"


@dataclass(frozen=True)
class AdmissionResult:
    """What admitting one delivery did."""

    outcome: Outcome
    reason: str | None = None
    conversation_id: str | None = None
    first_outcome: Outcome | None = None
    effects: int = 0
    wake_ids: tuple[str, ...] = ()

    @property
    def wakes(self) -> bool:
        """True when a conversation got work (or a lifecycle change) to act on."""
        return bool(self.wake_ids)


@dataclass
class _Conversation:
    id: str
    terminal: bool
    reset_at: int | None


class Admissions:
    """Writes admission groups; used by the admission writer thread only."""

    def __init__(self, db: SqliteDatabase, fifo: Fifo, outbox: Outbox, following_default: bool) -> None:
        self._db = db
        self._fifo = fifo
        self._outbox = outbox
        self._following_default = following_default

    def admit(self, plans: Sequence[AdmissionPlan]) -> list[AdmissionResult | Unavailable]:
        """Commit a group in one transaction; one result per plan, in order.

        When the store cannot commit at all every entry is an `Unavailable` and
        nothing of the group is written.
        """
        try:
            with self._db.atomic():
                conn = self._db.connection()
                # One read per group is one read per delivery: no switch can commit in between.
                following = self._following(conn)
                results = [self._guarded(conn, plan, following) for plan in plans]
            return results
        except DatabaseError as exc:
            log.warning("admission group failed", extra={"error": exc.__class__.__name__})
            return [Unavailable() for _ in plans]

    def _following(self, conn: sqlite3.Connection) -> bool:
        row = conn.execute(_FOLLOWING, (FOLLOWING_KEY,)).fetchone()
        return bool(json.loads(row[0])) if row else self._following_default

    def _guarded(self, conn: sqlite3.Connection, plan: AdmissionPlan,
                 following: bool) -> AdmissionResult | Unavailable:
        conn.execute("SAVEPOINT admission")
        try:
            result = self._admit(conn, plan, following)
        except Exception as exc:
            # This delivery is rolled back alone; failures that abort the whole transaction
            # (I/O, read-only) resurface at commit for the group.
            conn.execute("ROLLBACK TO admission")
            conn.execute("RELEASE admission")
            log.warning(
                "admission failed",
                extra={"delivery_id": plan.delivery.delivery_id, "error": exc.__class__.__name__},
                exc_info=not isinstance(exc, DatabaseError),
            )
            return Unavailable()
        conn.execute("RELEASE admission")
        return result

    def _admit(self, conn: sqlite3.Connection, plan: AdmissionPlan, following: bool) -> AdmissionResult:
        d = plan.delivery
        first = conn.execute(_FIRST, (d.delivery_id, d.body_sha256)).fetchone()
        if first is not None:
            return AdmissionResult(Outcome.DUPLICATE, first_outcome=Outcome(first[0]))
        if self._is_echo(conn, plan):
            self._receipt(conn, plan, Outcome.SELF_ECHO, "own_write", None)
            return AdmissionResult(Outcome.SELF_ECHO, "own_write")
        outcome, reason, effects = plan.outcome, plan.reason, list(plan.effects)
        conv, to_fifo, changed = None, plan.to_fifo, False
        if plan.subject is not None and (plan.to_fifo or plan.lifecycle is not None or plan.route):
            conv = self._conversation(conn, plan, create=plan.route is not None)
        session = d.envelope if isinstance(d.envelope, AgentSession) else None
        if conv is not None:
            changed = self._apply_lifecycle(conn, conv, plan)
            if plan.stop_session:
                self._fifo.stop_session(conv.id, plan.stop_session, plan.received_ms)
                changed = True
            if to_fifo and conv.terminal:
                # A terminal conversation takes no new turns until Linear reopens the issue.
                to_fifo, outcome, reason = False, Outcome.IGNORED, "terminal"
                if session is not None:
                    effects = [replies.activity(session.session_id, "error", replies.CLOSED)]
            elif to_fifo and session is not None and session.action == "prompted" \
                    and not self._fifo.knows_session(conv.id, session.session_id):
                # A follow-up to a session we never saw (created before install, state lost):
                # treat it as a fresh request, and say so at once as for `created`.
                effects.append(replies.activity(session.session_id, "thought", replies.ACK))
            if to_fifo and session is not None:
                conn.execute("UPDATE conversations SET agent_session_id = ? WHERE id = ?",
                             (session.session_id, conv.id))
        conversation_id = conv.id if conv else None
        receipt_id = self._receipt(conn, plan, outcome, reason, conversation_id)
        if to_fifo and conv is not None and d.envelope is not None:
            to_fifo = self._enqueue(conn, conv, plan, receipt_id)
            if not to_fifo and session is not None:
                effects.append(replies.activity(session.session_id, "response", replies.RESET))
        wake_ids = [conversation_id] if (to_fifo or changed) and conversation_id else []
        if d.inbox_event is not None and plan.outcome is Outcome.ACCEPTED:
            event = json.dumps(d.inbox_event, ensure_ascii=False, separators=(",", ":"))
            # Only what arrives while following is on may wake an inbox turn.
            conn.execute(_INBOX, (receipt_id, plan.received_ms, d.headline, event, len(event.encode("utf-8")),
                       int(following)))
            if following:
                wake_ids.append(INBOX_CONVERSATION_ID)
        if effects:
            self._outbox.prepare(
                [replace(s, conversation_id=s.conversation_id or conversation_id) for s in effects],
                plan.received_ms,
            )
        return AdmissionResult(outcome, reason, conversation_id, effects=len(effects),
                               wake_ids=tuple(wake_ids))

    @staticmethod
    def _is_echo(conn: sqlite3.Connection, plan: AdmissionPlan) -> bool:
        """Exact evidence only: the event names an object whose id we chose for our own write.

        Every create wakeline sends carries a client-chosen UUID, recorded before the request
        leaves; Linear's webhook about that object carries the same id. The creation is ours
        whenever it arrives; later changes count as echoes only within the window, so a
        person's edit afterwards is acted on as usual.
        """
        env = plan.delivery.envelope
        if not isinstance(env, DataChange):
            return False
        row = conn.execute(_OWN_EFFECT, (env.object_id,)).fetchone()
        if row is None:
            return False
        return env.action == "create" or plan.received_ms - row[0] <= plan.echo_window_ms

    @staticmethod
    def _receipt(conn: sqlite3.Connection, plan: AdmissionPlan, outcome: Outcome, reason: str | None,
                 conversation_id: str | None) -> int:
        d = plan.delivery
        cursor = conn.execute(_RECEIPT, (d.delivery_id, d.body_sha256, d.event_type, d.action,
                              plan.received_ms, d.webhook_ms, outcome.value, reason, conversation_id))
        return int(cursor.lastrowid)

    @staticmethod
    def _enqueue(conn: sqlite3.Connection, conv: _Conversation, plan: AdmissionPlan, receipt_id: int) -> bool:
        """Add the FIFO entry; False when it arrived before a committed reset and is done already."""
        d = plan.delivery
        assert d.envelope is not None
        envelope = dump_envelope(d.envelope)
        # Received at or before a reset that committed first: it belongs to the old context,
        # exactly as startup recovery would decide.
        before_reset = conv.reset_at is not None and plan.received_ms <= conv.reset_at
        state = DeliveryState.COMPLETED if before_reset else DeliveryState.PENDING
        conn.execute(_DELIVERY, (conv.id, receipt_id, state.value,
                      TurnResultKind.RESET.value if before_reset else None,
                      plan.received_ms if before_reset else None, envelope, d.headline,
                      plan.received_ms, len(envelope.encode("utf-8"))))
        return not before_reset

    @staticmethod
    def _conversation(conn: sqlite3.Connection, plan: AdmissionPlan, *, create: bool) -> _Conversation | None:
        subject, now = plan.subject, plan.received_ms
        assert subject is not None
        row = conn.execute(_FIND_CONVERSATION, (subject.namespace, subject.key)).fetchone()
        if row is not None:
            if plan.title and not row[1]:
                conn.execute("UPDATE conversations SET title = ?, updated_at = ? WHERE id = ?",
                  (plan.title, now, row[0]))
            return _Conversation(row[0], bool(row[2]), row[3])
        if not create:
            return None
        envelope = plan.delivery.envelope
        issue = envelope.issue if envelope is not None else None
        conversation_id = "cv_" + secrets.token_hex(8)
        conn.execute(_NEW_CONVERSATION, (conversation_id, subject.namespace, subject.key,
                              ConversationKind.ISSUE.value, plan.title or "", plan.route, now, now,
                              subject.key, issue.identifier if issue else None, int(plan.tainted)))
        return _Conversation(conversation_id, False, None)

    def _apply_lifecycle(self, conn: sqlite3.Connection, conv: _Conversation, plan: AdmissionPlan) -> bool:
        """Record terminal intent (retiring unfinished work) or clear it; True if it changed."""
        if plan.lifecycle is None:
            return False
        terminal = plan.lifecycle == "terminal"
        if conv.terminal == terminal:
            return False
        conn.execute("UPDATE conversations SET terminal = ?, updated_at = ? WHERE id = ?",
          (int(terminal), plan.received_ms, conv.id))
        conv.terminal = terminal
        if terminal:
            self._fifo.retire(conv.id, plan.received_ms)
        return True
