"""The feed as `text/event-stream`: what a reader of `GET /v1/events` receives.

Each change is one event: `id:` its sequence (the browser sends the last one back as
`Last-Event-ID` when it reconnects, and the stream resumes after it), `event:` its kind,
`data:` one line of JSON. A reader the ring cannot resume gets a `refresh` event (it reloads
what it shows). A comment line goes out whenever nothing else did for `heartbeat_seconds`,
so proxies and the browser see a live connection; a stream ends after `lifetime_seconds`
(the browser reconnects after `retry:`), and at once when the service stops or the client
went away, so its thread goes back to the API.

A reader past the bound of open streams gets a poll answer instead: the changes after its
cursor, then the end of the response; the browser asks again after `POLL_RETRY_MS`.
"""

from __future__ import annotations

from typing import Callable, Iterator

from wakeline.clock import Clock
from wakeline.control.feed import Change, Feed

HEARTBEAT_SECONDS = 15.0
LIFETIME_SECONDS = 300.0
STREAM_RETRY_MS = 2000
POLL_RETRY_MS = 1000
# How long one wait lasts before the stream looks at the clock and the client again.
WAIT_SLICE_SECONDS = 1.0


def event(change: Change) -> bytes:
    """One change as an event."""
    return f"id: {change.seq}\nevent: {change.kind}\ndata: {change.json()}\n\n".encode()


def refresh(seq: int) -> bytes:
    """The event that tells a reader to reload everything, resuming after `seq`."""
    return f"id: {seq}\nevent: refresh\ndata: {{}}\n\n".encode()


def _batch(feed: Feed, changes: list[Change] | None) -> tuple[bytes, int | None]:
    """The events for what `since` or `wait` found, and the reader's cursor after them
    (None: unchanged); a refresh when the ring could not resume."""
    if changes is None:
        newest = feed.newest
        return refresh(newest), newest
    if not changes:
        return b"", None
    return b"".join(event(c) for c in changes), changes[-1].seq


def poll(feed: Feed, after: int | None) -> bytes:
    """One batch for a reader past the bound: what is new, and when to ask again."""
    head = f"retry: {POLL_RETRY_MS}\n".encode()
    if after is None:
        return head + f"id: {feed.newest}\n\n".encode()
    body, _ = _batch(feed, feed.since(after))
    return head + (body or b": nothing new\n\n")


def stream(feed: Feed, after: int | None, clock: Clock, *, gone: Callable[[], bool],
           heartbeat_seconds: float = HEARTBEAT_SECONDS,
           lifetime_seconds: float = LIFETIME_SECONDS) -> Iterator[bytes]:
    """The events after `after` (None: from now), as they come, until the lifetime ends, the
    feed closes or `gone()` says the client left. The caller holds a stream slot."""
    cursor = feed.newest if after is None else after
    started = last = clock.monotonic()
    yield f"retry: {STREAM_RETRY_MS}\nid: {cursor}\n\n".encode()
    while not feed.closed and not gone():
        now = clock.monotonic()
        if now - started >= lifetime_seconds:
            return
        if now - last >= heartbeat_seconds:
            last = now
            yield b": keep-alive\n\n"
            continue
        body, moved = _batch(feed, feed.wait(
            cursor, min(WAIT_SLICE_SECONDS, heartbeat_seconds - (now - last))))
        if moved is not None:
            cursor, last = moved, clock.monotonic()
            yield body


def events(feed: Feed, after: int | None, clock: Clock, *, gone: Callable[[], bool],
           heartbeat_seconds: float = HEARTBEAT_SECONDS,
           lifetime_seconds: float = LIFETIME_SECONDS) -> Iterator[bytes]:
    """A stream while a slot is free, else one poll batch; the slot is given back however
    the response ends (a write to a closed connection closes the generator)."""
    if not feed.take_stream():
        yield poll(feed, after)
        return
    try:
        yield from stream(feed, after, clock, gone=gone, heartbeat_seconds=heartbeat_seconds,
                          lifetime_seconds=lifetime_seconds)
    finally:
        feed.release_stream()
