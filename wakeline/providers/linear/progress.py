"""An agent's progress in its Linear agent session: what each event becomes, and how often.

A tool call starting is an ephemeral `action` (Linear replaces it with the next
activity); its result a lasting `action` with `result`; intermediate text a `thought`;
the plan the session's native plan and a link an external URL, both through
`agentSessionUpdate`. Everything is bounded and scrubbed before it is kept.

`SessionProgress` is one session's throttle: at most one write per interval; while
writes wait, the newest plan and the newest action or thought replace older ones (the
replaced ones are counted as skipped); links are never replaced. The session's first
thought goes at once without starting the interval. When the turn ends (`close`) the
waiting action or thought is dropped and the waiting plan and links go at once, before
the answer (the tracker sends one write per session at a time, so the answer follows
them).
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

from wakeline.agents.streams import (
    PLAN_STATUSES,
    LinkFound,
    PlanUpdate,
    ProgressEvent,
    Thought,
    ToolFinished,
    ToolStarted,
)
from wakeline.secrets import scrub

RESULT_MAX_CHARS = 500
THOUGHT_MAX_CHARS = 2_000
PARAMETER_MAX_CHARS = 300
PLAN_MAX_STEPS = 50
STEP_MAX_CHARS = 300
LABEL_MAX_CHARS = 100
URL_MAX_CHARS = 2_000
# Each text of a write, by its key, is cut to this after it is scrubbed.
LIMITS = {"action": LABEL_MAX_CHARS, "parameter": PARAMETER_MAX_CHARS,
          "result": RESULT_MAX_CHARS, "body": THOUGHT_MAX_CHARS, "content": STEP_MAX_CHARS,
          "label": LABEL_MAX_CHARS, "url": URL_MAX_CHARS, "status": LABEL_MAX_CHARS,
          "type": LABEL_MAX_CHARS}

ACTIVITY_MUTATION = (
    "mutation WakelineProgress($input: AgentActivityCreateInput!) "
    "{ agentActivityCreate(input: $input) { success } }"
)
SESSION_UPDATE_MUTATION = (
    "mutation WakelineSessionUpdate($id: String!, $input: AgentSessionUpdateInput!) "
    "{ agentSessionUpdate(id: $id, input: $input) { success } }"
)


@dataclass(frozen=True)
class Item:
    """One progress write, before it is addressed to a session: `slot` says what it replaces.

    Texts are cut when the item is made and scrubbed when it is sent (`request`): most
    items of a busy agent are replaced before they go, and scrubbing is the costly part.
    """

    slot: str  # "activity" (an action or a thought), "plan", or "link"
    payload: dict[str, Any]
    ephemeral: bool = False
    secret_values: Sequence[str] = field(default=(), compare=False, repr=False)

    @property
    def thought(self) -> bool:
        """True for a thought."""
        return self.payload.get("type") == "thought"

    def request(self, session_id: str) -> tuple[str, dict[str, Any]]:
        """The GraphQL document and variables that write this item to `session_id`, every
        text scrubbed."""
        payload = _scrubbed(self.payload, self.secret_values)
        if self.slot == "activity":
            data: dict[str, Any] = {"id": str(uuid.uuid4()), "agentSessionId": session_id,
                                    "content": payload}
            if self.ephemeral:
                data["ephemeral"] = True
            return ACTIVITY_MUTATION, {"input": data}
        return SESSION_UPDATE_MUTATION, {"id": session_id, "input": payload}


def _scrubbed(value: Any, secret_values: Sequence[str], key: str = "") -> Any:
    """Every string in a payload scrubbed, then cut to its key's limit: scrubbing the longer
    text first means no secret is ever cut in half past the scrubber."""
    if isinstance(value, str):
        return _cut(scrub(value, secret_values), LIMITS.get(key, THOUGHT_MAX_CHARS))
    if isinstance(value, list):
        return [_scrubbed(v, secret_values, key) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(v, secret_values, k) for k, v in value.items()}
    return value


def items_of(events: Sequence[ProgressEvent], secret_values: Sequence[str]) -> list[Item]:
    """The Linear writes a batch of progress events asks for (a session id asks for none).

    Within one batch only the newest action or thought and the newest plan can ever be
    sent (each replaces the one before), so only those become items; every link does.
    """
    items: list[Item] = []
    newest_activity = _last_index(events, (ToolStarted, ToolFinished, Thought))
    newest_plan = _last_index(events, (PlanUpdate,))
    for index, event in enumerate(events):
        if isinstance(event, (ToolStarted, ToolFinished, Thought)) and index != newest_activity:
            items.append(REPLACED)
            continue
        if isinstance(event, PlanUpdate) and index != newest_plan:
            items.append(REPLACED)
            continue
        if isinstance(event, ToolStarted):
            items.append(Item("activity", {"type": "action", "action": _short(event.tool),
                                           "parameter": _kept(event.parameter, PARAMETER_MAX_CHARS)},
                              True, secret_values))
        elif isinstance(event, ToolFinished):
            items.append(Item("activity", {
                "type": "action", "action": _short(event.tool),
                "parameter": _kept(event.parameter, PARAMETER_MAX_CHARS),
                "result": _kept(event.result, RESULT_MAX_CHARS)}, False, secret_values))
        elif isinstance(event, Thought):
            items.append(Item("activity", {"type": "thought",
                                           "body": _kept(event.text, THOUGHT_MAX_CHARS)},
                              False, secret_values))
        elif isinstance(event, PlanUpdate):
            items.append(Item("plan", {"plan": plan_payload(event)}, False, secret_values))
        elif isinstance(event, LinkFound):
            items.append(Item("link", {"addedExternalUrls": [
                {"label": _kept(event.label, LABEL_MAX_CHARS), "url": event.url[:URL_MAX_CHARS]}]},
                False, secret_values))
    return items


def _last_index(events: Sequence[ProgressEvent], kinds: tuple[type, ...]) -> int:
    for index in range(len(events) - 1, -1, -1):
        if isinstance(events[index], kinds):
            return index
    return -1


def plan_payload(plan: PlanUpdate) -> list[dict[str, str]]:
    """The native plan: at most `PLAN_MAX_STEPS` steps, the rest summed up in the last one."""
    steps = [{"content": _kept(s.content, STEP_MAX_CHARS),
              "status": s.status if s.status in PLAN_STATUSES else "pending"} for s in plan.steps]
    if len(steps) > PLAN_MAX_STEPS:
        rest = steps[PLAN_MAX_STEPS - 1:]
        done = all(s["status"] in ("completed", "canceled") for s in rest)
        steps = steps[:PLAN_MAX_STEPS - 1] + [{"content": f"… and {len(rest)} more steps",
                                               "status": "completed" if done else "pending"}]
    return steps


def _short(text: str) -> str:
    return text.strip()[:LABEL_MAX_CHARS] or "tool"


def _cut(text: str, limit: int) -> str:
    """Bounded to `limit` characters."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _kept(text: str, limit: int) -> str:
    """What an item keeps of a text until it is sent: enough that the final cut, after
    scrubbing, never falls inside a secret the scrubber has not seen whole."""
    return text[: limit * 4]


