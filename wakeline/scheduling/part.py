"""The scheduling engine as a part of the service: where and when turns run.

`local`: the supervisor decides alone (nothing to start). `dbos`: a DBOS queue on the
shared PostgreSQL hands this host's supervisor the turns it runs, and the parts one host
at a time runs (`roles`: Discord's Gateway, Matrix sync) start and stop with their lock.
It starts after recovery and the admission writer (a shared engine's first jobs resume
this host's turns; the roles it starts admit through the writer).
"""

from __future__ import annotations

from typing import Any

from wakeline.scheduling.base import HostView, Scheduler
from wakeline.scheduling.roles import Roles
from wakeline.service.parts import BasePart, Check


class EnginePart(BasePart):
    """The engine that `turns.part.TurnsPart` chose, started and stopped as a part."""

    name = "engine"

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    @property
    def roles(self) -> Roles:
        """What one host at a time runs."""
        return self.scheduler.roles

    def hosts(self) -> list[HostView]:
        """The hosts sharing the work (`GET /v1/status`)."""
        return self.scheduler.hosts()

    def start(self) -> None:
        """Begin taking turns, and the roles this host holds."""
        self.scheduler.start()

    def stop(self) -> None:
        """No job starts a turn here any more; a role's part stops."""
        self.scheduler.stop()

    def checks(self) -> list[Check]:
        """A shared engine's hosts and clocks (nothing for `local`)."""
        checks: Any = getattr(self.scheduler, "checks", None)
        return list(checks()) if checks is not None else []
