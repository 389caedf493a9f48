"""Opening the database: SQLite (one host) or PostgreSQL (`scale.engine = "dbos"`).

SQLite: WAL with `synchronous=FULL` makes every commit durable before it returns;
write transactions begin IMMEDIATE so a writer takes the lock up front instead
of failing to upgrade a read lock halfway through. Inside one process the
writers queue on a lock (`WriterQueueDatabase`), not on SQLite's busy handler, and
take turns on one writer connection.

PostgreSQL: the same schema and queries (`dialect.py` holds what differs), a pooled
connection per thread, READ COMMITTED transactions. Inside one process writers
queue on the same lock, so one host behaves exactly as on SQLite; between hosts
the writers that read before they write lock the rows they change
(`SELECT ... FOR UPDATE`) or a named advisory lock (`Dialect.lock`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, Iterator

from peewee import Database, OperationalError, SqliteDatabase
from playhouse.pool import PooledPostgresqlDatabase, PooledSqliteDatabase

from wakeline.errors import WakelineError
from wakeline.models.dialect import POSTGRES, SQLITE, Dialect
from wakeline.models.schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)

BUSY_TIMEOUT_SECONDS = 5.0
# Page caches (KiB). The writer connection's stays valid from one transaction to the next
# (decision 0028), so it keeps the hot pages. A thread's own connection loses its cache to
# every commit of the writer, and what its last read left stays until its next one: a
# doctor's quick check leaves the whole file's pages, on every thread that served one.
# SQLite's default bounds them (decision 0033).
WRITER_CACHE_KIB = 16_000
READER_CACHE_KIB = 2_000


class SchemaTooNew(WakelineError):
    """The database was written by a newer wakeline."""

    code = "schema_too_new"


class _WriterQueue:
    """Writers in this process wait on one lock, woken as the last one commits."""

    dialect: Dialect

    def __init__(self, *args: Any, busy_timeout: float = BUSY_TIMEOUT_SECONDS,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self._writer = threading.Lock()
        self._writer_wait = busy_timeout
        self._holder = threading.local()

    def _queue_for_writer(self) -> None:
        self._holder.held = self._writer.acquire(timeout=self._writer_wait)

    def begin(self, lock_type: str | None = None) -> None:
        """Queue for the process's writer lock, then BEGIN."""
        self._queue_for_writer()
        try:
            self._begin(lock_type)
        except BaseException:
            self._release_writer()
            raise

    def _begin(self, lock_type: str | None) -> None:
        super().begin(lock_type)  # type: ignore[misc]

    def commit(self) -> None:
        """COMMIT, then let the next writer in."""
        try:
            super().commit()  # type: ignore[misc]
        finally:
            self._release_writer()

    def rollback(self) -> None:
        """ROLLBACK, then let the next writer in."""
        try:
            super().rollback()  # type: ignore[misc]
        finally:
            self._release_writer()

    def _release_writer(self) -> None:
        if getattr(self._holder, "held", False):
            self._holder.held = False
            self._done_writing()
            self._writer.release()

    def _done_writing(self) -> None:
        """Called with the writer lock still held, once the transaction has ended."""


