"""The journal in the shared database (hosts on one PostgreSQL; here on the test's backend):
the file's entries, dedupe, window and paging, one sequence for every host."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Callable

import pytest

from tests.conftest import now_ms
from wakeline.clock import SystemClock
from wakeline.journal.entries import Note
from wakeline.journal.table import JournalTable
from wakeline.models.store import Store

SECRET = "held-secret-value-0123456789"
DAY = timedelta(days=1)
Opener = Callable[..., JournalTable]


def note(n: int, text: str = "done") -> Note:
    """A turn report stamped now."""
    return Note(id=f"turn_report:{n}", kind="turn_report", at_ms=now_ms(), sender="worker",
                to="lead", text=text)


def seqs(page: Any) -> list[int]:
    return [e["seq"] for e in page.entries]


@pytest.fixture
def open_table(store: Store, clock: SystemClock, frozen: Any) -> Iterator[Opener]:
    """Open a JournalTable on the test's store (as a host named `host`); all closed after."""
    opened: list[JournalTable] = []

    def make(host: str = "host-a", **kwargs: Any) -> JournalTable:
        table = JournalTable(store.db, clock, [SECRET], host=host, **kwargs)
        table.open()
        opened.append(table)
        return table

    yield make
    for table in opened:
        table.close()


def test_entries_are_the_files_scrubbed_and_each_source_id_lands_once(
        open_table: Opener, store: Store) -> None:
    journal = open_table()
    fresh = journal.append([note(1, f"key {SECRET}"), note(2), note(1)])
    assert [e["seq"] for e in fresh] == [1, 2]
    assert journal.append([note(2)]) == []
    [first, second] = journal.page().entries
    assert list(first) == ["seq", "id", "kind", "at", "from", "to", "text", "issueKeys", "commits",
                           "thread", "stage"]
    assert first["text"] == "key [redacted]" and second["id"] == "turn_report:2"
    stored = store.db.execute_sql("SELECT entry, host FROM journal_entries").fetchall()
    assert not [row for row in stored if SECRET in row[0]] and {r[1] for r in stored} == {"host-a"}


def test_hosts_share_one_sequence_and_one_recording_start(open_table: Opener, frozen: Any) -> None:
    a = open_table("host-a")
    a.append([note(1)])
    frozen.tick(timedelta(hours=1))
    b = open_table("host-b")
    b.append([note(2)])
    a.append([note(3)])
    assert seqs(a.page()) == seqs(b.page()) == [1, 2, 3]
    assert a.page().recording_since == b.page().recording_since == "2026-11-29T12:00:00.000Z"


def test_readers_see_the_newest_entries_and_nothing_older_than_the_window(
        open_table: Opener, frozen: Any) -> None:
    journal = open_table(keep_entries=5)
    journal.append([note(i) for i in range(1, 8)])
    page = journal.page()
    assert seqs(page) == [3, 4, 5, 6, 7] and (page.oldest, page.newest) == (3, 7)
    frozen.tick(14 * DAY + timedelta(seconds=1))
    page = journal.page()
    assert page.entries == [] and (page.oldest, page.newest) == (None, 7)
    assert journal.compact_if_due() is True and journal.compact_if_due() is False


def test_paging_older_newer_and_limit(open_table: Opener) -> None:
    journal = open_table()
    journal.append([note(i) for i in range(1, 11)])
    page = journal.page(limit=3)
    assert seqs(page) == [8, 9, 10] and (page.oldest, page.newest) == (1, 10)
    assert seqs(journal.page(limit=3, older=8)) == [5, 6, 7]
    assert seqs(journal.page(limit=2, newer=7)) == [8, 9]
    assert journal.page(newer=10).entries == []
    for bad in ({"limit": 0}, {"limit": 501}, {"older": 3, "newer": 1}):
        with pytest.raises(ValueError):
            journal.page(**bad)


def test_a_long_poll_wakes_for_another_hosts_entry_and_ends_on_close(open_table: Opener) -> None:
    a, b = open_table("host-a"), open_table("host-b")
    a.append([note(1)])
    started, results = threading.Event(), []

    def poll() -> None:
        started.set()
        results.append(a.wait_newer(1, 10.0))

    waiter = threading.Thread(target=poll, name="poll")
    waiter.start()
    started.wait(5)
    b.append([note(2)])  # another host: seen by polling the table
    waiter.join(10)
    assert not waiter.is_alive() and results == [True]
    assert a.wait_newer(2, 0.05) is False
    a.close()
    assert a.wait_newer(0, 5.0) is False
    with pytest.raises(OSError):
        a.append([note(3)])


def test_the_table_itself_stays_bounded(open_table: Opener, store: Store, frozen: Any) -> None:
    """Not only what readers see: the rows past the window are deleted (decision 0030 relies
    on it, and leaves the journal to these rules)."""
    journal = open_table(keep_entries=5)
    for i in range(1, 21):
        journal.append([note(i)])
    count = "SELECT COUNT(*) FROM journal_entries"
    assert store.db.execute_sql(count).fetchone()[0] == 5
    frozen.tick(14 * DAY + timedelta(seconds=1))
    journal.compact()
    assert store.db.execute_sql(count).fetchone()[0] == 0
