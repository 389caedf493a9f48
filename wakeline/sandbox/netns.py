"""A confined turn's own network, reached from the host: listeners inside, a relay outside.

Under `network = "off"` and `"allow"` bubblewrap gives the turn a network namespace of its own
(`--unshare-net`): a loopback and nothing else. The agent still reaches wakeline's API (and under
`allow` the proxy) at `127.0.0.2:8788` (`:3128`), and no process inside the sandbox serves them:
a socket belongs to the network namespace it was made in, whoever holds its descriptor. So the
fork server starts bubblewrap with `--info-fd` (which process holds the new namespaces) and
`--block-fd` (the agent waits until a byte comes), listens in that process's network namespace
and only then lets the agent start: a connection never finds nothing there. To get in, root
sends a thread of its own (a network namespace is a thread's); anyone else forks a child that
joins the user namespace owning it, then it, and hands the listening sockets back (SCM_RIGHTS):
a process with threads may not enter a user namespace (that child costs about a millisecond of
CPU, beside bubblewrap's own set-up). The fork server's relay (`Relay`) accepts on them and
carries each connection to wakeline's Unix socket; the listeners are closed when the sandbox
ends (they would keep its namespace alive).

Why join bubblewrap's namespaces rather than make the network namespace first and run bubblewrap
in it: unprivileged, that needs a user namespace made by this interpreter, and Ubuntu's AppArmor
restriction (`kernel.apparmor_restrict_unprivileged_userns`) strips such a namespace of every
capability, a bubblewrap run inside it included; the documented fix there is a profile for
`bwrap` alone (docs/operations.md), which this way is all it takes.

Standard library only: the fork server loads this file by its path (it runs isolated, `-I`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import select
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence

INFO_FD = 3  # where bubblewrap writes `{"child-pid": N, ...}`, as the fork server starts it
BLOCK_FD = 4  # where it waits for a byte before it runs the agent
BWRAP_OPTIONS = ("--info-fd", str(INFO_FD), "--block-fd", str(BLOCK_FD))
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace, as a descriptor
IP_FREEBIND = 15  # bind before bubblewrap has brought the loopback up (`socket` lacks it in 3.11)
BACKLOG = 64
CHUNK = 65_536
SETUP_TIMEOUT_SECONDS = 30.0
PROBE_FAILED = 125  # the probe, not bubblewrap, failed (as env(1) says it)

Listen = Sequence[tuple[str, int, str]]  # (address inside, port, wakeline's Unix socket)


class SandboxNetwork:
    """Opens the listeners of a sandbox whose bubblewrap was started with `BWRAP_OPTIONS`."""

    def __init__(self, in_thread: bool | None = None) -> None:
        """`in_thread`: join the namespace from a thread (root may) rather than from a child
        (anyone may); by default, as the effective user allows."""
        # Loaded now, before any fork: the child only calls it.
        self._setns: Callable[[int, int], None] = getattr(os, "setns", None) or _libc_setns()
        self._in_thread = os.geteuid() == 0 if in_thread is None else in_thread

    def prepare(self, argv: Sequence[str]) -> tuple[list[str], list[tuple[int, int]],
                                                     tuple[int, int]]:
        """bubblewrap's `argv` with `BWRAP_OPTIONS`; the descriptors to give it as
        (descriptor, number in bubblewrap), to close once it has them; and the fork server's
        ends of those pipes, for `open`."""
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        # Numbered above the ones they become, so that no dup2 overwrites another's source.
        given = []
        for fd, target in ((info_w, INFO_FD), (block_r, BLOCK_FD)):
            given.append((fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, BLOCK_FD + 1), target))
            os.close(fd)
        return [argv[0], *BWRAP_OPTIONS, *argv[1:]], given, (info_r, block_w)

    def open(self, bwrap: int, info: int, block: int, listen: Listen) -> list[socket.socket]:
        """Read the sandbox's process from `info`, listen on each `listen` address in its
        network namespace, then let the agent start (a byte on `block`). Closes both.

        Raises:
            OSError: the sandbox is gone, or its namespaces cannot be joined. The agent has
                not started: bubblewrap's group (`bwrap`, its pid) is killed first, since the
                end of `block` would let it go on; the caller reaps it.
        """
        deadline = time.monotonic() + SETUP_TIMEOUT_SECONDS
        try:
            pid = _child_pid(info, deadline)
            listeners = self._listen_in(pid, listen, deadline)
            try:
                os.write(block, b"x")
            except OSError:
                for sock in listeners:
                    sock.close()
                raise
            return listeners
        except OSError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(bwrap, signal.SIGKILL)
            raise
        finally:
            os.close(info)
            os.close(block)

    def _listen_in(self, pid: int, listen: Listen, deadline: float) -> list[socket.socket]:
        """Listening sockets made in `pid`'s network namespace."""
        net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(net).st_ino == os.stat("/proc/self/ns/net").st_ino:
                raise OSError(0, "the sandbox has no network of its own (no --unshare-net)")
            if self._in_thread:
                return self._listen_from_thread(net, listen)
            # The user namespace that owns it, not the process's: bubblewrap may have made
            # another inside by now (for `--uid`), whose members cannot join it.
            owner = fcntl.ioctl(net, NS_GET_USERNS)
            try:
                return self._listen_from_child(owner, net, listen, deadline)
            finally:
                os.close(owner)
        finally:
            os.close(net)

    def _listen_from_thread(self, net: int, listen: Listen) -> list[socket.socket]:
        """As root: a thread of its own joins the namespace (a network namespace is a
        thread's), makes the sockets and ends, namespace and all."""
        made: list[socket.socket] = []
        failed: list[BaseException] = []

        def work() -> None:
            try:
                self._setns(net, CLONE_NEWNET)
                made.extend(_listener(host, port) for host, port, _ in listen)
            except OSError as exc:
                failed.append(exc)

        thread = threading.Thread(target=work, name="sandbox-listen")
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to be had
            raise OSError(0, f"cannot listen in the sandbox's network: {exc}") from None
        thread.join()
        if failed or len(made) != len(listen):
            for sock in made:
                sock.close()
            why = f"{failed[0].__class__.__name__}: {failed[0]}" if failed else "no sockets"
            raise OSError(0, f"cannot listen in the sandbox's network: {why}")
        return made

    def _listen_from_child(self, owner: int, net: int, listen: Listen,
                           deadline: float) -> list[socket.socket]:
        """Unprivileged: a network namespace is joined from inside the user namespace that
        owns it, which a process with threads may not enter. So a child joins both and sends
        the sockets back."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            child = os.fork()
            if child == 0:  # nothing here may return or raise into the fork server
                code = 1
                try:
                    ours.close()
                    self._setns(owner, CLONE_NEWUSER)
                    self._setns(net, CLONE_NEWNET)
                    sockets = [_listener(host, port) for host, port, _ in listen]
                    socket.send_fds(theirs, [b"ok"], [sock.fileno() for sock in sockets])
                    code = 0
                except OSError as exc:
                    with contextlib.suppress(OSError):
                        theirs.sendall(f"{exc.__class__.__name__}: {exc}".encode()[:500])
                finally:
                    os._exit(code)
            theirs.close()
            said, fds = b"", []  # type: tuple[bytes, list[int]]
            try:
                ours.settimeout(max(deadline - time.monotonic(), 0.001))
                said, fds, _, _ = socket.recv_fds(ours, 512, len(listen),
                                                  socket.MSG_CMSG_CLOEXEC)
            finally:
                if not said:  # stuck, or gone without a word
                    os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
        finally:
            ours.close()
            theirs.close()
        made = [socket.socket(fileno=fd) for fd in fds]
        if said != b"ok" or len(made) != len(listen):
            for sock in made:
                sock.close()
            why = said.decode("utf-8", "replace") or "the child ended without an answer"
            raise OSError(0, f"cannot listen in the sandbox's network: {why}")
        return made


class Relay:
    """Carries each connection to a sandbox's listeners to wakeline's Unix socket for it.

    One thread (`sandbox-accept`) accepts on every sandbox's listeners; each connection gets
    two threads (`sandbox-relay`), one a direction, while it carries bytes. Outside the sandbox,
    the relay hears none of the signals a stop sends the agent: its last calls get through.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # epoll (Linux's, as bubblewrap is): a listener registered while the accepting thread
        # waits is watched at once, with no wake-up.
        self._selector = selectors.EpollSelector()
        self._accepting = False  # the thread starts with the first listener
        self._groups: dict[int, list[socket.socket]] = {}

    def add(self, key: int, listeners: Sequence[socket.socket], listen: Listen) -> None:
        """Relay `listeners` (one a `listen` entry) until `close(key)`, which closes them
        (so does a failure here)."""
        with self._lock:
            self._groups[key] = list(listeners)
            try:
                for sock, (_, _, path) in zip(listeners, listen):
                    sock.setblocking(False)
                    self._selector.register(sock, selectors.EVENT_READ, path)
                if not self._accepting:
                    threading.Thread(target=self._accept_loop, name="sandbox-accept",
                                     daemon=True).start()
                    self._accepting = True
            except (OSError, RuntimeError):  # out of descriptors, or of threads
                self._close(key)
                raise

    def close(self, key: int) -> None:
        """Stop listening for `key` (its sandbox has ended); idempotent. Connections in
        flight end as their sandbox's side closes."""
        with self._lock:
            self._close(key)

    def _close(self, key: int) -> None:
        for sock in self._groups.pop(key, ()):
            with contextlib.suppress(KeyError):
                self._selector.unregister(sock)
            sock.close()

    def _accept_loop(self) -> None:
        while True:
            for key, _ in self._selector.select():
                try:
                    client, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:  # gone meanwhile (closed), or nothing left to accept
                    continue
                threading.Thread(target=_relay, args=(client, key.data), name="sandbox-relay",
                                 daemon=True).start()


