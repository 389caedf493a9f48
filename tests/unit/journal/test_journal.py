"""The owner's journal: entry shape, scrubbing, dedupe, retention, compaction, paging, the actor."""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import LINEAR_KEY, now_ms
from tests.helpers import wait_until
from wakeline.actors.journal import Journal
from wakeline.clock import SystemClock
from wakeline.journal.entries import EXCERPT_MAX_CHARS, KINDS, TEXT_MAX_CHARS, Note, commit_shas, excerpt, issue_keys
from wakeline.journal.file import JournalFile
from wakeline.secrets import scrub

SECRET = "held-secret-value-0123456789"
KEYS = ["seq", "id", "kind", "at", "from", "to", "text", "issueKeys", "commits", "thread", "stage"]
DAY = timedelta(days=1)
Opener = Callable[..., JournalFile]


def note(n: int | str, text: str = "done", *, kind: str = "turn_report", at_ms: int | None = None,
         **extra: Any) -> Note:
    """A note from a worker to its lead, stamped now unless told."""
    return Note(id=f"{kind}:{n}", kind=kind, at_ms=now_ms() if at_ms is None else at_ms,
                sender="worker", to="lead", text=text, **extra)


def notes(first: int, last: int) -> list[Note]:
    """Notes `first`..`last` inclusive."""
    return [note(i) for i in range(first, last + 1)]


def file_lines(journal: JournalFile) -> list[str]:
    """The lines of entries.jsonl as written."""
    return journal.entries_path.read_text(encoding="utf-8").splitlines()


def seqs(entries: Sequence[dict[str, Any]]) -> list[int]:
    """The seq of each entry."""
    return [e["seq"] for e in entries]


def mode(path: Path) -> int:
    """Permission bits."""
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_journal(tmp_path: Path, clock: SystemClock, frozen: Any) -> Iterator[Opener]:
    """Open a JournalFile (by default in tmp_path/journal, holding SECRET); all closed after."""
    opened: list[JournalFile] = []

    def make(directory: Path | None = None, cls: type[JournalFile] = JournalFile,
             **kwargs: Any) -> JournalFile:
        journal = cls(directory or tmp_path / "journal", clock, [SECRET], **kwargs)
        journal.open()
        opened.append(journal)
        return journal

    yield make
    for journal in opened:
        journal.close()


# --- entries ---------------------------------------------------------------------------------


def test_entry_has_exactly_the_contract_keys(open_journal: Opener) -> None:
    """An entry carries the contract's keys, in order, on disk and to readers alike."""
    journal = open_journal()
    written = journal.append([note("t1", "Fixed ENG-12 in abc1234", thread="conv-1",
                                   stage="stored", issue_keys=("ENG-9",))])
    expected = {"seq": 1, "id": "turn_report:t1", "kind": "turn_report",
                "at": "2026-11-29T12:00:00.000Z", "from": "worker", "to": "lead",
                "text": "Fixed ENG-12 in abc1234", "issueKeys": ["ENG-9", "ENG-12"],
                "commits": ["abc1234"], "thread": "conv-1", "stage": "stored"}
    on_disk = json.loads(file_lines(journal)[0])
    for entry in (written[0], on_disk, journal.page().entries[0]):
        assert entry == expected
        assert list(entry) == KEYS
    assert KINDS == {"inbound", "turn_brief", "turn_report", "owner_question", "owner_answer",
                     "lifecycle", "outbound"}


def test_thread_and_stage_may_be_null(open_journal: Opener) -> None:
    """Without a thread or a stage the keys are present and null."""
    entry = open_journal().append([note(1, kind="lifecycle")])[0]
    assert entry["thread"] is None and entry["stage"] is None
    assert entry["issueKeys"] == [] and entry["commits"] == []


def test_lines_are_compact_utf8_json(open_journal: Opener) -> None:
    """One compact JSON object a line, non-ASCII text kept as UTF-8."""
    journal = open_journal()
    journal.append([note(1, "café — ✓"), note(2, "two")])
    raw = journal.entries_path.read_bytes()
    assert "café — ✓".encode() in raw and b"\\u" not in raw
    assert raw.count(b"\n") == 2 and raw.endswith(b"\n")
    assert b'", "' not in raw and b'": ' not in raw


