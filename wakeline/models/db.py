"""Opening the SQLite database: pragmas, locking and migrations.

WAL with `synchronous=FULL` makes every commit durable before it returns;
write transactions begin IMMEDIATE so a writer takes the lock up front instead
of failing to upgrade a read lock halfway through.
"""

from __future__ import annotations

import logging
from pathlib import Path

from peewee import SqliteDatabase

from wakeline.errors import WakelineError
from wakeline.models.schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)

BUSY_TIMEOUT_SECONDS = 5.0


class SchemaTooNew(WakelineError):
    """The database was written by a newer wakeline."""

    code = "schema_too_new"


def open_database(path: Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> SqliteDatabase:
    """Open (creating if needed) and migrate the database at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    db = SqliteDatabase(
        str(path),
        pragmas={
            "journal_mode": "wal",
            "synchronous": "full",
            "foreign_keys": 1,
            "busy_timeout": int(busy_timeout * 1000),
            "cache_size": -16_000,
        },
        timeout=busy_timeout,
        lock_type="IMMEDIATE",
        check_same_thread=False,
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
