"""The journal as a file on one host: `<directory>/entries.jsonl` and `since.json`.

Entries live one JSON object a line; `since.json` keeps when recording began and the
last sequence number, so `seq` never restarts, even when every entry has aged out. The
file is rewritten to exactly what readers may see when it grows long, or hourly once some
entries have aged out. One thread writes (the `Journal` actor); any thread may read or
long-poll.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Sequence

from wakeline.clock import Clock, iso, to_ms
from wakeline.errors import Unavailable
from wakeline.journal.entries import (
    COMPACT_AT_LINES,
    COMPACT_EVERY_SECONDS,
    DAY_MS,
    ENTRIES,
    KEEP_DAYS,
    KEEP_ENTRIES,
    NEVER,
    check_page,
    SINCE,
    Kept,
    Note,
    Page,
    copy_entry,
    dumps_entry,
    parse_line,
    render_entry,
)

log = logging.getLogger(__name__)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    """Create or truncate `path` (0600), write `data` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class JournalFile:
    """The journal on disk: `<directory>/entries.jsonl` and `<directory>/since.json` (both 0600,
    directory 0700), with the retained entries mirrored in memory for readers."""

    def __init__(self, directory: Path, clock: Clock, secret_values: Sequence[str] = (), *,
                 keep_entries: int = KEEP_ENTRIES, keep_days: int = KEEP_DAYS,
                 compact_at_lines: int = COMPACT_AT_LINES) -> None:
        self.directory = Path(directory)
        self._clock = clock
        self._secrets = list(secret_values)
        self._keep_entries, self._keep_ms = keep_entries, keep_days * DAY_MS
        self._compact_at = compact_at_lines
        self._cond = threading.Condition()
        self._fd: int | None = None
        self._closed = False
        self._reset()

    def _reset(self) -> None:
        self._kept: list[Kept] = []  # retained entries, ascending seq
        self._ids: dict[str, int] = {}  # source id -> seq, for exactly the retained entries
        self._seq = 0  # the last seq handed out
        self._since = ""
        self._lines = 0  # lines in entries.jsonl, readable or not
        self._aged_in_file = 0  # entries in the file that aged out since the last compaction
        self._oldest_at = 0  # at most the oldest retained `at`: below the cutoff, look closer
        self._torn_tail = False  # the file does not end with a newline
        self._compacted_at_ms: int | None = None
        self.skipped_lines = 0

    @property
    def is_open(self) -> bool:
        """True between a successful `open()` and `close()`."""
        return self._fd is not None

    @property
    def entries_path(self) -> Path:
        """Where the entries are written."""
        return self.directory / ENTRIES

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        """Create what is missing, load the retained entries and recover the sequence."""
        with self._cond:
            self._close_fd()
            self._reset()
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.directory, 0o700)
            for leftover in (ENTRIES + ".tmp", SINCE + ".tmp"):  # a crash mid-rewrite
                (self.directory / leftover).unlink(missing_ok=True)
            fd = os.open(self.entries_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.fchmod(fd, 0o600)
                self._load(self.entries_path.read_bytes())
                self._load_since()
            except BaseException:
                os.close(fd)
                raise
            self._fd, self._closed = fd, False
            self._trim(to_ms(self._clock.now()))

    def _load(self, data: bytes) -> None:
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        else:
            self._torn_tail = True
        self._lines = len(lines)
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if (kept := parse_line(line)) is not None:
                self._kept.append(kept)
                self._ids[kept.entry["id"]] = kept.seq
                continue
            self.skipped_lines += 1  # torn by a crash mid-write, most likely the last line
            log.warning("unreadable journal line skipped", extra={"line": number})
        self._kept.sort(key=lambda k: k.seq)
        self._seq = self._kept[-1].seq if self._kept else 0

    def _load_since(self) -> None:
        try:
            since = json.loads((self.directory / SINCE).read_bytes())
            self._since, self._seq = str(since["recordingSince"]), max(self._seq, int(since["seq"]))
            return
        except FileNotFoundError:  # a new journal: recording begins now
            pass
        except (ValueError, TypeError, KeyError):
            log.warning("journal since.json unreadable; rebuilt from the entries")
        self._since = iso(self._kept[0].at_ms if self._kept else to_ms(self._clock.now()))
        self._write_since()

    def _write_since(self) -> None:
        tmp = self.directory / (SINCE + ".tmp")
        body = {"recordingSince": self._since, "seq": self._seq}
        _write_file(tmp, json.dumps(body, separators=(",", ":")).encode())
        os.replace(tmp, self.directory / SINCE)
        _fsync_dir(self.directory)

    def close(self) -> None:
        """Close the file and release every waiter."""
        with self._cond:
            self._close_fd()
            self._closed = True
            self._cond.notify_all()

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # --- writing -----------------------------------------------------------------------------

    def append(self, notes: Sequence[Note]) -> list[dict[str, Any]]:
        """Write the notes not already retained, in one write and fsync; return their entries.

        Raises:
            ValueError: a note has an unknown kind (nothing is written).
            OSError: the write failed (nothing of the batch is kept).
        """
        drafts = [(n.at_ms, render_entry(n, self._secrets)) for n in notes]  # no lock needed
        with self._cond:
            if self._fd is None:
                raise OSError("the journal is not open")
            self._trim(to_ms(self._clock.now()))
            fresh: list[Kept] = []
            batch_ids: set[str] = set()
            before = self._seq
            for at_ms, entry in drafts:
                if entry["id"] in self._ids or entry["id"] in batch_ids:
                    continue
                batch_ids.add(entry["id"])
                self._seq += 1
                entry["seq"] = self._seq
                fresh.append(Kept(self._seq, at_ms, entry, dumps_entry(entry)))
            if not fresh:
                return []
            try:
                self._write_lines([k.line for k in fresh])
            except OSError:
                if not self._torn_tail:  # nothing of the batch reached the file: reuse its seqs
                    self._seq = before
                raise
            self._kept.extend(fresh)
            self._oldest_at = min(self._oldest_at, *(k.at_ms for k in fresh))
            self._ids.update((k.entry["id"], k.seq) for k in fresh)
            self._lines += len(fresh)
            self._cond.notify_all()
            if self._lines >= self._compact_at:
                try:
                    self._compact()
                except OSError as exc:  # the batch is durable; the next append tries again
                    log.warning("journal compaction failed",
                                extra={"error": exc.__class__.__name__, "errno": exc.errno})
            return [copy_entry(k.entry) for k in fresh]

    def _write_lines(self, lines: list[str]) -> None:
        assert self._fd is not None
        data = ("\n" if self._torn_tail else "") + "".join(line + "\n" for line in lines)
        size = os.fstat(self._fd).st_size
        try:
            _write_all(self._fd, data.encode("utf-8"))
            os.fsync(self._fd)
        except OSError:
            try:  # take back a partial batch so no half line stays behind
                os.ftruncate(self._fd, size)
            except OSError:
                self._torn_tail = True
            raise
        self._torn_tail = False

    # --- retention ---------------------------------------------------------------------------

    def _trim(self, now_ms: int) -> None:
        """Forget entries out of the window: past the newest `keep_entries`, or too old."""
        dropped = self._kept[: max(0, len(self._kept) - self._keep_entries)]
        del self._kept[: len(dropped)]
        cutoff = now_ms - self._keep_ms
        if self._oldest_at < cutoff:  # something may have aged out: scan, then tighten the bound
            aged = [k for k in self._kept if k.at_ms < cutoff]
            if aged:
                self._kept = [k for k in self._kept if k.at_ms >= cutoff]
                self._aged_in_file += len(aged)
                dropped += aged
            self._oldest_at = min((k.at_ms for k in self._kept), default=NEVER)
        for k in dropped:
            if self._ids.get(k.entry["id"]) == k.seq:
                del self._ids[k.entry["id"]]

    def compact_if_due(self) -> bool:
        """Rewrite the file when entries have aged out, at most once per COMPACT_EVERY_SECONDS."""
        with self._cond:
            if self._fd is None:
                return False
            now = to_ms(self._clock.now())
            self._trim(now)
            last = self._compacted_at_ms
            if self._aged_in_file and (last is None or now - last >= COMPACT_EVERY_SECONDS * 1000):
                self._compact()
                return True
            return False

    def compact(self) -> None:
        """Rewrite the file to exactly the retained entries now."""
        with self._cond:
            if self._fd is None:
                raise OSError("the journal is not open")
            self._compact()

    def _compact(self) -> None:
        # Until the rename the old file is whole; since.json is durable before it, so even a
        # file compacted to nothing leaves the sequence behind.
        self._trim(to_ms(self._clock.now()))
        tmp = self.directory / (ENTRIES + ".tmp")
        try:
            _write_file(tmp, "".join(k.line + "\n" for k in self._kept).encode("utf-8"))
            self._write_since()
            os.replace(tmp, self.entries_path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        self._lines, self._aged_in_file, self._torn_tail = len(self._kept), 0, False
        self._compacted_at_ms = to_ms(self._clock.now())
        self._close_fd()  # the old inode is gone; a failed reopen leaves the journal closed
        self._fd = os.open(self.entries_path, os.O_WRONLY | os.O_APPEND)
        _fsync_dir(self.directory)

    # --- reading -----------------------------------------------------------------------------

    def page(self, *, limit: int = 100, older: int | None = None,
             newer: int | None = None) -> Page:
        """The newest `limit` visible entries, or those just before `older` / just after
        `newer`; oldest first either way."""
        check_page(limit, older, newer)
        with self._cond:
            if self._fd is None:
                raise Unavailable("the journal is not open")
            self._trim(to_ms(self._clock.now()))
            kept = self._kept
            if older is not None:
                end = bisect.bisect_left(kept, older, key=lambda k: k.seq)
                chosen = kept[max(0, end - limit):end]
            elif newer is not None:
                start = bisect.bisect_right(kept, newer, key=lambda k: k.seq)
                chosen = kept[start:start + limit]
            else:
                chosen = kept[-limit:]
            oldest, newest = (kept[0].seq, kept[-1].seq) if kept else (None, self._seq or None)
            return Page([copy_entry(k.entry) for k in chosen], self._since, oldest, newest)

    def wait_newer(self, cursor: int, timeout: float) -> bool:
        """Block until an entry after `cursor` is visible, or `timeout` real seconds pass."""

        def newer() -> bool:
            if self._fd is None:
                return False
            self._trim(to_ms(self._clock.now()))
            return bool(self._kept) and self._kept[-1].seq > cursor

        with self._cond:
            self._cond.wait_for(lambda: self._closed or newer(), timeout=max(0.0, timeout))
            return newer()
