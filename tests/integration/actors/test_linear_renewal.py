"""The app's token renews in the background, and answers go out seconds after the token
endpoint recovers (issue 36).

Real waiting against the fake Linear's token endpoint, with tokens that live a few
seconds: the service's own ticker drives the renewal, nothing else asks for a token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import session_event
from tests.fakes.linear import FakeLinear, FakeOAuth
from tests.helpers import wait_until
from tests.integration.actors.test_linear_app import install, landed, start

# How often a new agent session arrives while the token endpoint is down.
SESSION_EVERY_SECONDS = 0.5


def answered(h: Any) -> set[str]:
    """The sessions whose answer (a `response` activity) Linear accepted."""
    return {a["agentSessionId"] for a in landed(h) if a["content"]["type"] == "response"}


@pytest.mark.parametrize("grant", ["authorization_code", "client_credentials"])
def test_a_quiet_service_renews_its_token_before_it_runs_out(
        harness: Callable[..., Any], grant: str) -> None:
    fake = FakeLinear(oauth=FakeOAuth(lifetime_seconds=2, client_credentials_lifetime_seconds=2))
    h = start(harness, grant, fake=fake)
    if grant == "authorization_code":
        install(h)
    assert fake.oauth is not None
    wait_until(lambda: len(fake.oauth.grants) >= 3, message="renewed twice with nothing sent")
    assert fake.oauth.grants[1:3] == ["refresh_token" if grant == "authorization_code"
                                      else "client_credentials"] * 2
    assert h.deliver(session_event())["outcome"] == "accepted"
    wait_until(lambda: answered(h) == {"session-1"}, message="answered")
    assert not [r for r in h.linear.requests if r.refused]  # never an expired token on the wire


def test_answers_go_out_seconds_after_the_token_endpoint_recovers(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear(oauth=FakeOAuth(lifetime_seconds=4))
    h = start(harness, fake=fake)
    install(h)
    assert fake.oauth is not None
    expires = time.time() + fake.oauth.lifetime_seconds
    fake.oauth.down = True  # every renewal answers 500, from before it is due to after expiry
    sessions: list[str] = []
    pace = threading.Event()  # never set: the arrivals' pace, not a wait for an outcome
    while time.time() < expires + 3:
        n = len(sessions) + 1
        sessions.append(f"session-{n}")
        assert h.deliver(session_event(session_id=sessions[-1], issue_id=f"issue-{n}",
                                       identifier=f"ENG-{n}"))["outcome"] == "accepted"
        pace.wait(SESSION_EVERY_SECONDS)
    assert len(fake.oauth.asked) >= 3  # asked before expiry, and again after it, soon
    status = h.api("GET", "/v1/status").json()["linear"]
    assert status["state"] == "unreachable" and "retrying" in status["detail"], status
    token = {c["name"]: c for c in h.api("GET", "/v1/doctor").json()["checks"]}["linear_token"]
    assert not token["ok"] and "500; retrying" in token["detail"], token
    assert "wakeline_linear_auth_ok 0.0" in h.api("GET", "/metrics").text
    fake.oauth.down = False
    wait_until(lambda: answered(h) == set(sessions), timeout=15,
               message="every session answered within seconds of the endpoint's recovery")
    assert h.api("GET", "/v1/status").json()["linear"]["state"] == "ok"
    wait_until(lambda: h.service.store.outbox.unsettled() == 0, message="all settled")
    ids = [a["id"] for a in landed(h)]
    assert len(ids) == len(set(ids)) == 2 * len(sessions)  # acknowledged and answered, once each