class WriterQueueDatabase(_WriterQueue, PooledSqliteDatabase):
    """SQLite whose writers in this process wait on one lock, woken as the last one commits.

    Connections are pooled: a thread's `close()` hands its connection back for the next
    thread, so a short-lived thread (a conversation actor) does not pay for opening one
    and setting its pragmas.

    Every transaction begins IMMEDIATE, so each is a writer. Without the lock, a
    thread that finds the write lock taken sleeps in SQLite's busy handler (1, 2, 5
    ... up to 100 ms a try) however soon the lock is free: under load a 1 ms claim
    waited up to a second (bench/turns.py). Other processes (the CLI) still meet
    the busy handler; after `busy_timeout` a thread stops waiting here and does too.

    Every write transaction of the process runs on one writer connection, whichever
    thread holds the lock (reads outside a transaction and `snapshot()` stay on the
    thread's own). SQLite drops a connection's whole page cache when it finds that
    another connection has committed, so with a connection per writer each transaction
    read its pages again from the file: about 60 `pread`s a turn. The writer connection
    is the only one that writes, so its cache stays valid (decision 0028). A thread that
    relaxed its durability (decision 0017) has the writer's `synchronous` set for it.
    """

    dialect = SQLITE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shared: Any = None  # the writer connection, opened by the first write
        self._shared_sync = ""  # its `synchronous` setting, changed only when a writer needs

    def relax_durability(self, relaxed: bool) -> None:
        """This thread's write transactions commit with `synchronous = NORMAL` (or FULL)."""
        self._holder.relaxed = relaxed

    def _begin(self, lock_type: str | None) -> None:
        # Holding the writer lock: this thread's transaction runs on the writer connection.
        if not getattr(self._holder, "held", False):  # waited past busy_timeout: SQLite's lock
            super()._begin(lock_type)
            return
        state = self._state
        if self._shared is None:
            self._shared = SqliteDatabase._connect(self)  # outside the pool: it is never handed back
            self._shared.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        self._holder.own = (state.conn, state.closed)
        state.conn, state.closed = self._shared, False
        sync = "NORMAL" if getattr(self._holder, "relaxed", False) else "FULL"
        if sync != self._shared_sync:
            self._shared.execute(f"PRAGMA synchronous = {sync}")
            self._shared_sync = sync
        super()._begin(lock_type)

    def commit(self) -> None:
        """COMMIT; a COMMIT that fails leaves the transaction for the rollback that follows."""
        try:
            PooledSqliteDatabase.commit(self)
        except BaseException:
            if not self._state.conn.in_transaction:
                self._release_writer()
            raise
        self._release_writer()

    def _done_writing(self) -> None:
        state = self._state
        if state.conn is self._shared:
            if self._shared.in_transaction:  # never hand the next writer an open transaction
                self._shared.execute("ROLLBACK")
            state.conn, state.closed = self._holder.own

    def close_all(self) -> None:
        """Close every pooled connection, and the writer connection unless a writer still
        holds it past `busy_timeout` (then the process's exit closes it)."""
        super().close_all()
        if self._writer.acquire(timeout=self._writer_wait):
            try:
                if self._shared is not None:
                    self._shared.close()
                    self._shared, self._shared_sync = None, ""
            finally:
                self._writer.release()

    def raw(self) -> Any:
        """What the hot paths run fixed SQL on: the connection itself, with no layer between."""
        return self.connection()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one committed state: a deferred read transaction, which takes
        no writer lock (inside a transaction already, that one is the snapshot)."""
        conn = self.connection()
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            conn.execute("COMMIT")


class _Statements:
    """Fixed SQL run as on a DB-API connection (`execute(sql, params)`), through peewee."""

    __slots__ = ("_db",)

    def __init__(self, db: Database) -> None:
        self._db = db

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._db.execute_sql(sql, params)


class PostgresDatabase(_WriterQueue, PooledPostgresqlDatabase):
    """PostgreSQL with the same writer queue, fixed SQL translated (`?` -> `%s`).

    `atomic()` begins READ COMMITTED; `atomic("DEFERRED")` (a read snapshot) begins
    REPEATABLE READ READ ONLY and takes no writer lock.
    """

    dialect = POSTGRES

    def begin(self, lock_type: str | None = None) -> None:
        if lock_type == "DEFERRED":  # a read-only snapshot: no writer to queue behind
            self._holder.held = False
            self._begin(lock_type)
            return
        super().begin(lock_type)

    def _begin(self, lock_type: str | None) -> None:
        statement = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" \
            if lock_type == "DEFERRED" else "BEGIN"
        self.cursor().execute(statement)

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        return super().execute_sql(POSTGRES.sql(sql), params)

    def raw(self) -> "_Statements":
        """What the hot paths run fixed SQL on: `execute_sql`, translated and wrapped."""
        return _Statements(self)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one committed state (REPEATABLE READ, READ ONLY)."""
        if self.in_transaction():
            yield
            return
        with self.atomic("DEFERRED"):
            yield


