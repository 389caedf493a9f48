"""A fake Linear GraphQL API: a real HTTP server on 127.0.0.1 with scripted behaviour.

It answers `agentActivityCreate`, `commentCreate` and `viewer` the way Linear
does, records every request, and can be told to be slow, fail with a 500, drop
the connection, answer RATELIMITED (as Linear does, with HTTP 400), or hold an
answer until the test lets it go (`hold`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs


@dataclass
class Recorded:
    """One request the fake received."""

    at: float
    headers: dict[str, str]
    body: dict[str, Any]
    refused: bool = False  # answered 401: the token was not a live one

    @property
    def query(self) -> str:
        return str(self.body.get("query", ""))

    @property
    def input(self) -> dict[str, Any]:
        return (self.body.get("variables") or {}).get("input") or {}


@dataclass
class FakeOAuth:
    """Linear's OAuth token endpoint: 24-hour tokens whose refresh token rotates on every use.

    `authorize` plays a workspace admin approving the app and returns the code Linear
    would put in the redirect. `script` takes the next behaviours of the token endpoint:
    "500", "drop", "slow" (longer than wakeline's read timeout is not needed: 1 s), or
    "invalid_grant"; while `down` is set every request answers 500, and while `gate` is
    set (an unset event) every request waits for it. `asked` has the time of every token
    request, whatever it was answered.
    """

    client_id: str = "client-1"
    client_secret: str = "client-secret-0123456789abcdef"
    lifetime_seconds: int = 24 * 3600
    client_credentials_lifetime_seconds: int = 30 * 24 * 3600
    script: list[str] = field(default_factory=list)
    codes: dict[str, str] = field(default_factory=dict)  # code -> its redirect URI
    access: dict[str, float] = field(default_factory=dict)  # token -> expiry (time.time())
    refresh: set[str] = field(default_factory=set)  # refresh tokens not yet used
    grants: list[str] = field(default_factory=list)  # grant_type of every accepted request
    forms: list[dict[str, str]] = field(default_factory=list)  # every request's form
    down: bool = False
    gate: threading.Event | None = None
    asked: list[float] = field(default_factory=list)  # time.time() of every request

    def authorize(self, redirect_uri: str) -> str:
        """A code for `redirect_uri`, as after an admin approved the install."""
        code = f"code-{uuid.uuid4().hex}"
        self.codes[code] = redirect_uri
        return code

    def revoke(self) -> None:
        """The app is uninstalled: no token works any more."""
        self.access.clear()
        self.refresh.clear()

    def valid(self, header: str | None) -> bool:
        """Whether an Authorization header carries a live access token."""
        token = (header or "").removeprefix("Bearer ")
        return time.time() < self.access.get(token, 0.0)

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """Answer one token request: (status, body)."""
        self.forms.append(form)
        if (form.get("client_id"), form.get("client_secret")) != (self.client_id, self.client_secret):
            return 401, {"error": "invalid_client", "error_description": "Client authentication failed"}
        grant = form.get("grant_type")
        if grant == "authorization_code":
            if self.codes.pop(form.get("code", ""), None) != form.get("redirect_uri"):
                return 400, {"error": "invalid_grant", "error_description": "Invalid or used code"}
        elif grant == "refresh_token":
            if form.get("refresh_token") not in self.refresh:
                return 400, {"error": "invalid_grant", "error_description": "Invalid refresh token"}
            self.refresh.discard(form["refresh_token"])  # rotated: spent
        elif grant != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        self.grants.append(str(grant))
        lifetime = self.client_credentials_lifetime_seconds if grant == "client_credentials" \
            else self.lifetime_seconds
        access = f"fake-access-{uuid.uuid4().hex}"
        self.access[access] = time.time() + lifetime
        body: dict[str, Any] = {"access_token": access, "token_type": "Bearer",
                                "expires_in": lifetime, "scope": "read,write,app:assignable,app:mentionable"}
        if grant != "client_credentials":
            body["refresh_token"] = f"fake-refresh-{uuid.uuid4().hex}"
            self.refresh.add(body["refresh_token"])
        return 200, body


@dataclass
class FakeLinear:
    """Start with `start()`; `url` is the GraphQL endpoint."""

    latency: float = 0.0
    script: list[str] = field(default_factory=list)  # next behaviours: "500", "drop", "ratelimited", "error"
    requests: list[Recorded] = field(default_factory=list)
    handler: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    delays: dict[str, float] = field(default_factory=dict)  # extra seconds when the body holds the key
    # issue id -> {"project": id | None, "team": key, "state": {"id", "type"}}; others: not found
    issues: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Set: the token endpoint is served, and GraphQL requests need one of its live tokens.
    oauth: FakeOAuth | None = None
    ratelimit_reset_seconds: float = 60.0  # when a scripted RATELIMITED says the limit resets
    # team key -> {"id", "states": [{"id", "name", "type"}]}: what workflow-state queries see
    teams: dict[str, dict[str, Any]] = field(default_factory=dict)
    refuse_state_create: bool = False
    # User ids `user(id) { app }` calls apps (other OAuth apps); every other user is a person.
    apps: set[str] = field(default_factory=set)
    users_failing: bool = False  # `user(id)` answers an internal error while set

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._gates: dict[str, threading.Event] = {}

    def hold(self, key: str) -> threading.Event:
        """Hold the answer to every request whose body contains `key` until the returned
        event is set (the request itself is recorded at once)."""
        gate = threading.Event()
        with self._lock:
            self._gates[key] = gate
        return gate

    def start(self) -> "FakeLinear":
        if self._server is not None:
            return self  # already serving (a test that needs its URL before the service)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw_body = self.rfile.read(length)
                if self.path.startswith("/oauth/token"):
                    return self._token(raw_body)
                body = json.loads(raw_body or b"{}")
                if fake.oauth is not None and not fake.oauth.valid(self.headers.get("Authorization")):
                    with fake._lock:
                        fake.requests.append(Recorded(time.time(), dict(self.headers), body, True))
                    return self._send(401, {"errors": [{
                        "message": "Authentication required, not authenticated",
                        "extensions": {"code": "AUTHENTICATION_ERROR"}}]})
                with fake._lock:
                    behaviour = fake.script.pop(0) if fake.script else "ok"
                    fake.requests.append(Recorded(time.time(), dict(self.headers), body))
                raw = json.dumps(body)
                with fake._lock:
                    gates = [g for key, g in fake._gates.items() if key in raw]
                for gate in gates:
                    gate.wait(30)
                delay = fake.latency + sum(s for key, s in fake.delays.items() if key in raw)
                if delay:
                    time.sleep(delay)
                if behaviour == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if behaviour == "500":
                    return self._send(500, {"error": "internal"})
                if behaviour == "ratelimited":
                    return self._send(400, {"errors": [{"message": "Rate limit exceeded",
                                                        "extensions": {"code": "RATELIMITED"}}]},
                                      {"X-RateLimit-Requests-Remaining": "0",
                                       "X-RateLimit-Requests-Reset": str(int(
                                           (time.time() + fake.ratelimit_reset_seconds) * 1000))})
                if behaviour == "error":
                    return self._send(200, {"errors": [{"message": "Entity not found: AgentSession"}]})
                self._send(200, fake.answer(body))

            def _token(self, raw: bytes) -> None:
                assert fake.oauth is not None, "no FakeOAuth configured"
                form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
                with fake._lock:
                    fake.oauth.asked.append(time.time())
                    gate = fake.oauth.gate
                if gate is not None:
                    gate.wait(30)
                with fake._lock:
                    behaviour = "500" if fake.oauth.down else \
                        fake.oauth.script.pop(0) if fake.oauth.script else "ok"
                if behaviour == "slow":
                    time.sleep(1.0)
                if behaviour == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if behaviour == "500":
                    return self._send(500, {"error": "server_error"})
                if behaviour == "invalid_grant":
                    return self._send(400, {"error": "invalid_grant",
                                            "error_description": "The refresh token was revoked"})
                with fake._lock:
                    status, answer = fake.oauth.token(form)
                self._send(status, answer)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fake-linear", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/graphql"

    @property
    def oauth_url(self) -> str:
        """The token endpoint (served when `oauth` is set)."""
        return self.url.removesuffix("/graphql") + "/oauth/token"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.handler is not None:
            return self.handler(body)
        query = str(body.get("query", ""))
        data = (body.get("variables") or {}).get("input") or {}
        if "agentActivityCreate" in query:
            return {"data": {"agentActivityCreate": {"success": True, "agentActivity": {"id": data.get("id")}}}}
        if "commentCreate" in query:
            return {"data": {"commentCreate": {"success": True, "comment": {"id": data.get("id")}}}}
        for update in ("issueUpdate", "commentUpdate"):
            if update in query:
                return {"data": {update: {"success": True}}}
        if "WakelineTeamStates" in query:
            key = (body.get("variables") or {}).get("key")
            team = self.teams.get(str(key))
            return {"data": {"teams": {"nodes": [{"id": team["id"], "key": key, "states": {
                "nodes": team["states"]}}] if team else []}}}
        if "workflowStateCreate" in query:
            if self.refuse_state_create:
                return {"data": None, "errors": [{"message": "Forbidden: not an admin",
                                                   "extensions": {"code": "FORBIDDEN"}}]}
            team = next(t for t in self.teams.values() if t["id"] == data.get("teamId"))
            state = {"id": f"state-{data['name'].lower().replace(' ', '-')}", "name": data["name"],
                     "type": data["type"]}
            team["states"].append(state)
            return {"data": {"workflowStateCreate": {"success": True, "workflowState": state}}}
        if "viewer" in query:
            data = {"viewer": {"id": "app-user-1", "name": "wakeline app"}}
            if "organization" in query:
                data["organization"] = {"id": "org-test", "name": "Test workspace"}
            return {"data": data}
        if "WakelineUser" in query:
            user_id = str((body.get("variables") or {}).get("id"))
            if self.users_failing:
                return {"data": None, "errors": [{"message": "Internal error",
                                                   "extensions": {"code": "INTERNAL_ERROR"}}]}
            return {"data": {"user": {"id": user_id, "app": user_id in self.apps}}}
        if "issue(id:" in query:
            issue_id = (body.get("variables") or {}).get("id")
            found = self.issues.get(str(issue_id))
            if found is None:
                return {"data": None, "errors": [{"message": "Entity not found: Issue",
                                                   "extensions": {"code": "INPUT_ERROR"}}]}
            project = found.get("project")
            return {"data": {"issue": {"id": issue_id, "project": {"id": project} if project else None,
                                       "team": {"key": found.get("team", "OPS")},
                                       "state": found.get("state", {"id": "state-todo",
                                                                    "type": "unstarted"})}}}
        return {"data": {}}

    def updates(self, field: str = "issueUpdate") -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if field in r.query]

    def lookups(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if "WakelineIssueOwner" in r.query]

    def user_lookups(self) -> list[str]:
        """The user ids asked about (`user(id) { app }`), in order."""
        with self._lock:
            return [r.body["variables"]["id"] for r in self.requests if "WakelineUser" in r.query]

    def activities(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if "agentActivityCreate" in r.query]

    def comments(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if "commentCreate" in r.query]
