"""A stand-in for Linear's GraphQL API on loopback: a test aid, and the demo's Linear.

Point `[linear] api_url` at `StandInLinear().start().url` and wakeline's calls land here: it
answers the writes wakeline makes (agent activities, comments, issue and comment updates),
`viewer` and `organization`, and whether a user is an app, the way Linear does, and records
every request in order. It is not a Linear: it checks nothing, keeps no issues, and answers
any other query with an error, unless `handler` answers it first.

It also stands in for Linear's file storage: point `[linear] uploads_url` at `uploads_url`,
`upload` a file, and put the link it returns in an issue's description or a comment; a
request for it is answered only with an `Authorization` header (`files_authorization`, when
set, exactly that one), as Linear's storage answers only with the workspace's credential.

wakeline's own tests run on it: their fake (`tests/fakes/linear.py`) extends it with scripted
failures, latency, held answers and Linear's OAuth token endpoint, by overriding `respond`
(how a request is answered) and `reply` (what the stand-in knows).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable

MAX_BODY_BYTES = 1_048_576
UPLOADS_PATH = "/uploads"
# The writes wakeline makes, each with the object its answer names (None: a bare success).
WRITES: dict[str, str | None] = {"agentActivityCreate": "agentActivity", "commentCreate": "comment",
                                 "issueUpdate": None, "commentUpdate": None}


def _variables(body: dict[str, Any]) -> dict[str, Any]:
    variables = body.get("variables")
    return variables if isinstance(variables, dict) else {}


def _input(body: dict[str, Any]) -> dict[str, Any]:
    given = _variables(body).get("input")
    return given if isinstance(given, dict) else {}


def _write(query: str) -> str | None:
    return next((write for write in WRITES if write in query), None)


@dataclass(frozen=True)
class Recorded:
    """One request the stand-in received."""

    at: float  # time.time() on arrival
    headers: dict[str, str]
    body: dict[str, Any]  # the JSON object sent (empty if it was none)
    refused: bool = False  # answered 401: a subclass that checks tokens found no live one
    path: str = ""  # a file request's path (GraphQL requests: empty)

    @property
    def query(self) -> str:
        """The GraphQL document."""
        return str(self.body.get("query", ""))

    @property
    def variables(self) -> dict[str, Any]:
        """The GraphQL variables (empty when there are none)."""
        return _variables(self.body)

    @property
    def input(self) -> dict[str, Any]:
        """The `input` variable: what a write writes."""
        return _input(self.body)

    @property
    def operation(self) -> str | None:
        """The write it makes (`commentCreate`...), None for anything else."""
        return _write(self.query)


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: its status, its JSON body and any extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FileReply:
    """An answer to a file request: its status, its bytes (in the chunks given, each written
    as it comes) and headers. `length`: send `Content-Length` (else the body ends with the
    connection)."""

    status: int
    chunks: Iterable[bytes] = ()
    headers: dict[str, str] = field(default_factory=dict)
    length: bool = True


@dataclass(eq=False, kw_only=True)
class StandInLinear:
    """Linear's GraphQL API as wakeline uses it, on a free loopback port.

    `start()` serves it on a daemon thread and returns it; `url` is the endpoint for
    `[linear] api_url`; `requests` holds every request received, in order, and `writes()`
    the writes among them; `stop()` ends it. `viewer` and `organization` are whom the
    credential belongs to. `handler`, when set, is asked first: the dict it returns is the
    answer, None leaves the request to the stand-in.
    """

    viewer: dict[str, str] = field(
        default_factory=lambda: {"id": "stand-in-app-user", "name": "wakeline (stand-in)"})
    organization: dict[str, str] = field(
        default_factory=lambda: {"id": "stand-in-org", "name": "Stand-in workspace"})
    handler: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
    requests: list[Recorded] = field(default_factory=list)
    # Linear's file storage: path -> (bytes, content type); every request for a file, in order.
    files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    files_authorization: str | None = None
    downloads: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Re-entrant: a subclass may hold it across `receive` and its own bookkeeping.
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> StandInLinear:
        """Serve on a free loopback port, on a daemon thread (once: again, it is a no-op)."""
        if self._server is not None:
            return self
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # requests are recorded, not logged
                pass

            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY_BYTES)
                reply = stand_in.respond(self.path, dict(self.headers), self.rfile.read(length))
                if reply is None:  # dropped unanswered, as by a broken connection
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                raw = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                reply = stand_in.respond_file(self.path, dict(self.headers))
                if reply is None:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                chunks = list(reply.chunks) if reply.length else reply.chunks
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.length:
                    self.send_header("Content-Length", str(sum(len(c) for c in chunks)))
                self.end_headers()
                try:
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except OSError:
                    pass  # the client gave up (too big, too slow): nothing more to send
                self.close_connection = True

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
        assert self._server is not None, "start() it first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/graphql"

    @property
    def uploads_url(self) -> str:
        """The file storage's base, for `[linear] uploads_url`."""
        return self.url.removesuffix("/graphql") + UPLOADS_PATH

    def upload(self, data: bytes, name: str = "file", content_type: str = "application/octet-stream"
               ) -> str:
        """Store a file; its link, as Linear puts it in Markdown (`![name](link)`)."""
        path = f"{UPLOADS_PATH}/{self.organization['id']}/{uuid.uuid4()}/{name}"
        with self._lock:
            self.files[path] = (data, content_type)
        return self.url.removesuffix("/graphql") + path

    def respond_file(self, path: str, headers: dict[str, str]) -> FileReply | None:
        """Answer one GET: record it, then the file, to a request with the credential (401
        without, 404 for what it does not hold). A subclass overrides it to add behaviours
        (statuses, delays, redirects); None drops the connection unanswered."""
        authorization = headers.get("Authorization")
        allowed = bool(authorization) and self.files_authorization in (None, authorization)
        with self._lock:
            self.downloads.append(Recorded(time.time(), headers, {}, not allowed, path))
            found = self.files.get(path.split("?", 1)[0])
        if not allowed:
            return FileReply(401, [b"not authenticated"], {"Content-Type": "text/plain"})
        if found is None:
            return FileReply(404, [b"not found"], {"Content-Type": "text/plain"})
        return FileReply(200, [found[0]], {"Content-Type": found[1]})

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> Reply | None:
        """Answer one POST (to any path): record it, then answer as Linear would.

        A subclass overrides it to add behaviours (failures, delays, other endpoints); None
        drops the connection unanswered.
        """
        return Reply(200, self.answer(self.receive(headers, raw).body))

    def receive(self, headers: dict[str, str], raw: bytes, *, refused: bool = False) -> Recorded:
        """Record one request (a body that is no JSON object is recorded as empty)."""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        recorded = Recorded(time.time(), headers, body if isinstance(body, dict) else {}, refused)
        with self._lock:
            self.requests.append(recorded)
        return recorded

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """What Linear would answer: `handler`'s answer, else the stand-in's, else an error."""
        if self.handler is not None and (given := self.handler(body)) is not None:
            return given
        return self.reply(body) or self.unknown(body)

    def reply(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The stand-in's own answer, None when it knows none: a success for each write,
        `viewer` (with `organization` when asked), and a user's `app` flag (false: a person)."""
        query = str(body.get("query", ""))
        write = _write(query)
        if write is not None:
            done: dict[str, Any] = {"success": True}
            if WRITES[write] is not None:
                done[str(WRITES[write])] = {"id": _input(body).get("id")}  # wakeline chose it
            return {"data": {write: done}}
        if "viewer" in query:
            data = {"viewer": dict(self.viewer)}
            if "organization" in query:
                data["organization"] = dict(self.organization)
            return {"data": data}
        if "WakelineUser" in query:
            return {"data": {"user": {"id": _variables(body).get("id"), "app": False}}}
        return None

    def unknown(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer to a query the stand-in does not know: a GraphQL error."""
        return {"data": None, "errors": [{"message": "the stand-in for Linear does not know this"}]}

    def writes(self) -> list[Recorded]:
        """Every write received, in order."""
        with self._lock:
            return [r for r in self.requests if r.operation is not None]

    def activities(self) -> list[Recorded]:
        """The agent activities received, in order."""
        return self.naming("agentActivityCreate")

    def comments(self) -> list[Recorded]:
        """The comments received, in order."""
        return self.naming("commentCreate")

    def updates(self, operation: str = "issueUpdate") -> list[Recorded]:
        """The updates received (of issues unless told: `commentUpdate`), in order."""
        return self.naming(operation)

    def naming(self, name: str) -> list[Recorded]:
        """The requests whose document names `name` (an operation, a type), in order."""
        with self._lock:
            return [r for r in self.requests if name in r.query]