# An event that a newer one of the same batch replaced before it was even queued.
REPLACED = Item("replaced", {})


@dataclass
class SessionProgress:
    """One session's waiting progress and when it last wrote."""

    interval_ms: int
    activity: tuple[int, Item] | None = None
    plan: tuple[int, Item] | None = None
    links: deque[tuple[int, Item]] = field(default_factory=deque)
    last_sent_ms: int | None = None
    thought_sent: bool = False
    closing: bool = False
    skipped: int = 0  # replaced or dropped since last read (the caller drains it)
    _order: int = 0

    def offer(self, item: Item) -> None:
        """A new write: it replaces the waiting one of its slot (not a link)."""
        if item is REPLACED:
            self.skipped += 1
            return
        self._order += 1
        entry = (self._order, item)
        if item.slot == "link":
            self.links.append(entry)
        elif item.slot == "plan":
            self.skipped += self.plan is not None
            self.plan = entry
        else:
            self.skipped += self.activity is not None
            self.activity = entry
        self.closing = False  # a new turn of the session writes again

    def next(self, now_ms: int) -> Item | None:
        """The write to send now, if one is due (oldest waiting first); None to wait."""
        waiting = [e for e in (self.activity, self.plan) if e is not None]
        if self.links:
            waiting.append(self.links[0])
        if not waiting:
            return None
        order, item = min(waiting, key=lambda e: e[0])
        free = item.thought and not self.thought_sent  # the first thought costs no interval
        if not (self.closing or free or self.last_sent_ms is None
                or now_ms - self.last_sent_ms >= self.interval_ms):
            return None
        if self.activity is not None and self.activity[0] == order:
            self.activity = None
        elif self.plan is not None and self.plan[0] == order:
            self.plan = None
        else:
            self.links.popleft()
        self.thought_sent = self.thought_sent or item.thought
        if not free:
            self.last_sent_ms = now_ms
        return item

    def close(self) -> None:
        """The turn ended: its waiting action or thought is stale; plan and links go now."""
        if self.activity is not None:
            self.skipped += 1
            self.activity = None
        self.closing = True

    def pending(self) -> bool:
        """Whether anything still waits to be written."""
        return self.activity is not None or self.plan is not None or bool(self.links)


