"""Retention: the store forgets finished work older than `[store] keep_days` (decision 0030).

A pass visits the tables in an order that frees what the next one needs: completed FIFO
entries, turn results, settled effects, then receipts (a receipt goes only once no FIFO
entry, inbox message or held delivery refers to it). Each step is one short transaction
that deletes at most `batch` rows of one table (a sixth of that of turn results, whose
output can be large), so an admission or a turn's finalisation waits behind one step at
most. On SQLite the pass ends by giving the freed pages back to the file (`auto_vacuum =
INCREMENTAL`), a bounded number a step. Whoever runs the steps (echo memory's thread)
handles its other messages between them. Hosts that share one PostgreSQL database take
turns: a step that finds another host's step under way ends its own pass.

Kept whatever their age:

- a FIFO entry pending, claimed or held, or one of a turn still in flight (its
  finalisation counts them);
- an open conversation's newest entry of its current agent session (`Fifo.knows_session`:
  a follow-up prompt there is not taken for a new session);
- an open conversation's latest turn result (`GET /v1/conversations/{id}`), and those its
  control thread has not shown yet (`Bindings.unanswered`);
- an effect not settled (prepared, dispatched, `outcome_unknown`); a confirmed one at least
  the dedupe window (its id tells the webhook of the object it created, which Linear
  retries for hours, for our own echo); an intent (an update, a `linear graphql` mutation)
  at least echo memory's evidence window;
- a receipt at least the dedupe window, and while anything refers to it.

Not touched here: conversations, plan gates, control bindings, turns, settings; the inbox
(decision 0005) and the journal (0016) keep their own rules, as do held deliveries and
own-create ids (echo memory, decisions 0011 and 0015) and Matrix approvals (30 days).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from peewee import Database

from wakeline.clock import iso
from wakeline.models.dialect import dialect_of
from wakeline.models.echoes import EVIDENCE_KEPT_MS
from wakeline.service.parts import Check

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
# Rows one step deletes: a few milliseconds of the writer lock.
PRUNE_BATCH_ROWS = 300
# A turn result carries up to 64 KB of output: a sixth of the batch frees as many pages.
TURN_RESULTS_SHARE = 6
# Pages one step gives back to the file (2 MB of 4 KiB pages).
VACUUM_PAGES_PER_STEP = 500
RETENTION_LOCK = "retention"

# An open conversation keeps its current session's newest entry. (`x.state IN` every
# state: so the FIFO index ranges over the ids after `d`.)
_DELIVERIES = """DELETE FROM deliveries WHERE id IN (
    SELECT d.id FROM deliveries d JOIN conversations c ON c.id = d.conversation_id
    WHERE d.state = 'completed' AND d.completed_at < ?
      AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.id = d.turn_id)
      AND NOT (c.terminal = 0 AND c.agent_session_id IS NOT NULL
               AND COALESCE({session}, '') = c.agent_session_id
               AND NOT EXISTS (
                   SELECT 1 FROM deliveries x WHERE x.conversation_id = d.conversation_id
                     AND x.state IN ('pending', 'claimed', 'completed', 'held') AND x.id > d.id
                     AND {later_session} = c.agent_session_id))
    ORDER BY d.completed_at LIMIT ?)"""
_TURN_RESULTS = """DELETE FROM turn_results WHERE id IN (
    SELECT r.id FROM turn_results r JOIN conversations c ON c.id = r.conversation_id
    WHERE r.finished_at < ?
      AND (c.terminal = 1 OR (
          r.id < (SELECT MAX(x.id) FROM turn_results x WHERE x.conversation_id = r.conversation_id)
          AND NOT EXISTS (SELECT 1 FROM control_bindings b
                          WHERE b.conversation_id = r.conversation_id
                            AND r.id > COALESCE(b.answered_through, 0))))
    ORDER BY r.finished_at LIMIT ?)"""
# Settled only; an intent at least the evidence window, a confirmed write the dedupe window.
_EFFECTS = """DELETE FROM effects WHERE id IN (
    SELECT id FROM effects WHERE state IN ('confirmed', 'rejected', 'released')
      AND created_at < ?
      AND settled_at < CASE WHEN kind IN ('mutation', 'update') THEN ?
                            WHEN state = 'confirmed' THEN ? ELSE ? END
    LIMIT ?)"""
_RECEIPTS = """DELETE FROM receipts WHERE id IN (
    SELECT r.id FROM receipts r WHERE r.received_at < ?
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.receipt_id = r.id)
      AND NOT EXISTS (SELECT 1 FROM inbox_messages m WHERE m.receipt_id = r.id)
      AND NOT EXISTS (SELECT 1 FROM held_deliveries h WHERE h.receipt_id = r.id)
    ORDER BY r.received_at LIMIT ?)"""

TABLES = ("deliveries", "turn_results", "effects", "receipts")


@dataclass
class PassReport:
    """One pass: when it began and ended, rows deleted by table, pages given back, and why
    it stopped early (another host pruning, or an error)."""

    began_ms: int
    ended_ms: int | None = None
    rows: dict[str, int] = field(default_factory=dict)
    pages: int = 0
    stopped: str | None = None

    def summary(self) -> str:
        """For people: `"... 1200 rows (deliveries 800, receipts 400), 96 pages back"`."""
        total = sum(self.rows.values())
        tables = ", ".join(f"{t} {n}" for t, n in self.rows.items() if n)
        text = f"{iso(self.began_ms)}: {total} rows" + (f" ({tables})" if tables else "")
        text += f", {self.pages} pages back" if self.pages else ""
        return text + (f"; stopped: {self.stopped}" if self.stopped else "")


class Retention:
    """Passes of pruning over one database, one short step at a time.

    `keep_ms`: how long finished rows are kept; `dedupe_ms`: how long a receipt is kept at
    least (Linear's retries); `on_pruned(table, rows)`: told after each step that deleted
    rows (metrics).
    """

    def __init__(self, db: Database, keep_ms: int, dedupe_ms: int, *,
                 batch: int = PRUNE_BATCH_ROWS, pages_per_step: int = VACUUM_PAGES_PER_STEP,
                 on_pruned: Callable[[str, int], None] | None = None) -> None:
        self._db = db
        self._dialect = dialect_of(db)
        self.keep_ms, self.dedupe_ms = keep_ms, dedupe_ms
        self._batch, self._pages = batch, pages_per_step
        self._on_pruned = on_pruned
        self._deliveries = _DELIVERIES.format(
            session=self._dialect.json_text_sql("d.envelope", "session_id"),
            later_session=self._dialect.json_text_sql("x.envelope", "session_id"))
        self._current: PassReport | None = None
        self._next = 0  # index into TABLES; len(TABLES): giving pages back
        self.last: PassReport | None = None

    @classmethod
    def of(cls, db: Database, keep_days: float, dedupe_hours: float,
           on_pruned: Callable[[str, int], None] | None = None) -> "Retention":
        """From the `[store]` settings."""
        return cls(db, int(keep_days * DAY_MS), int(dedupe_hours * HOUR_MS), on_pruned=on_pruned)

    # --- passes ------------------------------------------------------------------------------

    @property
    def doing(self) -> str | None:
        """What the pass under way does next: a table's name, "pages", or None between passes."""
        if self._current is None:
            return None
        return TABLES[self._next] if self._next < len(TABLES) else "pages"

    def begin(self, now: int) -> bool:
        """Start a pass at `now` (False: one is under way; its steps go on)."""
        if self._current is not None:
            return False
        self._current, self._next = PassReport(began_ms=now), 0
        return True

    def step(self, now: int) -> bool:
        """One step of the pass under way; True when more steps are owed.

        An error ends the pass (logged, and shown by `checks`); the next pass starts over.
        """
        report = self._current
        if report is None:
            return False
        try:
            more = self._step(report, now)
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            log.exception("pruning the store failed")
            report.stopped, more = f"failed ({exc.__class__.__name__})", False
        if not more:
            report.ended_ms = now
            self.last, self._current = report, None
            log.log(logging.INFO if any(report.rows.values()) or report.pages else logging.DEBUG,
                    "store pruned", extra={"rows": report.rows, "pages": report.pages,
                                           "stopped": report.stopped})
        return more

    def run(self, now: int) -> PassReport:
        """A whole pass at once (tests, tools): every step in a row."""
        self.begin(now)
        while self.step(now):
            pass
        assert self.last is not None
        return self.last

    def _step(self, report: PassReport, now: int) -> bool:
        if self._next < len(TABLES):
            table = TABLES[self._next]
            gone = self.prune(table, now)
            if gone is None:
                report.stopped = "another host is pruning"
                return False
            report.rows[table] = report.rows.get(table, 0) + gone
            if gone < self._limit(table):
                self._next += 1
            return True
        with self._db.atomic():
            pages = self._dialect.give_back_pages(self._db, self._pages)
        report.pages += pages
        return pages >= self._pages

    # --- one batch -----------------------------------------------------------------------------

    def prune(self, table: str, now: int) -> int | None:
        """Delete up to one batch of `table`'s rows past their window, in one transaction: how
        many went, or None when another host holds the pruning lock."""
        sql, params = self._statement(table, now)
        with self._db.atomic():
            if not self._dialect.try_lock(self._db, RETENTION_LOCK):
                return None
            gone = int(self._db.execute_sql(sql, params).rowcount)
        if gone and self._on_pruned is not None:
            self._on_pruned(table, gone)
        return gone

    def _limit(self, table: str) -> int:
        return max(1, self._batch // TURN_RESULTS_SHARE) if table == "turn_results" \
            else self._batch

    def _statement(self, table: str, now: int) -> tuple[str, tuple[Any, ...]]:
        keep, limit = now - self.keep_ms, self._limit(table)
        if table == "deliveries":
            return self._deliveries, (keep, limit)
        if table == "turn_results":
            return _TURN_RESULTS, (keep, limit)
        if table == "effects":
            intents = now - max(self.keep_ms, EVIDENCE_KEPT_MS)
            confirmed = now - max(self.keep_ms, self.dedupe_ms)
            return _EFFECTS, (keep, intents, confirmed, keep, limit)
        if table == "receipts":
            return _RECEIPTS, (now - max(self.keep_ms, self.dedupe_ms), limit)
        raise ValueError(f"no retention for table {table!r}")

    # --- doctor ------------------------------------------------------------------------------

    def checks(self) -> list[Check]:
        """`doctor`'s view: the windows, the last pass and the store's size on disk."""
        detail = f"keep_days {self.keep_ms / DAY_MS:g}, dedupe_hours {self.dedupe_ms / HOUR_MS:g}"
        last = self.last
        detail += f"; last pass {last.summary()}" if last else "; no pass yet"
        try:
            detail += f"; {self._dialect.size_bytes(self._db) / 1e6:.1f} MB on disk"
        except Exception:  # noqa: BLE001 - the size is a courtesy
            log.debug("store size unavailable", exc_info=True)
        if last is not None and (last.stopped or "").startswith("failed"):
            return [Check("store_retention", False, detail,
                          "see the log's \"pruning the store failed\"; the next pass (in a "
                          "minute) tries again")]
        return [Check("store_retention", True, detail)]
