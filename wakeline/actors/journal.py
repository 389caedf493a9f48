"""Journal: appends the owner's journal for every producer, off their threads.

Producers `tell` a note and move on. The first note of a burst schedules one flush behind
the notes already queued, so a burst becomes one write and one fsync (group commit)
without looking into pykka's inbox. With a `group_window`, that flush first lets the
window pass and goes to the back of the inbox once more, so steady traffic (a few notes
per turn, hundreds of turns a second) also shares one fsync per window instead of paying
one per note. A journal that cannot be written logs a warning and
calls `on_failure`; the producer's delivery or turn never notices.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import pykka

from wakeline.journal.entries import KINDS, JournalStore, Note

log = logging.getLogger(__name__)


class Journal(pykka.ThreadingActor):
    """Appends the owner's journal; producers tell it and move on."""

    def __init__(self, file: JournalStore, on_failure: Callable[[], None] = lambda: None, *,
                 group_window: float = 0.0) -> None:
        super().__init__()
        self._file = file
        self._failed = on_failure
        self._window = group_window  # real seconds: a batching delay, not a time of the story
        self._buffer: list[Note] = []
        self._flush_scheduled = False
        self._self: Any = None

    def on_start(self) -> None:
        """Name the thread and open the file; a journal that cannot open retries later."""
        threading.current_thread().name = "journal"
        self._self = self.actor_ref.proxy()
        self._ensure_open()

    def on_stop(self) -> None:
        """Write what is buffered, then close the file."""
        self.flush()
        try:
            self._file.close()
        except OSError as exc:
            log.warning("journal close failed", extra={"error": exc.__class__.__name__})

    # --- messages ----------------------------------------------------------------------------

    def record(self, note: Note) -> None:
        """Buffer a note; the flush behind it writes every note queued before it."""
        if note.kind not in KINDS or not note.id:  # one bad note must not sink its batch
            log.warning("invalid journal note dropped", extra={"kind": note.kind})
            return
        self._buffer.append(note)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._self.group_flush.defer()

    def group_flush(self, waited: bool = False) -> None:
        """The scheduled flush: after the group window (once), behind what came meanwhile."""
        if self._window > 0 and not waited:
            time.sleep(self._window)
            self._self.group_flush.defer(waited=True)
            return
        self.flush()

    def flush(self) -> None:
        """Append the buffered notes in one write now; a failure drops the batch, never raises."""
        self._flush_scheduled = False
        batch, self._buffer = self._buffer, []
        if not batch or not self._ensure_open():
            return
        try:
            self._file.append(batch)
        except Exception as exc:  # recording never blocks coordination
            self._fail("journal append failed; batch dropped", exc, notes=len(batch))

    def maintain(self) -> None:
        """Retry a failed open, and compact the file when entries have aged out (a ticker)."""
        if not self._ensure_open():
            return
        try:
            self._file.compact_if_due()
        except Exception as exc:
            self._fail("journal compaction failed", exc)

    # --- helpers -----------------------------------------------------------------------------

    def _ensure_open(self) -> bool:
        if self._file.is_open:
            return True
        try:
            self._file.open()
        except OSError as exc:
            self._fail("journal cannot be opened", exc)
            return False
        return True

    def _fail(self, message: str, exc: Exception, **extra: Any) -> None:
        # The error's class and errno only: its text could quote a path or an entry.
        log.warning(message, extra={"error": exc.__class__.__name__,
                                    "errno": getattr(exc, "errno", None), **extra})
        try:
            self._failed()
        except Exception:
            log.exception("journal failure callback failed")
