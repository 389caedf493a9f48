"""The turn runner: one agent child process, watched from a runner thread.

The fork server starts the child (the service never forks itself; see
`wakeline/turns/forkserver.py`). The child runs in its own process group (so stop
reaches everything it started), reads the prompt on stdin from an anonymous
in-memory file (a memfd, so the prompt never touches the disk; an owner-only
file in the state dir, unlinked at once, where the platform has none), and has
its stdout and stderr read with fixed bounds: a flood costs CPU, never memory. A
plain-text agent's output is read by the fork server, which answers with it when
the child ends, so the runner thread waits for one message and wakes once (on the
service's one CPU, every wake-up costs a context switch). When the child exits
the runner calls `on_exit` with a `RunOutcome`; it never decides what the
outcome means. Runner threads come from a fixed pool (one per turn slot), so a
turn costs no thread start and its store connection stays open between turns.

A stream agent's pipes are read here instead, and its stdout is not kept: its
lines go to the turn's `StreamReader` as they arrive (bounded per line), the
progress they carry to `on_progress` at once, and the reader gives the answer
when the child has exited.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import threading
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Mapping

from wakeline.agents.streams import ProgressEvent, StreamAnswer, StreamReader
from wakeline.errors import WakelineError
from wakeline.sandbox.part import Confined
from wakeline.secrets import write_private
from wakeline.turns.forkserver import ForkServer, SpawnedChild, SpawnFailed

log = logging.getLogger(__name__)

STDOUT_MAX_BYTES = 1_048_576
# A stream line longer than this is dropped unread (a reader skips such lines anyway).
STREAM_LINE_MAX_BYTES = 4_000_000
# After a read of a stream, wait at most this long for more lines before the next one (or
# until the child exits): each wake of the runner thread costs about a quarter of a
# millisecond on the service's one CPU, and progress goes out at most once per interval.
STREAM_GATHER_SECONDS = 0.1
# A stream's pipe holds this much while the runner gathers, so an agent printing a large tool
# result does not stall on a full pipe (Linux; elsewhere the pipe keeps its default size).
STREAM_PIPE_BYTES = 1_048_576
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
    # A stream agent (`output = "claude"` or `"codex"`): stdout is read line by line as it
    # comes, its progress handed to `on_progress` on the runner thread, the answer read at
    # the end. None: plain `text` output, kept whole.
    reader: StreamReader | None = None
    on_progress: Callable[[list[ProgressEvent]], None] | None = None
    # How long a read of the stream waits for more lines to gather (`gather_seconds`).
    gather_seconds: float = STREAM_GATHER_SECONDS
    # Runs on the runner thread once the child has exited, before its outcome is reported
    # (a planning turn's workspace is put back as it was).
    after_exit: Callable[[], None] | None = None
    # A confined turn (CONTRACT section 12): given the ready workspace, on the runner thread,
    # what to spawn instead of `argv` and `env` (bwrap around the agent), and how to signal it.
    confine: Callable[[Path], Confined] | None = None
    # Given the ready workspace, on the runner thread: the prompt to send instead of `prompt`
    # (the files fetched into the workspace and named in it).
    compose: Callable[[Path], str] | None = None


class NoAgent(Exception):
    """Raised by a spec's `prepare`: the turn ends with `answer` and no agent runs (the
    person must first say which repository it works in)."""

    def __init__(self, answer: StreamAnswer) -> None:
        super().__init__(answer.kind)
        self.answer = answer


@dataclass(frozen=True)
class RunOutcome:
    """What the child did: an exit code, or a reason it never ran or was signalled."""

    exit_code: int | None
    stdout: str = ""
    stdout_truncated: bool = False
    stderr_tail: str = ""
    spawn_error: str | None = None
    answer: StreamAnswer | None = None  # a stream agent's answer (`stdout` holds its text)
    runner_session: str | None = None  # the stream CLI's own session id
    resume_refused: bool = False  # the CLI did not know the session it was asked to resume
    skipped_lines: int = 0  # stream lines that were not understood

    @property
    def signalled(self) -> bool:
        """True when a signal ended the child."""
        return self.exit_code is not None and self.exit_code < 0


@dataclass
class _Tail:
    """The last `limit` bytes of a stream (a stream agent's stderr)."""

    limit: int
    data: bytearray = field(default_factory=bytearray)

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        del self.data[: max(len(self.data) - self.limit, 0)]


class _Lines:
    """Splits a stream agent's stdout into lines for its reader as the bytes arrive.

    A line longer than `STREAM_LINE_MAX_BYTES` is dropped (counted) without being held
    whole, so a 10 MB line costs CPU, never memory; bytes that are not UTF-8 are replaced.
    """

    def __init__(self, reader: StreamReader,
                 on_progress: Callable[[list[ProgressEvent]], None] | None) -> None:
        self.reader = reader
        self._on_progress = on_progress
        self._partial = bytearray()
        self._discarding = False
        self.dropped = 0
        self.seen = False  # any output at all

    def add(self, chunk: bytes) -> None:
        """Feed every whole line in `chunk`; keep the unfinished rest."""
        self.seen = True
        lines = chunk.split(b"\n")
        rest = lines.pop()
        events: list[ProgressEvent] = []
        for n, line in enumerate(lines):
            if n == 0:
                if self._discarding:  # the end of a line too long to keep
                    self._discarding = False
                    continue
                if self._partial:
                    self._partial += line
                    line = bytes(self._partial)
                    self._partial.clear()
            events += self._feed(line)
        self._keep(rest)
        self._tell(events)

    def close(self) -> None:
        """The stream ended: a last line without its newline is fed as it is."""
        if self._partial and not self._discarding:
            self._tell(self._feed(bytes(self._partial)))
        self._partial.clear()

    def _keep(self, rest: bytes) -> None:
        if self._discarding:
            return
        self._partial += rest
        if len(self._partial) > STREAM_LINE_MAX_BYTES:
            self._partial.clear()
            self._discarding = True
            self.dropped += 1

    def _feed(self, line: bytes) -> list[ProgressEvent]:
        return self.reader.feed(line.decode("utf-8", "replace").rstrip("\r"))

    def _tell(self, events: list[ProgressEvent]) -> None:
        if events and self._on_progress is not None:
            try:
                self._on_progress(events)
            except Exception:  # progress is a courtesy: it never ends a turn
                log.exception("progress listener failed")


def gather_seconds(progress_interval_seconds: float) -> float:
    """How long a stream's lines may gather: a tenth of the progress interval at most, so
    that with no interval every step can show."""
    return min(STREAM_GATHER_SECONDS, progress_interval_seconds / 10)


def _widen(fd: int) -> None:
    """Give a pipe `STREAM_PIPE_BYTES` of room where the platform allows; else leave it."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, STREAM_PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # not Linux, or over the user's pipe quota: the default size still works


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
        self._confined: Confined | None = None

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
            pid, confined = self._pid, self._confined
        try:
            os.killpg(confined.signal_target(pid, signum) if confined else pid, signum)
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
            if spec.compose is not None and cancelled is None:
                spec = replace(spec, prompt=spec.compose(cwd))
            if spec.confine is not None and cancelled is None:
                self._confined = spec.confine(cwd)
        except NoAgent as ended:
            return RunOutcome(exit_code=None, stdout=ended.answer.text, answer=ended.answer)
        except WakelineError as exc:
            return RunOutcome(exit_code=None, spawn_error=f"{exc.code}: {exc.detail or exc.code}")
        try:
            if spec.reader is None:
                return self._run_captured(spec, cwd)
            return self._run_streamed(spec, cwd, spec.reader)
        finally:
            if self._confined is not None:
                self._confined.close()

    def _start_child(self, spec: TurnSpec, cwd: Path, stdout: int | None = None,
                     stderr: int | None = None) -> tuple[SpawnedChild | None, RunOutcome]:
        """Start the child through the fork server unless a stop came first; on these
        descriptors, or captured by the helper when none are given."""
        try:
            with self._lock, prompt_stdin(spec) as stdin:
                if self._cancelled is not None:
                    return None, RunOutcome(exit_code=-self._cancelled)
                confined = self._confined
                argv, env, listen = (confined.argv, confined.env, confined.listen) if confined \
                    else (spec.argv, spec.env, ())
                if stdout is None or stderr is None:
                    child = self._forkserver.spawn(argv, str(cwd), env, (stdin.fileno(),),
                                                   capture=(STDOUT_MAX_BYTES, STDERR_TAIL_BYTES),
                                                   listen=listen)
                else:
                    child = self._forkserver.spawn(argv, str(cwd), env,
                                                   (stdin.fileno(), stdout, stderr), listen=listen)
                self._pid = child.pid
                return child, RunOutcome(exit_code=None)
        except OSError as exc:
            reason = str(exc) if isinstance(exc, SpawnFailed) else \
                f"{exc.__class__.__name__}: {exc.strerror or exc}"
            return None, RunOutcome(exit_code=None, spawn_error=reason)

    def _run_captured(self, spec: TurnSpec, cwd: Path) -> RunOutcome:
        """A plain-text agent: the helper reads its output; this thread waits for one answer."""
        child, not_started = self._start_child(spec, cwd)
        if child is None:
            return not_started
        exited = child.finish()
        self._after_exit()
        if exited is None:
            return RunOutcome(exit_code=None, spawn_error="the fork server stopped during the turn")
        code = exited.code
        if self._confined is not None:
            failure = self._confined.failure(code, exited.stdout, exited.stderr)
            if failure is not None:
                return RunOutcome(exit_code=None, spawn_error=failure, stderr_tail=exited.stderr)
            code = self._confined.exit_code(code)
        return RunOutcome(exit_code=code, stdout=exited.stdout,
                          stdout_truncated=exited.stdout_dropped > 0, stderr_tail=exited.stderr)

    def _run_streamed(self, spec: TurnSpec, cwd: Path, reader: StreamReader) -> RunOutcome:
        """A stream agent: its lines are read here as they come, for progress."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        _widen(out_w)
        try:
            child, not_started = self._start_child(spec, cwd, out_w, err_w)
        finally:
            os.close(out_w)
            os.close(err_w)
        if child is None:
            os.close(out_r)
            os.close(err_r)
            return not_started
        out = _Lines(reader, spec.on_progress)
        err = _Tail(STDERR_TAIL_BYTES)
        try:
            self._pump(child.exit_fileno(), {out_r: out, err_r: err}, spec.gather_seconds)
        finally:
            os.close(out_r)
            os.close(err_r)
        code = child.wait()
        self._after_exit()
        if code is None:
            return RunOutcome(exit_code=None, spawn_error="the fork server stopped during the turn")
        stderr_tail = err.data.decode("utf-8", "replace")
        if self._confined is not None:
            failure = self._confined.failure(code, "x" if out.seen else "", stderr_tail)
            if failure is not None:
                return RunOutcome(exit_code=None, spawn_error=failure, stderr_tail=stderr_tail)
            code = self._confined.exit_code(code)
        out.close()
        answer = reader.finish(code if code >= 0 else None, stderr_tail)
        return RunOutcome(exit_code=code, stdout=answer.text, stderr_tail=stderr_tail,
                          answer=answer, runner_session=reader.session_id,
                          resume_refused=reader.resume_refused,
                          skipped_lines=reader.skipped + out.dropped)

    def _after_exit(self) -> None:
        """The child is gone: no signal goes to its pid again; then the spec's clean-up."""
        with self._lock:
            self._exited = True
        if self.spec.after_exit is not None:
            try:
                self.spec.after_exit()
            except Exception:  # the turn's outcome stands; what failed is logged
                log.exception("after the turn's exit", extra={"turn_id": self.spec.turn_id})

    @staticmethod
    def _pump(exit_fd: int, captures: dict[int, _Tail | _Lines], gather_seconds: float) -> None:
        """Read the child's pipes until both close, or until it has exited and they are dry:
        a grandchild may keep them open after the agent exits."""
        with selectors.DefaultSelector() as sel, selectors.DefaultSelector() as gate:
            sel.register(exit_fd, selectors.EVENT_READ)
            gate.register(exit_fd, selectors.EVENT_READ)
            for fd, capture in captures.items():
                sel.register(fd, selectors.EVENT_READ, capture)
            exited = False
            while len(sel.get_map()) > (0 if exited else 1):
                events = sel.select(timeout=0 if exited else None)
                if not events:
                    break  # exited, and nothing more is waiting in the pipes
                gather = False
                for key, _ in events:
                    if key.data is None:
                        exited = True
                        sel.unregister(exit_fd)  # its message is the caller's to read
                        continue
                    chunk = os.read(key.fd, _CHUNK)
                    if not chunk:
                        sel.unregister(key.fd)
                        continue
                    key.data.add(chunk)
                    if isinstance(key.data, _Lines):
                        gather = len(chunk) < _CHUNK  # a full read: more is waiting now
                if gather and gather_seconds > 0 and not exited:
                    # A chatty stream: let its lines gather a moment, so a read (and its
                    # wake-up of this thread) carries many; the child's exit ends the wait.
                    gate.select(timeout=gather_seconds)
