"""The body limit is enforced by the real server before the body is read.

Raw sockets, so the test controls `Content-Length` and how much body is actually sent.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import SecretStr

from tests.conftest import OPERATOR_TOKEN, WEBHOOK_SECRET, comment_event, signed
from wakeline.app import Service
from wakeline.config import Config
from wakeline.models.store import Store
from wakeline.secrets import Secrets

LIMIT = 8192
DEADLINE_SECONDS = 5.0

pytestmark = pytest.mark.slow


@pytest.fixture
def secrets() -> Secrets:
    """No Linear API key: the local backend, so nothing here ever calls api.linear.app."""
    return Secrets(webhook_secret=SecretStr(WEBHOOK_SECRET), linear_api_key=None,
                   operator_token=SecretStr(OPERATOR_TOKEN))


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    """A small body limit keeps the padded bodies small."""
    return make_config(server={"max_body_bytes": LIMIT})


def exchange(svc: Service, head: dict[str, str], body: bytes, content_length: int | None = None,
             chunked: bool = False) -> tuple[int, dict[str, str], bytes, float]:
    """Send one POST over a raw socket; return status, headers, body and seconds to the answer.

    Reads until the server closes or the announced response body is complete, and never
    longer than the deadline (the socket timeout makes a stalled server fail the test).
    """
    lines = ["POST /webhooks/linear HTTP/1.1", f"Host: 127.0.0.1:{svc.ingress.port}"]
    lines += [f"{k}: {v}" for k, v in head.items()]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        payload = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body) if content_length is None else content_length}")
        payload = body
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
    started = time.monotonic()
    address = ("127.0.0.1", svc.ingress.port)
    with socket.create_connection(address, timeout=DEADLINE_SECONDS) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before taking the whole body
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
            header_end = data.find(b"\r\n\r\n")
            if header_end >= 0:
                headers = _headers(data[:header_end])
                want = int(headers.get("content-length", "-1"))
                if want >= 0 and len(data) - header_end - 4 >= want:
                    break
    elapsed = time.monotonic() - started
    header_end = data.index(b"\r\n\r\n")
    status = int(data.split(b" ", 2)[1])
    return status, _headers(data[:header_end]), data[header_end + 4:], elapsed


def _headers(block: bytes) -> dict[str, str]:
    out = {}
    for line in block.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        out[name.strip().lower()] = value.strip()
    return out


def padded_comment(size: int) -> bytes:
    """A valid comment event whose JSON is exactly `size` bytes."""
    body: dict[str, Any] = comment_event()
    body["data"]["body"] = ""
    base = len(json.dumps(body).encode())
    body["data"]["body"] = "x" * (size - base)
    raw = json.dumps(body).encode()
    assert len(raw) == size
    return raw


def test_huge_content_length_is_refused_promptly_without_the_body(service: Service,
                                                                  store: Store) -> None:
    """A 99999999999-byte Content-Length with 10 bytes sent is 413 too_large at once."""
    raw, headers = signed(b'{"type":1}')
    status, resp_headers, body, elapsed = exchange(service, headers, raw,
                                                   content_length=99_999_999_999)
    assert status == 413
    assert json.loads(body) == {"error": "too_large"}
    assert resp_headers["content-type"].startswith("application/json")
    assert elapsed < DEADLINE_SECONDS
    assert store.t.receipts.select().count() == 0


def test_one_byte_over_the_limit_is_too_large(service: Service, store: Store) -> None:
    """A signed body of max_body_bytes + 1 is 413 too_large."""
    raw, headers = signed(padded_comment(LIMIT + 1))
    status, _, body, _ = exchange(service, headers, raw)
    assert status == 413
    assert json.loads(body) == {"error": "too_large"}
    assert store.t.receipts.select().count() == 0


def test_a_body_of_exactly_the_limit_is_accepted(service: Service, store: Store) -> None:
    """A valid signed body of exactly max_body_bytes is read and admitted."""
    raw, headers = signed(padded_comment(LIMIT))
    status, _, body, _ = exchange(service, headers, raw)
    assert status == 200
    assert json.loads(body) == {"outcome": "accepted"}
    assert store.t.receipts.select().count() == 1


def test_an_oversized_chunked_body_is_too_large(service: Service, store: Store) -> None:
    """Without a Content-Length, a chunked body over the limit is 413 too_large too."""
    raw, headers = signed(padded_comment(2 * LIMIT))
    status, _, body, _ = exchange(service, headers, raw, chunked=True)
    assert status == 413
    assert json.loads(body) == {"error": "too_large"}
    assert store.t.receipts.select().count() == 0
