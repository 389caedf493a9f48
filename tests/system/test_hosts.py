"""Three `wakeline serve` hosts on one PostgreSQL database (engine "dbos"), no load balancer.

Deliveries of 12 issues go to whichever host the sender picks (each one to a random host,
a fifth of them sent again to another host, as a retry through another address would be).
Under load one host is killed with SIGKILL and not restarted: the other two take its turns
over and finish everything. Then it is started again and rejoins. In the end every
acknowledged delivery is completed exactly once, each issue's deliveries reached the agent
in order, no two runs of one conversation overlapped on any hosts, and status lists the
hosts. The figures (lost, doubled, misordered, overlapping, agent runs that ran again, and
how long the takeover took) are printed, as the single-host crash test's are.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests

from tests.helpers import StoreShell, wait_until
from tests.support.hosts import (
    Host, agent_runs, misordered, overlaps, running_lately, running_on, signed_delivery,
    takeover_seconds, write_agent,
)

pytest.importorskip("dbos")

pytestmark = pytest.mark.slow

ISSUES, PER_ISSUE = 12, 8
HOST_TIMEOUT = 4
AGENT_SECONDS = 0.3


def test_three_hosts_lose_double_and_reorder_nothing_when_one_is_killed(
        tmp_path: Path, postgres: Any) -> None:
    url = postgres.create_database()
    agent = write_agent(tmp_path / "agent.py")
    log = tmp_path / "runs.jsonl"
    hosts = [Host(tmp_path, f"host-{n}", url, agent, log, agent_seconds=AGENT_SECONDS,
                  host_timeout=HOST_TIMEOUT) for n in (1, 2, 3)]
    victim = hosts[0]
    rng = random.Random(25)
    work = [(i, n) for n in range(PER_ISSUE) for i in range(ISSUES)]
    acknowledged: set[tuple[int, int]] = set()
    sent_twice = 0
    killed: dict[str, float] = {}
    session = requests.Session()

    def deliver(i: int, n: int) -> None:
        nonlocal sent_twice
        live = [h for h in hosts if h.alive()]
        targets = rng.sample(live, 2 if rng.random() < 0.2 else 1)
        sent_twice += len(targets) - 1
        for target in targets:
            while True:  # as Linear does: until some host acknowledges it
                raw, headers = signed_delivery(i, n)
                try:
                    resp = session.post(target.url, data=raw, headers=headers, timeout=10)
                except requests.RequestException:
                    target = rng.choice([h for h in hosts if h.alive()])
                    continue
                if resp.status_code == 200:
                    assert resp.json()["outcome"] in ("accepted", "duplicate"), resp.json()
                    acknowledged.add((i, n))
                    break
                time.sleep(0.05)

    try:
        for host in hosts:
            host.start()
        for count, (i, n) in enumerate(work):
            deliver(i, n)
            if count == len(work) // 2:
                # Kill a host in the middle of its turns, and do not bring it back yet: best
                # while an agent has just started (not between its exit and the turn's end).
                patience = time.time() + 3

                def mid_run() -> bool:
                    runs = agent_runs(log)
                    return bool(running_lately(runs, victim.name, AGENT_SECONDS / 2)
                                or (time.time() > patience and running_on(runs, victim.name)))

                wait_until(mid_run, timeout=60, message="the victim runs a turn")
                victim.kill9()
                killed[victim.name] = time.time()
            time.sleep(0.02)
        wait_until(lambda: _drained(url, len(work)), timeout=HOST_TIMEOUT + 120,
                   message="the survivors finished everything")
        drained_after = time.time() - killed[victim.name]
        assert {h["id"]: h["alive"] for h in hosts[1].status()["hosts"]} == {
            "host-1": False, "host-2": True, "host-3": True}

        # The victim comes back with the same id: it rejoins and takes work again.
        victim.start()
        wait_until(lambda: all(h["alive"] for h in victim.status()["hosts"]), timeout=30,
                   message="the victim rejoined")
        for i in range(ISSUES):
            raw, headers = signed_delivery(i, PER_ISSUE)
            assert session.post(victim.url, data=raw, headers=headers, timeout=10).ok
            acknowledged.add((i, PER_ISSUE))
        wait_until(lambda: _drained(url, len(acknowledged)), timeout=120,
                   message="the rejoined cluster finished the rest")
    finally:
        for host in hosts:
            host.stop()

    runs = agent_runs(log)
    store = StoreShell(_config(url))
    rows = store.execute("SELECT r.delivery_id, d.state, d.completion FROM receipts r"
                         " JOIN deliveries d ON d.receipt_id = r.id")
    by_delivery = {r[0]: r for r in rows}
    lost = {f"d-{i}-{n}" for i, n in acknowledged} - set(by_delivery)
    admitted_twice = len(rows) - len(by_delivery)
    doubled = int(store.execute("SELECT SUM(deliveries) FROM turn_results").fetchone()[0]) - len(rows)
    wrong_order = misordered(runs)
    crossed = overlaps(runs, killed)
    turns = [r["turn"] for r in runs if "start" in r]
    ran_again = len(turns) - len(set(turns))
    takeover = takeover_seconds(runs, victim.name, killed[victim.name])
    print(f"\nthree hosts, one killed: {len(acknowledged)} acknowledged ({sent_twice} sent to two"
          f" hosts), lost {len(lost)}, doubled {doubled}, admitted twice {admitted_twice},"
          f" misordered {wrong_order}, overlapping {crossed}, agent runs that ran again"
          f" {ran_again}, first takeover {takeover:.1f} s after the kill (timeout {HOST_TIMEOUT} s),"
          f" drained {drained_after:.1f} s after it")
    assert not lost and admitted_twice == 0 and doubled == 0
    assert {r[1] for r in rows} == {"completed"} and {r[2] for r in rows} == {"response"}
    assert store.execute("SELECT COUNT(*) FROM turns").fetchone()[0] == 0
    assert wrong_order == 0 and crossed == 0
    assert {r["host"] for r in runs} == {"host-1", "host-2", "host-3"}
    assert takeover < HOST_TIMEOUT + 10 + AGENT_SECONDS


def _config(url: str) -> Any:
    return SimpleNamespace(scale=SimpleNamespace(engine="dbos", database_url=url))


def _drained(url: str, expected: int) -> bool:
    open_count, total = StoreShell(_config(url)).execute(
        "SELECT SUM(CASE WHEN state = 'completed' THEN 0 ELSE 1 END), COUNT(*) FROM deliveries"
    ).fetchone()
    return total == expected and not open_count
