"""The fork server: a small helper process that starts every agent, so the service never forks.

Why: in the service, `subprocess.Popen` holds the GIL through fork and exec and then takes
it back several times while the other threads are busy; each time it may wait out the
GIL's switch interval. Under a drain a spawn cost as much wall time as the agent's whole
run, and every thread stalled with it. The helper has a GIL of its own, runs on every CPU
the service was given (so agents need no affinity dance), and keeps its heap small.

The protocol: the service hands the helper one connected Unix socket per runner thread
(over the control socket, with SCM_RIGHTS). On a connection, requests come one at a time:
a spawn request carries the argv, cwd and environment as JSON and the child's stdin,
stdout and stderr as file descriptors. The helper answers `{"pid": N}` (or `{"error":
"..."}`), waits for the child, kills what the child left in its process group, and answers
`{"exit": code}`. A request with `capture` (byte bounds) sends only stdin: the helper reads
the child's stdout and stderr itself, within those bounds, and the exit answer carries them
too. A plain-text agent's turn then costs the service one request and one answer, with no
pipes to read or wake-ups per chunk on the service's one CPU. A request with `listen` starts a
bubblewrap that makes a network namespace of its own: before its agent starts, the helper
listens on each address given inside that namespace and relays what connects there to the Unix
socket given (`wakeline/sandbox/netns.py`), until the sandbox ends. When the control socket
closes (the service stopped or died, even by kill -9) the helper kills every agent group
still running and exits: an agent never keeps working beside its turn's re-run.

This module imports only the standard library: the helper runs it as a script
(`python -I forkserver.py FD`), without the service's packages or environment, and loads
`sandbox/netns.py` (standard library only too) by its path.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # an argv and environment far beyond any real one
READY_TIMEOUT_SECONDS = 30.0


# --- framing (both sides) ---------------------------------------------------------------------


def _send(sock: socket.socket, message: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode("utf-8")
    frame = _HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [frame], list(fds)) if fds else sock.send(frame)
    if sent < len(frame):
        sock.sendall(frame[sent:])


def _recv_exact(sock: socket.socket, n: int, into: bytearray) -> bool:
    while len(into) < n:
        chunk = sock.recv(n - len(into))
        if not chunk:
            return False
        into += chunk
    return True


def _recv(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]] | None:
    """One framed message and the descriptors sent with it; None at EOF.

    Reads exactly one frame: a fast child's exit may already wait behind its pid.
    """
    if max_fds:  # the descriptors ride on the frame's first bytes
        first, fds, _, _ = socket.recv_fds(sock, _HEADER.size, max_fds, socket.MSG_CMSG_CLOEXEC)
    else:
        first, fds = sock.recv(_HEADER.size), []
    buf = bytearray(first)
    ok = bool(first) and _recv_exact(sock, _HEADER.size, buf)
    size = _HEADER.unpack_from(buf)[0] if ok else 0
    if not ok or size > MAX_MESSAGE_BYTES or not _recv_exact(sock, _HEADER.size + size, buf):
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(bytes(buf[_HEADER.size:])), list(fds)


# --- the helper process -----------------------------------------------------------------------


class _Helper:
    """The helper's state: the agent groups running now, killed when the service goes, and
    the sandboxes' networks (see `wakeline/sandbox/netns.py`)."""

    def __init__(self, netns: Any) -> None:
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self._network = netns.SandboxNetwork()
        self._relay = netns.Relay()

    def serve(self, control: socket.socket) -> None:
        """Take connections until the control socket closes; then end every agent group."""
        while True:
            try:
                got = _recv(control, max_fds=1)
            except OSError:
                got = None
            if got is None:
                break
            _, fds = got
            if fds:
                conn = socket.socket(fileno=fds[0])
                threading.Thread(target=self._connection, args=(conn,), name="connection",
                                 daemon=True).start()
        with self._lock:
            for pid in self._running:
                _kill_group(pid)

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    got = _recv(conn, max_fds=3)
                except OSError:
                    return
                if got is None:
                    return
                request, fds = got
                try:
                    self._spawn(conn, request, fds)
                except OSError:
                    return  # the service end went away

    def _spawn(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        capture = request.get("capture")  # [stdout bytes kept, stderr tail bytes], or None
        listen = request.get("listen")  # [[address, port, Unix socket], ...]: argv is a bwrap's
        pipes: list[int] = []  # the read ends of the child's stdout and stderr, when captured
        ends: list[int] = []  # the helper's ends of a sandbox's info and block pipes
        try:
            if len(fds) != (1 if capture else 3):
                raise OSError(0, "a spawn request needs stdin, stdout and stderr"
                                 if not capture else "a captured spawn request needs stdin only")
            stdio = list(fds)
            if capture:
                for _ in range(2):
                    read, write = os.pipe()
                    pipes.append(read)
                    fds.append(write)  # closed below, once the child has its copy
                    stdio.append(write)
            argv, given = request["argv"], []
            if listen:
                argv, given, (info, block) = self._network.prepare(argv)
                ends += (info, block)
                fds += [fd for fd, _ in given]
            with self._lock:  # one spawn at a time (it changes directory); none once stopping
                pid = _spawn(argv, request["cwd"], request["env"], [*stdio, *given])
                self._running.add(pid)
        except OSError as exc:
            for fd in pipes + ends:
                os.close(fd)
            _send(conn, {"error": f"{exc.__class__.__name__}: {exc.strerror or exc}"})
            return
        finally:
            for fd in fds:
                os.close(fd)
        if listen:
            try:  # the agent waits for this, so nothing it connects to is missing
                self._relay.add(pid, self._network.open(pid, *ends, listen), listen)
            except (OSError, RuntimeError) as exc:  # RuntimeError: no thread to be had
                _kill_group(pid)
                os.waitpid(pid, 0)
                with self._lock:
                    self._running.discard(pid)
                for fd in pipes:
                    os.close(fd)
                why = getattr(exc, "strerror", None) or exc
                _send(conn, {"error": f"{exc.__class__.__name__}: {why}"})
                return
        try:
            _send(conn, {"pid": pid})
        except OSError:
            for fd in pipes:  # nobody is left to read them (the agents end with the control)
                os.close(fd)
            raise
        output = _capture(pid, pipes[0], pipes[1], int(capture[0]), int(capture[1])) \
            if capture else {}
        _, status = os.waitpid(pid, 0)
        self._relay.close(pid)  # the listeners would keep the sandbox's network alive
        with self._lock:
            self._running.discard(pid)
            _kill_group(pid)  # whatever the agent left running ends with its turn
        _send(conn, {"exit": os.waitstatus_to_exitcode(status), **output})


def _capture(pid: int, out_r: int, err_r: int, out_max: int, err_tail: int) -> dict[str, Any]:
    """Read the child's stdout (its first `out_max` bytes kept) and stderr (its last
    `err_tail` bytes) until both close, or until the child has exited and they are dry: a
    grandchild may hold them open. Closes both; the child is not reaped here."""
    out, err = bytearray(), bytearray()
    dropped = 0
    exited, stop_watching = _exit_watch(pid)
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(exited, selectors.EVENT_READ)
            sel.register(out_r, selectors.EVENT_READ, out)
            sel.register(err_r, selectors.EVENT_READ, err)
            gone = False
            while len(sel.get_map()) > (0 if gone else 1):
                events = sel.select(timeout=0 if gone else None)
                if not events:
                    break  # exited, and nothing more waits in the pipes
                for key, _ in events:
                    if key.data is None:
                        gone = True
                        sel.unregister(exited)
                        continue
                    chunk = os.read(key.fd, 65_536)
                    if not chunk:
                        sel.unregister(key.fd)
                    elif key.data is out:
                        room = out_max - len(out)
                        out += chunk[:room]
                        dropped += max(len(chunk) - room, 0)
                    else:
                        err += chunk
                        del err[:max(len(err) - err_tail, 0)]
    finally:
        stop_watching()
        os.close(out_r)
        os.close(err_r)
    return {"stdout": out.decode("utf-8", "replace"), "stdout_dropped": dropped,
            "stderr": err.decode("utf-8", "replace")}


def _exit_watch(pid: int) -> tuple[int, Any]:
    """A descriptor that becomes readable when `pid` exits (without reaping it), and what
    closes it: a pidfd, or where the kernel has none, a pipe a waiting thread writes to."""
    try:
        fd = os.pidfd_open(pid)
        return fd, lambda: os.close(fd)
    except (AttributeError, OSError):
        pass
    read, write = os.pipe()

    def wait() -> None:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass
        os.close(write)  # readable (EOF) from now on

    threading.Thread(target=wait, name=f"exit-watch-{pid}", daemon=True).start()
    return read, lambda: os.close(read)


def _spawn(argv: Sequence[str], cwd: str, env: Mapping[str, str],
           fds: Sequence[int | tuple[int, int]]) -> int:
    """posix_spawn (a vfork in the C library): far less work than `subprocess.Popen`.

    It has no working directory of its own, so the helper moves there first; the program
    is looked up on the child's PATH, as `subprocess` does. The child gets a session of
    its own and default dispositions for the signals the interpreter ignores. `fds` become
    the child's 0, 1, 2..., or, given as (descriptor, number), that number.
    """
    moves = [fd if isinstance(fd, tuple) else (fd, target) for target, fd in enumerate(fds)]
    found = shutil.which(argv[0], path=env.get("PATH", os.defpath)) if os.sep not in argv[0] \
        else argv[0]
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", argv[0])
    os.chdir(cwd)
    try:
        return os.posix_spawn(
            found, list(argv), dict(env), setsid=True,
            setsigdef=(signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ),
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in moves])
    finally:
        os.chdir("/")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: Sequence[str]) -> int:
    """The helper's entry point: `forkserver.py CONTROL_FD`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the service decides when agents stop
    os.chdir("/")
    os.set_inheritable(int(argv[1]), False)  # no agent inherits it
    control = socket.socket(fileno=int(argv[1]))
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    helper = _Helper(_load(os.path.join(package, "sandbox", "netns.py")))
    _send(control, {"ready": True})
    helper.serve(control)
    return 0


def _load(path: str) -> Any:
    """A module of the standard library's imports only, by its path (the helper runs `-I`)."""
    spec = importlib.util.spec_from_file_location("wakeline_helper_" + os.path.basename(path)[:-3],
                                                  path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the service's side -----------------------------------------------------------------------


class SpawnFailed(OSError):
    """The helper could not start the program (its reason is the text), or is not there."""


@dataclass(frozen=True)
class Exited:
    """How a child ended: its exit code (negative: the signal), and what a captured spawn
    read of its output."""

    code: int
    stdout: str = ""
    stdout_dropped: int = 0  # bytes past the stdout bound, not kept
    stderr: str = ""  # its tail


@dataclass
class SpawnedChild:
    """An agent the helper started: its pid, and the connection its exit comes on."""

    pid: int
    _conn: socket.socket

    def exit_fileno(self) -> int:
        """Readable once the child has exited (select on it beside its pipes)."""
        return self._conn.fileno()

    def finish(self) -> Exited | None:
        """Wait for the child's end (and its output, when captured); None if the helper died."""
        try:
            got = _recv(self._conn)
        except OSError:
            got = None
        if got is None or "exit" not in got[0]:
            _kill_group(self.pid)  # nobody is watching it any more
            return None
        answer = got[0]
        return Exited(int(answer["exit"]), str(answer.get("stdout", "")),
                      int(answer.get("stdout_dropped", 0)), str(answer.get("stderr", "")))

    def wait(self) -> int | None:
        """The child's exit code (negative: the signal that ended it); None if the helper died."""
        exited = self.finish()
        return exited.code if exited is not None else None


class ForkServer:
    """Starts agents through the helper process; one connection per calling thread.

    The helper is started on first use, and again if it died.
    """

    def __init__(self, cpus: frozenset[int] | None = None) -> None:
        self._cpus = cpus  # the helper's (and so the agents') CPUs; None: the caller's
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._local = threading.local()
        self._conns: set[socket.socket] = set()  # every thread's, so stop closes them all
        self._generation = 0
        self._broken = False  # a connection broke: the helper is gone, even if not yet reapable

    def start(self) -> None:
        """Start the helper now, so the first turn does not wait for its interpreter."""
        with self._lock:
            self._ensure_helper()

    def spawn(self, argv: Sequence[str], cwd: str, env: Mapping[str, str],
              stdio: tuple[int, ...], capture: tuple[int, int] | None = None,
              listen: Sequence[tuple[str, int, str]] = ()) -> SpawnedChild:
        """Start `argv` in its own session with these stdin, stdout and stderr descriptors;
        with `capture` (stdout bytes kept, stderr tail bytes), `stdio` is stdin alone and
        the helper reads the output, which `SpawnedChild.finish` returns. With `listen`
        ((address, port, Unix socket path)...), `argv` is a bubblewrap with `--unshare-net`:
        each address is listened on in its network namespace before the agent starts, and
        relayed to its Unix socket until the sandbox ends.

        Raises:
            SpawnFailed: the program could not be started, or the helper is not there.
            OSError: the helper itself could not be started.
        """
        conn = self._connection()
        generation = self._local.generation
        try:
            request: dict[str, Any] = {"argv": list(argv), "cwd": cwd, "env": dict(env)}
            if capture is not None:
                request["capture"] = list(capture)
            if listen:
                request["listen"] = [list(entry) for entry in listen]
            _send(conn, request, stdio)
            got = _recv(conn)
        except OSError:
            got = None
        if got is None:
            self._drop_connection()
            with self._lock:  # unless another thread has already started a new helper
                self._broken = self._broken or generation == self._generation
            raise SpawnFailed("the fork server stopped")
        answer = got[0]
        if "error" in answer:
            raise SpawnFailed(str(answer["error"]))
        return SpawnedChild(int(answer["pid"]), conn)

    def stop(self) -> None:
        """Close the control socket: the helper ends every agent group left and exits."""
        with self._lock:
            control, proc, self._control, self._proc = self._control, self._proc, None, None
            conns, self._conns = self._conns, set()
            self._generation += 1
        for conn in conns:
            conn.close()
        if control is not None:
            control.close()
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def pid(self) -> int | None:
        """The helper's pid while it runs."""
        return self._proc.pid if self._proc is not None else None

    # --- internals ---------------------------------------------------------------------------

    def _connection(self) -> socket.socket:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.generation == self._generation:
            return conn
        self._drop_connection()
        with self._lock:
            self._ensure_helper()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                assert self._control is not None
                _send(self._control, {"connect": True}, [theirs.fileno()])
            except OSError:
                ours.close()
                self._broken = True
                raise SpawnFailed("the fork server stopped")
            finally:
                theirs.close()
            self._local.conn, self._local.generation = ours, self._generation
            self._conns.add(ours)
        return ours

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            with self._lock:
                self._conns.discard(conn)

    def _ensure_helper(self) -> None:
        if self._proc is not None and self._proc.poll() is None and not self._broken:
            return
        if self._proc is not None:
            log.warning("fork server gone; starting it again",
                        extra={"code": self._proc.returncode})
            if self._proc.returncode is None:  # it may still be exiting: see it gone first
                self._proc.kill()
                self._proc.wait()
            if self._control is not None:
                self._control.close()
            self._control, self._proc = None, None
            self._generation += 1  # every thread's connection went with it
        self._broken = False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        from wakeline.turns.cpus import spawning_on  # here: the helper itself must not import it

        try:
            with spawning_on(self._cpus):
                # A clean environment: nothing of the service's (secrets included) reaches it.
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", os.path.abspath(__file__), str(theirs.fileno())],
                    pass_fds=[theirs.fileno()], env={}, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        # Wait for its interpreter: the first turn must not pay for the start-up.
        ours.settimeout(READY_TIMEOUT_SECONDS)
        try:
            ready = _recv(ours)
        except OSError:
            ready = None
        ours.settimeout(None)
        if ready is None:
            ours.close()
            self._proc.kill()
            self._proc.wait()
            self._proc = None
            raise SpawnFailed("the fork server did not start")
        self._control = ours


if __name__ == "__main__":
    sys.exit(main(sys.argv))
