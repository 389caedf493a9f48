"""Writers of one process queue on a lock, let in as the previous one ends, never left holding it."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Callable

import pytest
from peewee import IntegrityError

from wakeline.models.db import READER_CACHE_KIB, WRITER_CACHE_KIB, open_database


class _Observed:
    """The writer lock, telling when someone asks for it."""

    def __init__(self, lock: threading.Lock, asked: threading.Event) -> None:
        self._lock = lock
        self._asked = asked

    def acquire(self, *args: object, **kwargs: object) -> bool:
        self._asked.set()
        return self._lock.acquire(*args, **kwargs)  # type: ignore[arg-type]

    def release(self) -> None:
        self._lock.release()


def test_a_waiting_writer_queues_here_not_in_sqlites_busy_handler(tmp_path: Path) -> None:
    db = open_database(tmp_path / "w.db")
    db.execute_sql("CREATE TABLE t (x INTEGER)")
    inside, about_to_begin, release = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def holder() -> None:
        with db.atomic():
            db.execute_sql("INSERT INTO t VALUES (1)")
            inside.set()
            release.wait(5)
        db.close()

    def waiter() -> None:
        # With no busy timeout, reaching SQLite's BEGIN while the holder writes would fail at once.
        db.execute_sql("PRAGMA busy_timeout = 0")
        about_to_begin.set()
        try:
            with db.atomic():
                db.execute_sql("INSERT INTO t VALUES (2)")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        db.close()

    threads = [threading.Thread(target=holder), threading.Thread(target=waiter)]
    threads[0].start()
    assert inside.wait(5)
    queued = threading.Event()
    db._writer = _Observed(db._writer, queued)  # type: ignore[attr-defined]
    threads[1].start()
    assert about_to_begin.wait(5)
    assert queued.wait(5)  # the waiter asked for the writer lock while the holder still writes
    release.set()
    for t in threads:
        t.join(10)
    assert errors == []
    assert db.execute_sql("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (2,)]
    db.close()


def test_a_failed_transaction_lets_the_next_writer_in(tmp_path: Path) -> None:
    db = open_database(tmp_path / "w.db")
    db.execute_sql("CREATE TABLE t (x INTEGER)")
    with pytest.raises(RuntimeError):
        with db.atomic():
            db.execute_sql("INSERT INTO t VALUES (1)")
            raise RuntimeError("boom")
    done = threading.Event()

    def writer() -> None:
        with db.atomic():
            db.execute_sql("INSERT INTO t VALUES (2)")
        db.close()
        done.set()

    threading.Thread(target=writer).start()
    assert done.wait(2), "the lock stayed held after a rollback"
    assert db.execute_sql("SELECT x FROM t").fetchall() == [(2,)]
    db.close()


def _in_thread(fn: Callable[[], object]) -> object:
    """Run `fn` on a thread of its own (its own pooled connection) and return what it returned."""
    out: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    if errors:
        raise errors[0]
    return out[0]


def test_every_write_runs_on_the_one_writer_connection_and_reads_on_the_threads_own(
        tmp_path: Path) -> None:
    db = open_database(tmp_path / "w.db")
    db.execute_sql("CREATE TABLE t (x INTEGER)")

    def write(x: int) -> tuple[int, int]:
        own = id(db.connection())
        with db.atomic():
            db.execute_sql("INSERT INTO t VALUES (?)", (x,))
            writer = id(db.connection())
        assert id(db.connection()) == own  # back on its own once the transaction ended
        db.close()
        return own, writer

    first, second = _in_thread(lambda: write(1)), _in_thread(lambda: write(2))
    assert first[1] == second[1]  # type: ignore[index]
    assert first[0] != first[1]  # type: ignore[index]
    # A thread's own connection sees what the writer connection committed.
    assert _in_thread(lambda: db.execute_sql("SELECT x FROM t ORDER BY x").fetchall()) \
        == [(1,), (2,)]
    db.close_all()


def test_the_writer_connection_keeps_the_large_page_cache_and_a_thread_s_own_the_default(
        tmp_path: Path) -> None:
    """A thread's own connection loses its pages to every commit of the writer's; what its
    last read left stays until its next read, so it keeps SQLite's default (decision 0033)."""
    db = open_database(tmp_path / "w.db")
    with db.atomic():
        writer = db.execute_sql("PRAGMA cache_size").fetchone()[0]
    assert (writer, db.execute_sql("PRAGMA cache_size").fetchone()[0]) == \
        (-WRITER_CACHE_KIB, -READER_CACHE_KIB)
    assert _in_thread(lambda: db.execute_sql("PRAGMA cache_size").fetchone()[0]) \
        == -READER_CACHE_KIB
    db.close_all()


