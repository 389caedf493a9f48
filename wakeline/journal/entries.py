"""The owner's journal: what an entry is, whatever keeps it.

One ordered, append-only record of what happened: a `Note` from a producer becomes an
entry (scrubbed of credentials, its text bounded, its issue keys and commits found).
Readers see the newest `KEEP_ENTRIES` entries that are at most `KEEP_DAYS` old, a `Page`
at a time, from a `JournalStore`: a file on one host (`journal.file`), a table of the
shared database for several (`journal.table`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol, Sequence

from wakeline.clock import iso, to_ms
from wakeline.secrets import scrub

log = logging.getLogger(__name__)

KINDS = frozenset({"inbound", "turn_brief", "turn_report", "owner_question", "owner_answer",
                   "lifecycle", "outbound"})
TEXT_MAX_CHARS = 2000
EXCERPT_MAX_CHARS = 280
FIELD_MAX_CHARS = 200  # from, to, thread, stage: names and references, not prose
KEEP_ENTRIES = 2000
KEEP_DAYS = 14
COMPACT_AT_LINES = 2500
COMPACT_EVERY_SECONDS = 3600
PAGE_MAX = 500
DAY_MS = 86_400_000
NEVER = 2**63  # the oldest `at` of an empty journal
ENTRIES, SINCE = "entries.jsonl", "since.json"

# --- text ------------------------------------------------------------------------------------

_ISSUE_KEY = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b")
# Prefixes that look like team keys in technical prose but name standards, not issues.
_NOT_TEAMS = frozenset({"UTF", "SHA", "ISO", "RFC", "CVE", "HTTP", "TLS", "SSL", "PEP", "AES",
                        "RSA", "MD", "GPT", "IPV"})
# A whole word of hex; a `-` or `#` neighbour means a UUID part or a colour, not a commit.
_SHA = re.compile(r"(?=[0-9a-f])(?<![\w#-])[0-9a-f]{7,40}(?![\w-])")


def issue_keys(text: str) -> list[str]:
    """Linear issue keys (`ENG-123`) the text names, first seen first, each once."""
    keys = (k for k in _ISSUE_KEY.findall(text) if k.split("-", 1)[0] not in _NOT_TEAMS)
    return list(dict.fromkeys(keys))


def commit_shas(text: str) -> list[str]:
    """Commit SHAs, short or full (7-40 lower-case hex, a digit and a letter), once each."""
    found = (s for s in _SHA.findall(text)
             if any(c.isdigit() for c in s) and any(c in "abcdef" for c in s))
    return list(dict.fromkeys(found))


def cut(text: str, limit: int) -> str:
    """`text` at most `limit` characters long, ending in "…" when something was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def excerpt(text: str, limit: int = EXCERPT_MAX_CHARS) -> str:
    """A one-line excerpt: whitespace collapsed, cut to `limit` characters."""
    return cut(" ".join(text.split()), limit)


# --- entries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    """What a producer records: the source id (namespaced by kind), who to whom, the text."""

    id: str
    kind: str
    at_ms: int
    sender: str  # becomes "from"
    to: str
    text: str
    thread: str | None = None
    stage: str | None = None
    issue_keys: tuple[str, ...] = ()  # keys the source itself states, listed first


def render_entry(note: Note, secret_values: Sequence[str]) -> dict[str, Any]:
    """The entry for a note, `seq` still 0: scrubbed, bounded, with its keys and SHAs."""
    if note.kind not in KINDS:
        raise ValueError(f"unknown journal kind {note.kind!r}")
    if not note.id:
        raise ValueError("a journal note needs its source id")

    def field(value: str | None) -> str | None:
        return None if value is None else cut(scrub(value, secret_values), FIELD_MAX_CHARS)

    text = cut(scrub(note.text, secret_values), TEXT_MAX_CHARS)
    keys = dict.fromkeys([*note.issue_keys, *issue_keys(text)])
    return {"seq": 0, "id": scrub(note.id, secret_values), "kind": note.kind,
            "at": iso(note.at_ms), "from": field(note.sender), "to": field(note.to),
            "text": text, "issueKeys": list(keys), "commits": commit_shas(text),
            "thread": field(note.thread), "stage": field(note.stage)}


def dumps_entry(entry: dict[str, Any]) -> str:
    """An entry as one compact line of UTF-8 JSON."""
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


def copy_entry(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "issueKeys": list(entry["issueKeys"]), "commits": list(entry["commits"])}


def at_ms(value: str) -> int:
    moment = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    return to_ms(moment)


@dataclass(frozen=True, slots=True)
class Kept:
    seq: int
    at_ms: int
    entry: dict[str, Any]
    line: str  # the entry exactly as written, for compaction


def parse_line(line: bytes) -> Kept | None:
    try:
        entry = json.loads(line)
        if isinstance(entry, dict) and type(entry.get("seq")) is int and entry.get("id"):
            return Kept(entry["seq"], at_ms(entry["at"]), entry, dumps_entry(entry))
    except (ValueError, TypeError, KeyError):
        pass
    return None


@dataclass(frozen=True)
class Page:
    """One page of entries, oldest first, and where the visible journal begins and ends."""

    entries: list[dict[str, Any]]
    recording_since: str
    oldest: int | None
    newest: int | None

    def to_json(self) -> dict[str, Any]:
        """The API's response body."""
        return {"entries": self.entries, "recordingSince": self.recording_since,
                "oldest": self.oldest, "newest": self.newest}


def check_page(limit: int, older: int | None, newer: int | None) -> None:
    """What every backend's `page` accepts.

    Raises:
        ValueError: `limit` outside 1..PAGE_MAX, or `older` with `newer`.
    """
    if not 1 <= limit <= PAGE_MAX:
        raise ValueError(f"limit must be between 1 and {PAGE_MAX}")
    if older is not None and newer is not None:
        raise ValueError("older and newer cannot be combined")


class JournalStore(Protocol):
    """Where entries are kept: a file on one host (`journal.file.JournalFile`), a table of
    the shared database for several (`journal.table.JournalTable`)."""

    @property
    def is_open(self) -> bool:
        """True between a successful `open()` and `close()`."""

    def open(self) -> None:
        """Make the journal ready; OSError when it cannot be."""

    def close(self) -> None:
        """Stop taking entries and release every waiter."""

    def append(self, notes: Sequence[Note]) -> list[dict[str, Any]]:
        """Keep the notes not kept already; their entries."""

    def compact_if_due(self) -> bool:
        """Drop what readers can no longer see, when it is time."""

    def page(self, *, limit: int = 100, older: int | None = None,
             newer: int | None = None) -> Page:
        """A page of visible entries, oldest first."""

    def wait_newer(self, cursor: int, timeout: float) -> bool:
        """Block until an entry after `cursor` is visible, or `timeout` seconds pass."""
