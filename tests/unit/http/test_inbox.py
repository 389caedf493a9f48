"""The Linear inbox over the operator API: forward and history reads, acks, retention, the CLI.

Messages are admitted for real: through the ingress app, or through the store's own
admission (`store.admit` of planned, verified deliveries) when a test needs many of
them or a chosen receipt time.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import uuid
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from falcon import testing

from tests.conftest import (
    OPERATOR_TOKEN, WEBHOOK_SECRET, comment_event, comments, deliver, issue_event, now_ms, signed,
)
from tests.helpers import free_port, wait_until
from wakeline.app import Service
from wakeline.cli import cli
from wakeline.clock import SystemClock
from wakeline.config import Config
from wakeline.errors import NotShown
from wakeline.http.operator import create_operator_app
from wakeline.models.inbox import EVENT_MAX_CHARS, PAGE_BUDGET_BYTES, Inbox, bound_event
from wakeline.service.metrics import Metrics
from wakeline.models import inbox_store
from wakeline.models.schema import INBOX_CONVERSATION_ID
from wakeline.models.states import Outcome
from wakeline.models.store import Store
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.admission.router import plan_admission
from wakeline.turns.tokens import Lane, TokenRegistry

DAY_MS = 86_400_000


# --- helpers -------------------------------------------------------------------------------------


def admit(store: Store, config: Config, n: int, *, received_ms: int | None = None,
          text: str = "note") -> list[int]:
    """Admit `n` comment events through the store's own admission; returns their cursors."""
    webhooks = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=config.linear.freshness_seconds)
    plans = []
    for i in range(n):
        body = comment_event(f"issue-{i}", f"ENG-{i}")
        body["data"]["body"] = text
        delivery = str(uuid.uuid4())
        raw, headers = signed(body, delivery=delivery)
        parsed = webhooks.read(raw, signature=headers["Linear-Signature"], delivery_id=delivery,
                               now_ms=now_ms())
        at = received_ms if received_ms is not None else now_ms()
        plans.append(plan_admission(parsed, config, at))
    for result in store.admit(plans):
        assert getattr(result, "outcome", None) is Outcome.ACCEPTED, result
    m = store.t.inbox
    return sorted(r.id for r in m.select(m.id).order_by(m.id.desc()).limit(n))


def read(client: Any, **params: Any) -> dict[str, Any]:
    resp = client.simulate_get("/v1/inbox", params={k: str(v) for k, v in params.items()})
    assert resp.status_code == 200, resp.json
    return resp.json


def ack(client: Any, cursor: Any) -> Any:
    return client.simulate_post("/v1/inbox/ack", json={"cursor": cursor})


def cursors_of(page: dict[str, Any]) -> list[int]:
    return [e["cursor"] for e in page["events"]]


def size_of(item: dict[str, Any]) -> int:
    """How the page budget measures one event: its UTF-8 JSON."""
    return len(json.dumps(item, ensure_ascii=False).encode("utf-8"))


def shown(store: Store) -> set[int]:
    """The cursors carrying a `shown` mark."""
    return {c for (c,) in store.db.execute_sql("SELECT id FROM inbox_shown")}


# --- forward reads -------------------------------------------------------------------------------


def test_forward_read_defaults_to_20_and_allows_at_most_100(frozen: Any, operator: Any,
                                                           store: Store, config: Config) -> None:
    """No limit: the 20 oldest unread; limit=100 is the most; 0 and 101 are refused.

    (Headlines, so that the byte budget does not end the page first.)
    """
    cursors = admit(store, config, 130)
    page = read(operator, view="headlines")
    assert cursors_of(page) == cursors[:20] and page["hasMore"] is True
    big = read(operator, limit=100, view="headlines")
    assert cursors_of(big) == cursors[:100] and big["hasMore"] is True
    assert read(operator, limit=100, after=cursors[99], view="headlines")["hasMore"] is False
    full = read(operator, limit=100)
    assert cursors_of(full) == cursors[: len(full["events"])] and full["hasMore"] is True
    for bad in ("0", "101", "x"):
        resp = operator.simulate_get("/v1/inbox", params={"limit": bad})
        assert resp.status_code == 400 and resp.json["error"] == "bad_request"


