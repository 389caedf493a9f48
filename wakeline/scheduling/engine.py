"""The engine choice: which engine runs turns, where the store lives, which host this is."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Callable

from wakeline.config import Config
from wakeline.errors import ConfigError
from wakeline.secrets import Secrets


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
