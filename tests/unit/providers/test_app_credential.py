"""The Linear app's token: the endpoint, the file, renewal before expiry and after a refusal.

Against the fake Linear's real token endpoint on loopback, which issues 24-hour tokens
whose refresh token rotates on every use; time is the frozen clock, moved past a day.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.fakes.linear import FakeLinear, FakeOAuth
from wakeline.clock import SystemClock, to_ms
from wakeline.errors import LinearAuthUnavailable
from wakeline.providers.linear.credentials import AppCredential, AuthState
from wakeline.providers.linear.oauth import (
    SCOPES, TokenEndpoint, TokenEndpointUnavailable, TokenRefused, authorize_url,
)
from wakeline.providers.linear.token_file import StoredTokens, TokenFile, TokenFileInvalid

REDIRECT = "http://127.0.0.1:8788/oauth/callback"
DAY = 24 * 3600


@pytest.fixture
def fake() -> Iterator[FakeLinear]:
    server = FakeLinear(oauth=FakeOAuth()).start()
    yield server
    server.stop()


def endpoint(fake: FakeLinear, **kw: Any) -> TokenEndpoint:
    assert fake.oauth is not None
    return TokenEndpoint(fake.oauth_url, fake.oauth.client_id, fake.oauth.client_secret,
                         SystemClock(), **kw)


def installed(fake: FakeLinear, tmp_path: Path, grant: str = "authorization_code",
              seen: list[AuthState] | None = None) -> AppCredential:
    """A credential whose app was installed just now (one code exchange)."""
    assert fake.oauth is not None
    credential = AppCredential(grant, fake.oauth.client_id,  # type: ignore[arg-type]
                               TokenFile(tmp_path / "secrets" / "linear-oauth.json"),
                               endpoint(fake), SystemClock())
    if seen is not None:
        credential.subscribe(seen.append)
    if grant == "authorization_code":
        first = endpoint(fake).exchange(fake.oauth.authorize(REDIRECT), REDIRECT)
        credential.install(first, viewer_id="app-user-1", viewer_name="wakeline app",
                           organization_id="org-test", organization_name="Test workspace")
    return credential


def token_of(header: str) -> str:
    return header.removeprefix("Bearer ")


def test_the_authorize_url_installs_the_app_as_itself() -> None:
    url = urlparse(authorize_url("client-1", REDIRECT, "st-123"))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert (url.scheme, url.netloc, url.path) == ("https", "linear.app", "/oauth/authorize")
    assert query == {"response_type": "code", "actor": "app", "client_id": "client-1",
                     "redirect_uri": REDIRECT, "state": "st-123",
                     "scope": "read,write,app:assignable,app:mentionable"}
    assert SCOPES == ("read", "write", "app:assignable", "app:mentionable")


def test_the_endpoint_exchanges_refreshes_and_refuses(fake: FakeLinear, frozen: Any) -> None:
    assert fake.oauth is not None
    grant = endpoint(fake).exchange(fake.oauth.authorize(REDIRECT), REDIRECT)
    # The expiry is ours: received now (our clock) plus expires_in, whatever Linear's clock says.
    assert grant.expires_ms == to_ms(SystemClock().now()) + DAY * 1000
    assert grant.refresh_token and grant.scope.startswith("read,write")
    again = endpoint(fake).refresh(grant.refresh_token)
    assert again.refresh_token != grant.refresh_token  # rotated
    with pytest.raises(TokenRefused) as spent:
        endpoint(fake).refresh(grant.refresh_token)  # the old one is spent
    assert spent.value.error == "invalid_grant"
    assert fake.oauth.client_secret not in str(spent.value)
    with pytest.raises(TokenRefused):
        endpoint(fake).exchange("not-a-code", REDIRECT)


@pytest.mark.parametrize("behaviour", ["500", "drop", "slow"])
def test_an_endpoint_down_or_slow_is_unavailable_not_refused(fake: FakeLinear, behaviour: str) -> None:
    assert fake.oauth is not None
    fake.oauth.script.append(behaviour)
    with pytest.raises(TokenEndpointUnavailable):
        endpoint(fake, timeouts=(1.0, 0.3)).client_credentials()


def test_the_token_file_is_owner_only_atomic_and_checked(tmp_path: Path) -> None:
    file = TokenFile(tmp_path / "secrets" / "linear-oauth.json")
    assert file.read() is None and file.stamp() is None
    tokens = StoredTokens(grant="authorization_code", client_id="c", access_token="a" * 20,
                          refresh_token="r" * 20, received_ms=1, expires_ms=1001)
    file.write(tokens)
    assert file.mode() == 0o600 and file.read() == tokens
    assert [p.name for p in file.path.parent.iterdir()] == ["linear-oauth.json"]  # no leftovers
    assert tokens.refresh_due_ms(0.1) == 901
    file.path.write_text('{"access_token": "' + "s" * 30 + '", "garbage": ')
    with pytest.raises(TokenFileInvalid) as bad:
        file.read()
    assert "s" * 30 not in str(bad.value)


def test_a_day_later_the_token_is_renewed_once_and_durable_first(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    first = credential.header()
    frozen.tick(int(DAY * 0.89))
    assert credential.header() == first  # more than a tenth of its life left
    frozen.tick(int(DAY * 0.02))
    renewed = credential.header()
    assert renewed != first and fake.oauth.valid(renewed)
    on_disk = TokenFile(tmp_path / "secrets" / "linear-oauth.json").read()
    assert on_disk is not None and on_disk.access_token == token_of(renewed)
    assert on_disk.viewer_id == "app-user-1" and on_disk.organization_id == "org-test"
    frozen.tick(DAY + 60)  # past the new token's life too: renewed again, once
    assert fake.oauth.valid(credential.header())
    assert fake.oauth.grants == ["authorization_code", "refresh_token", "refresh_token"]


def test_a_refusal_renews_once_whatever_the_number_of_threads(
        fake: FakeLinear, tmp_path: Path) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    stale = credential.header()
    fake.oauth.access.clear()  # Linear dropped the access token early
    answers: list[str | None] = []
    threads = [threading.Thread(target=lambda: answers.append(credential.refused(stale)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(set(answers)) == 1 and answers[0] != stale and fake.oauth.valid(answers[0])
    assert fake.oauth.grants.count("refresh_token") == 1


def test_a_revoked_refresh_token_means_no_token_works_until_a_new_install(
        fake: FakeLinear, tmp_path: Path) -> None:
    assert fake.oauth is not None
    seen: list[AuthState] = []
    credential = installed(fake, tmp_path, seen=seen)
    stale = credential.header()
    fake.oauth.revoke()  # the app was uninstalled
    assert credential.refused(stale) is None
    state = credential.state()
    assert (state.condition, state.fix) == ("refused", "run `wakeline linear install`")
    assert not credential.usable() and [s.condition for s in seen][-1] == "refused"
    with pytest.raises(LinearAuthUnavailable) as refused:
        credential.header()
    assert "wakeline linear install" in refused.value.detail
    installed(fake, tmp_path)  # a new install, written by another credential (another process)
    assert credential.usable() and fake.oauth.valid(credential.header())
    assert [s.condition for s in seen][-1] == "ok"


def test_an_endpoint_down_keeps_a_live_token_and_waits_once_it_expired(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    first = credential.header()
    frozen.tick(int(DAY * 0.95))
    fake.oauth.script.append("500")
    assert credential.header() == first  # still valid: used, renewal retried later
    frozen.tick(int(DAY * 0.06))  # expired, and the endpoint still down
    fake.oauth.script.append("500")
    with pytest.raises(LinearAuthUnavailable):
        credential.header()
    assert credential.state().condition == "unreachable" and not credential.usable()
    frozen.tick(61)  # a minute later it may try again, and the endpoint is back
    assert credential.usable() and fake.oauth.valid(credential.header())


def test_client_credentials_are_fetched_when_missing_and_again_before_expiry(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path, grant="client_credentials")
    assert credential.usable()
    first = credential.header()
    assert fake.oauth.grants == ["client_credentials"]
    frozen.tick(int(30 * DAY * 0.91))
    assert credential.header() != first and fake.oauth.grants == ["client_credentials"] * 2
    # A token file edited into garbage gets the token in use back, with no new fetch.
    (tmp_path / "secrets" / "linear-oauth.json").write_text("garbage")
    assert fake.oauth.valid(credential.header()) and len(fake.oauth.grants) == 2


def test_a_garbage_file_under_a_working_pair_gets_the_pair_back(
        fake: FakeLinear, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    credential = installed(fake, tmp_path)
    held = credential.header()
    path = tmp_path / "secrets" / "linear-oauth.json"
    path.write_text('{"access_token": 5}')
    assert credential.usable() and credential.header() == held
    assert credential.state().condition == "ok"
    stored = TokenFile(path).read()  # the rotating refresh token is on disk again
    assert stored is not None and f"Bearer {stored.access_token}" == held
    assert stored.refresh_token == credential.tokens.refresh_token  # type: ignore[union-attr]
    assert (path.stat().st_mode & 0o777) == 0o600
    assert "rewrote it with the tokens in use" in caplog.text
    assert stored.access_token not in caplog.text


def test_a_garbage_file_at_start_is_reported_never_trusted(fake: FakeLinear, tmp_path: Path) -> None:
    installed(fake, tmp_path)
    path = tmp_path / "secrets" / "linear-oauth.json"
    path.write_text('{"access_token": 5}')
    assert fake.oauth is not None
    credential = AppCredential("authorization_code", fake.oauth.client_id, TokenFile(path),
                               endpoint(fake), SystemClock())  # a restart: nothing in memory
    assert not credential.usable()
    state = credential.state()
    assert state.condition == "invalid_file" and state.fix == "run `wakeline linear install`"
    assert path.read_text() == '{"access_token": 5}'  # reported, left for the person to see


RENEWER = textwrap.dedent("""
    import os, signal, sys
    from wakeline.clock import SystemClock
    from wakeline.providers.linear.credentials import AppCredential
    from wakeline.providers.linear.oauth import TokenEndpoint
    from wakeline.providers.linear.token_file import TokenFile
    url, client_id, secret, path, stale, then = sys.argv[1:]
    credential = AppCredential("authorization_code", client_id, TokenFile(__import__("pathlib").Path(path)),
                               TokenEndpoint(url, client_id, secret, SystemClock()), SystemClock())
    print(credential.refused(stale), flush=True)
    if then == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
