"""The local engine: today's in-process supervisor decides where and when turns run.

One host, SQLite: the supervisor actor keeps the conversation -> slot map and the
ready queue, and a conversation's actor runs its turns one at a time
(`actors/supervisor.py`, decision 0019). This module only puts that wake path
behind the `Scheduler` protocol so the composition root can pick an engine;
the supervisor itself is unchanged.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Iterable

from wakeline.scheduling import HostView


class LocalScheduler:
    """Wakes go to the supervisor actor (a pykka proxy); there is one host, this one."""

    def __init__(self, supervisor: Any, host_id: str = "", running: Any = None) -> None:
        self._supervisor = supervisor
        self._host_id = host_id or socket.gethostname()
        self._running = running or (lambda: 0)

    def start(self) -> None:
        """The supervisor is started by the composition root; nothing else runs here."""

    def stop(self) -> None:
        """The supervisor is stopped by the composition root."""

    def wake(self, conversation_ids: Iterable[str]) -> None:
        ids = list(conversation_ids)
        if ids:
            self._supervisor.wake.defer(ids)

    def hosts(self) -> list[HostView]:
        return [HostView(self._host_id, int(time.time() * 1000), True, int(self._running()))]
