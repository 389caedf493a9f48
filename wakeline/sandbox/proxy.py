"""The allow-list proxy of `network = "allow"`: the only way out of such a turn's sandbox.

Each running turn gets a listening Unix socket of its own (the fork server relays the turn's
`127.0.0.2:3128` to it: `netns.py`), so every request is the turn's, without credentials.
A request is an HTTP `CONNECT host:port` or a plain request in absolute form (`GET
http://host/path`); anything else gets 400. A destination the route's `allow_hosts` does not
name gets 403, and the first such request of a turn for each host and port is reported
(`on_refused`, a journal entry). An allowed name is resolved here, and none of its addresses
may be this host's loopback, link-local or unspecified ones (a rule naming an address gets
exactly that address): a public name pointed at 127.0.0.1 must not reach the host's own
services. The proxy connects to the address it checked, never resolving twice.

One thread accepts on every turn's socket; each connection gets a thread (two while it
carries bytes), at most `MAX_CONNECTIONS` at once per turn.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from wakeline.sandbox.hosts import AllowList, Rule, reachable

log = logging.getLogger(__name__)

HEAD_MAX_BYTES = 16_384
HEAD_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS = 16  # a turn's connections through the proxy at once: two threads each
CHUNK = 65_536
_HOP_BY_HOP = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}


@dataclass
class ProxyTurn:
    """A running turn, as the proxy knows it."""

    turn_id: str
    conversation_id: str
    issue_key: str | None
    allow: AllowList
    rules_key: str  # where its rules are configured, for the refusal's text
    refused: set[tuple[str, int]] = field(default_factory=set)
    connections: int = 0


Refused = Callable[[ProxyTurn, str, int, str], None]  # (turn, host, port, why)


class AllowProxy:
    """Serves every `allow` turn's socket from one accepting thread."""

    def __init__(self, runtime: Path, on_refused: Refused) -> None:
        self._runtime = runtime
        self._on_refused = on_refused
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._listening: dict[Path, socket.socket] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        """Start accepting (on the sockets of the turns that open from now on)."""
        self._thread = threading.Thread(target=self._accept_loop, name="sandbox-proxy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting; connections in flight end with their turns."""
        self._stopping = True
        self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            for path, sock in self._listening.items():
                self._selector.unregister(sock)
                sock.close()
                path.unlink(missing_ok=True)
            self._listening.clear()
        self._wake_r.close()
        self._wake_w.close()

    def open(self, turn: ProxyTurn, path: Path) -> None:
        """Listen for `turn` at `path` (a new Unix socket, owner-only)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            os.chmod(path, 0o600)
            sock.listen(16)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        with self._lock:
            self._listening[path] = sock
            self._selector.register(sock, selectors.EVENT_READ, turn)
        self._wake_w.send(b"x")

    def close(self, path: Path) -> None:
        """Stop listening at `path` (its turn ended); idempotent."""
        with self._lock:
            sock = self._listening.pop(path, None)
            if sock is not None:
                self._selector.unregister(sock)
                sock.close()
        path.unlink(missing_ok=True)

    def _accept_loop(self) -> None:
        while not self._stopping:
            for key, _ in self._selector.select():
                if self._stopping:
                    return
                if key.fileobj is self._wake_r:
                    self._wake_r.recv(4096)
                    continue
                try:
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except (BlockingIOError, OSError):
                    continue
                turn: ProxyTurn = key.data
                with self._lock:
                    busy = turn.connections >= MAX_CONNECTIONS
                    if not busy:
                        turn.connections += 1
                if busy:
                    _answer(conn, 503, "too many connections at once")
                    conn.close()
                    continue
                threading.Thread(target=self._serve, args=(conn, turn), daemon=True,
                                 name=f"sandbox-proxy-{turn.turn_id}").start()

    def _serve(self, conn: socket.socket, turn: ProxyTurn) -> None:
        try:
            conn.setblocking(True)
            self._handle(conn, turn)
        except Exception:
            log.exception("proxy connection failed", extra={"turn_id": turn.turn_id})
        finally:
            conn.close()
            with self._lock:
                turn.connections -= 1

    def _handle(self, conn: socket.socket, turn: ProxyTurn) -> None:
        conn.settimeout(HEAD_TIMEOUT_SECONDS)
        head, rest = _read_head(conn)
        if head is None:
            _answer(conn, 400, "expected an HTTP request head")
            return
        request = _parse(head)
        if request is None:
            _answer(conn, 400, "expected CONNECT host:port or an absolute http:// URL")
            return
        method, host, port, target = request
        rule = turn.allow.match(host, port)
        if rule is None:
            self._refuse(conn, turn, host, port, f"not in {turn.rules_key}")
            return
        upstream, why = _connect(rule, host, port)
        if upstream is None:
            if why.startswith("resolves"):
                self._refuse(conn, turn, host, port, why)
            else:
                _answer(conn, 502, f"{host}:{port}: {why}")
            return
        conn.settimeout(None)
        with upstream:
            if method == b"CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(_origin_form(head, method, target))
            if rest:
                upstream.sendall(rest)
            _splice(conn, upstream)

    def _refuse(self, conn: socket.socket, turn: ProxyTurn, host: str, port: int,
                why: str) -> None:
        _answer(conn, 403, f"{host}:{port} is refused: {why}")
        with self._lock:
            first = (host, port) not in turn.refused
            turn.refused.add((host, port))
        if first:
            try:
                self._on_refused(turn, host, port, why)
            except Exception:  # recording never gets in the way
                log.exception("proxy refusal not recorded")


def _read_head(conn: socket.socket) -> tuple[bytes | None, bytes]:
    """The request head (up to its blank line) and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_MAX_BYTES:
            return None, b""
        try:
            chunk = conn.recv(CHUNK)
        except OSError:
            return None, b""
        if not chunk:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _parse(head: bytes) -> tuple[bytes, str, int, bytes] | None:
    """(method, host, port, origin-form target) of a proxy request, or None."""
    line = head.split(b"\r\n", 1)[0].split(b" ")
    if len(line) != 3 or not line[2].startswith(b"HTTP/1."):
        return None
    method, target = line[0], line[1]
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        return None
    if method == b"CONNECT":
        parts = urlsplit("//" + text)
        path = b""
    else:
        parts = urlsplit(text)
        if parts.scheme != "http":
            return None
        path = (parts.path or "/").encode("ascii") + (
            b"?" + parts.query.encode("ascii") if parts.query else b"")
    try:
        port = parts.port or (80 if method != b"CONNECT" else None)
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return method, parts.hostname, port, path


def _origin_form(head: bytes, method: bytes, target: bytes) -> bytes:
    """The request as the origin server wants it: its path, no proxy headers, one request."""
    lines = head.split(b"\r\n")
    version = lines[0].rsplit(b" ", 1)[1]
    kept = [line for line in lines[1:]
            if line.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP]
    return b"\r\n".join([method + b" " + target + b" " + version, *kept,
                         b"Connection: close", b"", b""])


def _connect(rule: Rule, host: str, port: int) -> tuple[socket.socket | None, str]:
    """A connection to the first address of `host` the rule may reach, or why there is none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return None, f"cannot resolve: {exc.strerror}"
    allowed = [info for info in infos if reachable(rule, str(info[4][0]))]
    if not allowed:
        return None, "resolves only to this host's own (loopback or link-local) addresses"
    last = "no address answered"
    for family, kind, proto, _, address in allowed:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(CONNECT_TIMEOUT_SECONDS)
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            last = exc.strerror or str(exc)
            continue
        sock.settimeout(None)
        return sock, ""
    return None, last


def _splice(a: socket.socket, b: socket.socket) -> None:
    """Carry bytes both ways until both directions have ended."""
    back = threading.Thread(target=_pump, args=(b, a), daemon=True,
                            name=f"{threading.current_thread().name}-back")
    back.start()
    _pump(a, b)
    back.join()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _answer(conn: socket.socket, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway",
              503: "Service Unavailable"}[status]
    body = f"wakeline proxy: {text}\n".encode()
    try:
        conn.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii")
                     + body)
    except OSError:
        pass