def test_files_and_directory_are_private(open_journal: Opener) -> None:
    """entries.jsonl and since.json are 0600, the directory 0700."""
    journal = open_journal()
    journal.append([note(1)])
    assert mode(journal.directory) == 0o700
    assert mode(journal.entries_path) == 0o600
    assert mode(journal.directory / "since.json") == 0o600


def test_unknown_kind_raises_and_writes_nothing(open_journal: Opener) -> None:
    """A batch with an unknown kind is refused whole."""
    journal = open_journal()
    with pytest.raises(ValueError):
        journal.append([note(1), note(2, kind="gossip")])
    assert file_lines(journal) == [] and journal.page().entries == []


# --- seq and recordingSince ------------------------------------------------------------------


def test_seq_grows_and_survives_reopen(open_journal: Opener) -> None:
    """seq counts up across batches and carries on after a reopen."""
    journal = open_journal()
    assert seqs(journal.append(notes(1, 3))) == [1, 2, 3]
    assert seqs(journal.append(notes(4, 4))) == [4]
    journal.close()
    again = open_journal()
    assert seqs(again.append(notes(5, 6))) == [5, 6]
    assert seqs(again.page().entries) == [1, 2, 3, 4, 5, 6]


def test_recording_since_is_set_once(open_journal: Opener, frozen: Any) -> None:
    """recordingSince is when the journal was first created, whatever happens later."""
    journal = open_journal()
    assert journal.page().recording_since == "2026-11-29T12:00:00.000Z"
    frozen.tick(20 * DAY)
    journal.append([note(1)])
    journal.compact()
    journal.close()
    frozen.tick(DAY)
    assert open_journal().page().recording_since == "2026-11-29T12:00:00.000Z"


def test_seq_continues_after_everything_aged_out_and_reopen(
        open_journal: Opener, frozen: Any) -> None:
    """A file compacted to nothing still leaves the seq behind in since.json."""
    journal = open_journal()
    journal.append(notes(1, 3))
    frozen.tick(15 * DAY)
    assert journal.compact_if_due()
    assert journal.entries_path.read_bytes() == b""
    assert json.loads((journal.directory / "since.json").read_text())["seq"] == 3
    journal.close()
    again = open_journal()
    page = again.page()
    assert page.entries == [] and page.oldest is None and page.newest == 3
    assert seqs(again.append([note(4)])) == [4]


# --- a source id lands once ------------------------------------------------------------------


def test_a_source_id_lands_once(open_journal: Opener) -> None:
    """A retried id, in the same batch or a later one, is skipped."""
    journal = open_journal()
    assert seqs(journal.append([note(1), note(1, "again"), note(2)])) == [1, 2]
    assert journal.append([note(1, "a retry")]) == []
    assert [e["text"] for e in journal.page().entries] == ["done", "done"]
    assert len(file_lines(journal)) == 2


def test_a_source_id_is_remembered_across_reopen(open_journal: Opener) -> None:
    """The retained entries on disk are the remembered ids after a restart."""
    open_journal().append([note(1)])
    again = open_journal()
    assert again.append([note(1)]) == []
    assert seqs(again.append([note(2)])) == [2]


def test_an_id_lands_again_only_after_its_entry_aged_out(
        open_journal: Opener, frozen: Any) -> None:
    """Within 14 days an id is a duplicate; once its entry ages out it is forgotten."""
    journal = open_journal()
    journal.append([note(1)])
    frozen.tick(13 * DAY)
    assert journal.append([note(1)]) == []
    frozen.tick(2 * DAY)
    assert seqs(journal.append([note(1)])) == [2]


def test_an_id_lands_again_after_falling_out_by_count(
        open_journal: Opener) -> None:
    """An id past the newest `keep_entries` is no longer remembered."""
    journal = open_journal(keep_entries=3)
    journal.append(notes(1, 3))
    assert journal.append([note(1)]) == []
    journal.append([note(4)])
    assert seqs(journal.append([note(1)])) == [5]


# --- scrubbing and text ----------------------------------------------------------------------

