"""The turn runner: one agent child process, watched from a runner thread.

The fork server starts the child (the service never forks itself; see
`wakeline/forkserver.py`). The child runs in its own process group (so stop
reaches everything it started), reads the prompt on stdin from an anonymous
in-memory file (a memfd, so the prompt never touches the disk; an owner-only
file in the state dir, unlinked at once, where the platform has none), and has
its stdout and stderr
read with fixed bounds: a flood costs CPU, never memory. When the child exits
the runner calls `on_exit` with a `RunOutcome`; it never decides what the
outcome means. Runner threads come from a fixed pool (one per turn slot), so a
turn costs no thread start and its store connection stays open between turns.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import threading
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Mapping

from wakeline.errors import WakelineError
from wakeline.forkserver import ForkServer, SpawnFailed
from wakeline.secrets import write_private

log = logging.getLogger(__name__)

STDOUT_MAX_BYTES = 1_048_576
STDERR_TAIL_BYTES = 16_384
_CHUNK = 65_536


@dataclass(frozen=True)
class TurnSpec:
    """How to start one agent turn."""

    turn_id: str
    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]
    prompt: str
    prompt_dir: Path  # where the prompt's file goes on a platform without memfd
    before_start: Callable[[], None] | None = None
    # Makes the workspace ready (a directory, or a git worktree) and returns it; runs on the
    # runner thread after `before_start`, so a slow git never blocks the actor.
    prepare: Callable[[], Path] | None = None


@dataclass(frozen=True)
class RunOutcome:
    """What the child did: an exit code, or a reason it never ran or was signalled."""

    exit_code: int | None
    stdout: str = ""
    stdout_truncated: bool = False
    stderr_tail: str = ""
    spawn_error: str | None = None

    @property
    def signalled(self) -> bool:
        """True when a signal ended the child."""
        return self.exit_code is not None and self.exit_code < 0


@dataclass
class _Capture:
    limit: int
    keep_tail: bool = False
    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def add(self, chunk: bytes) -> None:
        if self.keep_tail:
            self.data += chunk
            if len(self.data) > self.limit:
                self.dropped += len(self.data) - self.limit
                del self.data[: len(self.data) - self.limit]
            return
        room = self.limit - len(self.data)
        self.data += chunk[:room]
        self.dropped += max(len(chunk) - room, 0)


@contextmanager
def prompt_stdin(spec: TurnSpec) -> Iterator[BinaryIO]:
    """The prompt as a readable file at offset 0, for the child's stdin; closed after."""
    data = spec.prompt.encode("utf-8")
    if hasattr(os, "memfd_create"):
        fh = os.fdopen(os.memfd_create("wakeline-prompt", os.MFD_CLOEXEC), "w+b")
    else:
        path = spec.prompt_dir / f"{spec.turn_id}.prompt"
        write_private(path, "")
        fh = open(path, "w+b")
        path.unlink()  # the open file is the child's alone
    with fh:
        fh.write(data)
        fh.seek(0)
        yield fh


class TurnProcess:
    """Runs one agent process on a runner thread of `pool` and reports its outcome once."""

    def __init__(self, spec: TurnSpec, on_exit: Callable[[RunOutcome], None],
                 forkserver: ForkServer, pool: Executor | None = None) -> None:
        self.spec = spec
        self._on_exit = on_exit
        self._forkserver = forkserver
        self._pool = pool
        self._pid: int | None = None
        self._exited = False
        self._lock = threading.Lock()
        self._cancelled: int | None = None
        self._done = threading.Event()

    def start(self) -> None:
        """Spawn the child on a runner thread (of the pool, else a thread of its own)."""
        if self._pool is not None:
            self._pool.submit(self._run)
        else:
            threading.Thread(target=self._run, name=f"turn-{self.spec.turn_id}", daemon=True).start()

    def signal(self, signum: int) -> None:
        """Send a signal to the child's whole process group; a gone group is fine.

        Before the child exists (the runner may still wait for the acknowledgement to
        settle) the signal cancels the start instead: the caller never waits.
        """
        with self._lock:
            if self._pid is None:
                self._cancelled = signum
                return
            if self._exited:  # its pid may belong to someone else by now
                return
            pid = self._pid
        try:
            os.killpg(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def wait_exit(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the child and its capture to end; True if they did."""
        return self._done.wait(timeout)

    def terminate(self) -> None:
        """SIGTERM to the group."""
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the group."""
        self.signal(signal.SIGKILL)

    def _run(self) -> None:
        try:
            outcome = self._execute()
        except Exception as exc:  # a runner crash is a failed turn, never a silent loss
            log.exception("turn runner failed", extra={"turn_id": self.spec.turn_id})
            outcome = RunOutcome(exit_code=None, spawn_error=f"runner crashed: {exc.__class__.__name__}")
        self._done.set()
        self._on_exit(outcome)

    def _execute(self) -> RunOutcome:
        spec = self.spec
        if spec.before_start is not None:
            spec.before_start()
        cwd = spec.cwd
        try:
            with self._lock:
                cancelled = self._cancelled
            if spec.prepare is not None and cancelled is None:
                cwd = spec.prepare()
        except WakelineError as exc:
            return RunOutcome(exit_code=None, spawn_error=f"{exc.code}: {exc.detail or exc.code}")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        child, not_started = None, RunOutcome(exit_code=None)
        try:
            with self._lock, prompt_stdin(spec) as stdin:
                if self._cancelled is not None:
                    not_started = RunOutcome(exit_code=-self._cancelled)
                else:
                    child = self._forkserver.spawn(spec.argv, str(cwd), spec.env,
                                                   (stdin.fileno(), out_w, err_w))
                    self._pid = child.pid
        except OSError as exc:
            reason = str(exc) if isinstance(exc, SpawnFailed) else \
                f"{exc.__class__.__name__}: {exc.strerror or exc}"
            not_started = RunOutcome(exit_code=None, spawn_error=reason)
        finally:
            os.close(out_w)
            os.close(err_w)
        if child is None:
            os.close(out_r)
            os.close(err_r)
            return not_started
        out = _Capture(STDOUT_MAX_BYTES)
        err = _Capture(STDERR_TAIL_BYTES, keep_tail=True)
        try:
            self._pump(child.exit_fileno(), {out_r: out, err_r: err})
        finally:
            os.close(out_r)
            os.close(err_r)
        code = child.wait()
        with self._lock:
            self._exited = True
        if code is None:
            return RunOutcome(exit_code=None, spawn_error="the fork server stopped during the turn")
        return RunOutcome(
            exit_code=code,
            stdout=out.data.decode("utf-8", "replace"),
            stdout_truncated=out.dropped > 0,
            stderr_tail=err.data.decode("utf-8", "replace"),
        )

    @staticmethod
    def _pump(exit_fd: int, captures: dict[int, _Capture]) -> None:
        """Read the child's pipes until both close, or until it has exited and they are dry:
        a grandchild may keep them open after the agent exits."""
        with selectors.DefaultSelector() as sel:
            sel.register(exit_fd, selectors.EVENT_READ)
            for fd, capture in captures.items():
                sel.register(fd, selectors.EVENT_READ, capture)
            exited = False
            while len(sel.get_map()) > (0 if exited else 1):
                events = sel.select(timeout=0 if exited else None)
                if not events:
                    break  # exited, and nothing more is waiting in the pipes
                for key, _ in events:
                    if key.data is None:
                        exited = True
                        sel.unregister(exit_fd)  # its message is the caller's to read
                        continue
                    chunk = os.read(key.fd, _CHUNK)
                    if chunk:
                        key.data.add(chunk)
                    else:
                        sel.unregister(key.fd)
