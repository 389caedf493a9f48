"""One running turn's progress: where its events go, whatever sent them.

A stream agent's reader (on the runner thread) and `POST /v1/turn/progress` (on a
request thread) both hand events to the turn's `TurnProgress`. It remembers the
agent's own session id at once (the next turn, or this one's retry, resumes it),
keeps the options the agent offered for its question, sends the rest to the turn's
Linear agent sessions through the tracker (throttled there, `agent.progress = true`
only), shows every event to the owner's control page (`shown`), and journals thoughts,
plans and links (tool calls are too many to journal one by one). It never raises:
progress is a courtesy, and a turn's answer never depends on it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from wakeline.agents.streams import LinkFound, PlanUpdate, ProgressEvent, SessionStarted, Thought
from wakeline.providers.linear.progress import Item, items_of

log = logging.getLogger(__name__)

OPTIONS_MAX = 10
OPTION_MAX_CHARS = 100
# A turn links each URL once, and at most this many: every waiting link goes out before the
# answer, so an agent that prints URLs in a loop must not queue thousands in front of it.
LINKS_MAX = 50


@dataclass(frozen=True)
class Option:
    """One choice the agent offers the human (`elicitation` with `signal: "select"`)."""

    label: str
    value: str


@dataclass
class TurnProgress:
    """The sinks of one turn's progress; thread-safe."""

    turn_id: str
    conversation_id: str
    sessions: Sequence[str]  # the turn's Linear agent sessions (none for issue routes)
    secret_values: Sequence[str]
    to_linear: Callable[[list[str], list[Item]], None] | None  # None: progress stays local
    remember_session: Callable[[str], None]
    journal: Callable[[str, str], None]  # (stage, text)
    shown: Callable[[list[ProgressEvent]], None] = lambda events: None  # the control page's feed
    options: tuple[Option, ...] = ()
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _linked: set[str] = field(default_factory=set, repr=False)

    def offer(self, events: Sequence[ProgressEvent]) -> None:
        """Route a batch of events (a reader's line, or a posted event)."""
        try:
            self._offer(events)
        except Exception:  # never into the runner thread or the request
            log.exception("progress not routed", extra={"turn_id": self.turn_id})

    def _new_link(self, url: str) -> bool:
        """The first time this turn links `url` (and while under `LINKS_MAX`)."""
        with self._lock:
            if url in self._linked or len(self._linked) >= LINKS_MAX:
                return False
            self._linked.add(url)
            return True

    def offer_options(self, options: Sequence[Option]) -> None:
        """The agent's question will offer these choices (the latest call wins)."""
        with self._lock:
            self.options = tuple(Option(o.label[:OPTION_MAX_CHARS], o.value[:OPTION_MAX_CHARS])
                                 for o in options[:OPTIONS_MAX])
        self.journal("options", ", ".join(f"{o.label}={o.value}" for o in self.options))

    def _offer(self, events: Sequence[ProgressEvent]) -> None:
        events = [e for e in events if not isinstance(e, LinkFound) or self._new_link(e.url)]
        self.shown(events)
        for event in events:
            if isinstance(event, SessionStarted):
                self.remember_session(event.id)
            elif isinstance(event, Thought):
                self.journal("thought", event.text)
            elif isinstance(event, PlanUpdate):
                self.journal("plan", "\n".join(f"[{s.status}] {s.content}" for s in event.steps))
            elif isinstance(event, LinkFound):
                self.journal("link", f"{event.label}: {event.url}")
        if self.to_linear is not None and self.sessions:
            items = items_of(events, self.secret_values)
            if items:
                self.to_linear(list(self.sessions), items)
