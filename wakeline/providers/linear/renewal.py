"""When the Linear app's token is asked for again after a failed renewal, and the thread
that renews it in the background (decision 0031).

A renewal that got no usable answer (no connection, a timeout, a 5xx) is tried again
soon: 1 s after the first failure, then 2 s, 4 s ... at most a minute, and from the
first wait again after a success. A definite refusal is not retried at all: only a new
install (or a token written by another process) changes it.

The background renewal runs on a thread of its own, started when a renewal is due and
gone once it answered: no thread waits at rest, the ticker that asks never waits for
Linear's token endpoint, and a renewal never queues behind writes that wait for the token
it fetches.
"""

from __future__ import annotations

import threading
from typing import Callable

FIRST_RETRY_MS = 1_000
MAX_RETRY_MS = 60_000
THREAD_NAME = "linear-token-renewal"


class RetryBackoff:
    """The wait after consecutive failed renewals: doubling from `first_ms`, at most `max_ms`."""

    def __init__(self, first_ms: int = FIRST_RETRY_MS, max_ms: int = MAX_RETRY_MS) -> None:
        self._first_ms = first_ms
        self._max_ms = max_ms
        self.failures = 0
        self.retry_at_ms = 0  # not before this instant (ms, the credential's clock)
        self.reason: str | None = None  # why the last renewal failed

    def failed(self, now_ms: int, reason: str) -> int:
        """One more failure at `now_ms`: returns the wait (ms) before the next attempt."""
        delay = min(self._first_ms << min(self.failures, 16), self._max_ms)
        self.failures += 1
        self.retry_at_ms = now_ms + delay
        self.reason = reason
        return delay

    def reset(self) -> None:
        """A renewal worked (or nothing needs one): the next failure waits the first wait."""
        self.failures = 0
        self.retry_at_ms = 0
        self.reason = None

    def waiting(self, now_ms: int) -> bool:
        """True while the last failure's wait is not over."""
        return now_ms < self.retry_at_ms


class BackgroundRenewal:
    """At most one background renewal thread at a time."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def running(self) -> bool:
        """True while the last renewal started here has not finished."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, renew: Callable[[], None]) -> threading.Thread:
        """Run `renew` on a new daemon thread (the caller checked `running` first)."""
        self._thread = threading.Thread(target=renew, name=THREAD_NAME, daemon=True)
        self._thread.start()
        return self._thread
