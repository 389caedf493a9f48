"""Nothing a test started outlives the session, and the session always exits.

A process left behind that holds the session's stdout or stderr keeps a CI runner reading that
pipe until its deadline; a non-daemon thread (or a pool worker, joined at interpreter exit)
blocked forever hangs the exit itself. Either turns a green run into a timeout that says
nothing. So at the end of the session this plugin names, kills and fails on such processes,
names the threads still running, and starts a watchdog: an exit still stuck after
`EXIT_GRACE_SECONDS` prints every thread's stack and ends the process with the session's
status (the tests' verdict stands; the stacks say what to fix).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import pytest

EXIT_GRACE_SECONDS = 120


def _ancestors() -> set[int]:
    """This process and every process above it."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def _leftover_processes() -> dict[int, str]:
    """Our children still alive, and processes other than us and our ancestors whose stdout
    or stderr is ours."""
    ours = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if not os.isatty(fd):
            ours.add((st.st_dev, st.st_ino))
    if not Path("/proc").is_dir():
        return {}
    skip, found = _ancestors(), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            child = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()
            # Only their own stdout and stderr: a reader of our pipe (`| tail`) holds its
            # other end on stdin, and is no leftover.
            fds = [] if child else [entry / "fd" / "1", entry / "fd" / "2"]
        except OSError:
            continue
        if child:
            found[int(entry.name)] = _cmdline(entry)
        for fd_path in fds:
            try:
                st = os.stat(fd_path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in ours:
                found[int(entry.name)] = _cmdline(entry)
                break
    return found


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def _live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and t.is_alive()]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """After every fixture's teardown: fail on leftover processes, name stuck threads."""
    if hasattr(session.config, "workerinput"):
        return  # a worker of a parallel run: its controller checks
    leftovers = _leftover_processes()
    for pid, cmd in leftovers.items():
        sys.stderr.write(f"\nleftovers: pid {pid} outlived its test: {cmd.strip()}\n")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if leftovers and session.exitstatus == 0:
        session.exitstatus = 1
    frames = sys._current_frames()
    for thread in _live_threads():
        stack = "".join(traceback.format_stack(frames[thread.ident])) \
            if thread.ident in frames else ""
        sys.stderr.write(f"\nleftovers: thread {thread.name!r} still runs:\n{stack}")
    _exit_within(EXIT_GRACE_SECONDS, int(session.exitstatus))


def _exit_within(seconds: float, status: int) -> None:
    """If the interpreter has not exited `seconds` from now, print every thread's stack and
    end it with the session's own status (a daemon thread runs on while exit joins the rest)."""
    def watch() -> None:
        if not threading.Event().wait(seconds):
            sys.stderr.write(f"\nleftovers: the exit still hangs after {seconds} s; stacks:\n")
            faulthandler.dump_traceback(all_threads=True)
            os._exit(status)

    threading.Thread(target=watch, name="exit-watchdog", daemon=True).start()
