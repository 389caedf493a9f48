"""The app's token renewed in the background, and asked for again soon after a failure
(issue 36, decision 0031).

Against the fake Linear's real token endpoint on loopback; time is the frozen clock,
moved in the ticker's half-second steps. `tick` returns the renewal's thread, which the
test joins: nothing here waits on the wall clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.linear import FakeLinear, FakeOAuth
from tests.unit.providers.test_app_credential import DAY, installed, token_of
from wakeline.errors import LinearAuthUnavailable
from wakeline.providers.linear.credentials import AppCredential, AuthState
from wakeline.providers.linear.token_file import TokenFile

TICK_SECONDS = 0.5  # the composition root's ticker


@pytest.fixture
def fake() -> Iterator[FakeLinear]:
    server = FakeLinear(oauth=FakeOAuth()).start()
    yield server
    server.stop()


def tick(credential: AppCredential) -> bool:
    """One tick of the ticker: True when it started a renewal (then finished)."""
    thread = credential.tick()
    if thread is None:
        return False
    thread.join(30)
    assert not thread.is_alive()
    return True


def ticks(credential: AppCredential, frozen: Any, seconds: float) -> int:
    """Tick every half second for `seconds` of the frozen clock: the renewals started."""
    started = 0
    for _ in range(int(seconds / TICK_SECONDS)):
        frozen.tick(TICK_SECONDS)
        started += tick(credential)
    return started


def reached(fake: FakeLinear, requests: int) -> None:
    """Until the token endpoint got `requests` requests (real time, bounded)."""
    assert fake.oauth is not None
    pause = threading.Event()
    for _ in range(1000):
        if len(fake.oauth.asked) >= requests:
            return
        pause.wait(0.01)
    raise AssertionError(f"the token endpoint got {len(fake.oauth.asked)} requests")


def attempts(fake: FakeLinear) -> list[float]:
    """Seconds between consecutive requests to the token endpoint."""
    assert fake.oauth is not None
    return [round(b - a, 3) for a, b in zip(fake.oauth.asked, fake.oauth.asked[1:])]


def test_renewed_in_the_background_at_nine_tenths_of_its_life_with_no_call(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    first = credential.header()
    frozen.tick(int(DAY * 0.899))
    assert not tick(credential)  # more than a tenth of its life left: nothing asked
    assert fake.oauth.grants == ["authorization_code"]
    frozen.tick(int(DAY * 0.002))
    assert tick(credential)
    assert fake.oauth.grants == ["authorization_code", "refresh_token"]
    on_disk = TokenFile(tmp_path / "secrets" / "linear-oauth.json").read()
    assert on_disk is not None and f"Bearer {on_disk.access_token}" != first
    assert fake.oauth.valid(f"Bearer {on_disk.access_token}")
    assert on_disk.refresh_token in fake.oauth.refresh  # the rotated one, kept
    assert token_of(credential.header()) == on_disk.access_token  # used at once, no new request
    assert not tick(credential) and len(fake.oauth.asked) == 2


def test_client_credentials_are_fetched_and_renewed_in_the_background(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path, grant="client_credentials")
    assert tick(credential)  # no token yet: fetched before anything needs it
    assert not tick(credential) and fake.oauth.grants == ["client_credentials"]
    first = credential.header()
    frozen.tick(int(30 * DAY * 0.899))
    assert not tick(credential)
    frozen.tick(int(30 * DAY * 0.002))
    assert tick(credential) and fake.oauth.grants == ["client_credentials"] * 2
    assert credential.header() != first and len(fake.oauth.asked) == 2


def test_a_500_after_expiry_is_asked_again_after_1_2_4_seconds_up_to_a_minute(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    seen: list[AuthState] = []
    credential = installed(fake, tmp_path, seen=seen)
    frozen.tick(DAY + 60)  # a quiet service: nothing asked for a token until after expiry
    fake.oauth.down = True
    assert tick(credential)  # the first renewal after expiry answers 500
    state = credential.state()
    assert state.condition == "unreachable" and not credential.usable()
    assert state.detail.endswith("the token endpoint answered 500; retrying in 1 s")
    assert [s.condition for s in seen] == ["ok", "unreachable"]
    with pytest.raises(LinearAuthUnavailable):
        credential.header()  # waits for the backoff: no request of its own
    ticks(credential, frozen, 1 + 2 + 4 + 8 + 16 + 32 + 60 + 60 + 30)
    assert attempts(fake)[1:] == [1, 2, 4, 8, 16, 32, 60, 60]  # after the install's exchange
    assert "retrying in 30 s" in credential.state().detail
    fake.oauth.down = False  # the endpoint recovers: the next attempt works, within the minute
    assert ticks(credential, frozen, 30) == 1
    assert attempts(fake)[-1] == 60
    assert credential.state().condition == "ok" and credential.usable()
    assert [s.condition for s in seen] == ["ok", "unreachable", "ok"]
    assert fake.oauth.valid(credential.header()) and fake.oauth.grants[-1] == "refresh_token"


def test_a_success_resets_the_wait_and_a_live_token_is_used_meanwhile(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    frozen.tick(DAY + 60)
    fake.oauth.down = True
    assert tick(credential) and ticks(credential, frozen, 1 + 2 + 4) == 3  # waits of 1, 2, 4 s
    fake.oauth.down = False
    assert ticks(credential, frozen, 8) == 1  # renewed: the next wait starts again from 1 s
    live = credential.header()
    frozen.tick(int(DAY * 0.95))  # due again
    fake.oauth.down = True
    assert tick(credential)
    state = credential.state()
    assert state.condition == "ok" and credential.usable()
    assert "renewing it failed (the token endpoint answered 500), retrying in 1 s" in state.detail
    asked = len(fake.oauth.asked)
    assert credential.header() == live  # still valid: used, and no request of its own
    assert len(fake.oauth.asked) == asked
    assert ticks(credential, frozen, 1) == 1 and attempts(fake)[-1] == 1
    assert ticks(credential, frozen, 2) == 1 and attempts(fake)[-1] == 2
    fake.oauth.down = False
    assert ticks(credential, frozen, 4) == 1
    assert credential.header() != live and fake.oauth.valid(credential.header())
    assert "retrying" not in credential.state().detail


def test_a_refused_renewal_is_not_asked_again_in_a_loop(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    frozen.tick(int(DAY * 0.95))
    fake.oauth.script.append("invalid_grant")  # the refresh token was revoked
    assert tick(credential)
    state = credential.state()
    assert (state.condition, state.fix) == ("refused", "run `wakeline linear install`")
    assert "retrying" not in state.detail
    assert ticks(credential, frozen, 600) == 0 and len(fake.oauth.asked) == 2
    assert not credential.usable()
    with pytest.raises(LinearAuthUnavailable) as refused:
        credential.header()
    assert "wakeline linear install" in refused.value.detail and len(fake.oauth.asked) == 2
    installed(fake, tmp_path)  # a new install brings it back
    assert credential.usable() and fake.oauth.valid(credential.header())


def test_calls_never_wait_for_a_background_renewal_while_their_token_works(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    live = credential.header()
    frozen.tick(int(DAY * 0.95))
    gate = fake.oauth.gate = threading.Event()  # the token endpoint holds its answer
    thread = credential.tick()
    assert thread is not None
    reached(fake, 2)
    assert credential.header() == live and credential.usable()  # no wait for the renewal
    assert credential.tick() is None  # one renewal at a time
    assert thread.is_alive()
    gate.set()
    thread.join(30)
    assert credential.header() != live and fake.oauth.grants.count("refresh_token") == 1


def test_a_call_whose_token_expired_waits_for_the_renewal_under_way(
        fake: FakeLinear, tmp_path: Path, frozen: Any) -> None:
    assert fake.oauth is not None
    credential = installed(fake, tmp_path)
    expired = credential.header()
    frozen.tick(DAY + 60)
    gate = fake.oauth.gate = threading.Event()
    thread = credential.tick()
    assert thread is not None
    reached(fake, 2)
    got: list[str] = []
    caller = threading.Thread(target=lambda: got.append(credential.header()))
    caller.start()
    caller.join(0.2)
    assert caller.is_alive() and not got  # no expired token handed out meanwhile
    gate.set()
    caller.join(30)
    thread.join(30)
    assert got and got[0] != expired and fake.oauth.valid(got[0])
    assert len(fake.oauth.asked) == 2  # the caller asked nothing of its own
