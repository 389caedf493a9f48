"""MatrixConnection: the actor that owns one connection's cursor and its approved sends.

The sync loop (`sync.py`) asks `handle_page` with each page and waits for the answer: the
actor classifies the page's events (`events.py`), admits the eligible ones of the rooms
whose route is on together with the new cursor in one transaction (`models/rooms.py`),
then wakes the conversations that got work and tells the journal. An undecryptable event
holds the cursor: its room's later events wait (earlier ones, and other rooms, are admitted:
their receipts make the next fetch of the page harmless), and after `stall_after_seconds`
the connection says it is stalled, in status, doctor and the journal.

An approved send is the actor's too (`send_approved`): it checks the approval is still bound
to what the route binds now, with the body whose hash was recorded, then the loop rechecks
the room and sends once with the approval's transaction id; the result comes back as
`send_finished`. A send that could not reach the homeserver is tried again, with the same
transaction id, on a later `tick`; one the homeserver refused fails for good.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import pykka

from wakeline.clock import Clock, to_ms
from wakeline.config import MatrixConnectionConfig
from wakeline.models.approvals import Approval, ApprovalStatus
from wakeline.models.rooms import RoomEvent, room_subject
from wakeline.models.store import Store
from wakeline.providers.matrix.events import SyncPage, Verdict, classify, room_event
from wakeline.providers.matrix.routes import RouteBook
from wakeline.providers.matrix.sync import PageAnswer

log = logging.getLogger(__name__)

RESEND_FIRST_SECONDS = 1.0
RESEND_MAX_SECONDS = 300.0


class SendRefused(Exception):
    """A send that must not be tried again: the reason, and whether the route goes off."""

    def __init__(self, reason: str, route_off: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.route_off = route_off


@dataclass(frozen=True)
class Held:
    """The undecryptable event that holds the cursor, and since when."""

    room_id: str
    event_id: str
    since_ms: int
    stalled: bool = False


@dataclass
class Health:
    """What the actor tells status and doctor, read from any thread."""

    held: Held | None = None
    counts: dict[str, int] = field(default_factory=dict)
    limited: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> tuple[Held | None, dict[str, int], int]:
        """(the held event, events by verdict, limited timelines) as of now."""
        with self._lock:
            return self.held, dict(self.counts), self.limited

    def count(self, verdict: str, n: int = 1) -> None:
        """Count events by what became of them."""
        with self._lock:
            self.counts[verdict] = self.counts.get(verdict, 0) + n

    def add_limited(self) -> None:
        """Count a limited timeline (a gap the homeserver left)."""
        with self._lock:
            self.limited += 1

    def hold(self, held: Held | None) -> None:
        """Record the event that holds the cursor (None: nothing does)."""
        with self._lock:
            self.held = held


@dataclass
class ConnectionHooks:
    """The actor's collaborators beyond the store (the composition root wires them)."""

    wake: Callable[[list[str]], None] = lambda ids: None
    inbound: Callable[[RoomEvent, str], None] = lambda event, conversation_id: None
    # (connection, event, text, about): stalled, resumed, route_off (about: the route), limited
    lifecycle: Callable[[str, str, str, str], None] = lambda name, event, text, about: None
    # (the approval as settled): sent or failed
    settled: Callable[[Approval], None] = lambda approval: None
    counted: Callable[[str, int], None] = lambda verdict, n: None
    # Recheck the room, then send once: the event id, or SendRefused / another error.
    send: Callable[[Approval], Future[str]] | None = None
    ready: Callable[[], bool] = lambda: False
    sweep: Callable[[], object] = lambda: None  # expire approvals whose day is over


