"""The Linear inbox's queries: paged reads, the `shown` marks, the ack boundary, retention.

The message id is the cursor: `AUTOINCREMENT`, so it only grows and is never reused.
The read boundary (`ack_cursor`) is one persisted integer: every message at or below
it has been acknowledged, every message above it is unread. Reads never move it; only
`ack` does, and only to a message some read has already shown.

The `shown` marks live in their own narrow table, `inbox_shown` (one cursor a row):
marking a page writes a few small rows instead of rewriting the pages that hold the
messages' event JSON. Only unread messages need a mark (an ack at or below the
boundary changes nothing), and marks at or below the boundary are pruned.

Retention bounds the read history only. A message above the boundary is never deleted;
at or below it, the newest `READ_KEEP_COUNT` messages younger than `READ_KEEP_DAYS` are
kept (docs/decisions/0005-inbox-retention.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from peewee import Case, Database, fn

from wakeline.errors import NotShown
from wakeline.models.dialect import dialect_of
from wakeline.models.schema import INBOX_LOCK
from wakeline.models.tables import Tables

ACK_CURSOR_KEY = "inbox.ack_cursor"
READ_KEEP_COUNT = 10_000
READ_KEEP_DAYS = 30
PRUNE_BATCH = 2_000
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class InboxRow:
    """One stored message, as a read returns it."""

    cursor: int
    received_at: int
    headline: str
    event: str | None  # the stored JSON; None when the read left it out (`events_over`)
    shown: bool


@dataclass(frozen=True)
class InboxState:
    """The boundary and counters of the inbox at one instant."""

    ack_cursor: int
    oldest_cursor: int | None
    unread_count: int


@dataclass(frozen=True)
class InboxRead:
    """Rows of one read, with the state they were read in and whether rows lie beyond."""

    rows: list[InboxRow]
    more: bool
    state: InboxState


@dataclass(frozen=True)
class AckResult:
    """The boundary after an ack, and whether this ack moved it."""

    ack_cursor: int
    unread_count: int
    moved: bool


class InboxStore:
    """The inbox tables over one database."""

    def __init__(self, db: Database, tables: Tables) -> None:
        self._db = db
        self._dialect = dialect_of(db)
        self._t = tables

    # --- reads -----------------------------------------------------------------------------

    def ack_cursor(self) -> int:
        """The read boundary: every message at or below it has been acknowledged."""
        s = self._t.settings
        raw = s.select(s.value).where(s.key == ACK_CURSOR_KEY).scalar()
        return int(json.loads(raw)) if raw is not None else 0

    def unread_count(self, ack: int | None = None) -> int:
        """Messages above the read boundary (`ack`, else the stored one)."""
        ack = self.ack_cursor() if ack is None else ack
        return int(self._db.execute_sql(
            "SELECT COUNT(*) FROM inbox_messages WHERE id > ?", (ack,)
        ).fetchone()[0])

    def oldest_cursor(self) -> int | None:
        """The oldest message still kept, or None when the inbox is empty."""
        m = self._t.inbox
        return m.select(fn.MIN(m.id)).scalar()

    def state(self) -> InboxState:
        """Boundary, oldest cursor and unread count, read in one snapshot."""
        with self._db.atomic("DEFERRED"):
            return self._state()

    def _state(self) -> InboxState:
        ack = self.ack_cursor()
        return InboxState(ack, self.oldest_cursor(), self.unread_count(ack))

    def forward(self, after: int | None, limit: int, *,
                events_over: int | None = None) -> InboxRead:
        """Up to `limit` messages after `after` (default: the boundary), oldest first.

        `more` is true when a message lies beyond the last one returned. With
        `events_over`, only events of more than that many bytes are read.
        """
        m = self._t.inbox
        with self._db.atomic("DEFERRED"):
            state = self._state()
            start = state.ack_cursor if after is None else after
            rows = self._rows(m.id > start, m.id.asc(), limit + 1, events_over)
        return InboxRead(rows[:limit], len(rows) > limit, state)

    def before(self, cursor: int, limit: int, *, events_over: int | None = None) -> InboxRead:
        """Up to `limit` messages just before `cursor`, read or not, newest first.

        `more` is true when an older message lies before the last one returned. With
        `events_over`, only events of more than that many bytes are read.
        """
        m = self._t.inbox
        with self._db.atomic("DEFERRED"):
            state = self._state()
            rows = self._rows(m.id < cursor, m.id.desc(), limit + 1, events_over)
        return InboxRead(rows[:limit], len(rows) > limit, state)

    def _rows(self, where: Any, order: Any, limit: int, events_over: int | None) -> list[InboxRow]:
        m = self._t.inbox
        event = m.event if events_over is None \
            else Case(None, [(m.size_bytes > events_over, m.event)])
        rows = list(
            m.select(m.id, m.received_at, m.headline, event)
            .where(where).order_by(order).limit(limit).tuples()
        )
        if not rows:
            return []
        cursors = [row[0] for row in rows]
        marked = {c for (c,) in self._db.execute_sql(
            "SELECT id FROM inbox_shown WHERE id BETWEEN ? AND ?", (min(cursors), max(cursors))
        )}
        return [InboxRow(c, r, h, e, c in marked) for c, r, h, e in rows]

    # --- writes ----------------------------------------------------------------------------

    def mark_shown(self, cursors: list[int]) -> None:
        """Record that a read showed these messages (an ack may name only those)."""
        if not cursors:
            return
        values = ", ".join("(?)" for _ in cursors)
        with self._db.atomic():
            self._db.execute_sql(f"INSERT INTO inbox_shown (id) VALUES {values}"
                                 " ON CONFLICT DO NOTHING", tuple(cursors))

    def _is_shown(self, cursor: int) -> bool:
        return self._db.execute_sql(
            """SELECT 1 FROM inbox_shown s JOIN inbox_messages m ON m.id = s.id
               WHERE s.id = ?""", (cursor,)
        ).fetchone() is not None

    def ack(self, cursor: int) -> AckResult:
        """Move the boundary to `cursor`, in one transaction with its checks.

        A cursor at or below the boundary changes nothing (a retry, or a late ack), so
        an ack can never reach past the message it names. Raises NotShown when the
        cursor is above the boundary but names no message a read has shown.
        """
        s = self._t.settings
        with self._db.atomic():
            self._dialect.lock(self._db, INBOX_LOCK)  # the boundary only moves forward
            ack = self.ack_cursor()
            if cursor <= ack:
                return AckResult(ack, self.unread_count(ack), moved=False)
            if not self._is_shown(cursor):
                raise NotShown(f"cursor {cursor} is not a message a read has shown", cursor=cursor)
            s.insert(key=ACK_CURSOR_KEY, value=json.dumps(cursor)).on_conflict(
                conflict_target=[s.key], update={s.value: json.dumps(cursor)}).execute()
            return AckResult(cursor, self.unread_count(cursor), moved=True)

    def prune(self, now: int, *, batch: int = PRUNE_BATCH) -> int:
        """Delete up to `batch` of the oldest read messages beyond the retention bounds.

        Only messages at or below the boundary are candidates; the boundary is read in
        the same transaction as the delete. Up to `batch` `shown` marks at or below the
        boundary go too (they can no longer matter). Returns how many messages were deleted.
        """
        with self._db.atomic():
            self._dialect.lock(self._db, INBOX_LOCK)
            ack = self.ack_cursor()
            self._db.execute_sql(
                """DELETE FROM inbox_shown WHERE id IN (
                       SELECT id FROM inbox_shown WHERE id <= ? ORDER BY id LIMIT ?)""",
                (ack, batch),
            )
            oldest = self.oldest_cursor()
            if oldest is None or oldest > ack:
                return 0
            # Keep read messages at or above `keep_from` by count (ids are unique, so a span
            # of at most READ_KEEP_COUNT ids cannot hold more read messages than that).
            keep_from = oldest
            if ack - oldest + 1 > READ_KEEP_COUNT:
                row = self._db.execute_sql(
                    "SELECT id FROM inbox_messages WHERE id <= ? ORDER BY id DESC LIMIT 1 OFFSET ?",
                    (ack, READ_KEEP_COUNT - 1),
                ).fetchone()
                keep_from = row[0] if row is not None else oldest
            cutoff = now - READ_KEEP_DAYS * _DAY_MS
            deleted = self._db.execute_sql(
                """DELETE FROM inbox_messages WHERE id IN (
                       SELECT id FROM inbox_messages WHERE id < ? ORDER BY id LIMIT ?)""",
                (keep_from, batch),
            ).rowcount
            if deleted < batch:
                deleted += self._db.execute_sql(
                    """DELETE FROM inbox_messages WHERE id IN (
                           SELECT id FROM inbox_messages{hint}
                           WHERE received_at < ? AND id <= ? ORDER BY id LIMIT ?)""".format(
                        hint=self._dialect.indexed_by("inbox_messages_received")),
                    (cutoff, ack, batch - deleted),
                ).rowcount
            return int(deleted)
