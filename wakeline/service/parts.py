"""One shape for every part of a running service (decision 0036).

A part is an object the composition root (`wakeline.app`) builds from its collaborators
and lists in start order: the store's and turns' machinery, Linear, the sandbox, the
scheduling engine, Discord, Matrix, the listeners. Every part answers the same small
protocol: `start` and `stop` (the root starts them in order and stops them in reverse),
`tick` (every ticker beat, with its count, for the periodic work the part owns), and
`checks` (its `doctor` items, one `Check` type everywhere). What a part listens to, it
subscribes to in its constructor, on the `Events` it is given (`service.events`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Protocol, Sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    """One doctor item: what, whether it passed, what was found, and how to fix it."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        """`{"name", "ok", "detail"}`, plus `fix` when it failed."""
        out = asdict(self)
        if out["fix"] is None:
            del out["fix"]
        return out


class Part(Protocol):
    """What the composition root asks of every part."""

    name: str

    def start(self) -> None:
        """Begin working (threads, connections); the parts before it have started."""

    def stop(self) -> None:
        """Stop and release; the parts after it have stopped. Idempotent."""

    def tick(self, count: int) -> None:
        """A ticker beat (`count` beats so far): start the periodic work that is due, never
        wait on it."""

    def checks(self) -> list[Check]:
        """The part's `doctor` items (no call to Linear or another remote)."""


class BasePart:
    """A part with nothing to do at each step: parts override what they need."""

    name = "part"

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to stop."""

    def tick(self, count: int) -> None:
        """Nothing periodic."""

    def checks(self) -> list[Check]:
        """No doctor items."""
        return []


class Parts:
    """The parts of one service, in start order."""

    def __init__(self, parts: Iterable[Part]) -> None:
        self._parts: list[Part] = list(parts)
        self._started: list[Part] = []

    def __iter__(self) -> Any:
        return iter(self._parts)

    def start(self) -> None:
        """Start each part in order; if one fails, stop those started, in reverse."""
        try:
            for part in self._parts:
                part.start()
                self._started.append(part)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the started parts in reverse order; one that fails does not keep the rest
        running."""
        while self._started:
            part = self._started.pop()
            try:
                part.stop()
            except Exception:
                log.exception("a part failed to stop", extra={"part": part.name})

    def tick(self, count: int) -> None:
        """Every part's beat; one that fails is logged and the rest still tick."""
        for part in self._started:
            try:
                part.tick(count)
            except Exception:
                log.exception("a part's tick failed", extra={"part": part.name})

    def checks(self) -> list[Check]:
        """Every part's doctor items, in start order."""
        return [check for part in self._parts for check in part.checks()]


def every(count: int, beats: int) -> bool:
    """True on every `beats`-th beat: how a part paces its periodic work."""
    return count % beats == 0


def named(parts: Sequence[Part]) -> dict[str, Part]:
    """The parts by name (the operator API's status and doctor look some up)."""
    return {part.name: part for part in parts}