class ProgressBoard:
    """Every session's waiting progress, shared by the turns that offer it (runner and
    request threads) and the tracker that sends it; thread-safe.

    Offering costs a lock, not a message: a busy agent's hundreds of events a second
    only replace what waits. The caller tells the tracker when `offer` says a session that
    had nothing waiting now has something; otherwise the tracker finds it on its tick.
    """

    def __init__(self, interval_ms: int) -> None:
        self._interval_ms = interval_ms
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionProgress] = {}
        self._skipped = 0

    def offer(self, session_ids: Sequence[str], items: Sequence[Item]) -> bool:
        """Queue items for each session; True when one had nothing waiting before."""
        woke = False
        with self._lock:
            for session_id in session_ids:
                state = self._sessions.get(session_id)
                if state is None:
                    state = self._sessions[session_id] = SessionProgress(self._interval_ms)
                woke = woke or not state.pending()
                for item in items:
                    state.offer(item)
        return woke

    def close(self, session_ids: Sequence[str]) -> bool:
        """The sessions' turn ended: drop waiting actions and thoughts, flush the rest. True
        when one of them had progress here (the tracker has something to look at)."""
        known = False
        with self._lock:
            for session_id in session_ids:
                state = self._sessions.get(session_id)
                if state is not None:
                    state.close()
                    known = True
        return known

    def take(self, now_ms: int, busy: set[str]) -> list[tuple[str, Item]]:
        """The writes due now, one per session not `busy`; forgets sessions done flushing."""
        due = []
        with self._lock:
            for session_id, state in list(self._sessions.items()):
                self._skipped += state.skipped
                state.skipped = 0
                if session_id in busy:
                    continue
                item = state.next(now_ms)
                if item is not None:
                    due.append((session_id, item))
                elif state.closing and not state.pending():
                    del self._sessions[session_id]
        return due

    def flushing(self) -> set[str]:
        """Sessions whose ended turn still has a plan or links to send (answers wait)."""
        with self._lock:
            return {s for s, p in self._sessions.items() if p.closing and p.pending()}

    def drain_skipped(self) -> int:
        """How many writes were replaced or dropped since the last call."""
        with self._lock:
            skipped, self._skipped = self._skipped, 0
            return skipped
