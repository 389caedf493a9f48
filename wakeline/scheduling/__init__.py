"""Where and when turns run: the engine choice, one module per engine (STYLE 14).

`scale.engine` picks one of two engines; nothing above this package knows which:

- `local` (`local.py`): one host, SQLite. The in-process supervisor decides: its own ready
  queue and turn slots (`actors/supervisor.py`, decision 0019).
- `dbos` (`dbos.py`): a DBOS Transact queue on PostgreSQL, partitioned by conversation, so
  one turn of a conversation runs at a time across every host that shares the database;
  the supervisor runs the turns the engine hands it (decision 0025).

Either way wakeline keeps admission, dedupe, the delivery rows, coalescing, the runner and
exactly-once completion; the engine only decides where and when a conversation's next turn
runs, and re-runs one whose host died. DBOS is an optional extra (`wakeline[dbos]`),
imported only by `dbos.py`, and only when the config names it (STYLE 15).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from wakeline.config import Config
from wakeline.errors import ConfigError
from wakeline.scheduling.roles import Roles
from wakeline.secrets import Secrets


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


def engine_shares(config: Config) -> bool:
    """Whether hosts share the store (and so what each would otherwise keep alone)."""
    return config.scale.engine != "local"


def host_id_of(config: Config) -> str:
    """This host's stable id: `scale.host_id`, else the hostname."""
    return config.scale.host_id or socket.gethostname()


def store_target(config: Config, secrets: Secrets | None = None) -> Path | str:
    """Where the store lives: the SQLite file (`local`), or the PostgreSQL URL every host
    shares (`dbos`; the environment's `WAKELINE_DATABASE_URL` wins over the file)."""
    if config.scale.engine == "local":
        return config.database_path
    url = secrets.database_url.get_secret_value() if secrets and secrets.database_url \
        else config.scale.database_url
    if not url:
        raise ConfigError("scale.database_url",
                          'engine "dbos" needs a postgresql:// URL (or WAKELINE_DATABASE_URL)')
    return url


def shared_engine(config: Config, database_url: str, store: Any, *,
                  run_turn: Callable[[str], bool], repair_host: Callable[[str], list[str]],
                  running: Callable[[], int]) -> Any:
    """The engine that shares turns between hosts (`DbosScheduler`), or None for `local`,
    whose supervisor decides alone. The one place the engine is chosen."""
    if not engine_shares(config):
        return None
    from wakeline.scheduling.dbos import DbosScheduler, DbosSettings  # only for engine "dbos"

    settings = DbosSettings(
        database_url=database_url, host_id=host_id_of(config),
        worker_concurrency=config.agent.max_concurrent_turns,
        host_timeout_seconds=config.scale.host_timeout_seconds)
    return DbosScheduler(settings, run_turn, flags=store.wakes, repair_host=repair_host,
                         running=running)


__all__ = ["HostView", "Scheduler", "engine_shares", "host_id_of", "shared_engine",
           "store_target"]
