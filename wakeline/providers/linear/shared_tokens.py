"""The Linear app's tokens where hosts share one database (engine "dbos").

Linear rotates the refresh token on every use, so the tokens cannot be a file per host:
the first host to renew would spend the refresh token every other host holds. They are
one row of the shared database instead (the `settings` row `linear.oauth`, as secret as
the database itself), with the same interface as `TokenFile`: a renewal holds a
PostgreSQL advisory lock (on a connection of its own, so no store transaction waits on
Linear's token endpoint) and reads the row again first, so two hosts never spend one
refresh token, and the new pair is committed before it is used. A host that ran alone
before keeps its install: the first read on an empty row takes the host's token file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from wakeline.models.store import Store
from wakeline.providers.linear.token_file import (
    Stamp,
    StoredTokens,
    TokenFile,
    TokenFileInvalid,
)

log = logging.getLogger(__name__)

SETTING = "linear.oauth"
LOCK = 0x5A1A_0A07_7070_0001  # the advisory lock of a renewal, cluster-wide


class SharedTokens:
    """Reads, replaces and locks the app's tokens in the shared database."""

    where = "the shared database (settings row linear.oauth)"

    def __init__(self, store: Store, database_url: str, legacy: TokenFile | None = None) -> None:
        self._store = store
        self._url = database_url
        self._legacy = legacy

    def read(self) -> StoredTokens | None:
        """The stored tokens, or None before the first install.

        Raises:
            TokenFileInvalid: the row is not the expected shape.
        """
        raw = self._stored()
        if raw is None:
            return self._adopt_legacy()
        try:
            return StoredTokens.model_validate(raw["tokens"])
        except (KeyError, TypeError, ValidationError):
            raise TokenFileInvalid(f"{self.where} holds no valid tokens") from None

    def write(self, tokens: StoredTokens) -> None:
        """Replace the tokens (committed when this returns).

        Raises:
            OSError: the database refused the write (the caller keeps the pair in memory).
        """
        try:
            version = int((self._stored() or {}).get("version", 0)) + 1
            self._store.set_setting(SETTING, {"version": version,
                                              "tokens": tokens.model_dump(mode="json")})
        except Exception as exc:  # noqa: BLE001 - the database's own error, as an OSError
            raise OSError(f"the tokens could not be stored ({exc.__class__.__name__})") from None

    def stamp(self) -> Stamp | None:
        """The row's version (None before the first install): cheap change checks."""
        try:
            raw = self._stored()
        except Exception:  # noqa: BLE001 - unreadable now: as unchanged, read again later
            return None
        if isinstance(raw, dict):
            return (int(raw.get("version", 0)), 0, 0)
        # None yet: a host's own file from before (read, and moved here, on the next load).
        return self._legacy.stamp() if self._legacy is not None else None

    def mode(self) -> int | None:
        """No file, no mode: the database's own access control applies."""
        return None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the renewal lock, across threads, processes and hosts."""
        import psycopg

        with psycopg.connect(self._url, autocommit=True, connect_timeout=10,
                             application_name="wakeline linear tokens") as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK,))

    def _stored(self) -> Any:
        return self._store.get_setting(SETTING)

    def _adopt_legacy(self) -> StoredTokens | None:
        """The host's own token file, from before it shared a database: stored once here."""
        if self._legacy is None:
            return None
        try:
            tokens = self._legacy.read()
        except TokenFileInvalid:
            return None
        if tokens is None:
            return None
        with self.locked():
            if self._stored() is None:
                self.write(tokens)
                log.info("the app's tokens moved from this host's file to the shared database")
        return self.read()  # the row now: another host may have stored its own first