CREDENTIALS = [
    (f"held {SECRET} value", SECRET),
    (f"Authorization: {LINEAR_KEY}", LINEAR_KEY),
    ("oauth lin_oauth_abcdefgh12345678XYZ", "lin_oauth_abcdefgh12345678XYZ"),
    ("WAKELINE_TOKEN=wlt_Ab3-dE_fGhIjKlMnOpQrStUvWxYz0123456789", "Ab3-dE_fGhIjKlMnOpQrStUvWxYz"),
    ("curl -H 'Authorization: Bearer abc.DEF-123_xyz~tok'", "abc.DEF-123_xyz~tok"),
    ("bearer ZYXWVUTSRQPONMLKJIHGFEDCBA", "ZYXWVUTSRQPONMLKJIHGFEDCBA"),
    ("push with ghp_0123456789abcdefghijABCDEFGHIJ012345", "ghp_0123456789abcdefghij"),
    ("gho_0123456789abcdefghijABCDEFGHIJ012345", "gho_0123456789abcdefghij"),
    ("ghs_0123456789abcdefghijABCDEFGHIJ012345", "ghs_0123456789abcdefghij"),
    ("ghu_0123456789abcdefghijABCDEFGHIJ012345", "ghu_0123456789abcdefghij"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "11ABCDEFG0123456789_abc"),
    ("OPENAI_KEY is sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123", "AbCdEfGhIjKlMnOpQrStUvWx"),
    ("sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx0123-xyz", "AbCdEfGhIjKlMnOpQrStUvWx"),
    ("slack xoxb-123456789012-abcdefghijKLMN", "123456789012-abcdefghij"),
    ("slack xoxp-123456789012-abcdefghijKLMN", "123456789012-abcdefghij"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("url?token=0123456789abcdef0123456789abcdef&x=1", "0123456789abcdef0123456789abcdef"),
    ("client_secret=c2VjcmV0LXZhbHVlLWhlcmU=", "c2VjcmV0LXZhbHVlLWhlcmU"),
    ("password=hunter2hunter2", "hunter2hunter2"),
    ('{"api_key": "AbC123xyz789QWE456"}', "AbC123xyz789QWE456"),
    ("export ANTHROPIC_API_KEY=q8W3e9R2t7Y1u6I0", "q8W3e9R2t7Y1u6I0"),
]


@pytest.mark.parametrize(("text", "raw"), CREDENTIALS)
def test_scrub_removes_each_credential_shape(text: str, raw: str) -> None:
    """Held secrets and every listed token shape become [redacted]."""
    out = scrub(text, [SECRET])
    assert raw not in out
    assert "[redacted]" in out


def test_scrub_leaves_ordinary_text_alone() -> None:
    """Prose, issue keys, SHAs and short values are not credentials."""
    text = ("Bearer authentication is set up. Secret: rotate it monthly. Fixed ENG-12 in "
            "abc1234; token=short; tokens are cheap; see https://linear.app/x/issue/ENG-12")
    assert scrub(text, [SECRET]) == text


def test_no_credential_reaches_the_file(open_journal: Opener) -> None:
    """Scrubbing happens before anything is written or kept, in every text field."""
    journal = open_journal()
    text = "\n".join(t for t, _ in CREDENTIALS)
    journal.append([Note(id="inbound:linear:1", kind="inbound", at_ms=now_ms(),
                         sender=f"owner {SECRET}", to="wakeline", text=text,
                         thread=f"conv {LINEAR_KEY}", stage="stored")])
    raw_file = journal.entries_path.read_text(encoding="utf-8")
    shown = json.dumps(journal.page().entries)
    for _, raw in CREDENTIALS:
        assert raw not in raw_file and raw not in shown


def test_text_is_cut_at_2000_chars_after_scrubbing(open_journal: Opener) -> None:
    """Long text is cut with an ellipsis; a secret across the cut is scrubbed whole first."""
    journal = open_journal()
    long, straddling = "x" * 5000, "a" * 1990 + " " + SECRET
    cut_long, cut_secret = (e["text"] for e in journal.append([note(1, long), note(2, straddling)]))
    assert len(cut_long) == TEXT_MAX_CHARS and cut_long.endswith("…")
    assert cut_long[:-1] == "x" * (TEXT_MAX_CHARS - 1)
    assert len(cut_secret) == TEXT_MAX_CHARS and SECRET[:8] not in cut_secret
    assert journal.append([note(3, "y" * TEXT_MAX_CHARS)])[0]["text"] == "y" * TEXT_MAX_CHARS


def test_issue_keys_are_extracted_first_seen_first() -> None:
    """Keys in ENG-123 shape, in order, once each; standards like SHA-256 are not issues."""
    text = "ENG-12 blocks OPS-3; see ENG-12 and feature/AB1-77-fix. SHA-256, UTF-8, eng-4, X-1"
    assert issue_keys(text) == ["ENG-12", "OPS-3", "AB1-77"]


def test_commit_shas_are_extracted() -> None:
    """7-40 lower-case hex words with a digit and a letter; not UUID parts or plain words."""
    full = "0123456789abcdef0123456789abcdef01234567"
    text = (f"merged abc1234 and {full}, then abc1234 again; deadbeef, 1234567, ABC1234, "
            "123e4567-e89b-12d3-a456-426614174000, #a1b2c3d4, "
            "abc12345678901234567890123456789012345678")
    assert commit_shas(text) == ["abc1234", full]


def test_entry_merges_stated_keys_before_found_ones(open_journal: Opener) -> None:
    """The source's own issue key comes first, then keys the text names, without repeats."""
    entry = open_journal().append([note(1, "OPS-1 then ENG-5 at 9f8e7d6", kind="inbound",
                                        issue_keys=("ENG-5",))])[0]
    assert entry["issueKeys"] == ["ENG-5", "OPS-1"]
    assert entry["commits"] == ["9f8e7d6"]


def test_excerpt_collapses_whitespace_and_cuts() -> None:
    """An inbound excerpt is one line of at most 280 characters."""
    assert excerpt("  hello\n\n\tworld  ") == "hello world"
    long = excerpt("word " * 200)
    assert len(long) == EXCERPT_MAX_CHARS and long.endswith("…") and "\n" not in long
    assert excerpt("abcdef", 4) == "abc…"


# --- retention and compaction ----------------------------------------------------------------


def test_readers_see_the_newest_2000_entries(open_journal: Opener) -> None:
    """Past 2,000 entries the oldest are hidden; paging back reaches exactly 2,000."""
    journal = open_journal()
    for start in range(1, 2101, 300):
        journal.append(notes(start, min(start + 299, 2100)))
    page = journal.page()
    assert seqs(page.entries) == list(range(2001, 2101))
    assert (page.oldest, page.newest) == (101, 2100)
    seen, cursor = [], page.oldest + 2000
    while entries := journal.page(limit=500, older=cursor).entries:
        seen[:0] = seqs(entries)
        cursor = entries[0]["seq"]
    assert seen == list(range(101, 2101))


def test_readers_see_nothing_older_than_14_days(
        open_journal: Opener, frozen: Any) -> None:
    """Entries older than 14 days by the clock are hidden at read time."""
    journal = open_journal()
    journal.append(notes(1, 3))
    frozen.tick(7 * DAY)
    journal.append(notes(4, 5))
    frozen.tick(7 * DAY + timedelta(seconds=1))
    page = journal.page()
    assert seqs(page.entries) == [4, 5] and (page.oldest, page.newest) == (4, 5)
    frozen.tick(7 * DAY)
    page = journal.page()
    assert page.entries == [] and (page.oldest, page.newest) == (None, 5)


def test_the_file_is_compacted_at_2500_lines(open_journal: Opener) -> None:
    """The append that makes 2,500 lines rewrites the file to the 2,000 retained entries."""
    journal = open_journal()
    for start in range(1, 2500, 500):
        journal.append(notes(start, min(start + 499, 2499)))
    assert len(file_lines(journal)) == 2499
    journal.append([note(2500)])
    assert [json.loads(line)["seq"] for line in file_lines(journal)] == list(range(501, 2501))
    assert mode(journal.entries_path) == 0o600 and mode(journal.directory / "since.json") == 0o600
    assert sorted(p.name for p in journal.directory.iterdir()) == ["entries.jsonl", "since.json"]
    assert seqs(journal.append([note(2501)])) == [2501]
    assert len(file_lines(journal)) == 2001


def test_aged_entries_are_compacted_at_most_hourly(
        open_journal: Opener, frozen: Any) -> None:
    """Once entries age out the file is rewritten, but not more often than once an hour."""
    journal = open_journal()
    journal.append(notes(1, 2))
    assert not journal.compact_if_due()  # nothing aged out yet
    frozen.tick(14 * DAY + timedelta(seconds=1))
    journal.append([note(3, at_ms=now_ms() - 14 * 86_400_000 + 10 * 60_000)])  # ages in 10 min
    assert journal.compact_if_due()
    assert [json.loads(line)["seq"] for line in file_lines(journal)] == [3]
    frozen.tick(timedelta(minutes=11))
    assert journal.page().entries == []
    assert not journal.compact_if_due()
    assert len(file_lines(journal)) == 1
    frozen.tick(timedelta(minutes=50))
    assert journal.compact_if_due()
    assert file_lines(journal) == []
    assert not journal.compact_if_due()


def test_a_crash_mid_compaction_loses_nothing(
        open_journal: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the rename never happens the old file is whole; a leftover tmp file is ignored."""
    journal = open_journal(keep_entries=3, compact_at_lines=5)
    journal.append(notes(1, 4))
    real_replace = os.replace

    def crash_on_entries(src: Any, dst: Any) -> None:
        if Path(dst).name == "entries.jsonl":
            raise OSError(errno.EIO, "simulated crash before the rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_entries)
    assert seqs(journal.append([note(5)])) == [5]  # the batch is durable; compaction failed
    monkeypatch.undo()
    assert [json.loads(line)["seq"] for line in file_lines(journal)] == [1, 2, 3, 4, 5]
    journal.close()
    # As a crash between writing the temporary file and the rename would leave it:
    (journal.directory / "entries.jsonl.tmp").write_text('{"seq":4,"id":"x"}\n{"seq":5,"i')
    again = open_journal(keep_entries=3, compact_at_lines=5)
    assert seqs(again.page().entries) == [3, 4, 5]
    assert not (again.directory / "entries.jsonl.tmp").exists()
    assert again.append([note(3)]) == []
    assert seqs(again.append([note(6)])) == [6]
    assert [json.loads(line)["seq"] for line in file_lines(again)] == [4, 5, 6]


def test_a_torn_last_line_is_skipped_on_open(
        open_journal: Opener, caplog: pytest.LogCaptureFixture) -> None:
    """A half-written last line is skipped with a warning, and appends start on a new line."""
    journal = open_journal()
    journal.append(notes(1, 3))
    journal.close()
    with journal.entries_path.open("ab") as fh:
        fh.write(b'{"seq":4,"id":"turn_report:4","ki')
    with caplog.at_level(logging.WARNING, logger="wakeline.journal"):
        again = open_journal()
    assert again.skipped_lines == 1
    assert "unreadable journal line skipped" in caplog.text
    assert seqs(again.page().entries) == [1, 2, 3]
    assert seqs(again.append([note(4)])) == [4]
    again.close()
    third = open_journal()
    assert seqs(third.page().entries) == [1, 2, 3, 4] and third.skipped_lines == 1


def test_a_failed_write_leaves_no_half_batch(
        open_journal: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that fills mid-batch: OSError, the partial batch is cut off, nothing is kept."""
    journal = open_journal()
    journal.append([note(1)])
    before = journal.entries_path.read_bytes()
    real_write = os.write
    calls = []

    def half_then_full(fd: int, data: Any) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError):
        journal.append(notes(2, 4))
    monkeypatch.undo()
    assert journal.entries_path.read_bytes() == before
    assert seqs(journal.page().entries) == [1]
    assert seqs(journal.append(notes(2, 2))) == [2]  # the id was not remembered, the seq reused
    assert [json.loads(line)["seq"] for line in file_lines(journal)] == [1, 2]


def test_append_on_a_closed_journal_raises_oserror(open_journal: Opener) -> None:
    """A journal that is not open refuses writes with an OSError, which the actor catches."""
    journal = open_journal()
    journal.close()
    with pytest.raises(OSError):
        journal.append([note(1)])


# --- reading ---------------------------------------------------------------------------------


def test_paging_older_newer_and_limit(open_journal: Opener) -> None:
    """Pages are oldest first: the newest N, the N before a cursor, the N after one."""
    journal = open_journal()
    journal.append(notes(1, 10))
    page = journal.page(limit=3)
    assert seqs(page.entries) == [8, 9, 10] and (page.oldest, page.newest) == (1, 10)
    assert seqs(journal.page(limit=3, older=8).entries) == [5, 6, 7]
    assert seqs(journal.page(limit=3, older=2).entries) == [1]
    assert journal.page(older=1).entries == []
    assert seqs(journal.page(limit=2, newer=7).entries) == [8, 9]
    assert seqs(journal.page(newer=0).entries) == list(range(1, 11))
    assert journal.page(newer=10).entries == []
    assert set(page.to_json()) == {"entries", "recordingSince", "oldest", "newest"}
    for bad in ({"limit": 0}, {"limit": 501}, {"older": 3, "newer": 1}):
        with pytest.raises(ValueError):
            journal.page(**bad)


def test_page_of_an_empty_journal(open_journal: Opener) -> None:
    """Nothing recorded: no entries, no bounds, and where recording began."""
    assert open_journal().page().to_json() == {
        "entries": [], "recordingSince": "2026-11-29T12:00:00.000Z", "oldest": None,
        "newest": None}


def test_wait_newer_wakes_when_another_thread_appends(
        open_journal: Opener) -> None:
    """A long poll returns True as soon as an entry after the cursor lands."""
    journal = open_journal()
    journal.append([note(1)])
    started, results = threading.Event(), []

    def poll() -> None:
        started.set()
        results.append(journal.wait_newer(1, 5.0))

    waiter = threading.Thread(target=poll, name="poll")
    waiter.start()
    started.wait(5)
    journal.append([note(2)])
    waiter.join(5)
    assert not waiter.is_alive() and results == [True]


def test_wait_newer_times_out_with_nothing_new(open_journal: Opener) -> None:
    """Nothing after the cursor: the wait ends at its timeout; an older cursor returns at once."""
    journal = open_journal()
    journal.append(notes(1, 2))
    assert journal.wait_newer(2, 0.05) is False
    assert journal.wait_newer(1, 5.0) is True


def test_wait_newer_returns_when_the_journal_closes(open_journal: Opener) -> None:
    """Closing releases long polls."""
    journal = open_journal()
    started, results = threading.Event(), []

    def poll() -> None:
        started.set()
        results.append(journal.wait_newer(0, 5.0))

    waiter = threading.Thread(target=poll, name="poll")
    waiter.start()
    started.wait(5)
    journal.close()
    waiter.join(5)
    assert not waiter.is_alive() and results == [False]


# --- the actor -------------------------------------------------------------------------------


class CountingFile(JournalFile):
    """A real JournalFile that counts its batches, can hold the first one and fail some."""

    def __init__(self, *args: Any, hold: threading.Event | None = None, fail: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []
        self.threads: set[str] = set()
        self.entered = threading.Event()
        self._hold, self._fail = hold, fail

    def append(self, notes: Sequence[Note]) -> list[dict[str, Any]]:
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        if self._hold is not None:
            self._hold.wait(5)
            self._hold = None
        if self._fail:
            self._fail -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        self.batches.append(len(notes))
        return super().append(notes)


def test_actor_group_commits_many_tells_in_order(
        tmp_path: Path, clock: SystemClock, frozen: Any) -> None:
    """Records told as fast as possible land in order, in at most two write+fsync batches."""
    hold = threading.Event()
    file = CountingFile(tmp_path / "journal", clock, hold=hold)
    proxy = Journal.start(file).proxy()
    told = [note(i, f"report {i}") for i in range(500)]
    for n in told:
        proxy.record(n)
    done = proxy.flush()
    hold.set()
    done.get(timeout=5)
    entries = file.page(limit=500).entries
    assert [e["id"] for e in entries] == [n.id for n in told]
    assert seqs(entries) == list(range(1, 501))
    assert sum(file.batches) == 500 and len(file.batches) <= 2
    assert file.threads == {"journal"}


def test_actor_shares_one_fsync_among_the_notes_of_its_group_window(
        tmp_path: Path, clock: SystemClock, frozen: Any) -> None:
    """Notes told one by one while the window runs land in one batch, in order, unasked."""
    file = CountingFile(tmp_path / "journal", clock)
    proxy = Journal.start(file, group_window=0.5).proxy()
    try:
        for i in range(1, 6):
            proxy.record(note(i))
        wait_until(lambda: len(file.page().entries) == 5, message="the window's batch")
        assert file.batches == [5]
        assert seqs(file.page().entries) == [1, 2, 3, 4, 5]
        proxy.record(note(6))  # a later note opens a window of its own
        wait_until(lambda: len(file.page().entries) == 6, message="the next batch")
        assert file.batches == [5, 1]
    finally:
        proxy.actor_ref.stop()


def test_actor_keeps_accepting_when_the_journal_cannot_open(
        tmp_path: Path, clock: SystemClock, frozen: Any) -> None:
    """A path under a regular file: warnings and on_failure, no exception, and a later retry."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    failures: list[int] = []
    file = JournalFile(blocker / "journal", clock)
    ref = Journal.start(file, on_failure=lambda: failures.append(1))
    proxy = ref.proxy()
    proxy.record(note(1))
    proxy.flush().get(timeout=5)
    assert ref.is_alive() and len(failures) >= 2 and not file.is_open
    blocker.unlink()
    proxy.record(note(2))
    proxy.flush().get(timeout=5)
    assert [e["id"] for e in file.page().entries] == ["turn_report:2"]


def test_actor_survives_a_failing_write(
        tmp_path: Path, clock: SystemClock, frozen: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A write that fails drops that batch, calls on_failure and logs no text; later ones land."""
    failures: list[int] = []
    file = CountingFile(tmp_path / "journal", clock, fail=1)
    proxy = Journal.start(file, on_failure=lambda: failures.append(1)).proxy()
    with caplog.at_level(logging.WARNING, logger="wakeline.actors.journal"):
        proxy.record(note(1, "first words"))
        proxy.flush().get(timeout=5)
        proxy.record(note(2, "second words"))
        proxy.flush().get(timeout=5)
    assert failures == [1]
    assert [e["id"] for e in file.page().entries] == ["turn_report:2"]
    assert "journal append failed" in caplog.text and "first words" not in caplog.text


def test_actor_drops_a_note_of_unknown_kind(
        tmp_path: Path, clock: SystemClock, frozen: Any) -> None:
    """A bad note is dropped alone; its neighbours in the batch still land."""
    file = JournalFile(tmp_path / "journal", clock)
    proxy = Journal.start(file).proxy()
    proxy.record(note(1))
    proxy.record(note(2, kind="gossip"))
    proxy.record(note(3))
    proxy.flush().get(timeout=5)
    assert [e["id"] for e in file.page().entries] == ["turn_report:1", "turn_report:3"]


def test_actor_stop_flushes_what_is_buffered(
        tmp_path: Path, clock: SystemClock, frozen: Any) -> None:
    """Notes buffered behind a slow write are written by on_stop, and the file is closed."""
    hold = threading.Event()
    file = CountingFile(tmp_path / "journal", clock, hold=hold)
    ref = Journal.start(file)
    proxy = ref.proxy()
    proxy.record(note(1))
    assert file.entered.wait(5)  # the actor is inside the first append
    for i in range(2, 6):
        proxy.record(note(i))
    stopping = ref.stop(block=False)
    hold.set()
    assert stopping.get(timeout=5)
    assert not file.is_open
    reader = JournalFile(tmp_path / "journal", clock)
    reader.open()
    try:
        assert seqs(reader.page().entries) == [1, 2, 3, 4, 5]
    finally:
        reader.close()
    assert file.batches == [1, 4]


def test_actor_maintain_compacts_aged_entries(
        tmp_path: Path, clock: SystemClock, frozen: Any) -> None:
    """The ticker's maintain rewrites the file once entries have aged out."""
    file = JournalFile(tmp_path / "journal", clock)
    proxy = Journal.start(file).proxy()
    proxy.record(note(1))
    proxy.flush().get(timeout=5)
    frozen.tick(15 * DAY)
    proxy.maintain().get(timeout=5)
    assert file.entries_path.read_bytes() == b""
