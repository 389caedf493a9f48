"""Confining the service's threads to one CPU, batch-scheduled, and letting agents have them all,
scheduled normally."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import pytest

from tests.helpers import batch_scheduling_allowed
from wakeline.turns.cpus import pin_to_one_cpu, spawning_on

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and two CPUs",
)


def in_a_thread(fn: Any) -> Any:
    """Run `fn` on a fresh thread, so the test process itself is never pinned."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test thread
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in out:
        raise out["error"]
    return out["value"]


def child_cpus() -> list[int]:
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    return eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True, timeout=30).stdout)


def child_policy() -> int:
    code = "import os; print(os.sched_getscheduler(0))"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, timeout=30).stdout)


def test_pinning_confines_the_thread_and_the_threads_it_starts() -> None:
    allowed = os.sched_getaffinity(0)

    def pin() -> tuple[Any, set[int], set[int]]:
        before = pin_to_one_cpu()
        started = in_a_thread(lambda: os.sched_getaffinity(0))
        return before, os.sched_getaffinity(0), started

    before, own, started = in_a_thread(pin)
    assert before == frozenset(allowed)
    assert own == started == {max(allowed)}
    assert os.sched_getaffinity(0) == allowed  # the test's own thread is untouched


needs_batch = pytest.mark.skipif(not batch_scheduling_allowed(),
                                 reason="this platform refuses SCHED_BATCH")


@needs_batch
def test_pinning_batch_schedules_the_thread_and_the_threads_it_starts() -> None:
    def pin() -> tuple[int, int]:
        pin_to_one_cpu()
        return os.sched_getscheduler(0), in_a_thread(lambda: os.sched_getscheduler(0))

    assert in_a_thread(pin) == (os.SCHED_BATCH, os.SCHED_BATCH)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the test's own thread is untouched


@needs_batch
def test_a_child_started_while_spawning_is_scheduled_normally() -> None:
    def spawn() -> tuple[int, int, int]:
        everything = pin_to_one_cpu()
        batch_child = child_policy()
        with spawning_on(everything):
            normal_child = child_policy()
        return batch_child, normal_child, os.sched_getscheduler(0)

    assert in_a_thread(spawn) == (os.SCHED_BATCH, os.SCHED_OTHER, os.SCHED_BATCH)


def test_a_refused_policy_still_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int, policy: int, param: Any) -> None:
        raise PermissionError("not here")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    allowed = os.sched_getaffinity(0)

    def pin() -> tuple[Any, set[int], int]:
        return pin_to_one_cpu(), os.sched_getaffinity(0), os.sched_getscheduler(0)

    assert in_a_thread(pin) == (frozenset(allowed), {max(allowed)}, os.SCHED_OTHER)


def test_a_child_started_while_spawning_gets_every_cpu_and_the_thread_stays_pinned() -> None:
    allowed = os.sched_getaffinity(0)

    def spawn() -> tuple[list[int], list[int], set[int]]:
        everything = pin_to_one_cpu()
        pinned_child = child_cpus()
        with spawning_on(everything):
            free_child = child_cpus()
        return pinned_child, free_child, os.sched_getaffinity(0)

    pinned_child, free_child, after = in_a_thread(spawn)
    assert pinned_child == [max(allowed)]
    assert free_child == sorted(allowed)
    assert after == {max(allowed)}


def test_spawning_without_cpus_changes_nothing() -> None:
    before = os.sched_getaffinity(0)
    with spawning_on(None):
        assert os.sched_getaffinity(0) == before
    assert os.sched_getaffinity(0) == before


def test_a_refused_pin_leaves_everything_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int, cpus: Any) -> None:
        raise PermissionError("not here")

    before = os.sched_getaffinity(0)
    monkeypatch.setattr(os, "sched_setaffinity", refuse)  # a sandbox's seccomp filter
    assert pin_to_one_cpu() is None
    assert os.sched_getaffinity(0) == before
