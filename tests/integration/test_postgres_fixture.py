"""The PostgreSQL test fixture itself: a real throwaway cluster, fresh databases, a clean stop."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from tests.support import postgres as pg

pytestmark = pytest.mark.slow


def test_finds_the_newest_server_directory(tmp_path: Path) -> None:
    for major in ("13", "15", "9"):
        bin_dir = tmp_path / major / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("initdb", "postgres", "pg_isready"):
            (bin_dir / name).write_text("")
    (tmp_path / "16" / "bin").mkdir(parents=True)  # incomplete: no binaries
    assert pg.find_server(tmp_path) == tmp_path / "15" / "bin"
    assert pg.find_server(tmp_path / "none") is None


def test_a_missing_server_skips_or_fails_where_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pg.REQUIRE_ENV, raising=False)
    monkeypatch.setenv(pg.CI_ENV, "false")
    with pytest.raises(pytest.skip.Exception, match="no server"):
        pg.unavailable("no server")
    for env, value in ((pg.CI_ENV, "true"), (pg.REQUIRE_ENV, "1")):
        monkeypatch.setenv(env, value)
        with pytest.raises(pytest.fail.Exception, match="PostgreSQL required here"):
            pg.unavailable("no server")
        monkeypatch.delenv(env)


def test_fresh_databases_are_empty_and_apart(postgres: pg.Cluster) -> None:
    import psycopg

    first, second = postgres.create_database(), postgres.create_database()
    assert first != second
    with psycopg.connect(first, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id BIGINT PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
    with psycopg.connect(second, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 't'").fetchone() == (0,)
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        assert conn.execute("SELECT current_setting('server_encoding')").fetchone() == ("UTF8",)
    for url in (first, second):
        postgres.drop_database(url.rsplit("/", 1)[1])


def test_the_server_runs_as_a_non_root_user_on_loopback(postgres: pg.Cluster) -> None:
    owner = Path(f"/proc/{postgres.process.pid}").stat().st_uid
    if os.geteuid() == 0:
        assert owner == pwd.getpwnam(pg.SERVER_USER).pw_uid
    else:
        assert owner == os.geteuid()
    assert (postgres.root / f".s.PGSQL.{postgres.port}").exists()  # the socket stays in the temp dir
    assert postgres.url().startswith("postgresql://postgres@127.0.0.1:")
    assert {"start", "copy"} <= set(postgres.timings)


def test_postgres_url_is_a_fresh_database(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_a_second_cluster_starts_and_stops_cleanly(postgres: pg.Cluster) -> None:
    other = pg.start_cluster(postgres.bin_dir)
    try:
        assert other.port != postgres.port
        url = other.create_database("probe")
        import psycopg

        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        other.stop()
    assert not other.running()
    assert other.process.returncode == 0  # a fast shutdown, not a crash
    assert not other.root.exists()
    assert other.timings["stop"] < 10
