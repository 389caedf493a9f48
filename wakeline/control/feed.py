"""The control page's live feed: the recent changes, numbered, and who may hold a thread on it.

A change is a note that something the store or a running turn records just happened: a
conversation changed (a delivery joined it, a turn started or ended, a lifecycle event),
a running turn showed progress, something began or stopped waiting for the owner. It is
kept in memory only, in a ring of the last `RING_CHANGES`, numbered by one sequence: the
store and the journal stay the record, and the page reads the state from the store. A
reader that asks for changes older than the ring holds (or from another process: each
starts its sequence at its start time in milliseconds, so ids grow across restarts) gets
None and refreshes everything instead.

Each open `text/event-stream` holds one of the operator listener's request threads, so at
most `stream_bound(threads)` hold one at a time; past the bound a reader gets one batch and
the connection ends (`take_stream`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

RING_CHANGES = 1000


def stream_bound(threads: int) -> int:
    """How many open streams the operator listener's `threads` allow: half of them, minus
    one, so the API always keeps at least half its threads (none below four threads)."""
    return max(0, threads // 2 - 1)


@dataclass
class Change:
    """One numbered change: its `kind` (the SSE event name) and its data, made into JSON
    the first time a reader needs it (most changes of a busy service are never read)."""

    seq: int
    kind: str
    data: Callable[[], dict[str, Any]]
    _json: str | None = field(default=None, repr=False)

    def json(self) -> str:
        """The data as one line of JSON (computed once; a race computes the same text)."""
        if self._json is None:
            self._json = json.dumps(self.data(), ensure_ascii=False, separators=(",", ":"))
        return self._json


class Feed:
    """The ring of recent changes; thread-safe.

    Args:
        first_seq: the sequence before the first change (the process's start, in ms).
        max_streams: how many readers may hold a thread on it at once.
        capacity: how many changes the ring keeps.
    """

    def __init__(self, first_seq: int, max_streams: int, capacity: int = RING_CHANGES) -> None:
        self._cond = threading.Condition()
        self._ring: list[Change] = []
        self._capacity = capacity
        self._newest = first_seq
        self._max_streams = max_streams
        self._streams = 0
        self._closed = False

    @property
    def newest(self) -> int:
        """The sequence of the newest change (the first sequence while there is none)."""
        with self._cond:
            return self._newest

    @property
    def closed(self) -> bool:
        """True once the service stops: every waiting reader returns."""
        return self._closed

    @property
    def streams(self) -> int:
        """How many readers hold a thread now."""
        with self._cond:
            return self._streams

    def publish(self, kind: str, data: Callable[[], dict[str, Any]]) -> int:
        """Number a change, keep it, wake the readers; its sequence."""
        with self._cond:
            self._newest += 1
            self._ring.append(Change(self._newest, kind, data))
            if len(self._ring) > self._capacity * 2:  # trimmed in steps: appends stay O(1)
                del self._ring[:-self._capacity]
            self._cond.notify_all()
            return self._newest

    def since(self, after: int) -> list[Change] | None:
        """The changes after `after`, oldest first; None when the ring no longer holds them
        all, or `after` is none of this feed's sequences (the reader refreshes)."""
        with self._cond:
            return self._since(after)

    def wait(self, after: int, timeout: float) -> list[Change] | None:
        """`since(after)`, once there is a change after `after`, the feed closed, or `timeout`
        seconds passed (then possibly empty)."""
        with self._cond:
            if after == self._newest and not self._closed:
                self._cond.wait(timeout)
            return self._since(after)

    def _since(self, after: int) -> list[Change] | None:
        if after == self._newest:
            return []
        if not self._ring:
            return None
        oldest = max(self._newest - self._capacity + 1, self._ring[0].seq)
        if not oldest - 1 <= after < self._newest:
            return None
        return self._ring[len(self._ring) - (self._newest - after):]

    def take_stream(self) -> bool:
        """Whether one more reader may hold a thread; if so it must `release_stream` after."""
        with self._cond:
            if self._closed or self._streams >= self._max_streams:
                return False
            self._streams += 1
            return True

    def release_stream(self) -> None:
        """A reader that held a thread is done."""
        with self._cond:
            self._streams -= 1

    def close(self) -> None:
        """No more waiting: the service stops, and open streams end at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
