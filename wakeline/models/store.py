"""The store: every transaction wakeline commits, behind one small API.

Callers never see peewee or SQL. Admission is the hot path: `admit` writes a
whole group of deliveries in one IMMEDIATE transaction, each inside its own
savepoint so one bad delivery cannot take its neighbours down with it.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from peewee import DatabaseError, SqliteDatabase, fn

from wakeline.clock import Clock
from wakeline.errors import Unavailable
from wakeline.models.db import open_database
from wakeline.models.envelopes import AgentSession, DataChange, dump_envelope
from wakeline.models.fifo import Fifo
from wakeline.models.inbox_store import InboxStore
from wakeline.models.outbox import Outbox
from wakeline.models.schema import INBOX_CONVERSATION_ID
from wakeline.models.states import ConversationKind, DeliveryState, Outcome, TurnResultKind, TurnState
from wakeline.models.tables import Tables, bind_tables
from wakeline.providers.linear import replies
from wakeline.routing import AdmissionPlan

log = logging.getLogger(__name__)

FOLLOWING_KEY = "inbox.following"


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


@dataclass(frozen=True)
class Counts:
    """The counters `GET /v1/status` reports."""

    conversations: int
    running: int
    stalled: int
    terminal: int
    fifo_pending: int
    fifo_claimed: int
    inbox_unread: int


class Store:
    """All durable state of one wakeline."""

    def __init__(self, db: SqliteDatabase, clock: Clock, following_default: bool = False) -> None:
        self.db = db
        self.clock = clock
        self.t: Tables = bind_tables(db)
        self.outbox = Outbox(db, self.t)
        self.fifo = Fifo(db, self.t, self.outbox, self.following)
        self.inbox = InboxStore(db, self.t)
        self._following_default = following_default

    @classmethod
    def open(cls, path: Path, clock: Clock, following_default: bool = False) -> "Store":
        """Open (creating and migrating as needed) the database at `path`."""
        return cls(open_database(path), clock, following_default)

    def following(self) -> bool:
        """The follow switch: the persisted runtime value, else the configured initial one."""
        return bool(self.get_setting(FOLLOWING_KEY, self._following_default))

    def set_following(self, value: bool) -> None:
        """Persist the follow switch; it wins over the config from now on.

        Switching on follows new deliveries only: messages already waiting stay unread
        for the agent to read, but none of them schedules a turn.
        """
        m = self.t.inbox
        with self.db.atomic():
            if value and not self.following():
                m.update(wakes=False).where((m.surfaced == False) & (m.wakes == True)).execute()  # noqa: E712
            self.set_setting(FOLLOWING_KEY, value)

    def close(self) -> None:
        """Close this thread's connection."""
        if not self.db.is_closed():
            self.db.close()

    # --- admission -----------------------------------------------------------------------

    def admit(self, plans: Sequence[AdmissionPlan]) -> list[AdmissionResult | Unavailable]:
        """Commit a group of admissions in one transaction.

        Returns one result per plan, in order. When the store cannot commit at all
        every entry is an `Unavailable`; nothing of the group is written.
        """
        try:
            with self.db.atomic():
                results: list[AdmissionResult | Unavailable] = []
                for plan in plans:
                    results.append(self._admit_one_guarded(plan))
            return results
        except DatabaseError as exc:
            log.warning("admission group failed", extra={"error": exc.__class__.__name__})
            return [Unavailable() for _ in plans]

    def _admit_one_guarded(self, plan: AdmissionPlan) -> AdmissionResult | Unavailable:
        try:
            with self.db.atomic():
                return self._admit_one(plan)
        except Exception as exc:
            # The savepoint rolled this delivery back; its neighbours still commit. Failures that
            # abort the whole transaction (I/O, read-only) resurface at commit for the group.
            log.warning(
                "admission failed",
                extra={"delivery_id": plan.delivery.delivery_id, "error": exc.__class__.__name__},
                exc_info=not isinstance(exc, DatabaseError),
            )
            return Unavailable()

    def _admit_one(self, plan: AdmissionPlan) -> AdmissionResult:
        d = plan.delivery
        receipts = self.t.receipts
        first = (
            receipts.select(receipts.outcome)
            .where((receipts.delivery_id == d.delivery_id) | (receipts.body_sha256 == d.body_sha256))
            .first()
        )
        if first is not None:
            return AdmissionResult(Outcome.DUPLICATE, first_outcome=Outcome(first.outcome))
        if self._is_echo(plan):
            self._receipt(plan, Outcome.SELF_ECHO, "own_write", None)
            return AdmissionResult(Outcome.SELF_ECHO, "own_write")
        outcome, reason, effects = plan.outcome, plan.reason, list(plan.effects)
        conversation_id, to_fifo, changed = None, plan.to_fifo, False
        if plan.subject is not None and (plan.to_fifo or plan.lifecycle is not None or plan.route):
            conversation_id = self._conversation(plan, create=plan.route is not None)
        session = d.envelope if isinstance(d.envelope, AgentSession) else None
        if conversation_id is not None:
            changed = self._apply_lifecycle(conversation_id, plan)
            if plan.stop_session:
                self.fifo.stop_session(conversation_id, plan.stop_session, plan.received_ms)
                changed = True
            if to_fifo and self._is_terminal(conversation_id):
                # A terminal conversation takes no new turns until Linear reopens the issue.
                to_fifo, outcome, reason = False, Outcome.IGNORED, "terminal"
                if session is not None:
                    effects = [replies.activity(session.session_id, "error", replies.CLOSED)]
            elif to_fifo and session is not None and session.action == "prompted" \
                    and not self.fifo.knows_session(conversation_id, session.session_id):
                # A follow-up to a session we never saw (created before install, state lost):
                # treat it as a fresh request, and say so at once as for `created`.
                effects.append(replies.activity(session.session_id, "thought", replies.ACK))
            if to_fifo and session is not None:
                self.t.conversations.update(agent_session_id=session.session_id) \
                    .where(self.t.conversations.id == conversation_id).execute()
        receipt_id = self._receipt(plan, outcome, reason, conversation_id)
        if to_fifo and conversation_id is not None and d.envelope is not None:
            envelope = dump_envelope(d.envelope)
            # Received at or before a reset that committed first: it belongs to the old context,
            # exactly as startup recovery would decide.
            before_reset = plan.received_ms <= (self._reset_at(conversation_id) or -1)
            self.t.deliveries.insert(
                conversation_id=conversation_id,
                receipt_id=receipt_id,
                state=(DeliveryState.COMPLETED if before_reset else DeliveryState.PENDING).value,
                completion=TurnResultKind.RESET.value if before_reset else None,
                completed_at=plan.received_ms if before_reset else None,
                envelope=envelope,
                headline=d.headline,
                received_at=plan.received_ms,
                size_bytes=len(envelope.encode("utf-8")),
            ).execute()
            to_fifo = not before_reset
            if before_reset and session is not None:
                effects.append(replies.activity(session.session_id, "response", replies.RESET))
        wake_ids = [conversation_id] if (to_fifo or changed) and conversation_id else []
        if d.inbox_event is not None and plan.outcome is Outcome.ACCEPTED:
            event = json.dumps(d.inbox_event, ensure_ascii=False, separators=(",", ":"))
            # Following is checked per delivery: only what arrives while it is on may wake a turn.
            following = self.following()
            self.t.inbox.insert(
                receipt_id=receipt_id,
                received_at=plan.received_ms,
                headline=d.headline,
                event=event,
                size_bytes=len(event.encode("utf-8")),
                wakes=following,
            ).execute()
            if following:
                wake_ids.append(INBOX_CONVERSATION_ID)
        self.outbox.prepare(
            [replace(spec, conversation_id=spec.conversation_id or conversation_id) for spec in effects],
            plan.received_ms,
        )
        return AdmissionResult(outcome, reason, conversation_id, effects=len(effects),
                               wake_ids=tuple(wake_ids))

    def _receipt(self, plan: AdmissionPlan, outcome: Outcome, reason: str | None,
                 conversation_id: str | None) -> int:
        d = plan.delivery
        return int(self.t.receipts.insert(
            delivery_id=d.delivery_id,
            body_sha256=d.body_sha256,
            event_type=d.event_type,
            action=d.action,
            received_at=plan.received_ms,
            webhook_at=d.webhook_ms,
            outcome=outcome.value,
            reason=reason,
            conversation_id=conversation_id,
        ).execute())

    def _conversation(self, plan: AdmissionPlan, *, create: bool) -> str | None:
        convs, subject, now = self.t.conversations, plan.subject, plan.received_ms
        assert subject is not None
        row = (
            convs.select(convs.id, convs.title)
            .where((convs.namespace == subject.namespace) & (convs.key == subject.key))
            .first()
        )
        if row is not None:
            if plan.title and not row.title:
                convs.update(title=plan.title, updated_at=now).where(convs.id == row.id).execute()
            return str(row.id)
        if not create:
            return None
        envelope = plan.delivery.envelope
        issue = envelope.issue if envelope is not None else None
        conversation_id = "cv_" + secrets.token_hex(8)
        convs.insert(
            id=conversation_id,
            namespace=subject.namespace,
            key=subject.key,
            kind=ConversationKind.ISSUE.value,
            title=plan.title or "",
            route=plan.route,
            created_at=now,
            updated_at=now,
            issue_id=subject.key,
            issue_identifier=issue.identifier if issue else None,
            tainted=plan.tainted,
        ).execute()
        return conversation_id

    def _reset_at(self, conversation_id: str) -> int | None:
        c = self.t.conversations
        return c.select(c.reset_at).where(c.id == conversation_id).scalar()

    def _is_echo(self, plan: AdmissionPlan) -> bool:
        """Exact evidence only: the event names an object whose id we chose for our own write.

        Every create wakeline sends carries a client-chosen UUID, recorded before the request
        leaves; Linear's webhook about that object carries the same id. The creation is ours
        whenever it arrives; later changes to the object count as echoes only within the
        window, so a person's edit afterwards is acted on as usual.
        """
        env = plan.delivery.envelope
        if not isinstance(env, DataChange):
            return False
        e = self.t.effects
        created = e.select(e.created_at).where(e.id == env.object_id).scalar()
        if created is None:
            return False
        return env.action == "create" or plan.received_ms - created <= plan.echo_window_ms

    def _is_terminal(self, conversation_id: str) -> bool:
        c = self.t.conversations
        return bool(c.select(c.terminal).where(c.id == conversation_id).scalar())

    def _apply_lifecycle(self, conversation_id: str, plan: AdmissionPlan) -> bool:
        """Record terminal intent (retiring unfinished work) or clear it; True if it changed."""
        if plan.lifecycle is None:
            return False
        terminal = plan.lifecycle == "terminal"
        if self._is_terminal(conversation_id) == terminal:
            return False
        c = self.t.conversations
        c.update(terminal=terminal, updated_at=plan.received_ms).where(c.id == conversation_id).execute()
        if terminal:
            self.fifo.retire(conversation_id, plan.received_ms)
        return True

    # --- reads ---------------------------------------------------------------------------

    def counts(self) -> Counts:
        """Counters for the status page."""
        d = self.t.deliveries
        by_state = dict(
            d.select(d.state, fn.COUNT(d.id)).where(d.state != DeliveryState.COMPLETED.value)
            .group_by(d.state).tuples()
        )
        tt = self.t.turns
        turns = dict(tt.select(tt.state, fn.COUNT(tt.id)).group_by(tt.state).tuples())
        c = self.t.conversations
        return Counts(
            conversations=c.select().count(),
            running=turns.get(TurnState.RUNNING.value, 0) + turns.get(TurnState.RETRY.value, 0),
            stalled=turns.get(TurnState.STALLED.value, 0),
            terminal=c.select().where(c.terminal == True).count(),  # noqa: E712
            fifo_pending=by_state.get(DeliveryState.PENDING.value, 0),
            fifo_claimed=by_state.get(DeliveryState.CLAIMED.value, 0),
            inbox_unread=self.inbox.unread_count(),
        )

    def conversation_exists(self, conversation_id: str) -> bool:
        """True when the conversation id is known."""
        c = self.t.conversations
        return c.select().where(c.id == conversation_id).exists()

    def receipt(self, delivery_id: str) -> Any:
        """The receipt row of a delivery id, or None."""
        r = self.t.receipts
        return r.select().where(r.delivery_id == delivery_id).first()

    # --- settings ------------------------------------------------------------------------

    def get_setting(self, key: str, default: Any = None) -> Any:
        """A persisted setting's JSON value, or `default`."""
        s = self.t.settings
        row = s.select(s.value).where(s.key == key).first()
        return json.loads(row.value) if row is not None else default

    def set_setting(self, key: str, value: Any) -> None:
        """Persist a setting."""
        s = self.t.settings
        with self.db.atomic():
            s.insert(key=key, value=json.dumps(value)).on_conflict_replace().execute()
