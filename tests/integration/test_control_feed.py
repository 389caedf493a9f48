"""The live feed `GET /v1/events` on the real operator listener (waitress on 127.0.0.1):
twelve open pages never starve the API, a reader past the bound gets one batch, a reader
resumes after `Last-Event-ID`, and the page's actions pass the guard to the real routes."""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Iterator

import requests

from tests.conftest import OPERATOR_TOKEN, comment_event, signed
from tests.helpers import wait_until
from wakeline.app import Service
from wakeline.control.feed import stream_bound
from wakeline.control.stream import POLL_RETRY_MS, STREAM_RETRY_MS

BEARER = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


def open_feed(stack: ExitStack, url: str, **headers: str) -> requests.Response:
    resp = requests.get(url + "/v1/events", headers={**BEARER, **headers}, stream=True, timeout=10)
    stack.callback(resp.close)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    return resp


def deliver(service: Service, identifier: str) -> None:
    body = comment_event(f"issue-{identifier}", identifier)
    body["data"]["issue"]["team"] = {"key": "OPS"}
    raw, headers = signed(body)
    resp = requests.post(service.ingress.url + "/webhooks/linear", data=raw, headers=headers,
                         timeout=10)
    assert resp.json() == {"outcome": "accepted"}


def events_of(lines: Iterator[str], until: str) -> list[dict[str, str]]:
    """Read a stream's events until one of kind `until` (comments skipped)."""
    out: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if fields:
                out.append(fields)
                if fields.get("event") == until:
                    return out
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
    return out


def test_twelve_open_feeds_never_starve_the_api(service: Service) -> None:
    url = service.operator.url
    bound = stream_bound(service.config.server.threads)
    with ExitStack() as stack:
        feeds = [open_feed(stack, url) for _ in range(12)]
        started = time.monotonic()
        status = requests.get(url + "/v1/status", headers=BEARER, timeout=10)
        assert status.status_code == 200 and time.monotonic() - started < 1.0
        # Within the bound, streams; past it, each got one batch (a poll's retry) and its
        # answer ended.
        firsts = [next(f.iter_lines(decode_unicode=True)) for f in feeds]
        polled = [f for f, first in zip(feeds, firsts) if first == f"retry: {POLL_RETRY_MS}"]
        assert firsts.count(f"retry: {STREAM_RETRY_MS}") == bound >= 1
        assert len(polled) == 12 - bound
        for answer in polled:
            answer.content  # noqa: B018 - read to its end: it ends
        assert service.control is not None and service.control.feed.streams == bound


def test_a_reader_resumes_after_last_event_id(service: Service) -> None:
    url = service.operator.url
    with ExitStack() as stack:
        live = open_feed(stack, url).iter_lines(decode_unicode=True)
        assert next(live) == f"retry: {STREAM_RETRY_MS}"
        deliver(service, "OPS-1")
        seen = events_of(live, until="conversation")
        last = seen[-1]["id"]
        assert '"change":"delivery"' in seen[-1]["data"]
    deliver(service, "OPS-2")
    with ExitStack() as stack:
        resumed = open_feed(stack, url, **{"Last-Event-ID": last}).iter_lines(decode_unicode=True)
        after = events_of(resumed, until="conversation")
        assert int(after[-1]["id"]) > int(last)
        gone = open_feed(stack, url, **{"Last-Event-ID": "12"})  # not one of this feed's ids
        assert events_of(gone.iter_lines(decode_unicode=True), until="refresh")[-1]["data"] == "{}"


def test_the_pages_actions_reach_the_routes_404_409_and_a_foreign_post_changes_nothing(
        service: Service) -> None:
    url = service.operator.url
    http = requests.Session()
    assert http.post(url + "/control/session", json={"token": OPERATOR_TOKEN},
                     timeout=10).status_code == 200
    page = {"Sec-Fetch-Site": "same-origin", "X-Wakeline-Action": "1"}
    missing = http.post(url + "/v1/conversations/cv_nope/retry", headers=page, timeout=10)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    deliver(service, "OPS-3")
    conversations = wait_until(lambda: http.get(url + "/v1/conversations", timeout=10)
                               .json()["conversations"])
    cid = conversations[0]["id"]
    healthy = http.post(url + f"/v1/conversations/{cid}/retry", headers=page, timeout=10)
    assert healthy.status_code == 409 and healthy.json()["detail"] == "the conversation is not stalled"
    foreign = http.post(url + f"/v1/conversations/{cid}/abandon", timeout=10, headers={
        "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1", "X-Wakeline-Action": "1"})
    assert foreign.status_code == 403 and foreign.json()["error"] == "action_refused"
    after = http.get(url + f"/v1/conversations/{cid}", timeout=10).json()
    assert all(f.get("completion") != "abandoned" for f in after["fifo"])


def test_a_page_that_closes_gives_its_thread_back(service: Service) -> None:
    assert service.control is not None
    feed = service.control.feed
    with ExitStack() as stack:
        page = open_feed(stack, service.operator.url)
        wait_until(lambda: feed.streams == 1)
        page.close()
        # Seen by waitress while the stream waits (no write needed): within a second or so.
        wait_until(lambda: feed.streams == 0, timeout=5)
