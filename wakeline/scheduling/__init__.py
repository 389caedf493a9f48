"""Where and when turns run: the engine choice, one module per engine (STYLE 14).

`scale.engine` picks one of two `Scheduler`s; nothing above this package knows which:

- `local` (`local.py`): today's in-process supervisor on one host, SQLite.
- `dbos` (`dbos.py`): a DBOS Transact queue on PostgreSQL, partitioned by conversation, so
  one turn of a conversation runs at a time across every host (prototype; issue 25).

Either way wakeline keeps admission, dedupe, the delivery rows, coalescing, the runner and
exactly-once completion; the engine only decides where and when a conversation's next turn
runs, and re-runs one whose host died. DBOS is an optional extra (`wakeline[dbos]`),
imported only by `dbos.py`, and only when the config names it (STYLE 15).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol

from wakeline.config import Config
from wakeline.errors import ConfigError
from wakeline.secrets import Secrets


@dataclass(frozen=True)
class HostView:
    """One host as `GET /v1/status` lists it (CONTRACT section 10)."""

    id: str
    last_seen_ms: int
    alive: bool
    running: int


class Scheduler(Protocol):
    """Decides where and when a conversation's next turn runs."""

    def start(self) -> None:
        """Begin running turns (the engine's own threads start here)."""

    def stop(self) -> None:
        """Stop taking turns; running ones get their grace period."""

    def wake(self, conversation_ids: Iterable[str]) -> None:
        """These conversations have work (or a lifecycle change): make sure a turn comes."""

    def hosts(self) -> list[HostView]:
        """The hosts sharing the work (one, for the local engine)."""


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


__all__ = ["HostView", "Scheduler", "store_target"]
