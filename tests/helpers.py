"""Small helpers shared by tests that wait on real processes and servers."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds.

    Returns the truthy value. Exceptions raised by the predicate count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - the thing polled may not exist yet
            last_error = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"{message} not met within {timeout}s{detail}")
        # A poll interval, not a wait for an event: the deadline bounds the loop.
        time.sleep(interval)


def batch_scheduling_allowed() -> bool:
    """Whether a thread here may take `SCHED_BATCH` (a sandbox may refuse it; wakeline then
    logs a warning and runs as before). Probed on a thread of its own, which then ends."""
    if not hasattr(os, "SCHED_BATCH"):
        return False
    allowed: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            allowed.append(True)
        except OSError:
            allowed.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(10)
    return allowed == [True]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` the way a person would, failing the test on an error."""
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def make_repo(path: Path) -> Path:
    """A real git repository at `path` on `main`, with one commit holding README.md."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "commit.gpgsign", "false")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    git(path, "commit", "--quiet", "-m", "first")
    return path


def kept_journal(service: Any) -> str:
    """Everything the service's journal keeps, as stored: the file's lines on one host, the
    table's rows when hosts share the database (engine "dbos")."""
    from wakeline.journal.file import JournalFile

    if isinstance(service.journal.entries, JournalFile):
        directory = service.config.journal_path
        return "".join(p.read_text() for p in directory.iterdir() if p.is_file()) \
            if directory.is_dir() else ""
    rows = service.store.db.execute_sql("SELECT entry_id, entry FROM journal_entries").fetchall()
    return "\n".join(f"{r[0]} {r[1]}" for r in rows)



class _Rows(list):  # type: ignore[type-arg]
    """A statement's rows, read like a DB-API cursor's."""

    def fetchone(self) -> Any:
        return self[0] if self else None

    def fetchall(self) -> list[Any]:
        return list(self)


class StoreShell:
    """The store a config names, from outside the service, as an operator with a database
    shell would see it: the SQLite file, or the PostgreSQL database of engine "dbos". Each
    statement (`?` placeholders) commits at once."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def __enter__(self) -> "StoreShell":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> _Rows:
        if self._config.scale.engine != "dbos":
            import sqlite3

            db = sqlite3.connect(self._config.database_path, timeout=5)
            try:
                with db:
                    return _Rows(db.execute(sql, params).fetchall())
            finally:
                db.close()
        import psycopg

        with psycopg.connect(self._config.scale.database_url, autocommit=True) as conn:
            cur = conn.execute(sql.replace("%", "%%").replace("?", "%s"), params)
            return _Rows(cur.fetchall() if cur.description else [])


def kept_tokens(service: Any) -> dict[str, Any] | None:
    """The Linear app's tokens as the service keeps them: its owner-only file on one host
    (the mode checked here), the shared database's row where hosts share one."""
    import json
    import stat

    if service.config.scale.engine == "dbos":
        row = StoreShell(service.config).execute(
            "SELECT value FROM settings WHERE key = 'linear.oauth'").fetchone()
        return json.loads(row[0])["tokens"] if row else None
    path = service.config.oauth_token_path
    if not path.exists():
        return None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return json.loads(path.read_text())
