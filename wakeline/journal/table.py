"""The owner's journal in the shared database, for more than one host (`scale.engine = "dbos"`).

On one host the journal is a file (`wakeline/journal.py`). Hosts that share one PostgreSQL
database keep one journal there instead, so the owner page of any host shows what every
host did: the same entries, scrubbed and bounded by the same rules (`journal._render`), the
same reading window (the newest `keep_entries`, at most `keep_days` old), the same paging
and long poll. Each entry also records the host that wrote it.

`seq` is the row id. Entries take their ids under a named lock, one transaction at a time
across hosts, so none can commit below a cursor a reader has already passed (the inbox does
the same). A source id lands once while its entry is kept: a unique key, as the file's
index of retained ids.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Sequence

from peewee import Database

from wakeline.clock import Clock, iso, to_ms
from wakeline.errors import Unavailable
from wakeline.journal.entries import (
    DAY_MS,
    KEEP_DAYS,
    KEEP_ENTRIES,
    check_page,
    Note,
    Page,
    dumps_entry,
    render_entry,
)
from wakeline.models.dialect import dialect_of

JOURNAL_LOCK = "journal"
SINCE_KEY = "journal_since"
# A long poll looks at the table this often for another host's entries; this host's own
# appends wake it at once.
POLL_SECONDS = 0.25
COMPACT_EVERY_SECONDS = 3600

_INSERT = ("INSERT INTO journal_entries (entry_id, at, host, entry) VALUES (?, ?, ?, ?)"
           " ON CONFLICT (entry_id) DO NOTHING RETURNING id")
_TRIM_COUNT = ("DELETE FROM journal_entries WHERE id <= (SELECT id FROM journal_entries"
               " ORDER BY id DESC LIMIT 1 OFFSET ?)")
_TRIM_AGE = "DELETE FROM journal_entries WHERE at < ?"
_SINCE_READ = "SELECT value FROM settings WHERE key = ?"
_SINCE_WRITE = "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING"
# The oldest visible entry, and the last seq handed out (visible or not, as in the file).
_BOUNDS = ("SELECT (SELECT MIN(id) FROM journal_entries WHERE at >= ?),"
           " (SELECT MAX(id) FROM journal_entries)")
_NEWEST = "SELECT id, entry FROM journal_entries WHERE at >= ? ORDER BY id DESC LIMIT ?"
_OLDER = "SELECT id, entry FROM journal_entries WHERE at >= ? AND id < ? ORDER BY id DESC LIMIT ?"
_NEWER = "SELECT id, entry FROM journal_entries WHERE at >= ? AND id > ? ORDER BY id LIMIT ?"


class JournalTable:
    """The journal as rows of `journal_entries`, with `JournalFile`'s interface."""

    def __init__(self, db: Database, clock: Clock, secret_values: Sequence[str] = (), *,
                 host: str = "", keep_entries: int = KEEP_ENTRIES, keep_days: int = KEEP_DAYS,
                 ) -> None:
        self._db = db
        self._dialect = dialect_of(db)
        self._clock = clock
        self._secrets = list(secret_values)
        self._host = host
        self._keep_entries, self._keep_ms = keep_entries, keep_days * DAY_MS
        self._cond = threading.Condition()
        self._open = False
        self._since = ""
        self._compacted_at_ms: int | None = None

    @property
    def is_open(self) -> bool:
        """True between a successful `open()` and `close()`."""
        return self._open

    def open(self) -> None:
        """Note when recording began (once for every host); OSError when the database fails."""
        now = to_ms(self._clock.now())
        try:
            with self._db.atomic():
                self._db.execute_sql(_SINCE_WRITE, (SINCE_KEY, json.dumps(iso(now))))
                row = self._db.execute_sql(_SINCE_READ, (SINCE_KEY,)).fetchone()
        except Exception as exc:  # the actor retries an open that failed
            raise OSError(f"the journal table cannot be opened: {exc.__class__.__name__}") from None
        with self._cond:
            self._since, self._open = str(json.loads(row[0])), True

    def close(self) -> None:
        """Stop taking entries and release every waiter."""
        with self._cond:
            self._open = False
            self._cond.notify_all()

    def append(self, notes: Sequence[Note]) -> list[dict[str, Any]]:
        """Insert the notes whose source id is not kept already, in one transaction; return
        their entries.

        Raises:
            ValueError: a note has an unknown kind (nothing is written).
            OSError: the journal is closed.
        """
        drafts = [(n.at_ms, render_entry(n, self._secrets)) for n in notes]
        if not self._open:
            raise OSError("the journal is not open")
        fresh: list[dict[str, Any]] = []
        with self._db.atomic():
            self._dialect.lock(self._db, JOURNAL_LOCK)
            for at_ms, entry in drafts:
                stored = {k: v for k, v in entry.items() if k != "seq"}
                row = self._db.execute_sql(
                    _INSERT, (entry["id"], at_ms, self._host, dumps_entry(stored))).fetchone()
                if row is not None:
                    entry["seq"] = int(row[0])
                    fresh.append(entry)
            if fresh:
                self._db.execute_sql(_TRIM_COUNT, (self._keep_entries,))
        if fresh:
            with self._cond:
                self._cond.notify_all()
        return fresh

    def compact_if_due(self) -> bool:
        """Delete entries past the reading window, at most once per COMPACT_EVERY_SECONDS."""
        now = to_ms(self._clock.now())
        last = self._compacted_at_ms
        if not self._open or (last is not None and now - last < COMPACT_EVERY_SECONDS * 1000):
            return False
        self.compact()
        return True

    def compact(self) -> None:
        """Delete what readers can no longer see, now."""
        if not self._open:
            raise OSError("the journal is not open")
        now = to_ms(self._clock.now())
        with self._db.atomic():
            self._db.execute_sql(_TRIM_AGE, (now - self._keep_ms,))
            self._db.execute_sql(_TRIM_COUNT, (self._keep_entries,))
        self._compacted_at_ms = now

    def page(self, *, limit: int = 100, older: int | None = None,
             newer: int | None = None) -> Page:
        """The newest `limit` visible entries, or those just before `older` / just after
        `newer`; oldest first either way."""
        check_page(limit, older, newer)
        if not self._open:
            raise Unavailable("the journal is not open")
        cutoff = to_ms(self._clock.now()) - self._keep_ms
        with self._db.snapshot():
            if older is not None:
                rows = self._db.execute_sql(_OLDER, (cutoff, older, limit)).fetchall()[::-1]
            elif newer is not None:
                rows = self._db.execute_sql(_NEWER, (cutoff, newer, limit)).fetchall()
            else:
                rows = self._db.execute_sql(_NEWEST, (cutoff, limit)).fetchall()[::-1]
            oldest, newest = self._db.execute_sql(_BOUNDS, (cutoff,)).fetchone()
        entries = [{"seq": int(seq), **json.loads(text)} for seq, text in rows]
        return Page(entries, self._since, None if oldest is None else int(oldest),
                    None if newest is None else int(newest))

    def wait_newer(self, cursor: int, timeout: float) -> bool:
        """Block until an entry after `cursor` is visible, or about `timeout` real seconds pass.

        The waits are counted, not timed: the service's clock may be frozen (tests), and a
        condition's wait is real time whatever the clock says."""
        left = max(0.0, timeout)
        while True:
            if not self._open:
                return False
            newest = self.page(limit=1).newest
            if newest is not None and newest > cursor:
                return True
            if left <= 0:
                return False
            with self._cond:
                self._cond.wait(min(left, POLL_SECONDS))
            left -= POLL_SECONDS
