"""Opening the SQLite database: pragmas, locking and migrations.

WAL with `synchronous=FULL` makes every commit durable before it returns;
write transactions begin IMMEDIATE so a writer takes the lock up front instead
of failing to upgrade a read lock halfway through. Inside one process the
writers queue on a lock (`WriterQueueDatabase`), not on SQLite's busy handler.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from peewee import SqliteDatabase
from playhouse.pool import PooledSqliteDatabase

from wakeline.errors import WakelineError
from wakeline.models.schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)

BUSY_TIMEOUT_SECONDS = 5.0


class SchemaTooNew(WakelineError):
    """The database was written by a newer wakeline."""

    code = "schema_too_new"


class WriterQueueDatabase(PooledSqliteDatabase):
    """SQLite whose writers in this process wait on one lock, woken as the last one commits.

    Connections are pooled: a thread's `close()` hands its connection back for the next
    thread, so a short-lived thread (a conversation actor) does not pay for opening one
    and setting its pragmas.

    Every transaction begins IMMEDIATE, so each is a writer. Without the lock, a
    thread that finds the write lock taken sleeps in SQLite's busy handler (1, 2, 5
    ... up to 100 ms a try) however soon the lock is free: under load a 1 ms claim
    waited up to a second (bench/turns.py). Other processes (the CLI) still meet
    the busy handler; after `busy_timeout` a thread stops waiting here and does too.
    """

    def __init__(self, *args: Any, busy_timeout: float = BUSY_TIMEOUT_SECONDS,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._writer = threading.Lock()
        self._writer_wait = busy_timeout
        self._holder = threading.local()

    def begin(self, lock_type: str | None = None) -> None:
        """Queue for the process's writer lock, then BEGIN."""
        self._holder.held = self._writer.acquire(timeout=self._writer_wait)
        try:
            super().begin(lock_type)
        except BaseException:
            self._release_writer()
            raise

    def commit(self) -> None:
        """COMMIT, then let the next writer in."""
        try:
            super().commit()
        finally:
            self._release_writer()

    def rollback(self) -> None:
        """ROLLBACK, then let the next writer in."""
        try:
            super().rollback()
        finally:
            self._release_writer()

    def _release_writer(self) -> None:
        if getattr(self._holder, "held", False):
            self._holder.held = False
            self._writer.release()


def open_database(path: Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> SqliteDatabase:
    """Open (creating if needed) and migrate the database at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    db = WriterQueueDatabase(
        str(path),
        pragmas={
            "journal_mode": "wal",
            "synchronous": "full",
            "foreign_keys": 1,
            "busy_timeout": int(busy_timeout * 1000),
            "cache_size": -16_000,
        },
        max_connections=None,  # one per thread that uses the store; they are few and reused
        lock_type="IMMEDIATE",
        check_same_thread=False,
        busy_timeout=busy_timeout,
    )
    db.connect(reuse_if_open=True)
    migrate(db)
    for owned in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if owned.exists():
            owned.chmod(0o600)
    return db


def migrate(db: SqliteDatabase) -> int:
    """Apply every migration the database lacks, each in its own transaction."""
    version = db.execute_sql("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(f"database schema {version} is newer than this wakeline ({SCHEMA_VERSION})")
    for number in range(version + 1, SCHEMA_VERSION + 1):
        with db.atomic():
            for statement in MIGRATIONS[number - 1]:
                db.execute_sql(statement)
            db.execute_sql(f"PRAGMA user_version = {number}")
        log.info("database migrated", extra={"schema_version": number})
    return SCHEMA_VERSION
