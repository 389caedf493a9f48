"""The store's part in hosts that share one database: turns name their host, a host repairs
only its own (or a dead host's) turns, a stop asked elsewhere reaches the turn, and wakes
coalesce into one engine job each (waiting-turn flags)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.models.test_fifo_state_machine import plan_for
from wakeline.clock import SystemClock
from wakeline.models.states import TurnResultKind
from wakeline.models.store import Store
from wakeline.providers.linear.replies import INTERRUPTED_REPLY, RERUN_REPLY
from wakeline.scheduling.engine import store_target


@pytest.fixture
def hosts(config: Any, store: Store) -> Iterator[tuple[Store, Store]]:
    """Two hosts' stores on the one database (`store` migrated it)."""
    a = Store.open(store_target(config), SystemClock(), host="host-a")
    b = Store.open(store_target(config), SystemClock(), host="host-b")
    yield a, b
    a.dispose()
    b.dispose()


def admit(store: Store, issue: str, now: int) -> str:
    [result] = store.admit([plan_for(issue, now)])
    assert result.conversation_id
    return result.conversation_id


def turn_row(store: Store, cid: str) -> tuple[Any, ...]:
    return store.db.execute_sql("SELECT state, attempt, host FROM turns WHERE conversation_id = ?",
                                (cid,)).fetchone()


def test_a_host_repairs_only_its_own_turns_and_takes_over_a_dead_hosts(
        hosts: tuple[Store, Store]) -> None:
    a, b = hosts
    mine, theirs = admit(a, "i-1", 1_000), admit(a, "i-2", 1_000)
    assert a.fifo.claim(mine, 1_000) is not None and b.fifo.claim(theirs, 1_000) is not None
    assert turn_row(a, theirs) == ("running", 1, "host-b")

    # Host a restarts: its own turn is due again; host b's, still running there, is untouched.
    work = a.fifo.recover(2_000, RERUN_REPLY, INTERRUPTED_REPLY, hosts=["host-a"])
    assert turn_row(a, mine) == ("retry", 2, "host-a") and turn_row(a, theirs) == ("running", 1, "host-b")
    assert mine in work
    # No host resumes a turn another live host runs, whatever wakes it.
    assert a.fifo.claim(theirs, 2_000) is None
    resumed = a.fifo.claim(mine, 2_000)
    assert resumed is not None and resumed.attempt == 2

    # Host b is found dead: host a repairs b's turns, then runs them.
    a.fifo.recover(3_000, RERUN_REPLY, INTERRUPTED_REPLY, hosts=["host-b"])
    assert turn_row(a, theirs) == ("retry", 2, "host-b")
    assert turn_row(a, mine) == ("running", 2, "host-a")  # a's own running turn stays a's
    taken = a.fifo.claim(theirs, 3_000)
    assert taken is not None and turn_row(a, theirs) == ("running", 2, "host-a")
    # Completion stays exactly-once: the dead host's late finalisation finds the turn taken.
    assert a.fifo.finalise(taken.turn_id, TurnResultKind.RESPONSE, 4_000)
    assert not b.fifo.finalise(taken.turn_id, TurnResultKind.RESPONSE, 4_000)


def test_one_host_repairs_every_turn(hosts: tuple[Store, Store]) -> None:
    a, b = hosts
    cid = admit(a, "i-1", 1_000)
    assert b.fifo.claim(cid, 1_000) is not None
    a.fifo.recover(2_000, RERUN_REPLY, INTERRUPTED_REPLY)  # hosts=None: the local engine
    assert turn_row(a, cid) == ("retry", 2, "host-b")


def test_a_stop_asked_on_another_host_reaches_the_running_turn(hosts: tuple[Store, Store]) -> None:
    a, b = hosts
    cid = admit(a, "i-1", 1_000)
    turn = b.fifo.claim(cid, 1_000)
    assert turn is not None
    assert b.fifo.turn_status(turn.turn_id) == (True, None)
    assert a.fifo.request_stop(cid)
    assert not a.fifo.request_stop(cid)  # asked once
    assert b.fifo.turn_status(turn.turn_id) == (True, "operator")
    assert b.fifo.finalise(turn.turn_id, TurnResultKind.STOPPED, 2_000)
    assert b.fifo.turn_status(turn.turn_id) == (False, None)
    assert not a.fifo.request_stop(cid)  # nothing runs


def test_a_stop_asked_before_a_crash_ends_the_turn_at_recovery(hosts: tuple[Store, Store]) -> None:
    a, b = hosts
    cid = admit(a, "i-1", 1_000)
    turn = b.fifo.claim(cid, 1_000)
    assert turn is not None and a.fifo.request_stop(cid)
    a.fifo.recover(2_000, RERUN_REPLY, INTERRUPTED_REPLY, hosts=["host-b"])
    [(result, output)] = a.db.execute_sql(
        "SELECT result, output FROM turn_results WHERE turn_id = ?", (turn.turn_id,)).fetchall()
    assert (result, output) == ("stopped", "stopped by the operator")


def test_wakes_coalesce_into_one_job_per_generation(store: Store) -> None:
    one, two = admit(store, "i-1", 1_000), admit(store, "i-2", 1_000)
    wakes = store.wakes
    assert sorted(wakes.flip([one, two, one])) == sorted([(one, 1), (two, 1)])
    assert wakes.flip([one]) == []  # its job is due: the wake rides it
    assert sorted(wakes.waiting()) == sorted([(one, 1), (two, 1)])
    wakes.begin(one, 1)
    assert wakes.waiting() == [(two, 1)]
    assert wakes.flip([one]) == [(one, 2)]  # after the job began, a new one
    wakes.begin(one, 1)  # a replayed first step of the old job clears nothing
    assert (one, 2) in wakes.waiting()
    assert wakes.flip(["cv_unknown"]) == []
