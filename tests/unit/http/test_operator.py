"""The operator API, in-process: auth, status, the follow switch and forward inbox reads."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
from typing import Any

import pytest
from falcon import testing

from tests.conftest import (
    OPERATOR_TOKEN, comment_event, comments, deliver, issue_event, on_postgres, session_event,
)
from wakeline.models.inbox import EVENT_MAX_CHARS, PAGE_BUDGET_BYTES


def size_of(event: dict[str, Any]) -> int:
    """How the page budget measures one event: its UTF-8 JSON."""
    return len(json.dumps(event, ensure_ascii=False).encode("utf-8"))


# --- auth ----------------------------------------------------------------------------------------

V1_PATHS = ["/v1/status", "/v1/following", "/v1/inbox"]


@pytest.mark.parametrize("path", V1_PATHS)
@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", "Bearer wrong-token", f"Basic {OPERATOR_TOKEN}",
     f"Bearer {OPERATOR_TOKEN}x", OPERATOR_TOKEN],
)
def test_no_or_bad_token_is_unauthorized(operator: Any, path: str,
                                         authorization: str | None) -> None:
    """Every /v1 path refuses a missing, malformed or unknown bearer token with 401."""
    client = testing.TestClient(operator.app)
    headers = {} if authorization is None else {"Authorization": authorization}
    resp = client.simulate_get(path, headers=headers)
    assert resp.status_code == 401
    assert resp.json == {"error": "unauthorized"}


def test_a_bad_token_is_refused_on_writes_too(operator: Any) -> None:
    """PUT /v1/following with a bad token is 401 and changes nothing."""
    client = testing.TestClient(operator.app)
    resp = client.simulate_put("/v1/following", json={"following": True},
                               headers={"Authorization": "Bearer nope"})
    assert resp.status_code == 401
    assert operator.simulate_get("/v1/following").json == {"following": False}


def test_the_token_scheme_is_case_insensitive(operator: Any) -> None:
    """`bearer TOKEN` is as good as `Bearer TOKEN`."""
    client = testing.TestClient(operator.app)
    resp = client.simulate_get("/v1/status", headers={"Authorization": f"bearer {OPERATOR_TOKEN}"})
    assert resp.status_code == 200


def test_healthz_and_metrics_need_no_token(operator: Any) -> None:
    """/healthz and /metrics answer without a token (loopback only)."""
    client = testing.TestClient(operator.app)
    assert client.simulate_get("/healthz").json == {"ok": True}
    metrics = client.simulate_get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "wakeline_deliveries" in metrics.text


def test_unknown_paths_are_json_errors(operator: Any) -> None:
    """An unknown /v1 path is a JSON 404; an unknown method a JSON 405."""
    assert operator.simulate_get("/v1/nothing").json == {"error": "not_found"}
    resp = operator.simulate_delete("/v1/status")
    assert resp.status_code == 405 and resp.json == {"error": "method_not_allowed"}


# --- status --------------------------------------------------------------------------------------


def test_status_has_the_contract_shape(operator: Any) -> None:
    """GET /v1/status: version, uptime, following, conversation/fifo/inbox counts, actors."""
    resp = operator.simulate_get("/v1/status")
    assert resp.status_code == 200
    data = resp.json
    assert set(data) == {"version", "uptimeSeconds", "following", "conversations", "fifo", "inbox",
                         "liveActors", "threads", "linear"}
    assert data["linear"]["state"] == "none" and data["linear"]["ok"] is False
    assert set(data["conversations"]) == {"total", "running", "stalled", "waitingOwnership",
                                          "terminal", "completed", "canceled"}
    assert set(data["fifo"]) == {"pending", "claimed", "held"}
    assert set(data["inbox"]) == {"unread"}
    assert isinstance(data["version"], str) and data["version"]
    assert data["uptimeSeconds"] >= 0
    assert data["following"] is False
    assert data["threads"] >= 1 and data["liveActors"] >= 0


def test_status_counts_follow_admissions(frozen: Any, operator: Any, ingress: Any) -> None:
    """Admitted deliveries show up in the conversation, FIFO and unread counts."""
    before = operator.simulate_get("/v1/status").json
    deliver(ingress, session_event(issue_id="i-1", identifier="ENG-1"))
    deliver(ingress, session_event("prompted", issue_id="i-1", identifier="ENG-1"))
    deliver(ingress, issue_event(issue_id="i-2", identifier="OPS-2"))
    deliver(ingress, comment_event())
    after = operator.simulate_get("/v1/status").json
    assert after["conversations"]["total"] - before["conversations"]["total"] == 2
    assert after["fifo"] == {"pending": 3, "claimed": 0, "held": 0}
    assert after["inbox"] == {"unread": 2}


# --- following -----------------------------------------------------------------------------------


def test_following_round_trips(operator: Any) -> None:
    """PUT /v1/following sets the switch; GET and /v1/status read it back."""
    assert operator.simulate_get("/v1/following").json == {"following": False}
    for value in (True, False, True):
        resp = operator.simulate_put("/v1/following", json={"following": value})
        assert resp.status_code == 200 and resp.json == {"following": value}
        assert operator.simulate_get("/v1/following").json == {"following": value}
    assert operator.simulate_get("/v1/status").json["following"] is True


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[true]", b"{}", b'{"following": "yes"}', b'{"following": 1}',
     b'{"following": null}'],
)
def test_a_bad_following_body_is_400(operator: Any, body: bytes) -> None:
    """Only {"following": true|false} is accepted; anything else is 400 and changes nothing."""
    resp = operator.simulate_put("/v1/following", body=body,
                                 headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    assert resp.json["error"] == "bad_request"
    assert operator.simulate_get("/v1/following").json == {"following": False}


# --- inbox forward reads -------------------------------------------------------------------------


def test_inbox_forward_read_has_the_contract_shape(frozen: Any, operator: Any,
                                                   ingress: Any) -> None:
    """Events carry cursor, receivedAt, headline, unread, truncated, event; pages their counters."""
    deliver(ingress, comment_event("issue-12", "ENG-12"))
    deliver(ingress, issue_event())
    deliver(ingress, session_event())  # FIFO only: never in the inbox
    page = operator.simulate_get("/v1/inbox").json
    assert set(page) == {"events", "ackCursor", "oldestCursor", "unreadCount", "hasMore"}
    assert (page["ackCursor"], page["unreadCount"], page["hasMore"]) == (0, 2, False)
    first, second = page["events"]
    assert page["oldestCursor"] == first["cursor"] < second["cursor"]
    for item in (first, second):
        assert set(item) == {"cursor", "receivedAt", "headline", "unread", "truncated", "event"}
        assert item["receivedAt"] == "2026-11-29T12:00:00.000Z"
        assert item["unread"] is True and item["truncated"] is False
    assert first["headline"] == "Comment create · ENG-12 · Jane Doe"
    assert second["headline"] == "Issue update · OPS-2 · Jane Doe"
    event = first["event"]
    assert set(event) == {"type", "action", "url", "createdAt", "actor", "data"}
    assert (event["type"], event["action"]) == ("Comment", "create")
    assert event["data"]["issue"]["identifier"] == "ENG-12"
    assert second["event"]["updatedFrom"] == {"title": "Old title"}
    assert "webhookTimestamp" not in event and "organizationId" not in event


def test_inbox_reads_never_consume_and_after_starts_past_a_cursor(frozen: Any, operator: Any,
                                                                  ingress: Any) -> None:
    """Reading twice returns the same page; ?after=C returns what follows C."""
    comments(ingress, 5)
    one = operator.simulate_get("/v1/inbox").json
    two = operator.simulate_get("/v1/inbox").json
    assert one == two and len(one["events"]) == 5 and one["unreadCount"] == 5
    cursors = [e["cursor"] for e in one["events"]]
    rest = operator.simulate_get("/v1/inbox", params={"after": cursors[1]}).json
    assert [e["cursor"] for e in rest["events"]] == cursors[2:]
    assert rest["unreadCount"] == 5  # reading past a cursor is not acknowledging it


def test_inbox_limit_pages_and_reports_has_more(frozen: Any, operator: Any, ingress: Any) -> None:
    """limit=N returns the N oldest and hasMore; the default is 20."""
    comments(ingress, 23)
    page = operator.simulate_get("/v1/inbox", params={"limit": 3}).json
    assert len(page["events"]) == 3 and page["hasMore"] is True
    default = operator.simulate_get("/v1/inbox").json
    assert len(default["events"]) == 20 and default["hasMore"] is True
    everything = operator.simulate_get("/v1/inbox", params={"limit": 100}).json
    assert len(everything["events"]) == 23 and everything["hasMore"] is False
    assert operator.simulate_get("/v1/inbox", params={"limit": 1}).status_code == 200


@pytest.mark.parametrize(
    "params",
    [{"limit": "0"}, {"limit": "101"}, {"limit": "-1"}, {"limit": "ten"}, {"after": "x"},
     {"after": "-1"}, {"view": "everything"}],
)
def test_inbox_bad_parameters_are_400(operator: Any, params: dict[str, str]) -> None:
    """limit outside 1..100, a non-integer cursor or an unknown view is 400 bad_request."""
    resp = operator.simulate_get("/v1/inbox", params=params)
    assert resp.status_code == 400
    assert resp.json["error"] == "bad_request" and resp.json["detail"]


def test_headlines_view_omits_the_event(frozen: Any, operator: Any, ingress: Any) -> None:
    """view=headlines returns the same keys as full, without `event`."""
    comments(ingress, 2)
    full = operator.simulate_get("/v1/inbox").json
    short = operator.simulate_get("/v1/inbox", params={"view": "headlines"}).json
    assert all("event" not in e for e in short["events"])
    assert [{k: v for k, v in e.items() if k != "event"} for e in full["events"]] == short["events"]
    assert {k: v for k, v in full.items() if k != "events"} == {
        k: v for k, v in short.items() if k != "events"
    }


def test_an_oversized_event_is_bounded_and_marked_truncated(frozen: Any, operator: Any,
                                                            ingress: Any) -> None:
    """An event over 8,000 characters comes back within 8,000 with truncated: true."""
    comments(ingress, 1, text="y" * 20_000)
    item = operator.simulate_get("/v1/inbox").json["events"][0]
    assert item["truncated"] is True
    assert len(json.dumps(item["event"], ensure_ascii=False)) <= EVENT_MAX_CHARS
    assert item["event"]["type"] == "Comment" and item["event"]["data"]["body"].startswith("yyyy")
    short = operator.simulate_get("/v1/inbox", params={"view": "headlines"}).json["events"][0]
    assert short["truncated"] is True


def test_a_page_stays_within_the_byte_budget(frozen: Any, operator: Any, ingress: Any) -> None:
    """Events are added while the page's events stay within 30,000 bytes; the rest wait."""
    comments(ingress, 10, text="z" * 7_000)
    page = operator.simulate_get("/v1/inbox", params={"limit": 100}).json
    sizes = [size_of(e) for e in page["events"]]
    assert 1 < len(sizes) < 10
    assert sum(sizes) <= PAGE_BUDGET_BYTES
    assert page["hasMore"] is True
    # The next page picks up right after the last event shown.
    nxt = operator.simulate_get("/v1/inbox", params={"after": page["events"][-1]["cursor"]}).json
    assert nxt["events"][0]["cursor"] > page["events"][-1]["cursor"]


