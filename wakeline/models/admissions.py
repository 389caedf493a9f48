"""The admission transaction: a group of deliveries, one IMMEDIATE transaction.

This is the ingress's hot path, run on the single admission writer thread, so
it is written for few statements: every `execute` releases and re-takes the
GIL, and under load each re-take waits behind the request threads. A comment
costs two statements (receipt, inbox message); the follow switch and the
self-echo evidence are read once per group; fixed SQL on the connection avoids
peewee's query building. If one delivery fails, the group is rolled back and
each delivery is admitted alone, so the failing one cannot take its neighbours
down. Rare paths (agent sessions' bookkeeping, lifecycle changes, stops) reuse
the FIFO's methods inside the same transaction.
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
from wakeline.providers.linear.adapter import ParsedDelivery
from wakeline.routing import AdmissionPlan

log = logging.getLogger(__name__)


class _DeliveryFailed(Exception):
    """One delivery of a group failed; the group's transaction is rolled back."""

FOLLOWING_KEY = "inbox.following"

_FIRST = "SELECT outcome FROM receipts WHERE delivery_id = ? OR body_sha256 = ? LIMIT 1"
# Our own writes: effects, and the objects `linear graphql` mutations created.
_OWN_WRITES = ("SELECT id, created_at FROM effects WHERE id IN ({marks})"
               " UNION ALL SELECT id, created_at FROM own_creates WHERE id IN ({marks})")
# A replay conflicts on delivery_id or body_sha256: nothing is written and rowcount is 0.
_RECEIPT = (
    "INSERT INTO receipts (delivery_id, body_sha256, event_type, action, received_at, webhook_at,"
    " outcome, reason, conversation_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL) ON CONFLICT DO NOTHING"
)
_RECEIPT_OUTCOME = "UPDATE receipts SET outcome = ?, reason = ?, conversation_id = ? WHERE id = ?"
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
            return self._group(plans)
        except _DeliveryFailed:
            pass  # rolled back whole: admit each alone, so only the failing one is refused
        except DatabaseError as exc:
            log.warning("admission group failed", extra={"error": exc.__class__.__name__})
            return [Unavailable() for _ in plans]
        results: list[AdmissionResult | Unavailable] = []
        for plan in plans:
            try:
                results.extend(self._group([plan]))
            except (_DeliveryFailed, DatabaseError):
                results.append(Unavailable())
        return results

    def _group(self, plans: Sequence[AdmissionPlan]) -> list[AdmissionResult | Unavailable]:
        with self._db.atomic():
            conn = self._db.connection()
            # One read per group is one read per delivery: no switch can commit in between.
            following = self._following(conn)
            own = self._own_writes(conn, plans)
            results: list[AdmissionResult | Unavailable] = []
            for plan in plans:
                try:
                    results.append(self._admit(conn, plan, following, own))
                except Exception as exc:
                    log.warning(
                        "admission failed",
                        extra={"delivery_id": plan.delivery.delivery_id, "error": exc.__class__.__name__},
                        exc_info=not isinstance(exc, DatabaseError),
                    )
                    raise _DeliveryFailed() from exc
        return results

    def _following(self, conn: sqlite3.Connection) -> bool:
        row = conn.execute(_FOLLOWING, (FOLLOWING_KEY,)).fetchone()
        return bool(json.loads(row[0])) if row else self._following_default

    @staticmethod
    def _own_writes(conn: sqlite3.Connection, plans: Sequence[AdmissionPlan]) -> dict[str, int]:
        """When each of our own writes that the group's events name was prepared."""
        ids = list({p.delivery.envelope.object_id for p in plans
                    if isinstance(p.delivery.envelope, DataChange)})
        if not ids:
            return {}
        rows = conn.execute(_OWN_WRITES.format(marks=", ".join("?" * len(ids))), ids + ids).fetchall()
        return {row[0]: row[1] for row in rows}

    def _admit(self, conn: sqlite3.Connection, plan: AdmissionPlan, following: bool,
               own: dict[str, int]) -> AdmissionResult:
        d = plan.delivery
        if self._is_echo(plan, own):
            receipt_id = self._receipt(conn, plan, Outcome.SELF_ECHO, "own_write")
            if receipt_id is None:
                return self._duplicate(conn, d)
            return AdmissionResult(Outcome.SELF_ECHO, "own_write")
        receipt_id = self._receipt(conn, plan, plan.outcome, plan.reason)
        if receipt_id is None:
            return self._duplicate(conn, d)
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
        if (outcome, reason, conversation_id) != (plan.outcome, plan.reason, None):
            conn.execute(_RECEIPT_OUTCOME, (outcome.value, reason, conversation_id, receipt_id))
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
    def _duplicate(conn: sqlite3.Connection, d: ParsedDelivery) -> AdmissionResult:
        first = conn.execute(_FIRST, (d.delivery_id, d.body_sha256)).fetchone()
        return AdmissionResult(Outcome.DUPLICATE, first_outcome=Outcome(first[0]))

    @staticmethod
    def _is_echo(plan: AdmissionPlan, own: dict[str, int]) -> bool:
        """Exact evidence only: the event names an object whose id we chose for our own write.

        Every create wakeline sends carries a client-chosen UUID, recorded before the request
        leaves; Linear's webhook about that object carries the same id. The creation is ours
        whenever it arrives; later changes count as echoes only within the window, so a
        person's edit afterwards is acted on as usual.
        """
        env = plan.delivery.envelope
        if not isinstance(env, DataChange) or env.object_id not in own:
            return False
        return env.action == "create" or plan.received_ms - own[env.object_id] <= plan.echo_window_ms

    @staticmethod
    def _receipt(conn: sqlite3.Connection, plan: AdmissionPlan, outcome: Outcome,
                 reason: str | None) -> int | None:
        """Insert the receipt; None when the delivery id or body was seen before."""
        d = plan.delivery
        cursor = conn.execute(_RECEIPT, (d.delivery_id, d.body_sha256, d.event_type, d.action,
                                         plan.received_ms, d.webhook_ms, outcome.value, reason))
        return int(cursor.lastrowid) if cursor.rowcount == 1 else None

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
