"""The store: every transaction wakeline commits, behind one small API.

Callers never see peewee or SQL. Admission is the hot path: `admit` writes a
whole group of deliveries in one IMMEDIATE transaction (see `admissions.py`).
"""

from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from peewee import Database, fn

from wakeline.clock import Clock
from wakeline.errors import Unavailable
from wakeline.models.admissions import FOLLOWING_KEY, AdmissionResult, Admissions
from wakeline.models.approvals import Approvals
from wakeline.models.bindings import Bindings
from wakeline.models.conversations import ConversationRecords
from wakeline.models.db import open_database
from wakeline.models.dialect import dialect_of
from wakeline.models.echoes import Echoes
from wakeline.models.fifo import Fifo
from wakeline.models.inbox_store import InboxStore
from wakeline.models.outbox import Outbox
from wakeline.models.people import PeopleRecords
from wakeline.models.plan_gate import PlanGates
from wakeline.models.plans import AdmissionPlan
from wakeline.models.rooms import RoomAdmissions
from wakeline.models.states import DeliveryState, Ownership, TerminalOutcome, TurnState
from wakeline.models.tables import Tables, bind_tables
from wakeline.models.wakes import WakeFlags

log = logging.getLogger(__name__)

__all__ = ["AdmissionResult", "Counts", "Store"]


@dataclass(frozen=True)
class Counts:
    """The counters `GET /v1/status` reports."""

    conversations: int
    running: int
    stalled: int
    terminal: int
    completed: int
    canceled: int
    waiting_ownership: int
    fifo_pending: int
    fifo_claimed: int
    fifo_held: int
    inbox_unread: int