def test_one_event_larger_than_the_budget_still_fits_alone(frozen: Any, operator: Any,
                                                           ingress: Any) -> None:
    """A single event over 30,000 bytes (multi-byte text) is returned, alone, never skipped."""
    comments(ingress, 1, text="😀" * 9_000)
    comments(ingress, 1)
    page = operator.simulate_get("/v1/inbox").json
    assert len(page["events"]) == 1
    huge = page["events"][0]
    assert size_of(huge) > PAGE_BUDGET_BYTES  # the premise: bounded in characters, not bytes
    assert huge["truncated"] is True and page["hasMore"] is True
    rest = operator.simulate_get("/v1/inbox", params={"after": huge["cursor"]}).json
    assert len(rest["events"]) == 1 and rest["hasMore"] is False


def test_status_lists_the_hosts_sharing_the_work(config: Any, store: Any, clock: Any) -> None:
    """With an engine's hosts: each one's id, last heartbeat, liveness and running turns; a
    dead host stays listed as not alive. `wakeline status` prints them."""
    from wakeline.commands.operate import status_text
    from wakeline.http.operator import OperatorParts, create_operator_app
    from wakeline.models.inbox import Inbox
    from wakeline.service.metrics import Metrics
    from wakeline.scheduling.base import HostView
    from wakeline.turns.tokens import TokenRegistry

    seen = [HostView("host-1", 1_796_000_000_000, False, 0, 12),
            HostView("host-2", 1_796_000_005_000, True, 3, -40)]
    client = testing.TestClient(
        create_operator_app(config, store, Inbox(store), TokenRegistry(OPERATOR_TOKEN), clock,
                            Metrics(), OperatorParts(hosts=lambda: seen)),
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    data = client.simulate_get("/v1/status").json
    assert data["hosts"] == [
        {"id": "host-1", "lastSeen": "2026-11-30T00:53:20.000Z", "alive": False, "running": 0,
         "skewMs": 12},
        {"id": "host-2", "lastSeen": "2026-11-30T00:53:25.000Z", "alive": True, "running": 3,
         "skewMs": -40}]
    import click

    text = click.unstyle(status_text(data))  # click drops the colour off a TTY
    assert "hosts: 1 of 2 alive" in text
    assert "host-1: NOT ALIVE" in text and "host-2: alive" in text and "3 running" in text

    def unreadable() -> list[HostView]:
        raise OSError("database away")

    broken = testing.TestClient(
        create_operator_app(config, store, Inbox(store), TokenRegistry(OPERATOR_TOKEN), clock,
                            Metrics(), OperatorParts(hosts=unreadable)),
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    assert broken.simulate_get("/v1/status").json["hosts"] == []  # the rest still answers


# --- memory ---------------------------------------------------------------------------------------


def sqlite_memory_used() -> int:
    """Bytes SQLite holds in this process (page caches, statements), from the library that
    Python's sqlite3 module uses."""
    lib = ctypes.util.find_library("sqlite3")
    if lib is None:
        pytest.skip("no shared SQLite library to ask")
    used = ctypes.CDLL(lib).sqlite3_memory_used
    used.restype = ctypes.c_int64
    return int(used())


@pytest.mark.skipif(on_postgres(), reason="PostgreSQL's pages live in its server")
def test_a_request_leaves_no_pages_in_its_thread_s_cache(operator: Any, store: Any) -> None:
    """What a request read is freed when it ends: kept, each listener thread would hold
    the pages of its last read (a status count of a long unread inbox, a quick check)."""
    store.db.execute_sql("CREATE TABLE filler (x TEXT)")
    store.db.execute_sql("INSERT INTO filler SELECT hex(randomblob(500)) FROM "
                         "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                         "WHERE i < 2000) SELECT i FROM n)")
    store.release_memory()  # the insert's pages
    idle = sqlite_memory_used()
    store.db.execute_sql("SELECT COUNT(*) FROM filler WHERE x LIKE '%zz%'").fetchone()
    assert sqlite_memory_used() > idle + 1_000_000  # the scan's pages (2 MB of rows)
    assert operator.simulate_get("/v1/status").status_code == 200  # on this same thread
    assert sqlite_memory_used() < idle + 200_000
