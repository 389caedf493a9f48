"""Roles one host holds at a time, on a real PostgreSQL: taken by one, handed over when the
holder's connection goes (a dead host), taken back after a broken connection, and always
this host's on one host."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg")

from wakeline.scheduling.roles import Roles  # noqa: E402


def two_hosts(url: str, role: str, log: list[str]) -> tuple[Roles, Roles]:
    """Hosts a and b, each with the role; what each starts and stops goes to `log`."""
    hosts = Roles(url, "a"), Roles(url, "b")
    for roles in hosts:
        name = roles.host_id
        roles.add(role, lambda n=name: log.append(f"{n} start"),
                  lambda n=name: log.append(f"{n} stop"))
    return hosts


def test_one_host_holds_a_role_and_a_survivor_takes_it_when_the_holder_dies(
        postgres_url: str) -> None:
    log: list[str] = []
    a, b = two_hosts(postgres_url, "gateway", log)
    a.poll()
    b.poll()
    b.poll()
    assert log == ["a start"] and a.held("gateway") and not b.held("gateway")
    a.release()  # the holder's lock connection closes, as when its process dies
    b.poll()
    assert log == ["a start", "b start"] and b.names() == ["gateway"]
    b.release()


def test_a_broken_lock_connection_is_taken_back_or_the_part_stops(postgres: object,
                                                                  postgres_url: str) -> None:
    import psycopg

    log: list[str] = []
    a, b = two_hosts(postgres_url, "matrix", log)
    a.poll()

    def break_holder() -> None:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE application_name = 'wakeline role matrix'")

    break_holder()
    a.poll()  # nobody took it meanwhile: a takes it back and keeps running
    assert log == ["a start"] and a.held("matrix")
    break_holder()
    b.poll()  # b is quicker this time
    a.poll()  # a finds it gone: its part stops, and stays stopped
    a.poll()
    assert log == ["a start", "b start", "a stop"]
    assert b.held("matrix") and not a.held("matrix")
    a.release()
    b.release()


def test_on_one_host_every_role_is_this_ones() -> None:
    log: list[str] = []
    roles = Roles(None, "solo")
    roles.add("gateway", lambda: log.append("solo start"), lambda: log.append("solo stop"))
    roles.poll()
    roles.poll()
    assert log == ["solo start"] and roles.held("gateway")