class Store:
    """All durable state of one wakeline."""

    def __init__(self, db: Database, clock: Clock, following_default: bool = False,
                 host: str | None = None) -> None:
        self.db = db
        self.dialect = dialect_of(db)
        self.clock = clock
        self._relaxed = threading.local()
        self.t: Tables = bind_tables(db)
        self.outbox = Outbox(db, self.t)
        self.fifo = Fifo(db, self.t, self.outbox, self.following, host)
        self.inbox = InboxStore(db, self.t)
        self.conversations = ConversationRecords(db, self.t, self.fifo)
        self.echoes = Echoes(db, self.t, self.following)
        self.gates = PlanGates(db, self.t)
        self.people = PeopleRecords(db)  # who is a person: Linear's answers, held entries
        self.bindings = Bindings(db)  # control threads (Discord): wakeline/models/bindings.py
        self._following_default = following_default
        self._admissions = Admissions(db, self.fifo, self.outbox, following_default, self.gates)
        # Matrix routes (decision 0024): pages with their cursor, and approvals of sends.
        self.rooms = RoomAdmissions(db)
        self.approvals = Approvals(db)
        self.wakes = WakeFlags(db)  # engine jobs, coalesced (hosts sharing the database)

    @classmethod
    def open(cls, target: Path | str, clock: Clock, following_default: bool = False,
             host: str | None = None) -> "Store":
        """Open (creating and migrating as needed) the database: a SQLite file at `target`, or
        the PostgreSQL database of a `postgresql://` URL. `host`: this host's id, recorded on
        the turns it runs (hosts that share the database)."""
        return cls(open_database(target), clock, following_default, host)

    @property
    def location(self) -> str:
        """Where the store lives, for people: the SQLite file, or the URL without a password."""
        return self.dialect.location(self.db)

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

    def relax_durability(self) -> None:
        """This thread's commits skip their own fsync (`synchronous = NORMAL`; decision 0017).

        For turn bookkeeping only (claims, finalisation): a kill -9 still loses nothing,
        and before anything leaves for Linear a FULL commit (dispatch) makes every earlier
        one durable too, since they share one write-ahead log. Admission stays FULL.
        """
        self.dialect.relax_durability(self.db)
        self._relaxed.on = True

    def close(self) -> None:
        """Hand this thread's connection back to the pool (durable again for its next user)."""
        if not self.db.is_closed():
            if getattr(self._relaxed, "on", False):
                self._relaxed.on = False
                self.dialect.restore_durability(self.db)
            self.db.close()

    def release_memory(self) -> None:
        """Free what this thread's last reads left in its connection's page cache. Any commit
        of another connection makes those pages stale before its next read anyway."""
        self.dialect.release_memory(self.db)

    def release_idle(self) -> None:
        """Hand this thread's connection back and close every idle pooled one (a stopping
        service: a thread still finishing keeps its own)."""
        self.close()
        self.db.close_idle()

    def dispose(self) -> None:
        """Close every pooled connection, in use or not: only once no thread uses the store."""
        self.close()
        self.db.close_all()

    # --- admission -----------------------------------------------------------------------

    def admit(self, plans: Sequence[AdmissionPlan]) -> list[AdmissionResult | Unavailable]:
        """Commit a group of admissions in one transaction (see `Admissions.admit`)."""
        return self._admissions.admit(plans)

    # --- reads ---------------------------------------------------------------------------

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one committed state: a deferred read transaction, which takes
        no writer lock. Without it each read sees the latest commit, so a view could show
        a turn's result beside the turn still running."""
        with self.db.snapshot():
            yield

    def counts(self) -> Counts:
        """Counters for the status page."""
        with self.snapshot():
            d = self.t.deliveries
            # The open states by name: `!= completed` walked every completed delivery's
            # index entry, so each status read grew with the history kept.
            open_states = [s.value for s in DeliveryState if s is not DeliveryState.COMPLETED]
            by_state = dict(
                d.select(d.state, fn.COUNT(d.id)).where(d.state.in_(open_states))
                .group_by(d.state).tuples()
            )
            tt = self.t.turns
            turns = dict(tt.select(tt.state, fn.COUNT(tt.id)).group_by(tt.state).tuples())
            c = self.t.conversations
            terminal = c.terminal == True  # noqa: E712 (peewee builds SQL from ==)
            outcomes = dict(c.select(c.outcome, fn.COUNT(c.id)).where(terminal)
                            .group_by(c.outcome).tuples())
            return Counts(
                conversations=c.select().count(),
                running=turns.get(TurnState.RUNNING.value, 0) + turns.get(TurnState.RETRY.value, 0),
                stalled=turns.get(TurnState.STALLED.value, 0),
                terminal=sum(outcomes.values()),
                completed=outcomes.get(TerminalOutcome.COMPLETED.value, 0),
                canceled=outcomes.get(TerminalOutcome.CANCELED.value, 0),
                waiting_ownership=c.select().where((c.ownership == Ownership.PENDING.value)
                                                   & (c.terminal == False)).count(),  # noqa: E712
                fifo_pending=by_state.get(DeliveryState.PENDING.value, 0),
                fifo_claimed=by_state.get(DeliveryState.CLAIMED.value, 0),
                fifo_held=by_state.get(DeliveryState.HELD.value, 0),
                inbox_unread=self.inbox.unread_count(),
            )

    def depths(self) -> dict[str, int]:
        """The queues `/metrics` shows: FIFO pending and claimed, the inbox's unread."""
        counts = self.counts()
        return {"fifo_pending": counts.fifo_pending, "fifo_claimed": counts.fifo_claimed,
                "inbox_unread": counts.inbox_unread}

    def conversation_exists(self, conversation_id: str) -> bool:
        """True when the conversation id is known."""
        c = self.t.conversations
        return c.select().where(c.id == conversation_id).exists()

    def receipt(self, delivery_id: str) -> Any:
        """The receipt row of a delivery id, or None."""
        r = self.t.receipts
        return r.select().where(r.delivery_id == delivery_id).first()

    def record_own_creates(self, ids: Sequence[str], now: int) -> None:
        """Remember the ids a `linear graphql` mutation is about to create, before it leaves.

        Their webhooks are then self-echoes. Echo memory forgets them after 30 days
        (`Echoes.prune`).
        """
        if not ids:
            return
        with self.db.atomic():
            for object_id in ids:
                self.db.execute_sql("INSERT INTO own_creates (id, created_at) VALUES (?, ?)"
                                    " ON CONFLICT (id) DO NOTHING", (object_id, now))

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
            s.insert(key=key, value=json.dumps(value)).on_conflict(
                conflict_target=[s.key], update={s.value: json.dumps(value)}).execute()
