"""The Matrix adapter: a sync page in plain data, and which of its events may be admitted.

nio's objects stop at `client.py`, which hands the rest of wakeline a `SyncPage`: per joined
room, its timeline as the raw (decrypted where nio could) event JSON, flagged when nio could
not decrypt it. `classify` then decides each event by exact rules only (decision 0024):

- admitted: a live `m.room.message` with `msgtype` `m.text` and a string body, original (not
  an edit, not redacted), from a user id other than the owner's;
- held: an encrypted event nio could not decrypt (the keys may come later);
- skipped, with a reason that is counted: everything else, and anything malformed or larger
  than a Matrix event can be (64 KiB).

Who the sender is comes from the user id, never from a display name, which anyone can set.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, Mapping

from wakeline.models.envelopes import MatrixMessage
from wakeline.models.rooms import RoomEvent

# The Matrix spec bounds a whole event (PDU) to 65,536 bytes; anything larger did not come
# from a homeserver that follows it, and is not read further.
MAX_EVENT_BYTES = 65_536
USER_ID = re.compile(r"^@[^:\s]{1,255}:\S{1,255}$")
EVENT_ID = re.compile(r"^\$\S{1,255}$")
HEADLINE_SENDER_CHARS = 80
_LATEST_MS = 32_503_680_000_000  # the year 3000: a later timestamp is not a real one


class Verdict(StrEnum):
    """What becomes of one timeline event."""

    ADMIT = "admit"
    HOLD = "undecryptable"  # keeps the cursor until the keys arrive
    NOT_MESSAGE = "not_message"  # reactions, redactions, state, anything but m.room.message
    NOT_TEXT = "not_text"  # notices, emotes, images, files...
    EDIT = "edit"
    REDACTED = "redacted"
    OWNER = "owner"
    EMPTY = "empty"
    TOO_LARGE = "too_large"
    MALFORMED = "malformed"


@dataclass(frozen=True)
class TimelineEvent:
    """One timeline event as nio left it: its JSON (the decrypted payload for an encrypted
    event nio decrypted), whether it came encrypted, whether it still is."""

    source: Mapping[str, Any]
    encrypted: bool = False
    undecryptable: bool = False
    sender_name: str | None = None


@dataclass(frozen=True)
class RoomTimeline:
    """A joined room's part of a page: its events in order, and `limited` when the
    homeserver left a gap before them (logged, never filled in)."""

    events: tuple[TimelineEvent, ...] = ()
    limited: bool = False


@dataclass(frozen=True)
class SyncPage:
    """One `/sync` answer in plain data.

    `first`: the connection had no cursor yet (the page is taken for its cursor only).
    `left`: rooms the owner has left (or was removed from) in this page.
    """

    next_batch: str
    rooms: Mapping[str, RoomTimeline] = field(default_factory=dict)
    left: frozenset[str] = frozenset()
    first: bool = False


def event_size(source: Mapping[str, Any]) -> int:
    """The event's size as JSON, in bytes (what the 64 KiB bound is about)."""
    try:
        return len(json.dumps(source, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    except (TypeError, ValueError):
        return MAX_EVENT_BYTES + 1


def classify(event: TimelineEvent, owner: str) -> Verdict:
    """Decide one event of a bound room (decision 0024's rules, in order)."""
    if event.undecryptable:
        return Verdict.HOLD
    source = event.source
    if not isinstance(source, Mapping):
        return Verdict.MALFORMED
    if event_size(source) > MAX_EVENT_BYTES:
        return Verdict.TOO_LARGE
    if not isinstance(source.get("event_id"), str) or not EVENT_ID.match(source["event_id"]) \
            or not isinstance(source.get("sender"), str) or not isinstance(source.get("type"), str):
        return Verdict.MALFORMED
    if source["type"] != "m.room.message":
        return Verdict.NOT_MESSAGE
    if "state_key" in source:
        return Verdict.MALFORMED
    content = source.get("content")
    unsigned = source.get("unsigned")
    if isinstance(unsigned, Mapping) and unsigned.get("redacted_because") is not None:
        return Verdict.REDACTED
    if not isinstance(content, Mapping):
        return Verdict.MALFORMED
    if not content:
        return Verdict.REDACTED  # a redaction strips the content
    relates = content.get("m.relates_to")
    if "m.new_content" in content or (isinstance(relates, Mapping)
                                      and relates.get("rel_type") == "m.replace"):
        return Verdict.EDIT
    if content.get("msgtype") != "m.text":
        return Verdict.NOT_TEXT
    body = content.get("body")
    if not isinstance(body, str):
        return Verdict.MALFORMED
    if not body.strip():
        return Verdict.EMPTY
    sender = source["sender"]
    if sender == owner:
        return Verdict.OWNER
    if not USER_ID.match(sender):
        return Verdict.MALFORMED
    return Verdict.ADMIT


def sent_ms(source: Mapping[str, Any]) -> int:
    """The event's `origin_server_ts`, or 0 when it has none worth trusting."""
    value = source.get("origin_server_ts")
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _LATEST_MS
    return value if ok else 0


def headline(route: str, sender: str) -> str:
    """One line for the FIFO and the prompt: the route and the sender's user id."""
    if len(sender) > HEADLINE_SENDER_CHARS:
        sender = sender[: HEADLINE_SENDER_CHARS - 1] + "…"
    return f"Matrix message · {route} · {sender}"


def room_event(event: TimelineEvent, *, connection: str, route: str, room_id: str,
               wakes: bool, now_ms: int) -> RoomEvent:
    """The typed event the store admits, for an event `classify` admitted."""
    source = event.source
    sent = sent_ms(source)
    name = event.sender_name
    envelope = MatrixMessage(
        connection=connection, route=route, room_id=room_id, event_id=source["event_id"],
        sender=source["sender"], sender_name=name[:200] if isinstance(name, str) else None,
        body=source["content"]["body"], encrypted=event.encrypted,
        sent_at=datetime.fromtimestamp(sent / 1000, tz=timezone.utc).isoformat() if sent else None)
    return RoomEvent(envelope, headline(route, envelope.sender),
                     title=f"Matrix room {route} ({room_id})", wakes=wakes, received_ms=now_ms,
                     sent_ms=sent or now_ms)
