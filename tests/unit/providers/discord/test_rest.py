"""The REST client: buckets waited out, 429s retried by `retry_after`, errors typed.

No network: the client's session is replaced by a stub that answers from a script and
records each request; time is a fake clock that `sleep` moves.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import requests

from wakeline.errors import (
    DiscordRateLimited, DiscordRejected, DiscordUnauthorized, DiscordUnavailable, ThreadGone,
)
from wakeline.providers.discord.limits import Route
from wakeline.providers.discord.rest import DiscordRest

TOKEN = "unit-bot-token-9f8e7d6c5b4a"
GOOGLE = {"Via": "1.1 google"}


def answer(status: int, body: Any = None, **headers: str) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp._content = json.dumps(body).encode() if body is not None else b""
    resp.headers.update({**GOOGLE, **{k.replace("_", "-"): v for k, v in headers.items()}})
    return resp


def limited(retry_after: float, *, via: bool = True, is_global: bool = False) -> requests.Response:
    resp = answer(429, {"message": "You are being rate limited.", "retry_after": retry_after,
                        "global": is_global}, X_RateLimit_Remaining="0")
    if not via:
        del resp.headers["Via"]
    return resp


class Stub:
    """A session whose answers come from a script; records (method, url, json, params)."""

    def __init__(self, clock: "Clock", *answers: requests.Response | Exception) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.sent: list[tuple[float, str, str, Any, Any, dict[str, str]]] = []

    def request(self, method: str, url: str, *, json: Any = None, params: Any = None,
                headers: dict[str, str], timeout: Any) -> requests.Response:
        assert timeout == (5.0, 15.0)
        self.sent.append((self.clock.now, method, url, json, params, headers))
        nxt = self.answers.pop(0)
        if isinstance(nxt, Exception):
            raise nxt
        return nxt


class Clock:
    def __init__(self) -> None:
        self.now = 64.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def client(*answers: requests.Response | Exception, **kw: Any) -> tuple[DiscordRest, Stub, Clock]:
    clock = Clock()
    rest = DiscordRest("http://127.0.0.1:9/api/v10", TOKEN, monotonic=clock.monotonic,
                       sleep=clock.sleep, **kw)
    stub = Stub(clock, *answers)
    rest._session = lambda: stub  # type: ignore[method-assign]
    return rest, stub, clock


MESSAGE = {"id": "42", "channel_id": "7"}


def test_a_post_pings_nobody_and_carries_its_nonce() -> None:
    rest, stub, _ = client(answer(200, MESSAGE))
    assert rest.post("7", "hi @everyone", nonce="n1") == "42"
    (_, method, url, body, _, headers), = stub.sent
    assert (method, url) == ("POST", "http://127.0.0.1:9/api/v10/channels/7/messages")
    assert body == {"content": "hi @everyone", "allowed_mentions": {"parse": []},
                    "nonce": "n1", "enforce_nonce": True}
    assert headers == {"Authorization": f"Bot {TOKEN}"}


def test_a_429_is_waited_out_by_its_retry_after_then_retried() -> None:
    rest, stub, clock = client(limited(0.5), answer(200, MESSAGE))
    assert rest.post("7", "hi") == "42"
    assert clock.slept == [0.5] and stub.sent[1][0] - stub.sent[0][0] == 0.5


def test_429s_past_the_attempts_give_up_without_another_request() -> None:
    rest, stub, clock = client(limited(0.25), limited(0.25), limited(0.25), answer(200, MESSAGE))
    with pytest.raises(DiscordRateLimited) as caught:
        rest.post("7", "hi")
    assert len(stub.sent) == 3 and caught.value.retry_after == 0.25
    # The bucket is still blocked: the next call waits before it sends.
    assert rest.post("7", "again") == "42"
    assert clock.slept[-1] == 0.25


def test_a_wait_longer_than_the_bound_is_refused_before_sending() -> None:
    rest, stub, _ = client(limited(40.0), **{"max_wait_seconds": 15.0})
    with pytest.raises(DiscordRateLimited) as caught:
        rest.post("7", "hi")
    assert len(stub.sent) == 1 and caught.value.retry_after == 40.0


def test_a_429_without_googles_via_header_is_cloudflare_and_not_retried() -> None:
    rest, stub, _ = client(limited(0.1, via=False))
    with pytest.raises(DiscordRateLimited) as caught:
        rest.channel("7")
    assert len(stub.sent) == 1 and caught.value.retry_after >= 60


def test_a_bucket_with_nothing_left_is_waited_out_without_a_429() -> None:
    empty = answer(200, MESSAGE, X_RateLimit_Bucket="b1", X_RateLimit_Remaining="0",
                   X_RateLimit_Reset_After="1.5")
    rest, stub, clock = client(empty, answer(200, MESSAGE), answer(200, MESSAGE))
    rest.post("7", "one")
    rest.post("8", "another channel: its own bucket")
    assert clock.slept == []
    rest.post("7", "two")
    assert clock.slept == [1.5] and [s[0] for s in stub.sent] == [64.0, 64.0, 65.5]


def test_a_global_429_holds_every_route() -> None:
    rest, stub, clock = client(limited(2.0, is_global=True), answer(200, {"id": "9", "type": 0}),
                               answer(200, MESSAGE), **{"max_attempts": 1})
    with pytest.raises(DiscordRateLimited):
        rest.post("7", "hi")
    rest.channel("9")
    assert clock.slept == [2.0]


@pytest.mark.parametrize("status,body,error", [
    (503, None, DiscordUnavailable),
    (502, {"message": "bad gateway"}, DiscordUnavailable),
    (404, {"message": "Unknown Channel", "code": 10003}, ThreadGone),
    (404, {"message": "Unknown Message", "code": 10008}, DiscordRejected),
    (401, {"message": "401: Unauthorized", "code": 0}, DiscordUnauthorized),
    (403, {"message": "Missing Access", "code": 50001}, DiscordRejected),
    (400, {"message": "Invalid Form Body", "code": 50035}, DiscordRejected),
])
def test_failures_are_typed(status: int, body: Any, error: type[Exception]) -> None:
    rest, _, _ = client(answer(status, body))
    with pytest.raises(error) as caught:
        rest.channel("7")
    assert type(caught.value) is error
    if isinstance(caught.value, DiscordRejected):
        assert (caught.value.status, caught.value.discord_code) == (status, body["code"])


def test_no_answer_is_unavailable() -> None:
    rest, _, _ = client(requests.ConnectTimeout("connect timed out"))
    with pytest.raises(DiscordUnavailable) as caught:
        rest.create_thread("7", "[ENG-1] t")
    assert caught.value.detail == "POST /channels/{id}/threads: ConnectTimeout"


def test_an_error_never_shows_the_token() -> None:
    rest, _, _ = client(answer(400, {"message": f"bad token {TOKEN}", "code": 50035}))
    with pytest.raises(DiscordRejected) as caught:
        rest.post("7", "hi")
    assert TOKEN not in str(caught.value) and TOKEN not in caught.value.detail
    assert "[redacted]" in caught.value.detail


def test_a_thread_is_public_and_made_without_a_message() -> None:
    thread = {"id": "9", "type": 11, "name": "[ENG-1] t", "parent_id": "7", "guild_id": "1",
              "thread_metadata": {"archived": False, "locked": False}}
    rest, stub, _ = client(answer(201, thread))
    made = rest.create_thread("7", "[ENG-1] t")
    assert (made.id, made.type, made.parent_id, made.archived) == ("9", 11, "7", False)
    assert stub.sent[0][3] == {"name": "[ENG-1] t", "type": 11, "auto_archive_duration": 10080}


def test_messages_after_come_oldest_first() -> None:
    page = [{"id": "30", "channel_id": "7"}, {"id": "20", "channel_id": "7"}]
    rest, stub, _ = client(answer(200, page))
    assert [m["id"] for m in rest.messages_after("7", 10)] == ["20", "30"]
    assert stub.sent[0][4] == {"after": "10", "limit": "100"}


def test_closing_ends_a_wait_at_once() -> None:
    rest = DiscordRest("http://127.0.0.1:9/api/v10", TOKEN)  # the real clock and wait
    rest.limits.limited(Route("GET", "/channels/{id}", "7"), 5.0, is_global=False)
    rest.close()
    started = time.monotonic()
    with pytest.raises(DiscordUnavailable):
        rest.channel("7")
    assert time.monotonic() - started < 1.0