def test_forward_read_starts_after_the_ack_boundary(frozen: Any, operator: Any,
                                                    ingress: Any) -> None:
    """After an ack of C, the default read starts right after C; `unread` follows the boundary."""
    comments(ingress, 6)
    first = read(operator)
    c = cursors_of(first)
    assert ack(operator, c[2]).status_code == 200
    page = read(operator)
    assert cursors_of(page) == c[3:]
    assert page["ackCursor"] == c[2] and page["unreadCount"] == 3
    assert all(e["unread"] for e in page["events"])


def test_after_reads_any_cursor_read_or_not(frozen: Any, operator: Any, ingress: Any) -> None:
    """?after=C below the boundary returns read events too, marked unread: false."""
    comments(ingress, 5)
    c = cursors_of(read(operator))
    ack(operator, c[3])
    page = read(operator, after=c[0])
    assert cursors_of(page) == c[1:]
    assert [e["unread"] for e in page["events"]] == [False, False, False, True]
    assert page["unreadCount"] == 1


def test_reads_never_consume(frozen: Any, operator: Any, ingress: Any) -> None:
    """Forward, history and headline reads, repeated, leave the boundary and unread count alone."""
    comments(ingress, 4)
    last = read(operator)["events"][-1]["cursor"]
    for _ in range(3):
        for params in ({}, {"view": "headlines"}, {"before": last + 1}, {"after": 0}):
            page = read(operator, **params)
            assert (page["ackCursor"], page["unreadCount"]) == (0, 4)
    assert operator.simulate_get("/v1/status").json["inbox"] == {"unread": 4}


def test_byte_budget_holds_and_the_next_page_continues(frozen: Any, operator: Any,
                                                       ingress: Any) -> None:
    """Large events: a page's events stay within 30,000 bytes; paging with after= sees them all."""
    comments(ingress, 12, text="z" * 7_000)
    seen: list[int] = []
    after = 0
    for _ in range(12):
        page = read(operator, after=after, limit=100)
        assert 1 <= len(page["events"]) < 12
        assert sum(size_of(e) for e in page["events"]) <= PAGE_BUDGET_BYTES
        seen += cursors_of(page)
        after = seen[-1]
        if not page["hasMore"]:
            break
    assert len(seen) == 12 and seen == sorted(seen)


def test_one_huge_event_always_fits_alone(frozen: Any, operator: Any, ingress: Any) -> None:
    """An event larger than the whole budget is returned alone, forward and backward."""
    comments(ingress, 1)
    comments(ingress, 1, text="😀" * 9_000)  # 8,000 characters are ~32,000 bytes
    comments(ingress, 1)
    c = cursors_of(read(operator, view="headlines"))
    huge = read(operator, after=c[0])
    assert cursors_of(huge) == [c[1]] and huge["hasMore"] is True
    assert size_of(huge["events"][0]) > PAGE_BUDGET_BYTES
    back = read(operator, before=c[2])
    assert cursors_of(back) == [c[1]] and back["hasMore"] is True


def test_headlines_view_has_the_same_keys_without_event(frozen: Any, operator: Any,
                                                       ingress: Any) -> None:
    """view=headlines: same events and counters, no `event` key; works for before reads too."""
    comments(ingress, 3)
    deliver(ingress, issue_event())
    full = read(operator)
    short = read(operator, view="headlines")
    assert [{k: v for k, v in e.items() if k != "event"} for e in full["events"]] == short["events"]
    assert {k: v for k, v in full.items() if k != "events"} == \
        {k: v for k, v in short.items() if k != "events"}
    back = read(operator, before=full["events"][-1]["cursor"] + 1, view="headlines")
    assert back["events"] == short["events"]
    assert short["events"][-1]["headline"] == "Issue update · OPS-2 · Jane Doe"


def test_headlines_fit_many_more_events_per_page(frozen: Any, operator: Any, ingress: Any) -> None:
    """Headlines are small: a limit of 10 large events fits in one headline page."""
    comments(ingress, 10, text="w" * 7_000)
    assert len(read(operator, limit=10)["events"]) < 10
    assert len(read(operator, limit=10, view="headlines")["events"]) == 10


# --- history reads (before) ----------------------------------------------------------------------


