"""The optional parts (pip extras), the config that turns each on, and whether it is installed.

discord.py, matrix-nio and DBOS are extras (STYLE 15), imported only where the config turns
them on. Without this check a part turned on but not installed failed late and quietly (a
traceback from the Gateway's role, Matrix routes off without a word, PostgreSQL's driver
missing under another name). So `serve` refuses to start (`require_extras`: a `ConfigError`,
exit 2) and `doctor` fails an item with the same text (`checks.extras_checks`), each naming the
config key that turned the part on and the command that installs it (decision 0032).

Nothing is imported to check: `importlib.util.find_spec` finds a top-level module without
running it, so the check stays as cheap as the default install's start.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from wakeline.config import Config
from wakeline.errors import ConfigError
from wakeline.secrets import DISCORD_TOKEN_ENV, read_secret_file

Finder = Callable[[str], Any]  # importlib.util.find_spec: a spec, or None when not installed


@dataclass(frozen=True)
class Extra:
    """One optional part: its pip extra, its name for people, the modules wakeline imports
    for it (top-level names, each from the extra's packages), and how to turn it off."""

    name: str
    part: str
    modules: tuple[str, ...]
    off: str

    @property
    def install(self) -> str:
        """The command that installs it into wakeline's environment."""
        return f"pip install 'wakeline[{self.name}]'"


# discord.py brings aiohttp and yarl (the Gateway module imports yarl itself).
DISCORD = Extra("discord", "Discord", ("discord", "aiohttp", "yarl"),
                "remove the bot token (discord.token_file, $WAKELINE_DISCORD_TOKEN)")
# nio encrypts only with vodozemac; its crypto store needs atomicwrites and cachetools.
MATRIX = Extra("matrix", "Matrix", ("nio", "vodozemac", "atomicwrites", "cachetools"),
               "remove the [matrix.connections.*] sections")
# The store on PostgreSQL and DBOS both use psycopg 3. Without it peewee falls back to its
# psycopg2 adapter and reports "psycopg2 postgres driver not found", naming neither.
DBOS = Extra("dbos", "DBOS", ("dbos", "psycopg"), 'set scale.engine = "local"')


@dataclass(frozen=True)
class Wanted:
    """A part the config turns on (`key` says where) and the modules of it not installed."""

    key: str
    extra: Extra
    missing: tuple[str, ...]

    @property
    def reason(self) -> str:
        """Why it cannot run and the command that fixes it (after the key, as in a
        `ConfigError`); empty when installed."""
        if not self.missing:
            return ""
        return (f"{self.extra.part} is configured but its extra is not installed (no module "
                f"{', '.join(self.missing)}): {self.extra.install}")

    @property
    def detail(self) -> str:
        """The doctor's detail: `<key>: <reason>`, word for word what `serve` says."""
        return f"{self.key}: {self.reason or self.extra.part + ' is installed'}"

    @property
    def fix(self) -> str | None:
        """How to fix it, for the doctor; None when installed."""
        if not self.missing:
            return None
        return (f"{self.extra.install} into the environment wakeline runs from, or "
                f"{self.extra.off}; then restart")


def discord_token_key(config: Config, environ: Mapping[str, str]) -> str | None:
    """Where the Discord bot token comes from (`$WAKELINE_DISCORD_TOKEN`, which wins, or
    `discord.token_file`), or None without one: Discord is off."""
    if environ.get(DISCORD_TOKEN_ENV, "").strip():
        return DISCORD_TOKEN_ENV
    try:
        found = read_secret_file(config.path(config.discord.token_file))
    except OSError:
        return "discord.token_file"  # there but unreadable: reading it at start-up fails too
    return "discord.token_file" if found is not None else None


def turned_on(config: Config, discord_key: str | None) -> list[tuple[str, Extra]]:
    """(the key that turns it on, the part) of each optional part the config turns on;
    `discord_key`: where the bot token comes from (`discord_token_key`), None without one."""
    on: list[tuple[str, Extra]] = []
    if discord_key is not None:
        on.append((discord_key, DISCORD))
    if config.matrix.connections:
        on.append((f"matrix.connections.{next(iter(config.matrix.connections))}", MATRIX))
    if config.scale.engine == "dbos":
        on.append(("scale.engine", DBOS))
    return on


def wanted(config: Config, discord_key: str | None,
           find_spec: Finder = importlib.util.find_spec) -> list[Wanted]:
    """Each part the config turns on, with the modules `find_spec` cannot find."""
    return [Wanted(key, extra, tuple(m for m in extra.modules if not _found(m, find_spec)))
            for key, extra in turned_on(config, discord_key)]


def _found(module: str, find_spec: Finder) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module half-imported
        return False


def require_extras(config: Config, environ: Mapping[str, str],
                   find_spec: Finder = importlib.util.find_spec) -> None:
    """Refuse to start when the config turns on a part that is not installed.

    Raises:
        ConfigError: naming the key that turned the first such part on and the command that
            installs it; the reason goes on to name every other one.
    """
    missing = [w for w in wanted(config, discord_token_key(config, environ), find_spec)
               if w.missing]
    if missing:
        first, *others = missing
        raise ConfigError(first.key, "; ".join([first.reason,
                                                *(f"{w.key}: {w.reason}" for w in others)]))
