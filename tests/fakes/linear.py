"""The tests' fake Linear: the shipped stand-in (`wakeline.testing.StandInLinear`) with
scripted behaviour.

On top of the stand-in's answers and records it knows teams and their workflow states,
issues' places, which users are apps, and Linear's OAuth token endpoint (`FakeOAuth`), and it
can be told to be slow, fail with a 500, drop the connection, answer RATELIMITED (as Linear
does, with HTTP 400), or hold an answer until the test lets it go (`hold`). Its file storage
(the stand-in's `upload`) can be told, per file name, to fail, hold its answer, redirect, or
stream without a length (`file_behaviours`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from wakeline.testing.linear import FileReply, Recorded, Reply, StandInLinear

UNAUTHENTICATED = {"errors": [{"message": "Authentication required, not authenticated",
                               "extensions": {"code": "AUTHENTICATION_ERROR"}}]}


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


@dataclass(eq=False, kw_only=True)
class FakeLinear(StandInLinear):
    """Start with `start()`; `url` is the GraphQL endpoint, `oauth_url` the token endpoint."""

    viewer: dict[str, str] = field(
        default_factory=lambda: {"id": "app-user-1", "name": "wakeline app"})
    organization: dict[str, str] = field(
        default_factory=lambda: {"id": "org-test", "name": "Test workspace"})
    latency: float = 0.0
    script: list[str] = field(default_factory=list)  # next behaviours: "500", "drop", "ratelimited", "error"
    delays: dict[str, float] = field(default_factory=dict)  # extra seconds when the body holds the key
    # issue id -> {"project": id | None, "team": key, "state": {"id", "type"}, "labels": [names]};
    # others: not found
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
    # An uploaded file's name -> how its request is answered (after being recorded): "500";
    # "hold" (nothing until `files_released` is set); "redirect:<url>"; "unsized" (its bytes
    # with no Content-Length). Others: the stand-in's answer (the file, with the credential).
    file_behaviours: dict[str, str] = field(default_factory=dict)
    files_released: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._gates: dict[str, threading.Event] = {}

    def hold(self, key: str) -> threading.Event:
        """Hold the answer to every request whose body contains `key` until the returned
        event is set (the request itself is recorded at once)."""
        gate = threading.Event()
        with self._lock:
            self._gates[key] = gate
        return gate

    @property
    def oauth_url(self) -> str:
        """The token endpoint (served when `oauth` is set)."""
        return self.url.removesuffix("/graphql") + "/oauth/token"

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> Reply | None:
        """The token endpoint; else the stand-in's answer, after the script's next behaviour,
        any hold and delay, to a request that carries a live token when `oauth` is set."""
        if path.startswith("/oauth/token"):
            return self._token(raw)
        if self.oauth is not None and not self.oauth.valid(headers.get("Authorization")):
            self.receive(headers, raw, refused=True)
            return Reply(401, UNAUTHENTICATED)
        with self._lock:  # the script's next behaviour belongs to the request recorded with it
            recorded = self.receive(headers, raw)
            behaviour = self.script.pop(0) if self.script else "ok"
            text = json.dumps(recorded.body)
            gates = [gate for key, gate in self._gates.items() if key in text]
        for gate in gates:
            gate.wait(30)
        delay = self.latency + sum(s for key, s in self.delays.items() if key in text)
        if delay:
            time.sleep(delay)
        if behaviour == "drop":
            return None
        if behaviour == "500":
            return Reply(500, {"error": "internal"})
        if behaviour == "ratelimited":
            reset_ms = int((time.time() + self.ratelimit_reset_seconds) * 1000)
            return Reply(400, {"errors": [{"message": "Rate limit exceeded",
                                           "extensions": {"code": "RATELIMITED"}}]},
                         {"X-RateLimit-Requests-Remaining": "0",
                          "X-RateLimit-Requests-Reset": str(reset_ms)})
        if behaviour == "error":
            return Reply(200, {"errors": [{"message": "Entity not found: AgentSession"}]})
        return Reply(200, self.answer(recorded.body))

    def _token(self, raw: bytes) -> Reply | None:
        assert self.oauth is not None, "no FakeOAuth configured"
        form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        with self._lock:
            self.oauth.asked.append(time.time())
            gate = self.oauth.gate
        if gate is not None:
            gate.wait(30)
        with self._lock:
            behaviour = "500" if self.oauth.down else \
                self.oauth.script.pop(0) if self.oauth.script else "ok"
        if behaviour == "slow":
            time.sleep(1.0)
        if behaviour == "drop":
            return None
        if behaviour == "500":
            return Reply(500, {"error": "server_error"})
        if behaviour == "invalid_grant":
            return Reply(400, {"error": "invalid_grant",
                               "error_description": "The refresh token was revoked"})
        with self._lock:
            status, answer = self.oauth.token(form)
        return Reply(status, answer)

    def respond_file(self, path: str, headers: dict[str, str]) -> FileReply | None:
        """The stand-in's answer, unless `file_behaviours` scripts this file's."""
        behaviour = self.file_behaviours.get(path.split("?", 1)[0].rsplit("/", 1)[-1])
        if behaviour is None or behaviour == "unsized":
            reply = super().respond_file(path, headers)
            if behaviour == "unsized" and reply is not None and reply.status == 200:
                return FileReply(200, reply.chunks, reply.headers, length=False)
            return reply
        with self._lock:
            self.downloads.append(Recorded(time.time(), headers, {}, False, path))
        if behaviour == "500":
            return FileReply(500, [b"internal"])
        if behaviour == "hold":
            self.files_released.wait(30)
            return FileReply(200, [b"too late"])
        assert behaviour.startswith("redirect:"), behaviour
        return FileReply(302, [], {"Location": behaviour.removeprefix("redirect:")})

    def stop(self) -> None:
        """Let held file answers go (their handlers end), then stop serving."""
        self.files_released.set()
        super().stop()

    def download_paths(self) -> list[str]:
        """The paths of every file request received, in order."""
        with self._lock:
            return [r.path for r in self.downloads]

    def reply(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The stand-in's answers, and teams' workflow states, issues' places and apps."""
        query = str(body.get("query", ""))
        variables = body.get("variables") or {}
        data = variables.get("input") or {}
        if "WakelineTeamStates" in query:
            key = variables.get("key")
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
        if "WakelineUser" in query:
            user_id = str(variables.get("id"))
            if self.users_failing:
                return {"data": None, "errors": [{"message": "Internal error",
                                                   "extensions": {"code": "INTERNAL_ERROR"}}]}
            return {"data": {"user": {"id": user_id, "app": user_id in self.apps}}}
        if "issue(id:" in query:
            issue_id = variables.get("id")
            found = self.issues.get(str(issue_id))
            if found is None:
                return {"data": None, "errors": [{"message": "Entity not found: Issue",
                                                   "extensions": {"code": "INPUT_ERROR"}}]}
            project = found.get("project")
            return {"data": {"issue": {"id": issue_id, "project": {"id": project} if project else None,
                                       "team": {"key": found.get("team", "OPS")},
                                       "labels": {"nodes": [{"name": n} for n in
                                                            found.get("labels", [])]},
                                       "state": found.get("state", {"id": "state-todo",
                                                                    "type": "unstarted"})}}}
        return super().reply(body)

    def unknown(self, body: dict[str, Any]) -> dict[str, Any]:
        """Empty data for what it does not know (the tests read only what they asked for)."""
        return {"data": {}}

    def lookups(self) -> list[Recorded]:
        """The issue-owner lookups received, in order."""
        return self.naming("WakelineIssueOwner")

    def label_lookups(self) -> list[Recorded]:
        """The issue-label lookups received, in order."""
        return self.naming("WakelineIssueLabels")

    def user_lookups(self) -> list[str]:
        """The user ids asked about (`user(id) { app }`), in order."""
        return [r.variables["id"] for r in self.naming("WakelineUser")]
