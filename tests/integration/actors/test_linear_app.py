"""The Linear app through the real service: installed in one command, tokens that renew.

The fake Linear serves an OAuth token endpoint (24-hour tokens, a refresh token that
rotates on every use) and refuses GraphQL requests without a live token (401
AUTHENTICATION_ERROR), as Linear does.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import requests
from click.testing import CliRunner
from freezegun import freeze_time

from tests.conftest import FROZEN_AT, OPERATOR_TOKEN, session_event, signed
from tests.fakes.linear import FakeLinear, FakeOAuth
from tests.helpers import kept_journal, kept_tokens, wait_until
from wakeline.cli import cli

DAY = 24 * 3600


def start(harness: Callable[..., Any], grant: str = "authorization_code",
          fake: FakeLinear | None = None, **kw: Any) -> Any:
    """A service configured with the fake's OAuth app (not installed yet)."""
    fake = (fake or FakeLinear(oauth=FakeOAuth())).start()
    assert fake.oauth is not None
    return harness("ok", linear=fake, client_secret=fake.oauth.client_secret, linear_config={
        "client_id": fake.oauth.client_id, "oauth_url": fake.oauth_url, "grant": grant}, **kw)


def install(h: Any) -> dict[str, Any]:
    """The whole browser flow: the URL, an admin's approval, Linear's redirect to the callback."""
    begun = h.api("POST", "/v1/linear/install", json={}).json()
    code = h.linear.oauth.authorize(begun["redirectUri"])
    page = requests.get(begun["redirectUri"], params={"code": code, "state": begun["state"]},
                        timeout=10)
    assert page.status_code == 200, page.text
    return begun


def landed(h: Any) -> list[dict[str, Any]]:
    """Activities Linear accepted (with a live token), in arrival order."""
    return [r.input for r in h.linear.activities() if not r.refused]


def test_install_through_the_callback(harness: Callable[..., Any],
                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    h = start(harness)
    status = h.api("GET", "/v1/status").json()["linear"]
    assert (status["ok"], status["state"], status["fix"]) == (
        False, "not_installed", "run `wakeline linear install`")
    begun = h.api("POST", "/v1/linear/install", json={}).json()
    url = urlparse(begun["authorizeUrl"])
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert query["actor"] == "app" and query["scope"] == "read,write,app:assignable,app:mentionable"
    assert query["state"] == begun["state"] and query["client_id"] == "client-1"
    assert begun["redirectUri"] == h.service.operator.url + "/oauth/callback" == query["redirect_uri"]
    code = h.linear.oauth.authorize(begun["redirectUri"])
    # A wrong state opens nothing.
    wrong = requests.get(begun["redirectUri"], params={"code": code, "state": "forged"}, timeout=10)
    assert wrong.status_code == 400 and "unknown" in wrong.text
    assert kept_tokens(h.service) is None
    page = requests.get(begun["redirectUri"], params={"code": code, "state": begun["state"]},
                        timeout=10)
    assert page.status_code == 200 and "wakeline app" in page.text and code not in page.text
    outcome = h.api("GET", f"/v1/linear/install/{begun['state']}").json()
    assert outcome["status"] == "connected"
    assert outcome["installed"]["viewer"] == {"id": "app-user-1", "name": "wakeline app"}
    assert outcome["installed"]["organization"] == {"id": "org-test", "name": "Test workspace"}
    # The state is spent: the same redirect again changes nothing.
    again = requests.get(begun["redirectUri"], params={"code": code, "state": begun["state"]},
                         timeout=10)
    assert again.status_code == 400 and "already used" in again.text
    stored = kept_tokens(h.service)  # owner-only (0600) when it is the host's file
    assert stored is not None
    assert (stored["viewer_id"], stored["organization_id"]) == ("app-user-1", "org-test")
    assert h.api("GET", "/v1/status").json()["linear"]["ok"] is True
    doctor = h.api("GET", "/v1/doctor").json()
    checks = {c["name"]: c for c in doctor["checks"]}
    assert checks["linear_token"]["ok"] and checks["linear_client_secret"]["ok"]
    assert checks["linear_account"]["detail"] == "wakeline app (app-user-1)"
    assert "wakeline_linear_auth_ok 1.0" in h.api("GET", "/metrics").text
    # The app's token answers agent sessions.
    assert h.deliver(session_event())["outcome"] == "accepted"
    wait_until(lambda: [a["content"]["type"] for a in landed(h)] == ["thought", "response"],
               message="acknowledged and answered")
    assert all(r.headers["Authorization"] == f"Bearer {stored['access_token']}"
               for r in h.linear.activities())
    # Deliveries of another organization are refused now (the install's is the default).
    other = session_event(session_id="s-other", organizationId="org-elsewhere")
    raw, headers = signed(other)
    refused = requests.post(h.service.ingress.url + "/webhooks/linear", data=raw, headers=headers,
                            timeout=10)
    assert refused.status_code == 403
    secrets = [stored["access_token"], stored["refresh_token"], h.linear.oauth.client_secret, code]
    logged = "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records
                       if r.name.startswith("wakeline"))  # the test's own HTTP client logs URLs
    text = logged + kept_journal(h.service) \
        + json.dumps(doctor) + json.dumps(h.api("GET", "/v1/status").json())
    assert not [s for s in secrets if s in text]


