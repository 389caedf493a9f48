"""A stand-in for Linear's GraphQL API, on loopback, for the offline demo.

It answers the writes wakeline makes (agent activities, comments, issue updates) and
`viewer` the way Linear does, and remembers every write in order, so the demo can show
what Linear would have received. It is not a Linear: it validates nothing else.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 1_048_576


@dataclass(frozen=True)
class Received:
    """One write Linear would have received."""

    operation: str
    input: dict[str, Any]


class StandInLinear:
    """Start with `start()`; `url` is its GraphQL endpoint; `writes()` what it received."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: list[Received] = []
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> StandInLinear:
        """Serve on a free loopback port, on a daemon thread."""
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # the demo prints its own summary
                pass

            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY_BYTES)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                raw = json.dumps(stand_in.answer(body if isinstance(body, dict) else {})).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="stand-in-linear",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        """The GraphQL endpoint."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/graphql"

    def writes(self) -> list[Received]:
        """Every write received, in order."""
        with self._lock:
            return list(self._writes)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """What Linear would answer (a success for every write it knows)."""
        query = str(body.get("query", ""))
        variables = body.get("variables") or {}
        given = variables.get("input") if isinstance(variables.get("input"), dict) else {}
        for operation, noun in (("agentActivityCreate", "agentActivity"), ("commentCreate", "comment")):
            if operation in query:
                with self._lock:
                    self._writes.append(Received(operation, dict(given)))
                return {"data": {operation: {"success": True, noun: {"id": given.get("id")}}}}
        if "issueUpdate" in query:
            with self._lock:
                self._writes.append(Received("issueUpdate", dict(given)))
            return {"data": {"issueUpdate": {"success": True}}}
        if "viewer" in query:
            return {"data": {"viewer": {"id": "demo-app-user", "name": "wakeline (demo)"}}}
        if "WakelineUser" in query:  # every user of the demo's session is a person
            return {"data": {"user": {"id": variables.get("id"), "app": False}}}
        return {"data": None, "errors": [{"message": "the demo's stand-in for Linear does not know this"}]}
