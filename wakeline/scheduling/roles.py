"""Roles one host holds at a time: the connections to the outside that must not run twice.

Discord's Gateway and each Matrix sync are one connection for the whole cluster: two hosts
syncing one Matrix device would split its encryption state, and every Gateway session
receives every message. Where hosts share a PostgreSQL database, each role is a session
advisory lock held on a connection of its own: the host that takes it starts the part,
and the lock goes with the connection when that host dies (the kernel closes its socket;
PostgreSQL sees it at once), so a live host's next poll takes it over. On one host every
role is this host's from the start.

A holder whose lock connection breaks (the database restarted) tries to take the lock back
on a new one; if another host has it by then, the part stops here and stays stopped (a
restart of this host may take it again later).
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger(__name__)


@dataclass
class _Role:
    name: str
    start: Callable[[], None]
    stop: Callable[[], None]
    conn: Any = None  # the lock's connection, while held
    held: bool = False
    lost: bool = False


def role_key(name: str) -> int:
    """The advisory lock of a role (a fixed 64-bit number per name)."""
    return zlib.crc32(b"wakeline-role:" + name.encode()) | (0x5A19 << 32)


@dataclass
class Roles:
    """The roles of this host: `database_url` None means one host (every role is ours)."""

    database_url: str | None = None
    host_id: str = ""
    _roles: list[_Role] = field(default_factory=list)

    def add(self, name: str, start: Callable[[], None], stop: Callable[[], None]) -> None:
        """A part to run on one host at a time; started by the poll that takes the role."""
        self._roles.append(_Role(name, start, stop))

    def held(self, name: str) -> bool:
        """Whether this host holds the role now."""
        return any(r.name == name and r.held for r in self._roles)

    def names(self) -> list[str]:
        """The roles this host holds."""
        return [r.name for r in self._roles if r.held]

    def poll(self) -> None:
        """Take every free role, start what was taken, and check the locks still held."""
        for role in self._roles:
            try:
                if role.held:
                    self._check(role)
                elif not role.lost and self._take(role):
                    role.held = True
                    log.info("role taken", extra={"role": role.name, "host": self.host_id})
                    role.start()
            except Exception:
                log.exception("role poll failed", extra={"role": role.name})

    def release(self) -> None:
        """This host stops (its parts were stopped by the composition root): the locks go."""
        for role in self._roles:
            role.held = False
            self._close(role)

    def _take(self, role: _Role) -> bool:
        if self.database_url is None:
            return True
        import psycopg

        conn = psycopg.connect(self.database_url, autocommit=True, connect_timeout=10,
                               application_name=f"wakeline role {role.name}")
        if conn.execute("SELECT pg_try_advisory_lock(%s)", (role_key(role.name),)).fetchone()[0]:
            role.conn = conn
            return True
        conn.close()
        return False

    def _check(self, role: _Role) -> None:
        if self.database_url is None:
            return
        if role.conn is not None:
            try:
                role.conn.execute("SELECT 1")
                return
            except Exception:  # noqa: BLE001 - the lock went with the connection
                self._close(role)
        try:
            if self._take(role):
                log.warning("role lock taken back after its connection broke",
                            extra={"role": role.name})
                return
        except Exception:  # noqa: BLE001 - the database is away: nobody can hold it now
            log.warning("role lock lost; the database is unreachable", extra={"role": role.name})
            return
        log.error("role lost to another host; stopped here", extra={"role": role.name})
        role.held, role.lost = False, True
        role.stop()

    @staticmethod
    def _close(role: _Role) -> None:
        if role.conn is not None:
            try:
                role.conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            role.conn = None
