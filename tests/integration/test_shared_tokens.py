"""The Linear app's tokens in a shared PostgreSQL database: hosts renewing at once (on a
refusal, or in the background) spend the refresh token once, and a host that ran alone
brings its token file along."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from tests.fakes.linear import FakeLinear, FakeOAuth  # noqa: E402
from tests.helpers import wait_until  # noqa: E402
from tests.unit.providers.test_app_credential import REDIRECT, endpoint  # noqa: E402
from wakeline.clock import SystemClock  # noqa: E402
from wakeline.models.store import Store  # noqa: E402
from wakeline.providers.linear.credentials import AppCredential  # noqa: E402
from wakeline.providers.linear.shared_tokens import SharedTokens  # noqa: E402
from wakeline.providers.linear.token_file import TokenFile  # noqa: E402


@pytest.fixture
def fake() -> Iterator[FakeLinear]:
    server = FakeLinear(oauth=FakeOAuth()).start()
    yield server
    server.stop()


def host(fake: FakeLinear, url: str, tmp_path: Path, name: str) -> tuple[AppCredential, Store]:
    """One host's credential over the shared database (its own store and file)."""
    assert fake.oauth is not None
    store = Store.open(url, SystemClock(), host=name)
    tokens = SharedTokens(store, url, legacy=TokenFile(tmp_path / name / "linear-oauth.json"))
    return AppCredential("authorization_code", fake.oauth.client_id, tokens, endpoint(fake),
                         SystemClock()), store


def test_hosts_renewing_at_once_spend_the_refresh_token_once(
        fake: FakeLinear, postgres_url: str, tmp_path: Path) -> None:
    assert fake.oauth is not None
    hosts = [host(fake, postgres_url, tmp_path, f"h{n}") for n in range(3)]
    first = hosts[0][0]
    first.install(endpoint(fake).exchange(fake.oauth.authorize(REDIRECT), REDIRECT),
                  viewer_id="app-user-1", viewer_name="wakeline app", organization_id="org-1",
                  organization_name="Org")
    stale = first.header()
    assert all(c.header() == stale for c, _ in hosts)  # every host reads the one install
    got: list[str] = []
    threads = [threading.Thread(target=lambda c=c: got.append(c.refused(stale))) for c, _ in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(set(got)) == 1 and fake.oauth.valid(got[0])
    assert fake.oauth.grants.count("refresh_token") == 1
    assert hosts[0][0].tokens_where and "shared database" in hosts[0][0].tokens_where
    for _, store in hosts:
        store.dispose()


def test_a_host_that_ran_alone_brings_its_token_file(
        fake: FakeLinear, postgres_url: str, tmp_path: Path) -> None:
    assert fake.oauth is not None
    alone = AppCredential("authorization_code", fake.oauth.client_id,
                          TokenFile(tmp_path / "h0" / "linear-oauth.json"), endpoint(fake),
                          SystemClock())
    alone.install(endpoint(fake).exchange(fake.oauth.authorize(REDIRECT), REDIRECT),
                  viewer_id="app-user-1", viewer_name="wakeline app", organization_id="org-1",
                  organization_name="Org")
    before = alone.header()
    moved, store = host(fake, postgres_url, tmp_path, "h0")
    other, other_store = host(fake, postgres_url, tmp_path, "h1")  # no file of its own
    assert moved.header() == before and other.header() == before
    assert fake.oauth.grants.count("refresh_token") == 0
    store.dispose()
    other_store.dispose()


def test_hosts_renewing_in_the_background_at_once_ask_linear_once(
        postgres_url: str, tmp_path: Path) -> None:
    fake = FakeLinear(oauth=FakeOAuth(lifetime_seconds=3)).start()
    assert fake.oauth is not None
    try:
        hosts = [host(fake, postgres_url, tmp_path, f"h{n}") for n in range(3)]
        hosts[0][0].install(endpoint(fake).exchange(fake.oauth.authorize(REDIRECT), REDIRECT),
                            viewer_id="app-user-1", viewer_name="wakeline app",
                            organization_id="org-1", organization_name="Org")
        stale = hosts[0][0].header()
        assert all(c.header() == stale for c, _ in hosts)
        # Every host's ticker finds the renewal due in the same round.
        started = wait_until(lambda: [t for t in (c.tick() for c, _ in hosts) if t is not None],
                             message="a renewal due")
        assert len(started) == 3
        for thread in started:
            thread.join(30)
        assert len(fake.oauth.asked) == 2  # the install, then one host asked; the others read
        assert fake.oauth.grants == ["authorization_code", "refresh_token"]
        fresh = {c.header() for c, _ in hosts}
        assert len(fresh) == 1 and stale not in fresh and fake.oauth.valid(fresh.pop())
        stored = SharedTokens(hosts[1][1], postgres_url).read()
        assert stored is not None and stored.refresh_token in fake.oauth.refresh  # not lost
        for _, store in hosts:
            store.dispose()
    finally:
        fake.stop()