def test_before_walks_history_back_to_the_oldest_cursor(frozen: Any, operator: Any,
                                                        store: Store, config: Config) -> None:
    """before=C pages back, oldest first within a page, read or not, until hasMore is false."""
    cursors = admit(store, config, 47)
    read(operator, limit=30)
    assert ack(operator, cursors[29]).status_code == 200
    collected: list[int] = []
    before = cursors[-1] + 1
    pages = 0
    while True:
        page = read(operator, before=before, limit=10)
        got = cursors_of(page)
        assert got == sorted(got) and all(c < before for c in got)
        assert [e["unread"] for e in page["events"]] == [c > cursors[29] for c in got]
        collected = got + collected
        pages += 1
        if not page["hasMore"]:
            break
        before = got[0]
    assert collected == cursors and pages == 5
    assert collected[0] == page["oldestCursor"]
    assert (page["ackCursor"], page["unreadCount"]) == (cursors[29], 17)


def test_before_returns_the_events_just_before_the_cursor(frozen: Any, operator: Any,
                                                         store: Store, config: Config) -> None:
    """The newest events below C, presented oldest first; nothing at or above C."""
    cursors = admit(store, config, 10)
    page = read(operator, before=cursors[6], limit=3)
    assert cursors_of(page) == cursors[3:6] and page["hasMore"] is True
    assert read(operator, before=cursors[0])["events"] == []
    assert read(operator, before=cursors[0])["hasMore"] is False
    assert cursors_of(read(operator, before=cursors[-1] + 1000)) == cursors


def test_before_respects_the_byte_budget(frozen: Any, operator: Any, ingress: Any) -> None:
    """A history page is filled from C backwards within the budget; hasMore reports the rest."""
    comments(ingress, 8, text="q" * 7_000)
    c = cursors_of(read(operator, view="headlines"))
    page = read(operator, before=c[-1] + 1, limit=100)
    got = cursors_of(page)
    assert got == c[-len(got):] and 1 < len(got) < 8
    assert sum(size_of(e) for e in page["events"]) <= PAGE_BUDGET_BYTES
    assert page["hasMore"] is True


@pytest.mark.parametrize(
    "params",
    [{"after": "1", "before": "5"}, {"before": "x"}, {"before": "-1"}, {"before": "1.5"},
     {"before": "3", "limit": "0"}, {"before": "3", "limit": "101"}],
)
def test_bad_history_parameters_are_400(operator: Any, params: dict[str, str]) -> None:
    """after with before, a bad cursor or a bad limit: 400 bad_request."""
    resp = operator.simulate_get("/v1/inbox", params=params)
    assert resp.status_code == 400 and resp.json["error"] == "bad_request"


# --- shown marks -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["forward", "after", "before", "headlines", "before-headlines"])
def test_every_kind_of_read_marks_what_it_returned_as_shown(frozen: Any, operator: Any,
                                                           store: Store, config: Config,
                                                           how: str) -> None:
    """Only the events a read returned become shown, whichever way they were read."""
    cursors = admit(store, config, 9)
    params = {
        "forward": {"limit": 3},
        "after": {"after": cursors[2], "limit": 3},
        "before": {"before": cursors[6], "limit": 3},
        "headlines": {"view": "headlines", "limit": 3},
        "before-headlines": {"before": cursors[6], "limit": 3, "view": "headlines"},
    }[how]
    assert shown(store) == set()
    page = read(operator, **params)
    assert shown(store) == set(cursors_of(page)) and len(page["events"]) == 3
    # Each of them may now be acknowledged.
    target = page["events"][-1]["cursor"]
    assert ack(operator, target).json == {"ackCursor": target,
                                         "unreadCount": sum(c > target for c in cursors)}


def test_a_page_cut_by_the_budget_marks_only_what_it_returned(frozen: Any, operator: Any,
                                                              ingress: Any, store: Store) -> None:
    """Events left off by the byte budget are not shown, so they cannot be acknowledged yet."""
    comments(ingress, 6, text="v" * 7_000)
    page = read(operator, limit=6)
    returned = cursors_of(page)
    assert shown(store) == set(returned)
    m = store.t.inbox
    left_off = [r.id for r in m.select(m.id).order_by(m.id) if r.id not in returned]
    assert left_off
    resp = ack(operator, left_off[0])
    assert resp.status_code == 409 and resp.json["error"] == "not_shown"


