"""The allow-list proxy, over a real Unix socket, in front of a real HTTP server on loopback."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_until
from wakeline.sandbox.hosts import AllowList, Rule
from wakeline.sandbox.proxy import AllowProxy, ProxyTurn, _connect


class _Echo(BaseHTTPRequestHandler):
    """Answers every GET with what it received: the request line and the header names."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = f"{self.requestline}|{','.join(sorted(k.lower() for k in self.headers))}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[AllowProxy, list[tuple[str, int, str]]]]:
    refused: list[tuple[str, int, str]] = []
    proxy = AllowProxy(tmp_path, lambda turn, host, port, why: refused.append((host, port, why)))
    proxy.start()
    yield proxy, refused
    proxy.stop()


def turn(rules: list[str]) -> ProxyTurn:
    return ProxyTurn("turn_1", "cv_1", "ENG-1", AllowList(rules), "routes.0.allow_hosts")


class _UnixHTTP(http.client.HTTPConnection):
    """An HTTP client whose connection is the proxy's Unix socket (as the launcher relays it)."""

    def __init__(self, path: Path) -> None:
        super().__init__("proxy", timeout=10)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(self._path))
        if self._tunnel_host:
            self._tunnel()


def get(path: Path, url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = _UnixHTTP(path)
    try:
        conn.request("GET", url, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_an_allowed_plain_request_reaches_its_host_as_the_host_wants_it(
        proxy: tuple[AllowProxy, list[Any]], upstream: int, tmp_path: Path) -> None:
    server, refused = proxy
    path = tmp_path / "p1.sock"
    server.open(turn([f"127.0.0.1:{upstream}"]), path)
    status, body = get(path, f"http://127.0.0.1:{upstream}/v1/x?y=1",
                       {"Proxy-Authorization": "Basic eA==", "Proxy-Connection": "keep-alive"})
    assert status == 200
    line, headers = body.split("|")
    assert line == "GET /v1/x?y=1 HTTP/1.1"  # origin form
    assert "proxy-authorization" not in headers and "proxy-connection" not in headers
    assert refused == []


def test_connect_opens_a_tunnel_to_an_allowed_host(
        proxy: tuple[AllowProxy, list[Any]], upstream: int, tmp_path: Path) -> None:
    server, _ = proxy
    path = tmp_path / "p1.sock"
    server.open(turn([f"127.0.0.1:{upstream}"]), path)
    conn = _UnixHTTP(path)
    conn.set_tunnel("127.0.0.1", upstream)
    conn.request("GET", "/through-the-tunnel")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read().decode().startswith("GET /through-the-tunnel")
    conn.close()


def test_anything_else_gets_403_and_is_reported_once_per_host_and_port(
        proxy: tuple[AllowProxy, list[Any]], upstream: int, tmp_path: Path) -> None:
    server, refused = proxy
    path = tmp_path / "p1.sock"
    server.open(turn(["api.example.com"]), path)
    for _ in range(2):
        status, body = get(path, f"http://127.0.0.1:{upstream}/")
        assert status == 403 and "not in routes.0.allow_hosts" in body
    conn = _UnixHTTP(path)
    conn.set_tunnel("127.0.0.1", 22)
    with pytest.raises(OSError, match="403"):
        conn.request("GET", "/")
    conn.close()
    # Reported after the 403 is sent: the last report may come just after the client saw it.
    wait_until(lambda: len(refused) >= 2, message="both refusals reported")
    assert [(h, p) for h, p, _ in refused] == [("127.0.0.1", upstream), ("127.0.0.1", 22)]


def test_a_request_that_is_not_for_a_proxy_gets_400(
        proxy: tuple[AllowProxy, list[Any]], tmp_path: Path) -> None:
    server, _ = proxy
    path = tmp_path / "p1.sock"
    server.open(turn(["example.com"]), path)
    assert get(path, "/just-a-path")[0] == 400
    assert get(path, "ftp://example.com/")[0] == 400


def test_a_name_that_resolves_to_this_host_is_refused(upstream: int) -> None:
    sock, why = _connect(Rule("models.example.test", (upstream,)), "127.0.0.1", upstream)
    assert sock is None and why.startswith("resolves only")
    sock, why = _connect(Rule("127.0.0.1", (upstream,)), "127.0.0.1", upstream)
    assert sock is not None
    sock.close()


def test_a_closed_turn_takes_its_socket_along(
        proxy: tuple[AllowProxy, list[Any]], tmp_path: Path) -> None:
    server, _ = proxy
    path = tmp_path / "p1.sock"
    server.open(turn(["example.com"]), path)
    assert path.exists() and (path.stat().st_mode & 0o777) == 0o600
    server.close(path)
    assert not path.exists()
    with pytest.raises(OSError):
        get(path, "http://example.com/")
