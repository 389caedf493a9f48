"""The owner's control page as a part of the service (CONTRACT section 13).

It listens to what the service records (admissions, turns starting and ending, lifecycle
events, a running turn's progress, Matrix approvals) and numbers each change in its feed;
the page reads the state itself from the store (`board`). Its sessions are the page's
sign-in. It starts after the operator listener and so stops before it: the feed closes
first, and the open streams end before the listener waits out its requests.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from wakeline.clock import Clock, to_ms
from wakeline.config import Config
from wakeline.control.board import Board, read_board
from wakeline.control.feed import Feed, stream_bound
from wakeline.control.progress import TurnLogs, items_of, shown
from wakeline.control.sessions import Sessions
from wakeline.models.states import Outcome
from wakeline.models.store import Store
from wakeline.service.events import Events
from wakeline.service.parts import BasePart, every
from wakeline.turns.tokens import TokenRegistry

PRUNE_EVERY_TICKS = 120


class ControlPart(BasePart):
    """The control page's feed, its sessions and its reading of the store.

    Args:
        approvals: the Matrix approvals service (None without Matrix routes).
    """

    name = "control"

    def __init__(self, config: Config, store: Store, clock: Clock, tokens: TokenRegistry,
                 secret_values: Sequence[str], events: Events, approvals: Any = None) -> None:
        self.clock = clock
        self.feed = Feed(to_ms(clock.now()), stream_bound(config.server.threads))
        self.sessions = Sessions(tokens, clock, config.control.session_hours * 3600)
        self._store = store
        self._approvals = approvals
        self._secret_values = list(secret_values)
        self._turns = TurnLogs(secret_values)
        # Numbering a progress batch and keeping it happen together, so a reading of the
        # turn's log is complete to the sequence taken with it.
        self._lock = threading.Lock()
        events.admitted.subscribe(self._admitted)
        events.woke.subscribe(lambda ids: self._changed(ids, "woke"))
        events.joined.subscribe(lambda ids: self._changed(ids, "joined"))
        events.turn_started.subscribe(self._turn_started)
        events.turn_finished.subscribe(
            lambda finished: self._changed([finished.turn.conversation_id], "turn_finished"))
        events.turn_failed.subscribe(lambda turn, error, stalled: self._changed(
            [turn.conversation_id], "stalled" if stalled else "turn_failed"))
        events.lifecycle.subscribe(lambda cid, event, text: self._changed([cid], event))
        events.progress.subscribe(self._progress)
        if approvals is not None:
            approvals.watch(self._approval)

    def board(self, selected: str | None) -> Board:
        """What the page shows now, `selected` whole.

        Raises:
            NotFound: `selected` names no conversation.
        """
        with self._lock:
            seq = self.feed.newest
            progress = self._turns.view(selected, seq) if selected else None
        return read_board(self._store, self._approvals, seq, selected, progress)

    # --- what it listens to ----------------------------------------------------------------

    def _changed(self, conversation_ids: list[str], change: str) -> None:
        for cid in dict.fromkeys(conversation_ids):
            data = {"conversation": cid, "change": change}
            self.feed.publish("conversation", lambda data=data: data)

    def _admitted(self, admitted: list[tuple[Any, Any]]) -> None:
        ids = [cid for _, result in admitted if result.outcome is not Outcome.DUPLICATE
               for cid in (result.conversation_id, result.joined, *result.wake_ids) if cid]
        self._changed(ids, "delivery")

    def _turn_started(self, turn: Any, confinement: str) -> None:
        self._turns.started(turn.conversation_id, turn.turn_id)
        self._changed([turn.conversation_id], "turn_started")

    def _progress(self, turn: Any, events: list[Any]) -> None:
        events = shown(events)
        if not events:
            return
        cid, turn_id = turn.conversation_id, turn.turn_id
        secret_values = self._secret_values

        def data() -> dict[str, Any]:
            return {"conversation": cid, "turn": turn_id, "items": items_of(events, secret_values)}

        with self._lock:
            seq = self.feed.publish("progress", data)
            self._turns.add(cid, turn_id, seq, events)

    def _approval(self, approval: Any) -> None:
        data = {"approval": approval.id, "status": str(approval.status),
                "conversation": approval.conversation_id}
        self.feed.publish("waiting", lambda: data)

    # --- the part --------------------------------------------------------------------------

    def tick(self, count: int) -> None:
        """Now and then: expired sessions are forgotten."""
        if every(count, PRUNE_EVERY_TICKS):
            self.sessions.prune()

    def stop(self) -> None:
        """The feed closes: open streams end, and their threads go back to the listener."""
        self.feed.close()