def test_a_relaxed_thread_commits_without_its_fsync_and_the_others_keep_theirs(
        tmp_path: Path) -> None:
    db = open_database(tmp_path / "w.db")
    db.execute_sql("CREATE TABLE t (x INTEGER)")

    def synchronous(relaxed: bool) -> int:
        db.relax_durability(relaxed)  # type: ignore[attr-defined]
        with db.atomic():
            db.execute_sql("INSERT INTO t VALUES (1)")
            level = int(db.execute_sql("PRAGMA synchronous").fetchone()[0])
        db.close()
        return level

    full, normal = 2, 1
    assert [_in_thread(lambda: synchronous(r)) for r in (True, False, True, True, False)] \
        == [normal, full, normal, normal, full]
    db.close_all()


def test_a_commit_that_fails_is_rolled_back_and_the_next_writer_starts_clean(
        tmp_path: Path) -> None:
    db = open_database(tmp_path / "w.db")
    db.execute_sql("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    db.execute_sql("CREATE TABLE child (parent_id INTEGER REFERENCES parent (id)"
                   " DEFERRABLE INITIALLY DEFERRED)")
    # The deferred foreign key fails at COMMIT, leaving the transaction open for the rollback.
    with pytest.raises(IntegrityError):
        with db.atomic():
            db.execute_sql("INSERT INTO child VALUES (7)")

    def writer() -> bool:
        with db.atomic():
            db.execute_sql("INSERT INTO parent VALUES (1)")
            db.execute_sql("INSERT INTO child VALUES (1)")
        db.close()
        return True

    assert _in_thread(writer)
    assert db.execute_sql("SELECT parent_id FROM child").fetchall() == [(1,)]
    db.close_all()


def test_a_writer_that_waited_past_the_busy_timeout_writes_on_its_own_connection(
        tmp_path: Path) -> None:
    db = open_database(tmp_path / "w.db", busy_timeout=0.05)
    db.execute_sql("CREATE TABLE t (x INTEGER)")
    db._writer.acquire()  # type: ignore[attr-defined] - a writer of this process that hangs

    def write() -> bool:
        own = db.connection()
        with db.atomic():  # SQLite's own lock is free: its busy handler lets this one in
            db.execute_sql("INSERT INTO t VALUES (1)")
            on_own = db.connection() is own
        db.close()
        return on_own

    try:
        assert _in_thread(write) is True
    finally:
        db._writer.release()  # type: ignore[attr-defined]
    assert db.execute_sql("SELECT x FROM t").fetchall() == [(1,)]
    db.close_all()


def test_closing_every_connection_closes_the_writers_and_a_later_write_opens_it_again(
        tmp_path: Path) -> None:
    db = open_database(tmp_path / "w.db")
    db.execute_sql("CREATE TABLE t (x INTEGER)")
    with db.atomic():
        db.execute_sql("INSERT INTO t VALUES (1)")
        writer = db.connection()
    db.close_all()
    with pytest.raises(sqlite3.ProgrammingError):
        writer.execute("SELECT 1")  # closed
    with db.atomic():
        db.execute_sql("INSERT INTO t VALUES (2)")
    assert db.execute_sql("SELECT COUNT(*) FROM t").fetchone()[0] == 2
    db.close_all()