def open_database(target: Path | str, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS,
                  max_connections: int | None = None) -> Database:
    """Open (creating if needed) and migrate the database: a SQLite file at `target`, or
    the PostgreSQL database a `postgresql://` URL names."""
    if isinstance(target, str) and target.startswith(("postgresql://", "postgres://")):
        return open_postgres(target, busy_timeout=busy_timeout, max_connections=max_connections)
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        # Only a new file takes auto_vacuum without a VACUUM, and only before its header is
        # written (WAL writes it). Not a pragma of every connection: on a file in use,
        # setting it waits for the write lock.
        with closing(sqlite3.connect(path)) as first:
            first.execute("PRAGMA auto_vacuum = INCREMENTAL")
            first.execute("PRAGMA journal_mode = WAL")
    db = WriterQueueDatabase(
        str(path),
        pragmas={
            "journal_mode": "wal",
            "synchronous": "full",
            "foreign_keys": 1,
            "busy_timeout": int(busy_timeout * 1000),
            "cache_size": -READER_CACHE_KIB,  # the writer connection's is larger
        },
        max_connections=None,  # one per thread that uses the store; they are few and reused
        lock_type="IMMEDIATE",
        check_same_thread=False,
        busy_timeout=busy_timeout,
    )
    db.connect(reuse_if_open=True)
    migrate(db)
    _vacuum_incrementally(db)
    for owned in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if owned.exists():
            owned.chmod(0o600)
    return db


def _vacuum_incrementally(db: Database) -> None:
    """A file made before retention (decision 0030) keeps its freed pages: convert it once,
    so pruning can give them back (`PRAGMA incremental_vacuum`). VACUUM rewrites the whole
    file, so the first start after the upgrade takes a moment on a large store. Refused (a
    reader elsewhere), it is tried again at the next start; pruning still frees pages for
    reuse meanwhile."""
    if int(db.execute_sql("PRAGMA auto_vacuum").fetchone()[0]) == 2:  # 2: incremental
        return
    log.info("converting the database to incremental vacuum, once; this rewrites the file")
    try:
        db.execute_sql("PRAGMA auto_vacuum = INCREMENTAL")
        db.execute_sql("VACUUM")
        db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")  # VACUUM wrote the whole file there
    except OperationalError as exc:
        log.warning("the database stays without incremental vacuum until the next start",
                    extra={"error": str(exc)})


def open_postgres(url: str, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS,
                  max_connections: int | None = None) -> PostgresDatabase:
    """Open and migrate the PostgreSQL database at `url` (libpq URL; its password a secret)."""
    db = PostgresDatabase(
        url.replace("postgres://", "postgresql://", 1),
        max_connections=max_connections,  # None: one per thread that uses the store, as SQLite
        stale_timeout=300,
        busy_timeout=busy_timeout,
        connect_timeout=10,
        application_name="wakeline",
        prefer_psycopg3=True,  # DBOS needs psycopg 3; peewee would pick psycopg2 when present
    )
    db.connect(reuse_if_open=True)
    migrate(db)
    return db


def migrate(db: Database) -> int:
    """Apply every migration the database lacks, each in its own transaction.

    Hosts that start together on one PostgreSQL database take turns: each migration
    runs under a lock and re-reads the version inside it.
    """
    dialect: Dialect = getattr(db, "dialect", SQLITE)
    version = dialect.schema_version(db)
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(f"database schema {version} is newer than this wakeline ({SCHEMA_VERSION})")
    for number in range(version + 1, SCHEMA_VERSION + 1):
        with db.atomic():
            dialect.lock(db, "schema")
            if dialect.schema_version(db) >= number:
                continue  # another host applied it while we waited
            for statement in MIGRATIONS[number - 1]:
                sql = dialect.ddl(statement)
                if sql:
                    db.execute_sql(sql)
            dialect.after_migration(db)
            dialect.set_schema_version(db, number)
        log.info("database migrated", extra={"schema_version": number})
    return SCHEMA_VERSION
