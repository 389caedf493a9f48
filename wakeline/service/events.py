"""What happens in a running service that more than one part listens to.

A part subscribes, in its constructor, to the events it acts on; the part that makes an
event happen calls it. Every listener is called in subscription order on the caller's
thread, so it only tells (an actor's `defer`) or records: it never waits. One that fails
is logged and the others are still called: a listener never fails what it listens to.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, ParamSpec

log = logging.getLogger(__name__)

P = ParamSpec("P")


class Hook(Generic[P]):
    """The listeners of one event."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._listeners: list[Callable[P, Any]] = []

    def subscribe(self, listener: Callable[P, Any]) -> None:
        """Call `listener` on every future event."""
        self._listeners.append(listener)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> None:
        for listener in self._listeners:
            try:
                listener(*args, **kwargs)
            except Exception:
                log.exception("an event listener failed", extra={"event": self.name})


@dataclass(frozen=True)
class Events:
    """The events of one service.

    Attributes:
        admitted: a group of deliveries is durable: `[(plan, result), ...]` (the writer's
            thread).
        woke: conversations with new work that no admission announced (held deliveries
            released, an ownership lookup answered).
        joined: conversations whose FIFO took deliveries outside the admission writer (a
            Matrix page): woken, and their control threads reconciled.
        turn_started: `(turn, confinement)`; turn_finished: `(finished)`; turn_failed:
            `(turn, error, stalled)`; lifecycle: `(conversation id, event, text)` of the
            turns' side (a reset, an abandon, a plan posted); progress: `(turn, events)`, a
            running turn's progress events as they come (a stream reader's line on the runner
            thread, a posted event on a request thread).
    """

    admitted: Hook[[list[tuple[Any, Any]]]] = field(default_factory=lambda: Hook("admitted"))
    woke: Hook[[list[str]]] = field(default_factory=lambda: Hook("woke"))
    joined: Hook[[list[str]]] = field(default_factory=lambda: Hook("joined"))
    turn_started: Hook[[Any, str]] = field(default_factory=lambda: Hook("turn_started"))
    turn_finished: Hook[[Any]] = field(default_factory=lambda: Hook("turn_finished"))
    turn_failed: Hook[[Any, str, bool]] = field(default_factory=lambda: Hook("turn_failed"))
    lifecycle: Hook[[str, str, str]] = field(default_factory=lambda: Hook("lifecycle"))
    progress: Hook[[Any, list[Any]]] = field(default_factory=lambda: Hook("progress"))
