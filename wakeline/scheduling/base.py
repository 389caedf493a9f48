"""What every engine shares: the `Scheduler` protocol and how a host is shown."""


from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wakeline.scheduling.roles import Roles


@dataclass(frozen=True)
class HostView:
    """One host as `GET /v1/status` lists it (CONTRACT section 10)."""

    id: str
    last_seen_ms: int
    alive: bool
    running: int
    skew_ms: int = 0  # the host's clock minus the database's, at its last heartbeat


class Scheduler(Protocol):
    """The engine as the composition root sees it: started after recovery, stopped before
    the supervisor, and asked which hosts share the work."""

    host_id: str
    roles: Roles  # the parts one host at a time runs (Discord's Gateway, Matrix sync)

    def start(self) -> None:
        """Begin taking turns (the engine's own threads start here)."""

    def stop(self) -> None:
        """Stop taking turns; a turn still running is recovered by the next start."""

    def hosts(self) -> list[HostView]:
        """The hosts sharing the work (one, for the local engine)."""
