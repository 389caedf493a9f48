"""Run `wakeline ...` with cProfile in every thread; write the merged stats at exit.

    python bench/profile_server.py OUT.pstats --config wakeline.toml serve

Used by `bench/ingest.py --profile OUT`. Each thread (waitress request threads,
the admission writer, the waitress loop) gets its own `cProfile.Profile`; at
exit they are merged into one pstats file. Deterministic profiling slows
Python-heavy code down, so the throughput of a profiled run is not a result:
read the profile for where the CPU goes, not for how fast. The timer is each
thread's own CPU time (`time.thread_time`), so time spent blocked (waiting for
the GIL, a lock, fsync, the network) is not counted.
"""

from __future__ import annotations

import atexit
import cProfile
import pstats
import sys
import threading
import time

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()


def _start_in_thread(frame: object, event: str, arg: object) -> None:
    # Called once as the first profile event of every new thread: swap in a real profiler.
    prof = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append(prof)
    prof.enable()


def _dump(path: str, main: cProfile.Profile) -> None:
    main.disable()
    with _lock:
        profiles = list(_profiles)
    stats = pstats.Stats(main)
    for prof in profiles:
        try:
            stats.add(prof)  # snapshots the profile; its thread has stopped by now
        except TypeError:  # a thread that never recorded anything
            continue
    stats.dump_stats(path)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: profile_server.py OUT.pstats WAKELINE-ARGS...")
    out, args = sys.argv[1], sys.argv[2:]
    from wakeline.cli import cli

    main_prof = cProfile.Profile(time.thread_time)
    atexit.register(_dump, out, main_prof)
    threading.setprofile(_start_in_thread)
    main_prof.enable()
    cli.main(args=args, prog_name="wakeline")


if __name__ == "__main__":
    main()
