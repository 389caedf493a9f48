"""Where wakeline's threads run: one CPU for the service, every CPU for its agents.

wakeline's Python runs under one GIL, so the service never uses more than one CPU at a
time anyway. When its threads may run on any CPU, each hand-off between them (a request
to the admission writer and back, an SQLite call releasing the GIL) wakes a thread on
another CPU, and the threads then take turns at the GIL across CPUs. On the 2-vCPU
benchmark machine that cost about 30% of the ingest's CPU and 20 context switches per
delivery instead of 3 (docs/performance.md). Agents are separate processes: they keep
every CPU the service was given.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger(__name__)


def pin_to_one_cpu() -> frozenset[int] | None:
    """Confine the calling thread, and every thread it starts from now on, to one CPU.

    The CPU is the highest one the thread may use. Call it before any other thread
    starts, since threads keep the CPUs of the thread that started them.

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
    return allowed


@contextmanager
def spawning_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Let a child process started inside the block use `cpus` (None: leave things be).

    A child starts with the CPUs of the thread that starts it, so the calling thread
    widens its own set for the block and narrows it again after.
    """
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