def _relay(client: socket.socket, path: str) -> None:
    """One relayed connection: to wakeline's socket at `path`, then both ways (a thread each:
    here, not in the accepting thread, a busy server's backlog holds up no one else)."""
    client.setblocking(True)
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    done: list[object] = [threading.Lock()]
    threading.Thread(target=_pump, args=(upstream, client, done), name="sandbox-relay",
                     daemon=True).start()
    _pump(client, upstream, done)


def _pump(src: socket.socket, dst: socket.socket, done: list[object]) -> None:
    """One direction of a relayed connection; the second to end closes both sockets."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        try:
            sock.shutdown(how)
        except OSError:
            pass
    with done[0]:  # type: ignore[attr-defined]
        done.append(None)
        last = len(done) == 3
    if last:
        src.close()
        dst.close()


def _child_pid(info: int, deadline: float) -> int:
    """The sandbox's first process, as bubblewrap's `--info-fd` JSON names it. Read up to its
    closing brace: bubblewrap's child may hold the pipe open until the agent runs."""
    data = b""
    poll = select.poll()
    poll.register(info, select.POLLIN)
    while not data.rstrip().endswith(b"}"):
        ready = poll.poll(max(deadline - time.monotonic(), 0) * 1000)
        chunk = os.read(info, 4096) if ready else b""
        if not chunk:
            raise OSError(0, "bubblewrap did not say which process holds the sandbox"
                             + ("" if ready else " in time"))
        data += chunk
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        raise OSError(0, f"bubblewrap's --info-fd said {data[:200]!r}") from None


