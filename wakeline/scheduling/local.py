"""The local engine: one host, and the in-process supervisor decides where and when turns run.

The supervisor actor keeps the conversation -> slot map and the ready queue, and a
conversation's slot runs its turns one at a time (`actors/supervisor.py`, decision 0019).
Nothing runs here: this module only answers the `Scheduler` questions for one host.
"""

from __future__ import annotations

import time
from typing import Callable

from wakeline.scheduling.base import HostView
from wakeline.scheduling.roles import Roles


class LocalScheduler:
    """One host, this one: the supervisor alone decides."""

    def __init__(self, host_id: str, running: Callable[[], int] = lambda: 0) -> None:
        self.host_id = host_id
        self._running = running
        self.roles = Roles(None, host_id)  # one host: every role is this one's

    def start(self) -> None:
        """Start every role's part (the supervisor is started by the composition root)."""
        self.roles.poll()

    def stop(self) -> None:
        """The parts and the supervisor are stopped by the composition root."""
        self.roles.release()

    def hosts(self) -> list[HostView]:
        return [HostView(self.host_id, int(time.time() * 1000), True, int(self._running()))]
