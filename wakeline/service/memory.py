"""The service's C heap: two malloc arenas, not one for every thread that met another.

glibc gives a thread that finds the arena it wanted locked an arena of its own, up to 8 per
CPU. Memory freed in one arena serves only the threads that allocate from it, so with many
threads each arena keeps free space of its own, and the heap grows for longer than what it
holds. wakeline's Python runs under one GIL and its threads on one CPU (`cpus.py`); only
SQLite and socket calls run outside the GIL, and rarely two at once: more arenas buy
nothing. `make soak` measured both (decision 0033).
"""

from __future__ import annotations

import ctypes
import os
from typing import Mapping

MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter
_ENV = "MALLOC_ARENA_MAX"  # glibc reads it at start-up: an operator's choice wins


def limit_malloc_arenas(environ: Mapping[str, str] | None = None,
                        arenas: int = MALLOC_ARENAS) -> bool:
    """Let this process's threads share at most `arenas` malloc arenas. Call it before any
    thread starts. Returns whether the limit was set: not with `MALLOC_ARENA_MAX` in the
    environment, nor on a C library without glibc's `mallopt` (musl, macOS)."""
    if _ENV in (os.environ if environ is None else environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas))