def _listener(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    return sock


def _libc_setns() -> Callable[[int, int], None]:
    """`os.setns` before Python 3.12: the C library's."""
    call = ctypes.CDLL(None, use_errno=True).setns
    call.argtypes = (ctypes.c_int, ctypes.c_int)

    def setns(fd: int, nstype: int) -> None:
        if call(fd, nstype) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return setns


def probe(argv: Sequence[str]) -> int:
    """Run bubblewrap's `argv` (with `--unshare-net`) as the fork server would, listening in its
    network before its command runs: its exit code, or 125 (with the reason on stderr) when
    the listening failed. The start-up probe runs it (`python -I -S netns.py BWRAP_ARGV...`)."""
    network = SandboxNetwork()
    argv, given, (info, block) = network.prepare(argv)
    try:
        pid = os.posix_spawn(argv[0], argv, dict(os.environ), setsid=True,
                             file_actions=[(os.POSIX_SPAWN_DUP2, fd, to) for fd, to in given])
    except OSError:
        os.close(info)
        os.close(block)
        raise
    finally:
        for fd, _ in given:
            os.close(fd)
    try:
        listeners = network.open(pid, info, block, [("127.0.0.2", 8788, "")])
    except OSError as exc:
        os.waitpid(pid, 0)
        os.write(2, f"wakeline: {exc.strerror or exc}\n".encode())
        return PROBE_FAILED
    _, status = os.waitpid(pid, 0)
    for sock in listeners:
        sock.close()
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    import sys

    sys.exit(probe(sys.argv[1:]))
