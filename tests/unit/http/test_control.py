"""The control page's sign-in, its cookie and the guard on its actions, in-process (falcon's
TestClient, the frozen clock). The feed itself is tested in tests/unit/control; the actions
against a running service in tests/integration/test_control_api.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from falcon import testing

from tests.conftest import OPERATOR_TOKEN
from wakeline.clock import SystemClock
from wakeline.config import Config
from wakeline.control.part import ControlPart
from wakeline.http.auth import SESSION_COOKIE
from wakeline.http.operator import OperatorParts, create_operator_app
from wakeline.models.inbox import Inbox
from wakeline.models.store import Store
from wakeline.service.events import Events
from wakeline.service.metrics import Metrics
from wakeline.turns.tokens import TokenRegistry

PAGE = {"Sec-Fetch-Site": "same-origin", "X-Wakeline-Action": "1"}


@pytest.fixture
def page(config: Config, store: Store, clock: SystemClock, frozen: Any) -> testing.TestClient:
    """The operator app with the control part, and no bearer token by default."""
    tokens = TokenRegistry(OPERATOR_TOKEN)
    part = ControlPart(config, store, clock, tokens, [], Events())
    return testing.TestClient(create_operator_app(config, store, Inbox(store), tokens, clock,
                                                  Metrics(), OperatorParts(control=part)))


def sign_in(client: testing.TestClient) -> str:
    resp = client.simulate_post("/control/session", json={"token": OPERATOR_TOKEN})
    assert resp.status_code == 200, resp.text
    return resp.cookies[SESSION_COOKIE].value


def with_cookie(cookie: str, **headers: str) -> dict[str, str]:
    return {"Cookie": f"{SESSION_COOKIE}={cookie}", **headers}


# --- sign-in -------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [{"token": "wrong"}, {"token": ""}, {}, {"token": OPERATOR_TOKEN + "x"}])
def test_a_wrong_token_gets_401_and_no_cookie(page: testing.TestClient, body: dict[str, Any]) -> None:
    resp = page.simulate_post("/control/session", json=body)
    assert resp.status_code == 401 and resp.json == {"error": "unauthorized"}
    assert "Set-Cookie" not in resp.headers


def test_the_sign_in_form_refused_shows_the_form_again_without_a_cookie(
        page: testing.TestClient) -> None:
    resp = page.simulate_post("/control/session", body="token=wrong",
                              headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status_code == 401 and 'id="sign-in"' in resp.text
    assert "That token was refused" in resp.text and "Set-Cookie" not in resp.headers


def test_the_operator_token_gets_an_httponly_strict_cookie_and_is_never_echoed_or_logged(
        page: testing.TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    resp = page.simulate_post("/control/session", json={"token": OPERATOR_TOKEN})
    assert resp.status_code == 200 and resp.json["signedIn"] is True
    cookie = resp.cookies[SESSION_COOKIE]
    assert cookie.http_only and cookie.same_site == "Strict" and cookie.path == "/"
    assert cookie.max_age == 12 * 3600
    assert OPERATOR_TOKEN not in cookie.value and OPERATOR_TOKEN not in resp.text
    form = page.simulate_post("/control/session", body=f"token={OPERATOR_TOKEN}",
                              headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 303 and form.headers["Location"].endswith("/control")
    assert OPERATOR_TOKEN not in form.headers["Location"]
    board = page.simulate_get("/control", headers=with_cookie(cookie.value))
    assert board.status_code == 200 and 'id="board"' in board.text
    assert OPERATOR_TOKEN not in board.text
    assert OPERATOR_TOKEN not in caplog.text


def test_the_page_without_a_session_is_the_sign_in_form(page: testing.TestClient) -> None:
    resp = page.simulate_get("/control")
    assert resp.status_code == 200 and 'id="sign-in"' in resp.text and 'id="board"' not in resp.text
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    assert page.simulate_get("/control/board").status_code == 401
    script = page.simulate_get("/control/static/control.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert page.simulate_get("/control/static/../page.py").status_code == 404


# --- the cookie ----------------------------------------------------------------------------------


def test_the_cookie_reads_the_api_and_nothing_else(page: testing.TestClient) -> None:
    cookie = sign_in(page)
    assert page.simulate_get("/v1/status", headers=with_cookie(cookie)).status_code == 200
    assert page.simulate_get("/v1/conversations", headers=with_cookie(cookie)).status_code == 200
    for method, path, body in [("POST", "/v1/linear/graphql", {"query": "{ viewer { id } }"}),
                               ("POST", "/v1/linear/comment", {"body": "hi"}),
                               ("POST", "/v1/turn/progress", {"events": []}),
                               ("PUT", "/v1/following", {"following": True}),
                               ("POST", "/v1/inbox/ack", {"cursor": "x"})]:
        resp = page.simulate_request(method, path, json=body, headers=with_cookie(cookie, **PAGE))
        assert resp.status_code == 403 and resp.json["error"] == "lane_refused", (path, resp.json)
    assert page.simulate_get("/v1/following", headers=with_cookie(cookie)).json == {"following": False}


def test_the_bearer_token_keeps_working_beside_the_cookie(page: testing.TestClient) -> None:
    bearer = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    assert page.simulate_put("/v1/following", json={"following": True}, headers=bearer).json \
        == {"following": True}
    # A bearer token decides alone: a cookie beside a wrong token does not rescue it.
    cookie = sign_in(page)
    resp = page.simulate_get("/v1/status", headers=with_cookie(cookie, Authorization="Bearer no"))
    assert resp.status_code == 401


def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(page: testing.TestClient) -> None:
    cookie = sign_in(page)
    refused = page.simulate_post("/control/session/end", headers=with_cookie(cookie))
    assert refused.status_code == 403  # not from the page: the session lives on
    assert page.simulate_get("/v1/status", headers=with_cookie(cookie)).status_code == 200
    out = page.simulate_post("/control/session/end", headers=with_cookie(cookie, **PAGE))
    assert out.status_code == 200 and out.json == {"signedIn": False}
    assert out.cookies[SESSION_COOKIE].value == ""
    assert page.simulate_get("/v1/status", headers=with_cookie(cookie)).status_code == 401
    again = page.simulate_get("/control", headers=with_cookie(cookie))
    assert again.status_code == 401 and 'id="sign-in"' in again.text and "signed out" in again.text


def test_a_session_expires_after_session_hours(page: testing.TestClient, frozen: Any) -> None:
    cookie = sign_in(page)
    frozen.tick(12 * 3600 - 1)
    assert page.simulate_get("/v1/status", headers=with_cookie(cookie)).status_code == 200
    frozen.tick(1)
    assert page.simulate_get("/v1/status", headers=with_cookie(cookie)).status_code == 401
    assert page.simulate_get("/control", headers=with_cookie(cookie)).status_code == 401


def test_a_tampered_or_foreign_cookie_is_refused(page: testing.TestClient, config: Config,
                                                 store: Store, clock: SystemClock) -> None:
    cookie = sign_in(page)
    last = "A" if cookie[-1] != "A" else "B"
    other = ControlPart(config, store, clock, TokenRegistry(OPERATOR_TOKEN), [], Events())
    foreign = other.sessions.sign_in(OPERATOR_TOKEN)
    assert foreign is not None
    for bad in (cookie[:-1] + last, "x" + cookie, foreign, "", OPERATOR_TOKEN):
        resp = page.simulate_get("/v1/status", headers=with_cookie(bad))
        assert resp.status_code == 401, bad


# --- only the owner ------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "same-origin"},  # no action header
    {"Sec-Fetch-Site": "same-origin", "X-Wakeline-Action": "0"},
    {"Sec-Fetch-Site": "cross-site", "X-Wakeline-Action": "1"},
    {"Sec-Fetch-Site": "same-site", "X-Wakeline-Action": "1"},
    {"Sec-Fetch-Site": "none", "X-Wakeline-Action": "1"},
    {"X-Wakeline-Action": "1"},  # no Sec-Fetch-Site, no Origin
    {"X-Wakeline-Action": "1", "Origin": "http://127.0.0.1:9999"},
    {"X-Wakeline-Action": "1", "Origin": "null"},
    {"Sec-Fetch-Site": "cross-site", "X-Wakeline-Action": "1", "Origin": "http://falconframework.org"},
])
@pytest.mark.parametrize("path", ["/v1/conversations/c1/stop", "/v1/conversations/c1/retry",
                                  "/v1/approvals/a1/approve", "/control/session/end"])
def test_a_state_change_with_the_cookie_not_from_the_page_is_403(
        page: testing.TestClient, headers: dict[str, str], path: str) -> None:
    cookie = sign_in(page)
    resp = page.simulate_post(path, json={}, headers=with_cookie(cookie, **headers))
    assert resp.status_code == 403 and resp.json["error"] == "action_refused", resp.json
    assert page.simulate_get("/v1/status", headers=with_cookie(cookie)).status_code == 200


def test_without_sec_fetch_site_the_pages_own_origin_is_enough(page: testing.TestClient) -> None:
    cookie = sign_in(page)
    # falcon's TestClient is http://falconframework.org: past the guard, the approval is unknown.
    resp = page.simulate_post("/v1/approvals/a1/approve", json={}, headers=with_cookie(
        cookie, **{"X-Wakeline-Action": "1", "Origin": "http://falconframework.org"}))
    assert resp.status_code == 404 and resp.json["error"] == "not_found"


def test_no_response_carries_a_cors_header(page: testing.TestClient) -> None:
    cookie = sign_in(page)
    evil = {"Origin": "http://127.0.0.1:9999", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-wakeline-action, content-type"}
    answers = [page.simulate_options(path, headers=evil) for path in
               ("/v1/status", "/v1/conversations/c1/stop", "/control/session", "/v1/events")]
    answers += [page.simulate_get("/v1/status", headers=with_cookie(cookie, **evil)),
                page.simulate_get("/control", headers=with_cookie(cookie, **evil)),
                page.simulate_post("/control/session", json={"token": OPERATOR_TOKEN}, headers=evil),
                page.simulate_post("/v1/conversations/c1/stop",
                                   headers=with_cookie(cookie, **evil, **PAGE))]
    for resp in answers:
        assert not [h for h in resp.headers if h.lower().startswith("access-control-")], resp.headers