def test_reading_acknowledged_history_needs_no_marks(frozen: Any, operator: Any, store: Store,
                                                     config: Config) -> None:
    """Events at or below the boundary are shown as read; they need no mark, since an
    ack there changes nothing; the marks of acknowledged events go with the ack."""
    cursors = admit(store, config, 6)
    read(operator, limit=3)
    assert shown(store) == set(cursors[:3])
    assert ack(operator, cursors[2]).status_code == 200
    assert shown(store) == set()  # pruned: at or below the boundary
    page = read(operator, before=cursors[-1] + 1)
    assert [e["unread"] for e in page["events"]] == [False] * 3 + [True] * 3
    assert shown(store) == set(cursors[3:])
    assert ack(operator, cursors[1]).json == {"ackCursor": cursors[2], "unreadCount": 3}


def test_legacy_shown_flags_above_the_boundary_carry_over(tmp_path: Any,
                                                          clock: SystemClock) -> None:
    """The migration that moves marks to inbox_shown keeps the unread ones of the old column."""
    from wakeline.models.db import open_database
    from wakeline.models.schema import MIGRATIONS

    target = next(i for i, m in enumerate(MIGRATIONS) if any("inbox_shown" in s for s in m))
    path = tmp_path / "legacy.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statements in MIGRATIONS[:target]:
        for statement in statements:
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {target}")
    conn.execute("INSERT INTO receipts (id, delivery_id, body_sha256, event_type, action, "
                 "received_at, webhook_at, outcome) "
                 "VALUES (1, 'd', 'h', 'Comment', 'create', 0, 0, 'accepted')")
    for cursor, flag in ((1, 1), (2, 1), (3, 1), (4, 0)):
        conn.execute("INSERT INTO inbox_messages (id, receipt_id, received_at, headline, event, "
                     "size_bytes, shown) VALUES (?, 1, 0, 'h', '{}', 2, ?)", (cursor, flag))
    conn.execute("INSERT INTO settings (key, value) VALUES ('inbox.ack_cursor', '1')")
    conn.close()
    store = Store(open_database(path), clock)
    try:
        assert shown(store) == {2, 3}
        assert store.inbox.ack(3).ack_cursor == 3
        with pytest.raises(NotShown):
            store.inbox.ack(4)
    finally:
        store.close()


# --- ack ---------------------------------------------------------------------------------------


def test_ack_moves_the_boundary_to_a_shown_unread_event(frozen: Any, operator: Any,
                                                       ingress: Any) -> None:
    """200 {"ackCursor": C, "unreadCount": N}; the status page and the next read agree."""
    comments(ingress, 5)
    c = cursors_of(read(operator))
    resp = ack(operator, c[1])
    assert resp.status_code == 200
    assert resp.json == {"ackCursor": c[1], "unreadCount": 3}
    assert operator.simulate_get("/v1/status").json["inbox"] == {"unread": 3}
    page = read(operator)
    assert cursors_of(page) == c[2:] and page["ackCursor"] == c[1]


def test_ack_may_skip_ahead_to_any_shown_event(frozen: Any, operator: Any, store: Store,
                                               config: Config) -> None:
    """An event reached by a history read may be acknowledged even past unshown ones."""
    cursors = admit(store, config, 30)
    page = read(operator, before=cursors[-1] + 1, limit=5)
    assert ack(operator, cursors[-3]).json == {"ackCursor": cursors[-3], "unreadCount": 2}
    assert cursors_of(page) == cursors[-5:]


def test_ack_of_an_unshown_or_missing_cursor_is_409(frozen: Any, operator: Any, store: Store,
                                                    config: Config) -> None:
    """Unread but never shown, or no such message: 409 not_shown, and the boundary stays."""
    cursors = admit(store, config, 6)
    read(operator, limit=2)
    for cursor in (cursors[2], cursors[5], cursors[-1] + 1, cursors[-1] + 10_000):
        resp = ack(operator, cursor)
        assert resp.status_code == 409
        assert resp.json["error"] == "not_shown"
    assert read(operator, view="headlines")["ackCursor"] == 0
    assert ack(operator, cursors[1]).status_code == 200


def test_ack_at_or_below_the_boundary_is_an_idempotent_no_op(frozen: Any, operator: Any,
                                                            store: Store, config: Config) -> None:
    """Acking C again, or anything below it, answers 200 with the unchanged state."""
    cursors = admit(store, config, 5)
    read(operator)
    assert ack(operator, cursors[3]).json == {"ackCursor": cursors[3], "unreadCount": 1}
    for cursor in (cursors[3], cursors[3], cursors[0], 0):
        resp = ack(operator, cursor)
        assert resp.status_code == 200
        assert resp.json == {"ackCursor": cursors[3], "unreadCount": 1}


