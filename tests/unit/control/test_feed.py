"""The control page's feed: numbered changes, resume, refresh, heartbeat, the bound on streams.

In-process, on the frozen clock: a stream is a generator read one chunk at a time, so a
test moves the clock between chunks and never waits for the wall clock.
"""

from __future__ import annotations

from typing import Any

from wakeline.clock import SystemClock
from wakeline.control.feed import Feed, stream_bound
from wakeline.control.stream import POLL_RETRY_MS, events, poll, stream

FIRST = 1_000


def publish(feed: Feed, n: int, kind: str = "conversation") -> list[int]:
    return [feed.publish(kind, lambda i=i: {"n": i}) for i in range(n)]


def frames(chunk: bytes) -> list[dict[str, str]]:
    """The events of a chunk: each a dict of its fields (comments under ":")."""
    out = []
    for block in chunk.decode().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ") if not line.startswith(":") else (":", "", line[2:])
            fields[name] = value
        if fields:
            out.append(fields)
    return out


def never() -> bool:
    return False


def test_changes_are_numbered_after_the_first_sequence_and_resume_after_an_id() -> None:
    feed = Feed(FIRST, max_streams=1)
    assert publish(feed, 3) == [FIRST + 1, FIRST + 2, FIRST + 3]
    assert [c.seq for c in feed.since(FIRST + 1) or []] == [FIRST + 2, FIRST + 3]
    assert feed.since(FIRST + 3) == []
    assert [c.seq for c in feed.since(FIRST) or []] == [FIRST + 1, FIRST + 2, FIRST + 3]


def test_an_id_the_ring_no_longer_holds_or_never_gave_asks_for_a_refresh() -> None:
    feed = Feed(FIRST, max_streams=1, capacity=10)
    publish(feed, 25)
    newest = FIRST + 25
    assert [c.seq for c in feed.since(newest - 10) or []] == list(range(newest - 9, newest + 1))
    assert feed.since(newest - 11) is None  # fell out of the ring
    assert feed.since(newest + 5) is None  # from the future: another process's
    assert feed.since(3) is None  # from a process that started earlier
    assert Feed(FIRST, max_streams=1).since(FIRST - 1) is None  # nothing kept yet


def test_a_stream_resumes_after_last_event_id_and_sends_each_change_once(frozen: Any) -> None:
    feed = Feed(FIRST, max_streams=1)
    publish(feed, 3)
    out = stream(feed, FIRST + 1, SystemClock(), gone=never)
    head = frames(next(out))
    assert head == [{"retry": "2000", "id": str(FIRST + 1)}]
    sent = frames(next(out))
    assert [(f["id"], f["event"]) for f in sent] == [(str(FIRST + 2), "conversation"),
                                                    (str(FIRST + 3), "conversation")]
    assert sent[0]["data"] == '{"n":1}'
    feed.publish("progress", lambda: {"turn": "t1", "items": [{"type": "thought", "text": "é"}]})
    (change,) = frames(next(out))
    assert change == {"id": str(FIRST + 4), "event": "progress",
                      "data": '{"turn":"t1","items":[{"type":"thought","text":"é"}]}'}


def test_a_stream_from_nowhere_starts_at_the_newest_and_a_gap_sends_a_refresh(frozen: Any) -> None:
    feed = Feed(FIRST, max_streams=1, capacity=5)
    publish(feed, 20)
    fresh = stream(feed, None, SystemClock(), gone=never)
    assert frames(next(fresh)) == [{"retry": "2000", "id": str(FIRST + 20)}]
    stale = stream(feed, FIRST + 2, SystemClock(), gone=never)
    next(stale)
    assert frames(next(stale)) == [{"id": str(FIRST + 20), "event": "refresh", "data": "{}"}]
    publish(feed, 1)
    assert [f["id"] for f in frames(next(stale))] == [str(FIRST + 21)]  # resumed from there


def test_a_quiet_stream_sends_a_comment_every_heartbeat(frozen: Any) -> None:
    feed = Feed(FIRST, max_streams=1)
    out = stream(feed, None, SystemClock(), gone=never, heartbeat_seconds=15)
    next(out)
    frozen.tick(15)
    assert next(out) == b": keep-alive\n\n"
    frozen.tick(14)
    publish(feed, 1)
    assert frames(next(out))[0]["id"] == str(FIRST + 1)
    frozen.tick(14)  # the change counted as traffic: no comment before 15 s of quiet
    publish(feed, 1)
    assert frames(next(out))[0]["id"] == str(FIRST + 2)
    frozen.tick(15)
    assert next(out) == b": keep-alive\n\n"


def test_a_stream_ends_with_its_lifetime_the_feed_or_its_client(frozen: Any) -> None:
    feed = Feed(FIRST, max_streams=3)
    clock = SystemClock()
    old = stream(feed, None, clock, gone=never, lifetime_seconds=300, heartbeat_seconds=15)
    next(old)
    for _ in range(20):
        frozen.tick(15)
        if next(old, None) is None:
            break
    assert list(old) == []  # over after 300 s: the browser reconnects
    left = [False]
    leaving = stream(feed, None, clock, gone=lambda: left[0])
    next(leaving)
    left[0] = True
    assert list(leaving) == []
    closing = stream(feed, None, clock, gone=never)
    next(closing)
    feed.close()
    assert list(closing) == []


def test_the_bound_of_streams_is_half_the_threads_minus_one() -> None:
    assert [stream_bound(t) for t in (1, 2, 3, 4, 8, 16)] == [0, 0, 0, 1, 3, 7]


def test_past_the_bound_a_reader_gets_one_batch_and_the_answer_ends(frozen: Any) -> None:
    feed = Feed(FIRST, max_streams=1)
    clock = SystemClock()
    held = events(feed, None, clock, gone=never)
    next(held)
    assert feed.streams == 1
    publish(feed, 2)
    polled = list(events(feed, FIRST, clock, gone=never))
    assert len(polled) == 1  # one batch, then the end
    assert polled[0].startswith(f"retry: {POLL_RETRY_MS}\n".encode())
    assert [f["id"] for f in frames(polled[0])] == [str(FIRST + 1), str(FIRST + 2)]
    assert frames(poll(feed, None)) == [{"retry": str(POLL_RETRY_MS), "id": str(FIRST + 2)}]
    assert frames(poll(feed, FIRST + 2)) == [{"retry": str(POLL_RETRY_MS), ":": "nothing new"}]
    held.close()  # the client went: the slot is given back
    assert feed.streams == 0
    again = events(feed, None, clock, gone=never)
    next(again)
    assert feed.streams == 1
    again.close()


def test_a_change_is_made_json_once_and_only_when_read() -> None:
    feed = Feed(FIRST, max_streams=1)
    made: list[int] = []

    def data() -> dict[str, Any]:
        made.append(1)
        return {"ok": True}

    feed.publish("waiting", data)
    assert made == []
    (change,) = feed.since(FIRST) or []
    assert change.json() == change.json() == '{"ok":true}'
    assert made == [1]

