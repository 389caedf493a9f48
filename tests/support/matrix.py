"""Matrix worlds for tests: an owner device logged in once, people who write to it, rooms.

Built on the Synapse fixture (`tests/support/synapse.py`). The owner logs in once over plain
HTTP with the fixed device id `WAKELINE`, as the operations guide tells a person to, and the
token goes to a 0600 file; wakeline's nio client uploads the device's keys on its first
start. People who write in encrypted rooms use nio in a child process (`Writer`).

`Running` is a whole wakeline (`build_service`, real listeners and actors, the fake agent)
acting as the owner's device. Load this module as a plugin (`pytest_plugins`) beside
`tests.support.synapse` for the `world` and `running` fixtures.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pydantic import SecretStr

from tests.conftest import LINEAR_KEY, OPERATOR_TOKEN, WEBHOOK_SECRET
from tests.helpers import StoreShell, wait_until
from tests.support.synapse import Homeserver, Registered, unique_name
from wakeline.app import Service, build_service
from wakeline.config import Config
from wakeline.service.net import http_session
from wakeline.secrets import Secrets

DEVICE_ID = "WAKELINE"


def login_device(server: Homeserver, user: Registered, device_id: str = DEVICE_ID) -> str:
    """Log in once with a fixed device id (what `docs/operations.md` has a person do)."""
    answer = server.api("POST", "/_matrix/client/v3/login", body={
        "type": "m.login.password", "identifier": {"type": "m.id.user", "user": user.user_id},
        "password": user.password, "device_id": device_id,
        "initial_device_display_name": "wakeline"})
    return str(answer["access_token"])


def write_token(path: Path, token: str) -> Path:
    """The token file, 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return path


@dataclass
class World:
    """The owner (with its wakeline token), alice and bob, and a plain and an encrypted room
    both have joined."""

    server: Homeserver
    me: Registered
    alice: Registered
    bob: Registered
    token: str
    token_file: Path
    plain: str
    encrypted: str

    def send_event(self, who: Registered, room: str, event_type: str, content: dict[str, Any],
                   txn: str | None = None) -> str:
        """Send any event as `who` (plain HTTP); its id."""
        txn = txn or unique_name("t")
        path = f"/_matrix/client/v3/rooms/{quote(room)}/send/{event_type}/{txn}"
        return str(self.server.api("PUT", path, who.access_token, content)["event_id"])

    def redact(self, who: Registered, room: str, event_id: str) -> str:
        """Redact an event as `who`; the redaction's id."""
        path = (f"/_matrix/client/v3/rooms/{quote(room)}/redact/{quote(event_id)}/"
                f"{unique_name('r')}")
        return str(self.server.api("PUT", path, who.access_token, {})["event_id"])

    def owner_texts(self, room: str) -> list[tuple[str, str]]:
        """(event id, body) of the owner's messages in a plain room, oldest first."""
        answer = self.server.api("GET", f"/_matrix/client/v3/rooms/{quote(room)}/messages",
                                 self.alice.access_token, params={"dir": "b", "limit": 100})
        return [(e["event_id"], e["content"].get("body", "")) for e in reversed(answer["chunk"])
                if e["type"] == "m.room.message" and e["sender"] == self.me.user_id]

    def set_display_name(self, who: Registered, name: str) -> None:
        """Change a user's display name (in every room they are in)."""
        self.server.api("PUT", f"/_matrix/client/v3/profile/{quote(who.user_id)}/displayname",
                        who.access_token, {"displayname": name})


def make_world(server: Homeserver, tmp_path: Path) -> World:
    """Fresh users and rooms on the shared server (it outlives the test)."""
    me = server.register(unique_name("me"))
    alice = server.register(unique_name("alice"))
    bob = server.register(unique_name("bob"))
    token = login_device(server, me)
    plain = server.create_room(me.access_token, invite=[alice.user_id, bob.user_id], name="plain")
    encrypted = server.create_room(me.access_token, encrypted=True, invite=[alice.user_id],
                                   name="secret")
    for room in (plain, encrypted):
        server.join(alice.access_token, room)
    server.join(bob.access_token, plain)
    return World(server, me, alice, bob, token, write_token(tmp_path / "secrets" / "matrix-me",
                                                             token), plain, encrypted)


