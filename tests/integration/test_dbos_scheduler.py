"""The DBOS engine prototype on a real PostgreSQL: one turn of a conversation at a time, in
order, coalesced wakes, and DBOS started and stopped from its own thread.

DBOS is a process-wide singleton, so this module runs one scheduler for all its checks. The
multi-host figures come from bench/hosts.py and tests/system/test_hosts.py.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

pytest.importorskip("dbos")

from tests.helpers import wait_until  # noqa: E402
from wakeline.clock import SystemClock  # noqa: E402
from wakeline.models.store import Store  # noqa: E402
from wakeline.scheduling.dbos import DBOS_VERSION, DbosScheduler, DbosSettings  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_pinned_version_is_the_installed_one() -> None:
    from importlib.metadata import version

    assert version("dbos") == DBOS_VERSION


def test_turns_of_a_conversation_run_one_at_a_time_in_order(postgres_url: str) -> None:
    lock = threading.Lock()
    fifo: dict[str, list[int]] = {f"c{n}": list(range(4)) for n in range(6)}
    done: dict[str, list[int]] = defaultdict(list)
    running: dict[str, int] = defaultdict(int)
    overlaps: list[str] = []
    begun: list[str] = []

    def run_turn(cid: str) -> bool:
        with lock:
            if not fifo[cid]:
                return False
            seq = fifo[cid].pop(0)
            running[cid] += 1
            if running[cid] > 1:
                overlaps.append(cid)
        time.sleep(0.05)  # the agent
        with lock:
            running[cid] -= 1
            done[cid].append(seq)
        return True

    Store.open(postgres_url, SystemClock()).dispose()  # the schema, wakeline_hosts with it
    scheduler = DbosScheduler(
        DbosSettings(database_url=postgres_url, host_id="host-a", worker_concurrency=3,
                     host_timeout_seconds=5, heartbeat_seconds=0.5),
        run_turn, begin_wake=lambda cid, generation: begun.append(cid))
    started = time.monotonic()
    scheduler.start()
    try:
        assert threading.current_thread().name != "dbos"
        for cid in fifo:  # the same job twice is one job (its workflow id)
            scheduler.enqueue(cid, 1)
            scheduler.enqueue(cid, 1)
        wait_until(lambda: all(len(d) == 4 for d in done.values()) and len(done) == 6,
                   timeout=60, message="every turn ran")
        assert overlaps == []
        assert all(d == [0, 1, 2, 3] for d in done.values())
        [host] = scheduler.hosts()
        assert (host.id, host.alive) == ("host-a", True)
        assert sorted(set(begun)) == sorted(fifo)
    finally:
        scheduler.stop(grace_seconds=5)
    assert time.monotonic() - started < 60
    assert not any(t.name == "dbos" and t.is_alive() for t in threading.enumerate())
