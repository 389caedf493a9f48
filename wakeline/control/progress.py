"""What the control page shows of a turn's progress, and the last turn's of each conversation.

The same events section 7 of the contract sends to Linear (tool calls with their results,
thoughts, the plan, links), for every route, agent sessions or not. They become page items
only when a page reads them (`items_of`): scrubbed of credentials and cut, like everything
that leaves the service. `TurnLogs` keeps, for the conversations that ran a turn lately,
that turn's events in memory, so a page opened in the middle of a turn shows what came
before; a tool call's result takes the place of its start.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Sequence

from wakeline.agents.streams import (
    LinkFound,
    PlanUpdate,
    ProgressEvent,
    Thought,
    ToolFinished,
    ToolStarted,
)
from wakeline.secrets import scrub

EVENTS_PER_TURN = 200
CONVERSATIONS_KEPT = 32
# What the page lists, in order; the plan is shown apart, a session id not at all.
LISTED = (ToolStarted, ToolFinished, Thought, LinkFound)
LIMITS = {"tool": 100, "parameter": 300, "result": 2_000, "text": 2_000, "content": 300,
          "label": 100, "url": 2_000}


def _text(value: str, key: str, secret_values: Sequence[str]) -> str:
    """Scrubbed, then cut to its key's limit (scrubbed before the cut: a secret is never
    cut in half past the scrubber)."""
    limit = LIMITS[key]
    text = scrub(value[: limit * 4], secret_values).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def item_of(event: ProgressEvent, secret_values: Sequence[str]) -> dict[str, Any] | None:
    """The page's item for one event; None for what the page does not show (a session id)."""
    def t(value: str, key: str) -> str:
        return _text(value, key, secret_values)

    if isinstance(event, ToolFinished):
        return {"type": "action", "call": event.call_id, "tool": t(event.tool, "tool"),
                "parameter": t(event.parameter, "parameter"), "result": t(event.result, "result"),
                "error": event.is_error}
    if isinstance(event, ToolStarted):
        return {"type": "action", "call": event.call_id, "tool": t(event.tool, "tool"),
                "parameter": t(event.parameter, "parameter")}
    if isinstance(event, Thought):
        return {"type": "thought", "text": t(event.text, "text")}
    if isinstance(event, PlanUpdate):
        return {"type": "plan", "steps": [{"content": t(s.content, "content"), "status": s.status}
                                          for s in event.steps]}
    if isinstance(event, LinkFound) and event.url.startswith(("https://", "http://")):
        return {"type": "link", "label": t(event.label, "label"), "url": event.url[:LIMITS["url"]]}
    return None


def shown(events: Sequence[ProgressEvent]) -> list[ProgressEvent]:
    """The events the page shows (not a session id)."""
    return [e for e in events if isinstance(e, (*LISTED, PlanUpdate))]


def items_of(events: Sequence[ProgressEvent], secret_values: Sequence[str]) -> list[dict[str, Any]]:
    """The page's items for a batch of events, in order."""
    return [item for item in (item_of(e, secret_values) for e in events) if item is not None]


@dataclass(frozen=True)
class TurnView:
    """One turn's progress as a page shows it: its items (oldest first, each with the `seq`
    of the change that last touched it), its plan, and the feed's sequence it is complete to."""

    turn_id: str
    items: list[dict[str, Any]]
    plan: list[dict[str, Any]] | None
    plan_seq: int
    as_of: int


class _TurnLog:
    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.events: deque[tuple[int, ProgressEvent]] = deque(maxlen=EVENTS_PER_TURN)
        self.plan: tuple[int, PlanUpdate] | None = None

    def add(self, seq: int, events: Sequence[ProgressEvent]) -> None:
        for event in events:
            if isinstance(event, PlanUpdate):
                self.plan = (seq, event)
            elif isinstance(event, LISTED) and not self._finished(seq, event):
                self.events.append((seq, event))

    def _finished(self, seq: int, event: ProgressEvent) -> bool:
        """A tool call's result takes the place of its start (posted actions have no call
        id: each is its own item)."""
        if not isinstance(event, ToolFinished) or not event.call_id:
            return False
        for index in range(len(self.events) - 1, -1, -1):
            kept = self.events[index][1]
            if isinstance(kept, ToolStarted) and kept.call_id == event.call_id:
                self.events[index] = (seq, event)
                return True
        return False


class TurnLogs:
    """The latest turn's progress of the last `CONVERSATIONS_KEPT` conversations that ran
    one; the caller numbers each batch (the feed's sequence). Thread-safe."""

    def __init__(self, secret_values: Sequence[str]) -> None:
        self._secret_values = list(secret_values)
        self._lock = threading.Lock()
        self._logs: OrderedDict[str, _TurnLog] = OrderedDict()

    def started(self, conversation_id: str, turn_id: str) -> None:
        """A turn started: the conversation's log is its, from now on."""
        with self._lock:
            self._log(conversation_id, turn_id)

    def add(self, conversation_id: str, turn_id: str, seq: int,
            events: Sequence[ProgressEvent]) -> None:
        """A batch of the turn's events, numbered `seq`."""
        with self._lock:
            self._log(conversation_id, turn_id).add(seq, events)

    def _log(self, conversation_id: str, turn_id: str) -> _TurnLog:
        log = self._logs.get(conversation_id)
        if log is None or log.turn_id != turn_id:
            log = self._logs[conversation_id] = _TurnLog(turn_id)
        self._logs.move_to_end(conversation_id)
        while len(self._logs) > CONVERSATIONS_KEPT:
            self._logs.popitem(last=False)
        return log

    def view(self, conversation_id: str, as_of: int) -> TurnView | None:
        """The conversation's latest turn as the page shows it, complete to `as_of` (the
        caller holds what numbers the batches, so none lands in between)."""
        with self._lock:
            log = self._logs.get(conversation_id)
            if log is None:
                return None
            kept, plan = list(log.events), log.plan
        items = []
        for seq, event in kept:
            item = item_of(event, self._secret_values)
            if item is not None:
                items.append({**item, "seq": seq})
        shown = item_of(plan[1], self._secret_values) if plan is not None else None
        return TurnView(log.turn_id, items, shown["steps"] if shown else None,
                        plan[0] if plan else 0, as_of)