""")


def renewer(fake: FakeLinear, path: Path, stale: str, then: str = "exit") -> subprocess.Popen[str]:
    assert fake.oauth is not None
    return subprocess.Popen([sys.executable, "-c", RENEWER, fake.oauth_url, fake.oauth.client_id,
                             fake.oauth.client_secret, str(path), stale, then],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3])


def test_two_processes_renewing_at_once_spend_the_refresh_token_once(
        fake: FakeLinear, tmp_path: Path) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    stale = credential.header()
    path = tmp_path / "secrets" / "linear-oauth.json"
    others = [renewer(fake, path, stale) for _ in range(3)]
    mine = credential.refused(stale)
    theirs = [p.communicate(timeout=30)[0].strip() for p in others]
    assert set(theirs) == {mine} and fake.oauth.valid(mine)
    assert fake.oauth.grants.count("refresh_token") == 1


def test_a_kill_9_right_after_a_renewal_leaves_a_working_token_on_disk(
        fake: FakeLinear, tmp_path: Path) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    path = tmp_path / "secrets" / "linear-oauth.json"
    proc = renewer(fake, path, credential.header(), then="kill")
    printed = proc.communicate(timeout=30)[0].strip()
    assert proc.returncode == -signal.SIGKILL
    stored = json.loads(path.read_text())
    assert f"Bearer {stored['access_token']}" == printed and fake.oauth.valid(printed)
    assert stored["refresh_token"] in fake.oauth.refresh  # the next renewal works too
    assert os.stat(path).st_mode & 0o777 == 0o600