class MatrixConnection(pykka.ThreadingActor):
    """One connection's page admissions and approved sends."""

    def __init__(self, name: str, conn: MatrixConnectionConfig, routes: RouteBook, store: Store,
                 clock: Clock, hooks: ConnectionHooks, health: Health) -> None:
        super().__init__()
        self.name = name
        self._conn = conn
        self._routes = routes
        self._store = store
        self._clock = clock
        self._hooks = hooks
        self._health = health
        self._me: Any = None
        self._sending: set[str] = set()
        self._resend_at: dict[str, tuple[int, float]] = {}  # approval id -> (when, last wait)

    def on_start(self) -> None:
        """Name the thread; make the proxy the send callbacks tell."""
        threading.current_thread().name = f"matrix-connection-{self.name}"
        self._me = self.actor_ref.proxy()

    def on_stop(self) -> None:
        """Hand this thread's store connection back."""
        self._store.close()

    def on_failure(self, *args: Any) -> None:
        """A message that raised (pykka logged it): the actor goes on."""

    # --- pages -------------------------------------------------------------------------------

    def handle_page(self, page: SyncPage) -> PageAnswer:
        """Admit a page's eligible events with its cursor (one transaction); the answer tells
        the loop where to sync from next. Raises when the store cannot commit: the loop then
        fetches the same page again from the old cursor."""
        now = to_ms(self._clock.now())
        if page.first:
            # The first sync of a connection: history, not live; only its cursor is kept.
            self._store.rooms.admit_page(self.name, [], page.next_batch, now)
            log.info("matrix first sync: cursor stored", extra={"connection": self.name})
            return PageAnswer(page.next_batch)
        for room_id in page.left:
            state = self._routes.by_room(room_id)
            if state is not None and self._routes.switch_off(state.route.name,
                                                             f"the owner left {room_id}"):
                self._route_went_off(state.route.name, f"the owner left {room_id}")
        events, held, counted = self._eligible(page, now)
        cursor = None if held is not None else page.next_batch
        admitted = self._store.rooms.admit_page(self.name, events, cursor, now)
        woke: list[str] = []
        for result in admitted:
            if result.duplicate:
                counted["duplicate"] = counted.get("duplicate", 0) + 1
                continue
            counted["admitted" if result.event.wakes else "on_demand"] = \
                counted.get("admitted" if result.event.wakes else "on_demand", 0) + 1
            if result.conversation_id is not None:
                self._hooks.inbound(result.event, result.conversation_id)
                if result.joined and result.conversation_id not in woke:
                    woke.append(result.conversation_id)
        if woke:
            self._hooks.wake(woke)
        for verdict, n in counted.items():
            self._health.count(verdict, n)
            self._hooks.counted(verdict, n)
        self._track_hold(held, now)
        return PageAnswer(cursor, held=held is not None)

    def _eligible(self, page: SyncPage, now: int
                  ) -> tuple[list[RoomEvent], tuple[str, str] | None, dict[str, int]]:
        """The events to admit, the first event that holds the cursor, and skip counts."""
        events: list[RoomEvent] = []
        held: tuple[str, str] | None = None
        counted: dict[str, int] = {}
        for room_id, timeline in page.rooms.items():
            state = self._routes.by_room(room_id)
            if state is None or not state.on:
                continue  # no route, or one switched off: not read
            if timeline.limited:
                # The homeserver skipped events before these: logged, never filled in.
                self._health.add_limited()
                log.warning("matrix timeline limited: events before this page were skipped",
                            extra={"connection": self.name, "room_id": room_id})
                self._hooks.lifecycle(self.name, "limited", f"Room {room_id} (route "
                                      f"{state.route.name}): the homeserver left a gap before "
                                      "this page's events; they are not read back.",
                                      state.route.name)
            for event in timeline.events:
                verdict = classify(event, self._conn.user_id)
                if verdict is Verdict.HOLD:
                    held = held or (room_id, str(event.source.get("event_id", "?")))
                    break  # the room's later events wait behind it, in order
                if verdict is Verdict.ADMIT:
                    events.append(room_event(event, connection=self.name, route=state.route.name,
                                             room_id=room_id, now_ms=now,
                                             wakes=state.route.activation == "on_event"))
                else:
                    counted[verdict.value] = counted.get(verdict.value, 0) + 1
        return events, held, counted

    def _track_hold(self, held: tuple[str, str] | None, now: int) -> None:
        current = self._health.held
        if held is None:
            if current is not None:
                self._health.hold(None)
                if current.stalled:
                    self._hooks.lifecycle(self.name, "resumed", "The undecryptable event's keys "
                                          "arrived: the connection syncs on.", current.event_id)
                log.info("matrix page no longer held", extra={"connection": self.name})
            return
        if current is None or (current.room_id, current.event_id) != held:
            self._health.hold(Held(held[0], held[1], now))
            log.warning("matrix event undecryptable: the cursor waits for its keys",
                        extra={"connection": self.name, "room_id": held[0], "event_id": held[1]})
            return
        if not current.stalled and now - current.since_ms >= self._conn.stall_after_seconds * 1000:
            self._health.hold(replace(current, stalled=True))
            text = (f"Stalled: event {current.event_id} in {current.room_id} has been "
                    f"undecryptable for {int((now - current.since_ms) / 1000)} s; its room's "
                    "later messages wait behind it. Fix: the sender's client must share the "
                    "keys with the device (verify it; see docs/operations.md).")
            log.error("matrix connection stalled", extra={"connection": self.name,
                                                          "event_id": current.event_id})
            self._hooks.lifecycle(self.name, "stalled", text, current.event_id)

    def _route_went_off(self, route: str, reason: str) -> None:
        log.error("matrix route switched off", extra={"connection": self.name, "route": route,
                                                      "reason": reason})
        self._hooks.lifecycle(self.name, "route_off", f"Route {route} switched off: {reason}.",
                              route)

    # --- approved sends ----------------------------------------------------------------------

    def send_approved(self, approval_id: str) -> None:
        """Send an approved approval once (a later tick retries what could not reach the
        homeserver, with the same transaction id)."""
        if approval_id in self._sending:
            return
        approval = self._store.approvals.get(approval_id)
        if approval is None or approval.status is not ApprovalStatus.APPROVED \
                or approval.connection != self.name:
            return
        problem = self._binding_problem(approval)
        if problem is not None:
            self._settle(approval, ApprovalStatus.FAILED, error=problem)
            return
        if self._hooks.send is None or not self._hooks.ready():
            self._retry_later(approval_id)  # not synced yet (a restart): on a later tick
            return
        self._sending.add(approval_id)
        self._store.approvals.attempted(approval_id)
        me = self._me
        future = self._hooks.send(approval)
        future.add_done_callback(lambda done: _tell(me.send_finished, approval_id, done))

    def send_finished(self, approval_id: str, done: Future[str]) -> None:
        """The loop's answer to a send."""
        self._sending.discard(approval_id)
        approval = self._store.approvals.get(approval_id)
        if approval is None or approval.status is not ApprovalStatus.APPROVED:
            return
        error = done.exception()
        if error is None:
            self._resend_at.pop(approval_id, None)
            self._settle(approval, ApprovalStatus.SENT, event_id=done.result())
        elif isinstance(error, SendRefused):
            self._resend_at.pop(approval_id, None)
            if error.route_off and self._routes.switch_off(approval.route, error.reason):
                self._route_went_off(approval.route, error.reason)
            self._settle(approval, ApprovalStatus.FAILED, error=error.reason)
        else:
            log.warning("matrix send not confirmed; it goes again with the same transaction id",
                        extra={"connection": self.name, "approval_id": approval_id,
                               "error": f"{error.__class__.__name__}: {str(error)[:200]}"})
            self._retry_later(approval_id)

    def tick(self) -> None:
        """Send what waits: approvals approved before a restart, and retries that are due."""
        now = to_ms(self._clock.now())
        for approval in self._store.approvals.to_send(self.name):
            due = self._resend_at.get(approval.id)
            if approval.id not in self._sending and (due is None or due[0] <= now):
                self.send_approved(approval.id)

    def sweep(self) -> None:
        """Expire the approvals nobody decided within a day (each journaled)."""
        self._hooks.sweep()

    def _binding_problem(self, approval: Approval) -> str | None:
        """Why this approval may not be sent to where the route points now, or None."""
        state = self._routes.get(approval.route)
        if state is None:
            return f"the route {approval.route} is no longer configured"
        if (state.route.connection, state.route.room_id) != (approval.connection, approval.room_id):
            return f"the route {approval.route} now binds another room, not {approval.room_id}"
        if not approval.intact:
            return "the body is not the one proposed (its hash differs): not sent"
        subject = self._store.rooms.subject_of(approval.conversation_id)
        if subject != room_subject(approval.connection, approval.room_id):
            return "the conversation is not the room's: not sent"
        if not state.on:
            return f"the route {approval.route} is off: {state.detail}"
        return None

    def _retry_later(self, approval_id: str) -> None:
        now = to_ms(self._clock.now())
        last = self._resend_at.get(approval_id, (0, 0.0))[1]
        wait = min(RESEND_MAX_SECONDS, max(RESEND_FIRST_SECONDS, last * 2))
        self._resend_at[approval_id] = (now + int(wait * 1000), wait)

    def _settle(self, approval: Approval, status: ApprovalStatus, *, event_id: str | None = None,
                error: str | None = None) -> None:
        now = to_ms(self._clock.now())
        if self._store.approvals.settle(approval.id, status, now, event_id=event_id, error=error):
            settled = self._store.approvals.get(approval.id)
            log.info("matrix approval settled", extra={"approval_id": approval.id,
                                                       "status": status.value, "event_id": event_id,
                                                       "error": error})
            if settled is not None:
                self._hooks.settled(settled)


def _tell(method: Any, *args: Any) -> None:
    """Tell the actor from a future's callback; a stopped actor leaves it for the next start."""
    try:
        method.defer(*args)
    except pykka.ActorDeadError:
        pass
