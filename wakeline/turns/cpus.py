"""Where wakeline's threads run: one CPU for the service, every CPU for its agents.

wakeline's Python runs under one GIL, so the service never uses more than one CPU at a
time anyway. When its threads may run on any CPU, each hand-off between them (a request
to the admission writer and back, an SQLite call releasing the GIL) wakes a thread on
another CPU, and the threads then take turns at the GIL across CPUs. On the 2-vCPU
benchmark machine that cost about 30% of the ingest's CPU and 20 context switches per
delivery instead of 3 (docs/performance.md). Agents are separate processes: they keep
every CPU the service was given.

On one CPU the threads are also batch-scheduled (`SCHED_BATCH`): a thread that wakes
another (a request handing its plan to the admission writer, the writer waking the
requests of a durable group) then keeps the CPU until it blocks, instead of being
preempted by the woken thread, which could only find the GIL taken and sleep again
(decision 0026).
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger(__name__)

_BATCH = getattr(os, "SCHED_BATCH", None)
_NORMAL = getattr(os, "SCHED_OTHER", None)


def pin_to_one_cpu() -> frozenset[int] | None:
    """Confine the calling thread, and every thread it starts from now on, to one CPU,
    batch-scheduled there.

    The CPU is the highest one the thread may use. Call it before any other thread
    starts, since threads keep the CPUs and the policy of the thread that started them.

    Returns:
        The CPUs the thread could use before, for the agents; None when nothing
        changed: the platform has no CPU affinity, only one CPU is allowed, or the
        call was refused.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    try:
        os.sched_setaffinity(0, {max(allowed)})
    except OSError as exc:  # a sandbox that forbids it: run as before, only slower
        log.warning("could not keep to one CPU", extra={"error": exc.__class__.__name__})
        return None
    _set_policy(_BATCH)
    return allowed


def _set_policy(policy: int | None) -> None:
    """Set the calling thread's scheduling policy (Linux: per thread); never fails."""
    if policy is None or not hasattr(os, "sched_setscheduler"):
        return
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as exc:  # refused: the threads only hand off the GIL less smoothly
        log.warning("could not change the scheduling policy",
                    extra={"error": exc.__class__.__name__})


@contextmanager
def spawning_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Let a child process started inside the block use `cpus` (None: leave things be),
    normally scheduled.

    A child starts with the CPUs and the scheduling policy of the thread that starts it,
    so the calling thread widens its own set and takes the normal policy for the block,
    and takes its own back after.
    """
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    policy = os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None
    os.sched_setaffinity(0, cpus)
    _set_policy(_NORMAL)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        _set_policy(policy)
