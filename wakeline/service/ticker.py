"""A thread that beats at a fixed real-time interval until stopped.

Each beat calls one function with the count of beats so far, so that a part can pace its
periodic work (every beat, every fourth, once a minute). The interval is real time (how
often to look); what the callee decides uses the injected clock, so tests move time and
wait for the next look.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class Ticker:
    """Calls `fn(count)` every `interval` seconds on a named daemon thread."""

    def __init__(self, fn: Callable[[int], object], interval: float, name: str = "ticker") -> None:
        self._fn = fn
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start ticking."""
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        count = 0
        while not self._stop.wait(self._interval):
            count += 1
            try:
                self._fn(count)
            except Exception:
                log.exception("tick failed")