def test_a_retried_ack_never_consumes_later_arrivals(frozen: Any, operator: Any,
                                                     ingress: Any) -> None:
    """Read, ack C, new events arrive, the ack is retried: the new events stay unread."""
    comments(ingress, 3)
    c = cursors_of(read(operator))
    assert ack(operator, c[-1]).json == {"ackCursor": c[-1], "unreadCount": 0}
    comments(ingress, 4)
    for _ in range(3):
        assert ack(operator, c[-1]).json == {"ackCursor": c[-1], "unreadCount": 4}
    page = read(operator)
    assert len(page["events"]) == 4 and all(e["unread"] for e in page["events"])
    assert all(e["cursor"] > c[-1] for e in page["events"])


def test_an_ack_sent_before_new_arrivals_are_shown_cannot_reach_them(frozen: Any, operator: Any,
                                                                    ingress: Any) -> None:
    """A page was read; more events arrive; acking the page's last cursor leaves them unread."""
    comments(ingress, 2)
    c = cursors_of(read(operator))
    comments(ingress, 3)
    assert ack(operator, c[-1]).json == {"ackCursor": c[-1], "unreadCount": 3}


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[1]", b"{}", b'{"cursor": "3"}', b'{"cursor": 1.5}', b'{"cursor": true}',
     b'{"cursor": null}', b'{"cursor": -1}', b'{"cursor": [3]}'],
)
def test_a_bad_ack_body_is_400(operator: Any, body: bytes) -> None:
    """Missing or non-integer cursor: 400 bad_request, nothing changes."""
    resp = operator.simulate_post("/v1/inbox/ack", body=body,
                                  headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and resp.json["error"] == "bad_request"


def test_the_boundary_is_persisted(frozen: Any, operator: Any, store: Store, config: Config,
                                   clock: SystemClock) -> None:
    """Another store on the same database (a restart) sees the same boundary and shown marks."""
    cursors = admit(store, config, 4)
    read(operator, limit=3)
    ack(operator, cursors[1])
    from wakeline.scheduling.engine import store_target

    other = Store.open(store_target(config), clock)  # SQLite, or the test's PostgreSQL database
    try:
        assert other.inbox.ack_cursor() == cursors[1]
        # cursors[2] was shown by a read through the first store.
        assert other.inbox.ack(cursors[2]).ack_cursor == cursors[2]
    finally:
        other.dispose()


def test_concurrent_acks_end_at_the_highest_and_never_beyond(operator: Any, store: Store,
                                                            config: Config) -> None:
    """Many threads ack different shown cursors at once while events arrive: the boundary
    ends at the highest cursor acked, and every arrival after it stays unread."""
    cursors = admit(store, config, 40)
    read(operator, limit=40)
    errors: list[Any] = []
    start = threading.Barrier(9)

    def acker(mine: list[int]) -> None:
        start.wait()
        for cursor in mine:
            resp = ack(operator, cursor)
            if resp.status_code != 200:
                errors.append(resp.json)

    def arrivals() -> None:
        start.wait()
        admit(store, config, 10)

    threads = [threading.Thread(target=acker, args=(cursors[i::8],)) for i in range(8)]
    threads.append(threading.Thread(target=arrivals))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert store.inbox.ack_cursor() == cursors[-1]
    assert store.inbox.unread_count() == 10


# --- lanes -------------------------------------------------------------------------------------


def test_the_room_lane_reads_and_acks_and_the_worker_lane_may_not(frozen: Any, config: Config,
                                                                  store: Store, ingress: Any,
                                                                  clock: SystemClock) -> None:
    """Reads and acks: operator and room; a worker turn token gets 403 lane_refused."""
    tokens = TokenRegistry(OPERATOR_TOKEN)
    room = tokens.issue_turn_token(Lane.ROOM, INBOX_CONVERSATION_ID, "turn-room")
    worker = tokens.issue_turn_token(Lane.WORKER, "cv_x", "turn-worker")
    app = create_operator_app(config, store, Inbox(store), tokens, clock, Metrics())
    comments(ingress, 2)
    as_room = testing.TestClient(app, headers={"Authorization": f"Bearer {room}"})
    as_worker = testing.TestClient(app, headers={"Authorization": f"Bearer {worker}"})
    c = cursors_of(read(as_room))
    assert len(c) == 2
    assert ack(as_room, c[0]).json == {"ackCursor": c[0], "unreadCount": 1}
    for resp in (as_worker.simulate_get("/v1/inbox"), ack(as_worker, c[1])):
        assert resp.status_code == 403 and resp.json == {"error": "lane_refused"}
    anonymous = testing.TestClient(app)
    assert anonymous.simulate_post("/v1/inbox/ack", json={"cursor": 1}).status_code == 401


# --- retention ---------------------------------------------------------------------------------


def test_prune_never_deletes_unread_messages(store: Store, config: Config,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Old and many, but unread: everything stays."""
    monkeypatch.setattr(inbox_store, "READ_KEEP_COUNT", 3)
    old = now_ms() - 400 * DAY_MS
    cursors = admit(store, config, 20, received_ms=old)
    assert store.inbox.prune(now_ms()) == 0
    assert store.t.inbox.select().count() == 20
    store.inbox.mark_shown(cursors[:5])
    store.inbox.ack(cursors[4])
    assert store.inbox.prune(now_ms()) == 5  # all five read ones are over 30 days old
    assert [r.id for r in store.t.inbox.select().order_by(store.t.inbox.id)] == cursors[5:]


def test_prune_keeps_the_newest_read_messages_by_count(store: Store, config: Config,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Of the read messages only the newest READ_KEEP_COUNT stay; unread ones are untouched."""
    monkeypatch.setattr(inbox_store, "READ_KEEP_COUNT", 4)
    cursors = admit(store, config, 15)
    store.inbox.mark_shown(cursors)
    store.inbox.ack(cursors[9])
    assert store.inbox.prune(now_ms()) == 6
    kept = [r.id for r in store.t.inbox.select().order_by(store.t.inbox.id)]
    assert kept == cursors[6:]
    assert store.inbox.prune(now_ms()) == 0
    assert store.inbox.unread_count() == 5


def test_prune_drops_read_messages_older_than_the_age_bound(store: Store, config: Config) -> None:
    """Read messages received over READ_KEEP_DAYS ago go; younger read ones stay."""
    now = now_ms()
    old = admit(store, config, 3, received_ms=now - (inbox_store.READ_KEEP_DAYS + 1) * DAY_MS)
    young = admit(store, config, 3, received_ms=now - (inbox_store.READ_KEEP_DAYS - 1) * DAY_MS)
    store.inbox.mark_shown(old + young)
    store.inbox.ack(young[-1])
    assert store.inbox.prune(now) == 3
    assert [r.id for r in store.t.inbox.select().order_by(store.t.inbox.id)] == young


def test_prune_deletes_in_bounded_batches(store: Store, config: Config,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """One call deletes at most `batch` messages, oldest first; later calls finish the job."""
    monkeypatch.setattr(inbox_store, "READ_KEEP_COUNT", 2)
    cursors = admit(store, config, 12)
    store.inbox.mark_shown(cursors)
    store.inbox.ack(cursors[-1])
    assert store.inbox.prune(now_ms(), batch=4) == 4
    assert store.inbox.state().oldest_cursor == cursors[4]
    assert store.inbox.prune(now_ms(), batch=4) == 4
    assert store.inbox.prune(now_ms(), batch=4) == 2
    assert store.inbox.prune(now_ms(), batch=4) == 0
    assert [r.id for r in store.t.inbox.select().order_by(store.t.inbox.id)] == cursors[-2:]


def test_an_ack_prunes_read_history_and_the_inbox_conversation_stays(
        frozen: Any, operator: Any, store: Store, config: Config,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ack that moves the boundary prunes; oldestCursor moves up; linear-inbox is kept."""
    monkeypatch.setattr(inbox_store, "READ_KEEP_COUNT", 3)
    cursors = admit(store, config, 10)
    read(operator, limit=10)
    assert ack(operator, cursors[7]).json == {"ackCursor": cursors[7], "unreadCount": 2}
    page = read(operator, before=cursors[-1] + 1, limit=100)
    assert cursors_of(page) == cursors[5:] and page["oldestCursor"] == cursors[5]
    assert page["hasMore"] is False
    assert store.conversation_exists(INBOX_CONVERSATION_ID)


def test_the_documented_retention_defaults() -> None:
    """The bounds docs/decisions/0005-inbox-retention.md names."""
    assert (inbox_store.READ_KEEP_COUNT, inbox_store.READ_KEEP_DAYS) == (10_000, 30)


# --- bounding one event ------------------------------------------------------------------------

_HEAD = {"type": "Issue", "action": "update", "url": "https://linear.app/t/issue/ENG-1",
         "createdAt": "2026-11-29T12:00:00.000Z", "actor": {"id": "u-1", "name": "Jane Doe"}}


@pytest.mark.parametrize(
    "event",
    [
        pytest.param({**_HEAD, "data": {"id": "i-1", "description": "d" * 60_000}},
                     id="large-data"),
        pytest.param({**_HEAD, "data": {f"field{i}": i for i in range(6_000)}}, id="many-numbers"),
        pytest.param({**_HEAD, "data": {f"f{i}": "abc" for i in range(6_000)}},
                     id="many-short-strings"),
        pytest.param({**_HEAD, "data": {"labels": [{"id": str(uuid.UUID(int=i)), "name": "bug"}
                                                   for i in range(2_000)]}},
                     id="many-small-objects"),
        pytest.param({**_HEAD, "data": {"id": "i-1"},
                      "updatedFrom": {"description": "u" * 90_000, "labelIds": ["x" * 36] * 4_000}},
                     id="huge-updatedFrom"),
        pytest.param({**_HEAD, "data": {"body": "😀" * 30_000}}, id="multibyte"),
        pytest.param({**_HEAD, "data": {"body": '"\\\n\x01' * 6_000}}, id="escaped-characters"),
        pytest.param({**_HEAD, "data": {"k" * 20_000: 1}}, id="huge-key"),
    ],
)
def test_bound_event_keeps_an_object_within_8000_characters(event: dict[str, Any]) -> None:
    """Whatever the shape, the bounded event is a JSON object of at most 8,000 characters,
    keeps its top-level keys and head fields, and keeps `data`/`updatedFrom` objects."""
    bounded, truncated = bound_event(event, EVENT_MAX_CHARS)
    assert truncated is True
    assert isinstance(bounded, dict)
    assert len(json.dumps(bounded, ensure_ascii=False)) <= EVENT_MAX_CHARS
    assert list(bounded) == list(event)
    for key in ("type", "action", "url", "createdAt"):
        assert bounded[key] == event[key]
    for key in ("actor", "data", "updatedFrom"):
        if key in event:
            assert isinstance(bounded[key], dict)
    # It uses the room it has: at least half of the budget.
    if "k" * 20_000 not in event["data"]:
        assert len(json.dumps(bounded, ensure_ascii=False)) > EVENT_MAX_CHARS // 2


def test_bound_event_leaves_a_small_event_alone() -> None:
    event = {**_HEAD, "data": {"body": "short"}}
    assert bound_event(event, EVENT_MAX_CHARS) == (event, False)


def test_bound_event_cuts_the_longest_string_first() -> None:
    """A long description is cut; short fields next to it survive whole."""
    event = {**_HEAD, "data": {"id": "i-1", "title": "Keep me whole", "description": "d" * 20_000}}
    bounded, _ = bound_event(event, EVENT_MAX_CHARS)
    assert bounded["data"]["title"] == "Keep me whole" and bounded["data"]["id"] == "i-1"
    assert bounded["data"]["description"].endswith("…")
    assert bounded["actor"] == _HEAD["actor"]


def test_bound_event_says_exactly_how_many_entries_it_left_out() -> None:
    """Shown entries plus the marker's count add up to the original width, however deep the cut."""
    many_keys = {**_HEAD, "data": {f"k{i}": i for i in range(50_000)}}
    bounded, _ = bound_event(many_keys, EVENT_MAX_CHARS)
    data = bounded["data"]
    more = int(data.pop("…").split()[0])
    assert list(data) == [f"k{i}" for i in range(len(data))] and len(data) + more == 50_000
    many_items = {**_HEAD, "data": {"labels": [{"id": "x" * 32, "name": "bug"}] * 10_000}}
    labels = bound_event(many_items, EVENT_MAX_CHARS)[0]["data"]["labels"]
    tail = labels.pop()
    assert tail.startswith("… ") and len(labels) + int(tail.split()[1]) == 10_000


def test_a_huge_updated_from_comes_back_bounded_through_the_api(frozen: Any, operator: Any,
                                                               ingress: Any) -> None:
    """An Issue update with an enormous previous description: bounded, truncated, still objects."""
    deliver(ingress, issue_event(updatedFrom={"description": "p" * 50_000, "title": "Old"}))
    item = read(operator)["events"][0]
    assert item["truncated"] is True
    assert len(json.dumps(item["event"], ensure_ascii=False)) <= EVENT_MAX_CHARS
    assert item["event"]["updatedFrom"]["title"] == "Old"
    assert item["event"]["data"]["identifier"] == "OPS-2"


# --- the CLI against a running service ---------------------------------------------------------


def post_delivery(service: Service, body: dict[str, Any]) -> None:
    raw, headers = signed(body)
    resp = requests.post(service.ingress.url + "/webhooks/linear", data=raw, headers=headers,
                         timeout=30)
    assert resp.json()["outcome"] == "accepted", resp.text


LINE = re.compile(r"^\s*(\d+)\s+(\S+ ago|just now) ([* ]) (.+)$")


def test_cli_reads_and_acknowledges_the_inbox(service: Service) -> None:
    """`wakeline inbox` (readable, --headlines, --before, --json) and `wakeline inbox ack`."""
    for i in range(3):
        post_delivery(service, comment_event(f"issue-{i}", f"ENG-{i}"))
    wait_until(lambda: service.store.inbox.unread_count() == 3, message="three inbox messages")
    env = {"WAKELINE_API_URL": service.operator.url, "WAKELINE_TOKEN": OPERATOR_TOKEN,
           "WAKELINE_CONFIG": None}
    runner = CliRunner()

    # Headlines first: one line per event, unread marked, and no payload.
    heads = runner.invoke(cli, ["inbox", "--headlines", "--limit", "2"], env=env)
    assert heads.exit_code == 0, heads.output
    lines = heads.output.splitlines()
    assert lines[0] == "inbox: 3 unread, ack cursor 0, oldest 1"
    assert "* Comment create · ENG-0 · Jane Doe" in lines[1]
    assert "* Comment create · ENG-1 · Jane Doe" in lines[2]
    assert lines[3] == "more: wakeline inbox --after 2"
    assert '"type"' not in heads.output

    # The full view indents each event's JSON under its line.
    full = runner.invoke(cli, ["inbox"], env=env)
    assert full.exit_code == 0 and '"type": "Comment"' in full.output
    assert "           {" in full.output

    # --json is the API's page.
    page = json.loads(runner.invoke(cli, ["inbox", "--json", "--after", "1"], env=env).output)
    assert [e["cursor"] for e in page["events"]] == [2, 3]

    # ack: a shown cursor moves the boundary; a retry is a no-op; --json prints the state.
    acked = runner.invoke(cli, ["inbox", "ack", "2"], env=env)
    assert acked.exit_code == 0 and acked.output.strip() == "ack cursor: 2, 1 unread"
    again = runner.invoke(cli, ["inbox", "ack", "1", "--json"], env=env)
    assert again.exit_code == 0 and json.loads(again.output) == {"ackCursor": 2, "unreadCount": 1}

    # History: --before shows read events without the unread marker.
    back = runner.invoke(cli, ["inbox", "--before", "3", "--headlines"], env=env)
    assert back.exit_code == 0
    rows = [LINE.match(line) for line in back.output.splitlines()[1:]]
    assert [(int(r[1]), r[3]) for r in rows if r] == [(1, " "), (2, " ")]

    # A cursor nobody was shown is refused (exit 1), naming the error.
    post_delivery(service, comment_event("issue-9", "ENG-9"))
    wait_until(lambda: service.store.inbox.unread_count() == 2, message="a fourth message")
    refused = runner.invoke(cli, ["inbox", "ack", "4"], env=env)
    assert refused.exit_code == 1 and "not_shown" in refused.output

    # Usage errors exit 2; an unreachable service exits 3.
    assert runner.invoke(cli, ["inbox", "--after", "1", "--before", "3"], env=env).exit_code == 2
    assert runner.invoke(cli, ["inbox", "ack", "x"], env=env).exit_code == 2
    gone = {**env, "WAKELINE_API_URL": f"http://127.0.0.1:{free_port()}"}
    assert runner.invoke(cli, ["inbox"], env=gone).exit_code == 3
    assert runner.invoke(cli, ["inbox", "ack", "3"], env=gone).exit_code == 3
