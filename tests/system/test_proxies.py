"""Behind a company proxy with no NO_PROXY: loopback never goes through it, Linear does.

Every proxy variable points at a dead port (or at a recording proxy), as on a laptop
whose proxy is unreachable from the user's own services.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.conftest import LINEAR_KEY, OPERATOR_TOKEN
from tests.helpers import free_port
from wakeline.clock import SystemClock
from wakeline.errors import PossiblyDispatched, ProviderRejected
from wakeline.service.net import is_loopback
from wakeline.providers.linear.client import LinearClient, RequestBudget
from wakeline.providers.linear.credentials import StaticCredential

pytestmark = pytest.mark.slow
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def behind_proxy(proxy: str) -> dict[str, str]:
    """The environment of a user whose every proxy variable says `proxy`, with no NO_PROXY."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("WAKELINE_") and k.lower() != "no_proxy"}
    env.update({name: proxy for name in PROXY_VARS})
    return env


def test_the_demo_runs_with_a_dead_proxy_in_every_variable() -> None:
    done = subprocess.run([sys.executable, "-m", "wakeline", "demo"],
                          env=behind_proxy(f"http://127.0.0.1:{free_port()}"),
                          capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    assert "response activity" in done.stdout


def test_cli_commands_reach_the_service_on_loopback_past_a_dead_proxy(service: Any) -> None:
    env = behind_proxy(f"http://127.0.0.1:{free_port()}")
    env.update(WAKELINE_API_URL=service.operator.url,
               WAKELINE_TOKEN=OPERATOR_TOKEN)
    for args in (["status"], ["conversations"], ["follow"]):
        done = subprocess.run([sys.executable, "-m", "wakeline", *args], env=env,
                              capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, (args, done.stderr)


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - a forward proxy gets the absolute URL
        type(self).seen.append(self.path)
        self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_linear_itself_still_goes_through_the_proxy(
        proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen = proxy
    for name in PROXY_VARS:
        monkeypatch.setenv(name, url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = LinearClient("http://api.linear.example/graphql", StaticCredential(LINEAR_KEY),
                          RequestBudget(100, SystemClock()), [])
    with pytest.raises(PossiblyDispatched):  # the proxy answered 502
        client.execute("query { viewer { id } }")
    assert seen == ["http://api.linear.example/graphql"]
    local = LinearClient(f"http://127.0.0.1:{free_port()}/graphql", StaticCredential(LINEAR_KEY),
                         RequestBudget(100, SystemClock()), [])
    with pytest.raises((PossiblyDispatched, ProviderRejected)):  # refused: nothing listens
        local.execute("query { viewer { id } }")
    assert seen == ["http://api.linear.example/graphql"]  # the loopback call went direct


@pytest.mark.parametrize(("url", "loopback"), [
    ("http://127.0.0.1:8788/v1/status", True), ("http://127.9.9.9/x", True),
    ("http://[::1]:8788/", True), ("http://localhost:1/", True),
    ("https://api.linear.app/graphql", False), ("http://10.0.0.1/", False), ("nonsense", False),
])
def test_what_counts_as_loopback(url: str, loopback: bool) -> None:
    assert is_loopback(url) is loopback
