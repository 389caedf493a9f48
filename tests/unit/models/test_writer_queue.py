"""Writers of one process queue on a lock, let in as the previous one ends, never left holding it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from wakeline.models.db import open_database


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