class Writer:
    """A person's nio client with their own device, in a child process (`matrix_writer.py`):
    never nio on a second thread of the test process (see that module)."""

    def __init__(self, server: Homeserver, user: Registered, store: Path) -> None:
        store.mkdir(parents=True, exist_ok=True)
        self.user = user
        root = Path(__file__).resolve().parents[2]
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.matrix_writer"], cwd=root, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.device_id = self.ask("login", url=server.url, user_id=user.user_id,
                                  password=user.password, store=str(store))["device_id"]

    def ask(self, op: str, timeout: float = 60.0, **args: Any) -> dict[str, Any]:
        """One command; its answer (the test fails on an error or after `timeout`)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self._proc.stdin.flush()
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        assert ready, f"the writer did not answer {op} within {timeout}s"
        answer: dict[str, Any] = json.loads(self._proc.stdout.readline() or "{}")
        assert answer.get("ok"), f"{op}: {answer}"
        return answer

    def send(self, room: str, body: str) -> str:
        """Send `m.text`, encrypted for every device of the room's members; its event id."""
        return str(self.ask("send", room=room, body=body)["event_id"])

    def read(self, room: str) -> list[tuple[str, str | None]]:
        """(sender, body) of the room's latest messages; body None where no key came."""
        return [(sender, body) for sender, body in self.ask("read", room=room)["messages"]]

    def withhold(self, room: str, user: str, device: str) -> dict[str, Any]:
        """A new session shared with every device but one; its first-index key."""
        return self.ask("withhold", room=room, user=user, device=device)

    def share_key(self, room: str, user: str, device: str, key: dict[str, Any]) -> None:
        """Send that key to the one device, late."""
        self.ask("share_key", room=room, user=user, device=device,
                 session_id=key["session_id"], session_key=key["session_key"])

    def close(self) -> None:
        """End the child."""
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.write(json.dumps({"op": "close"}) + "\n")
                self._proc.stdin.close()
            self._proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait(timeout=10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


# --- a wakeline acting as the owner ----------------------------------------------------------

AGENT = Path(__file__).resolve().parents[1] / "fakes" / "agent.py"
WAIT = 30.0


def matrix_config(make_config: Callable[..., Config], world: World, routes: list[dict[str, Any]],
                  agent: list[str] | None = None, more: dict[str, dict[str, Any]] | None = None,
                  discord: dict[str, Any] | None = None, **connection: Any) -> Config:
    """A config with connection `me` (the world's owner), `more` connections, these routes
    (and a `[discord]` section when given)."""
    me = {"homeserver": world.server.url, "user_id": world.me.user_id,
          "access_token_file": str(world.token_file), "sync_timeout_seconds": 5.0,
          "retry_max_seconds": 1.0, **connection}
    return make_config(
        agent={"command": agent or [sys.executable, str(AGENT), "ok"]},
        routes=[{"name": "eng", "teams": ["ENG"]}],
        matrix={"connections": {"me": me, **{name: {**me, **c} for name, c in (more or {}).items()}},
                "routes": routes},
        **({"discord": discord} if discord is not None else {}))


def secrets_for(world: World, **tokens: str) -> Secrets:
    """The test secrets plus the Matrix token(s)."""
    return Secrets(webhook_secret=SecretStr(WEBHOOK_SECRET), linear_api_key=SecretStr(LINEAR_KEY),
                   operator_token=SecretStr(OPERATOR_TOKEN),
                   matrix_tokens={name: SecretStr(t) for name, t in
                                  ({"me": world.token} | tokens).items()})


class Running:
    """A started service and what the tests ask of it."""

    def __init__(self, config: Config, secrets: Secrets, log: Path,
                 discord_tuning: Any = None) -> None:
        self.config = config
        self.log = log
        self.service: Service = build_service(config, secrets,
                                              base_env={"FAKE_AGENT_LOG": str(log),
                                                        "PATH": "/usr/bin:/bin"},
                                              discord_tuning=discord_tuning)
        self.service.start()
        self.http = http_session(self.service.operator.url)

    def api(self, method: str, path: str, token: str = OPERATOR_TOKEN, **kwargs: Any) -> Any:
        resp = self.http.request(method, self.service.operator.url + path,
                                 headers={"Authorization": f"Bearer {token}"}, timeout=60, **kwargs)
        return resp.status_code, resp.json()

    def status(self) -> dict[str, Any]:
        return self.api("GET", "/v1/status")[1]["matrix"]["connections"][0]

    def cursor(self) -> str | None:
        return self.service.store.rooms.cursor("me")

    def synced(self) -> bool:
        """The connection has handled at least one page since it started."""
        loop = self.service.matrix.connections["me"].loop
        return loop is not None and loop.pages > 0 and self.cursor() is not None

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def texts(self) -> list[str]:
        return [t for run in self.runs() for t in run.get("texts", [])]

    def db(self) -> StoreShell:
        return StoreShell(self.config)

    def stop(self) -> None:
        self.service.stop()


@pytest.fixture
def world(synapse: Homeserver, tmp_path: Path) -> World:
    return make_world(synapse, tmp_path)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(config: Config, secrets: Secrets, discord_tuning: Any = None) -> Running:
        r = Running(config, secrets, tmp_path / "agent.jsonl", discord_tuning)
        started.append(r)
        try:
            wait_until(r.synced, WAIT, message="the Matrix connection synced")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {_state(r)}") from None
        return r

    yield start
    for r in started:
        r.stop()


def _state(r: Running) -> str:
    loop = r.service.matrix.connections["me"].loop
    return repr(loop.state()) if loop is not None else repr(r.service.matrix.connections["me"].failure)


def journal(r: Running) -> list[dict[str, Any]]:
    return r.api("GET", "/v1/journal?limit=500")[1]["entries"]



def restart_homeserver(server: Homeserver, timeout: float = 90.0) -> None:
    """Start a stopped Synapse again with its config, database and port (a homeserver back
    from an outage)."""
    from tests.support.synapse import _answering

    python = Path(server.process.args[0])  # type: ignore[index]
    config = server.workdir / "homeserver.yaml"
    with server.log_path.open("ab") as log:
        server.process = subprocess.Popen(
            [str(python), "-m", "synapse.app.homeserver", "--config-path", str(config)],
            cwd=server.workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert wait_until(lambda: _answering(server), timeout, interval=0.1,
                      message="Synapse answering again") == "up"