def test_install_with_a_code_and_what_it_refuses(harness: Callable[..., Any]) -> None:
    h = start(harness)
    bogus = h.api("POST", "/v1/linear/install", json={"code": "not-a-code"})
    assert bogus.status_code == 400 and bogus.json()["error"] == "install_refused"
    assert kept_tokens(h.service) is None
    begun = h.api("POST", "/v1/linear/install", json={}).json()
    code = h.linear.oauth.authorize(begun["redirectUri"])
    done = h.api("POST", "/v1/linear/install", json={"code": code})
    assert done.status_code == 200 and done.json()["status"] == "connected"
    assert h.api("GET", f"/v1/linear/install/{begun['state']}").json()["status"] == "connected"
    reused = h.api("POST", "/v1/linear/install", json={"code": code})
    assert reused.status_code == 400 and "used" in reused.json()["detail"]
    # An admin who declines: Linear's redirect carries an error, the outcome says so.
    declined = h.api("POST", "/v1/linear/install", json={}).json()
    page = requests.get(declined["redirectUri"],
                        params={"error": "access_denied", "state": declined["state"]}, timeout=10)
    assert page.status_code == 400
    outcome = h.api("GET", f"/v1/linear/install/{declined['state']}").json()
    assert outcome == {"status": "failed", "error": "Linear says: access_denied"}
    assert h.api("GET", "/v1/status").json()["linear"]["ok"] is True  # the first install stands


def test_without_an_app_install_says_how_to_configure_one(harness: Callable[..., Any]) -> None:
    h = harness("ok")
    refused = h.api("POST", "/v1/linear/install", json={})
    assert refused.status_code == 409 and "linear.client_id" in refused.json()["detail"]
    assert requests.get(h.service.operator.url + "/oauth/callback", timeout=10).status_code == 409


def test_a_day_later_writes_keep_working_with_one_refresh(harness: Callable[..., Any]) -> None:
    with freeze_time(FROZEN_AT, tick=True) as frozen:
        h = start(harness)
        install(h)
        assert h.deliver(session_event())["outcome"] == "accepted"
        wait_until(lambda: len(landed(h)) == 2, message="the first session answered")
        frozen.tick(DAY + 3600)
        assert h.deliver(session_event(session_id="session-2", issue_id="issue-2",
                                       identifier="ENG-2"))["outcome"] == "accepted"
        wait_until(lambda: len(landed(h)) == 4, message="a day later, answered too")
        assert h.linear.oauth.grants == ["authorization_code", "refresh_token"]
        assert not [r for r in h.linear.activities() if r.refused]  # renewed before it ran out


def test_a_401_mid_run_renews_once_and_the_write_lands_once(harness: Callable[..., Any]) -> None:
    h = start(harness)
    install(h)
    h.linear.oauth.access.clear()  # Linear drops the access token before its time
    assert h.deliver(session_event())["outcome"] == "accepted"
    wait_until(lambda: len(landed(h)) == 2, message="both writes landed")
    ids = [a["id"] for a in landed(h)]
    assert len(set(ids)) == 2  # each once
    assert len([r for r in h.linear.activities() if r.refused]) == 1  # the one refused request
    assert h.linear.oauth.grants == ["authorization_code", "refresh_token"]


def test_a_refused_refresh_keeps_the_answers_until_a_new_install(
        harness: Callable[..., Any]) -> None:
    h = start(harness)
    install(h)
    h.linear.oauth.revoke()  # the app was uninstalled: the refresh token is refused too
    assert h.deliver(session_event())["outcome"] == "accepted"
    wait_until(lambda: len(h.runs()) == 1, message="the agent ran without waiting for Linear")
    wait_until(lambda: h.service.store.outbox.unsettled() == 2, message="both answers wait")
    status = h.api("GET", "/v1/status").json()["linear"]
    assert (status["ok"], status["state"], status["fix"]) == (
        False, "refused", "run `wakeline linear install`")
    checks = {c["name"]: c for c in h.api("GET", "/v1/doctor").json()["checks"]}
    assert not checks["linear_token"]["ok"] and "wakeline linear install" in checks["linear_token"]["detail"]
    assert "wakeline_linear_auth_ok 0.0" in h.api("GET", "/metrics").text
    stages = wait_until(lambda: [e["stage"] for e in h.api("GET", "/v1/journal").json()["entries"]
                                 if e["stage"] == "linear_auth_refused"], message="journaled")
    assert stages
    h.restart()  # the answers wait durably; the first write after the start finds out again
    wait_until(lambda: h.api("GET", "/v1/status").json()["linear"]["state"] == "refused",
               message="still refused after the restart")
    assert h.service.store.outbox.unsettled() == 2 and not landed(h)
    install(h)
    wait_until(lambda: [a["content"]["type"] for a in landed(h)] == ["thought", "response"],
               message="sent in order once a token works")
    wait_until(lambda: h.service.store.outbox.unsettled() == 0, message="all settled")
    assert len(landed(h)) == 2  # nothing twice


def test_client_credentials_fetch_the_apps_token_at_start_up(harness: Callable[..., Any]) -> None:
    h = start(harness, grant="client_credentials")
    wait_until(lambda: h.linear.oauth.grants == ["client_credentials"], message="fetched at start")
    assert h.deliver(session_event())["outcome"] == "accepted"
    wait_until(lambda: len(landed(h)) == 2, message="answered with the app's token")
    done = h.api("POST", "/v1/linear/install", json={}).json()  # no browser: checked and stored
    assert done["status"] == "connected" and done["installed"]["viewer"]["id"] == "app-user-1"
    assert h.api("GET", "/v1/status").json()["linear"]["ok"] is True


def test_the_cli_installs_with_the_callback_or_a_code(harness: Callable[..., Any]) -> None:
    h = start(harness)
    env = {**os.environ, "WAKELINE_API_URL": h.service.operator.url,
           "WAKELINE_TOKEN": OPERATOR_TOKEN, "NO_COLOR": "1"}
    env.pop("WAKELINE_CONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "wakeline", "linear", "install"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    url = next(line.strip() for line in proc.stderr if line.strip().startswith("https://"))
    query = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
    code = h.linear.oauth.authorize(query["redirect_uri"])
    requests.get(query["redirect_uri"], params={"code": code, "state": query["state"]}, timeout=10)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out.strip().startswith("connected to Linear as wakeline app (app-user-1) in Test "
                                  "workspace (org-test); the token renews itself")
    runner = CliRunner()
    cli_env = {"WAKELINE_API_URL": h.service.operator.url, "WAKELINE_TOKEN": OPERATOR_TOKEN,
               "WAKELINE_CONFIG": None}
    refused = runner.invoke(cli, ["linear", "install", "--code", code], env=cli_env)
    assert refused.exit_code == 1 and "install_refused" in refused.stderr
    assert "next: run `wakeline linear install` again" in refused.stderr
    fresh = h.linear.oauth.authorize(query["redirect_uri"])
    done = runner.invoke(cli, ["linear", "install", "--code", fresh, "--redirect-uri",
                               query["redirect_uri"], "--json"], env=cli_env)
    assert done.exit_code == 0 and json.loads(done.stdout)["status"] == "connected"
