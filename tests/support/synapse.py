"""A real Synapse homeserver for tests, on loopback, installed once and cached between runs.

Synapse is installed from PyPI into a venv of its own under
`$XDG_CACHE_HOME/wakeline-tests/synapse-<version>` (default `~/.cache/...`), never into the
project's venv, so its many dependencies cannot leak into the app's. The first run installs it
(guarded by a file lock, so parallel pytest processes do not race, and bounded by a timeout);
later runs find the finished install and only start the server. When it cannot be installed
the `synapse` fixture skips with the reason.

Each test session starts one throwaway homeserver in a temp dir: SQLite, one client listener on
127.0.0.1, no federation, registration closed except through the shared-secret admin API, rate
limits out of the way, and the `/sync` response cache off. Its log is kept beside its database
and the last lines are added to the report of any failing test that used it.

To share one Synapse across test modules, load this module as a plugin from the root
`tests/conftest.py` (pytest allows `pytest_plugins` only there or in a test module)::

    pytest_plugins = ["tests.support.synapse"]

A test module may name the plugin itself too; a plugin is registered once per session, so
every module that names it gets the same session-scoped homeserver. Such a module that also
imports names from here must first call `pytest.register_assert_rewrite("tests.support.synapse")`
(pytest warns, and so fails, if a plugin was imported before it could rewrite its asserts).
Do not import the fixture function into a module instead: each import would define its own
session fixture and start its own Synapse.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import hashlib
import hmac
import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from tests.helpers import free_port, wait_until

logger = logging.getLogger(__name__)

SYNAPSE_VERSION = "1.163.2"
SERVER_NAME = "localhost"
MEGOLM = "m.megolm.v1.aes-sha2"
# A cold install (venv, pip, ~240 MB of wheels) takes well under a minute here; the bound is
# for a slow mirror, not the normal case.
INSTALL_TIMEOUT_SECONDS = 900.0
START_TIMEOUT_SECONDS = 90.0
STOP_GRACE_SECONDS = 15.0
HTTP_TIMEOUT_SECONDS = 30.0
LOG_TAIL_LINES = 80
_INSTALLED_MARKER = ".wakeline-installed"
# Far above anything a test does, so no test ever meets a 429.
_UNLIMITED = {"per_second": 10_000, "burst_count": 10_000}


@dataclass(frozen=True)
class SynapseInstall:
    """Where a usable Synapse lives, or why there is none.

    `python` is the interpreter of Synapse's own venv, or None when Synapse could not be
    installed; `reason` then says why (the text a test skips with).
    """

    python: Path | None
    reason: str = ""
    seconds: float = 0.0


def cache_root() -> Path:
    """The folder that holds cached test parts: `$XDG_CACHE_HOME/wakeline-tests`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wakeline-tests"


@contextmanager
def _file_lock(path: Path, timeout: float) -> Iterator[bool]:
    """Hold an exclusive flock on `path`; yields False if it could not be had in `timeout`."""
    with path.open("a+b") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    yield False
                    return
                # Another process is installing: poll the lock until it finishes (bounded).
                time.sleep(0.25)
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def install_synapse(version: str = SYNAPSE_VERSION, root: Path | None = None,
                    timeout: float = INSTALL_TIMEOUT_SECONDS) -> SynapseInstall:
    """Install `matrix-synapse==version` into its own cached venv, once; never raises.

    A finished install is marked with a file written last, so an interrupted one is
    removed and redone. Returns the venv's interpreter, or None and the reason.
    """
    root = root or cache_root()
    target = root / f"synapse-{version}"
    python = target / "bin" / "python"
    marker = target / _INSTALLED_MARKER
    if marker.exists() and python.exists():
        return SynapseInstall(python)
    started = time.monotonic()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with _file_lock(root / f"synapse-{version}.lock", timeout) as locked:
            if not locked:
                return SynapseInstall(None, f"timed out after {timeout:.0f}s waiting for another "
                                            f"process to install Synapse into {target}")
            if marker.exists() and python.exists():  # the other process finished it
                return SynapseInstall(python)
            return _install_locked(version, target, started + timeout, started)
    except OSError as exc:
        return SynapseInstall(None, f"cannot install Synapse into {target}: {exc}")


def _install_locked(version: str, target: Path, deadline: float,
                    started: float) -> SynapseInstall:
    shutil.rmtree(target, ignore_errors=True)  # a half-made venv from an interrupted run
    python = target / "bin" / "python"
    steps = [
        # The base interpreter, not the project's venv: Synapse's venv must not see its packages.
        [sys.executable, "-m", "venv", str(target)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         f"matrix-synapse=={version}"],
        [str(python), "-c", "import synapse.app.homeserver"],
    ]
    for command in steps:
        remaining = deadline - time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=max(remaining, 1.0), check=False)
        except subprocess.TimeoutExpired:
            shutil.rmtree(target, ignore_errors=True)
            return SynapseInstall(None, f"installing Synapse {version} took longer than "
                                        f"{deadline - started:.0f}s ({' '.join(command[:4])})")
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            return SynapseInstall(None, f"cannot install Synapse {version}: `{' '.join(command)}`"
                                        f" exited {done.returncode}: "
                                        f"{_tail(done.stderr or done.stdout)}")
    freeze = subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True,
                            text=True, timeout=60, check=False)
    # What was resolved, for a person comparing a failing run with a passing one.
    (target / "wakeline-freeze.txt").write_text(freeze.stdout, encoding="utf-8")
    seconds = time.monotonic() - started
    (target / _INSTALLED_MARKER).write_text(f"matrix-synapse=={version} in {seconds:.1f}s\n",
                                            encoding="utf-8")
    logger.info("installed Synapse", extra={"version": version, "seconds": round(seconds, 1)})
    return SynapseInstall(python, seconds=seconds)


def homeserver_config(workdir: Path, port: int, shared_secret: str,
                      server_name: str = SERVER_NAME) -> dict[str, Any]:
    """The homeserver.yaml for a throwaway test server (JSON is YAML, so no YAML writer)."""
    return {
        "server_name": server_name,
        "public_baseurl": f"http://127.0.0.1:{port}/",
        "pid_file": str(workdir / "homeserver.pid"),
        # The client resource only (it also serves /_synapse/admin): no federation listener.
        "listeners": [{
            "port": port, "bind_addresses": ["127.0.0.1"], "type": "http", "tls": False,
            "x_forwarded": False, "resources": [{"names": ["client"], "compress": False}],
        }],
        "database": {"name": "sqlite3", "args": {"database": str(workdir / "homeserver.db")}},
        "signing_key_path": str(workdir / "signing.key"),
        "macaroon_secret_key": secrets.token_hex(32),
        "form_secret": secrets.token_hex(32),
        "report_stats": False,
        # Nobody outside: no federation with any server, no key servers to ask.
        "federation_domain_whitelist": [],
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        # Users come only from the fixture, through the shared-secret admin API.
        "enable_registration": False,
        "registration_shared_secret": shared_secret,
        "allow_guest_access": False,
        # bcrypt's cheapest cost: each registration or password login would spend ~0.2 s.
        "bcrypt_rounds": 4,
        # Synapse caches a /sync answer for 2 minutes by default, so asking again with the same
        # `since` returns the old page even after new events; a test of cursor handling (an
        # app that re-syncs from a cursor it kept) must see what a fresh request sees.
        "caches": {"sync_response_cache_duration": 0},
        "presence": {"enabled": False},
        "push": {"enabled": False},
        "enable_media_repo": False,
        "media_store_path": str(workdir / "media"),
        "url_preview_enabled": False,
        "enable_metrics": False,
        "rc_message": _UNLIMITED,
        "rc_registration": _UNLIMITED,
        "rc_login": {"address": _UNLIMITED, "account": _UNLIMITED,
                     "failed_attempts": _UNLIMITED},
        "rc_joins": {"local": _UNLIMITED, "remote": _UNLIMITED},
        "rc_joins_per_room": _UNLIMITED,
        "rc_invites": {"per_room": _UNLIMITED, "per_user": _UNLIMITED,
                       "per_issuer": _UNLIMITED},
        "rc_room_creation": _UNLIMITED,
        "rc_key_requests": _UNLIMITED,
        "rc_admin_redaction": _UNLIMITED,
        "rc_delayed_event_mgmt": _UNLIMITED,
    }


def _write_signing_key(path: Path) -> None:
    # Synapse's key file format: "<algorithm> <version> <unpadded base64 of a 32-byte seed>";
    # written here so starting needs no extra `--generate-keys` run of Synapse.
    seed = base64.b64encode(os.urandom(32)).decode("ascii").rstrip("=")
    path.write_text(f"ed25519 a_wkln {seed}\n", encoding="utf-8")


@dataclass(frozen=True)
class Registered:
    """A user the fixture registered: what a client needs to act as them."""

    user_id: str
    access_token: str
    device_id: str
    password: str


@dataclass
class Homeserver:
    """A running Synapse on 127.0.0.1 and plain-HTTP helpers for its client-server API."""

    url: str
    server_name: str
    shared_secret: str
    workdir: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    started_in_seconds: float = 0.0
    _txn: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def user_id(self, localpart: str) -> str:
        """The full Matrix id of `localpart` on this server."""
        return f"@{localpart}:{self.server_name}"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the server's log (stdout and stderr together)."""
        try:
            return _tail(self.log_path.read_text(encoding="utf-8", errors="replace"), lines)
        except OSError as exc:
            return f"(no log: {exc})"

    def api(self, method: str, path: str, token: str | None = None,
            body: dict[str, Any] | None = None, params: dict[str, Any] | None = None,
            ) -> dict[str, Any]:
        """Call the server and return its JSON; fail with the Matrix error and the log tail."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = requests.request(method, self.url + path, json=body, params=params,
                                  headers=headers, timeout=HTTP_TIMEOUT_SECONDS)
        if not answer.ok:
            raise AssertionError(f"{method} {path} -> {answer.status_code} {answer.text}\n"
                                 f"--- synapse log ---\n{self.log_tail(20)}")
        result: dict[str, Any] = answer.json()
        return result

    def register(self, username: str, password: str | None = None,
                 admin: bool = False) -> Registered:
        """Register a user through the shared-secret admin API (the HMAC nonce exchange)."""
        password = password or secrets.token_urlsafe(16)
        nonce = self.api("GET", "/_synapse/admin/v1/register")["nonce"]
        mac = hmac.new(self.shared_secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), username.encode(), password.encode(),
                                 b"admin" if admin else b"notadmin"]))
        done = self.api("POST", "/_synapse/admin/v1/register", body={
            "nonce": nonce, "username": username, "password": password, "admin": admin,
            "mac": mac.hexdigest(),
        })
        return Registered(done["user_id"], done["access_token"], done["device_id"], password)

    def create_room(self, token: str, encrypted: bool = False,
                    invite: list[str] | None = None, name: str = "") -> str:
        """Create a private room (megolm-encrypted from its first event if asked); its id."""
        body: dict[str, Any] = {"preset": "private_chat", "invite": list(invite or [])}
        if name:
            body["name"] = name
        if encrypted:
            body["initial_state"] = [{"type": "m.room.encryption", "state_key": "",
                                      "content": {"algorithm": MEGOLM}}]
        return str(self.api("POST", "/_matrix/client/v3/createRoom", token, body)["room_id"])

    def join(self, token: str, room_id: str) -> None:
        """Join (or accept the invite to) a room."""
        self.api("POST", f"/_matrix/client/v3/join/{quote(room_id)}", token, {})

    def send_text(self, token: str, room_id: str, body: str) -> str:
        """Send an unencrypted `m.text` message; its event id."""
        path = (f"/_matrix/client/v3/rooms/{quote(room_id)}/send/m.room.message/"
                f"wkln-{next(self._txn)}")
        content = {"msgtype": "m.text", "body": body}
        return str(self.api("PUT", path, token, content)["event_id"])

    def sync(self, token: str, since: str | None = None, timeout_ms: int = 0,
             filter_json: dict[str, Any] | None = None) -> dict[str, Any]:
        """One raw `/sync` answer."""
        params: dict[str, Any] = {"timeout": timeout_ms}
        if since:
            params["since"] = since
        if filter_json is not None:
            params["filter"] = json.dumps(filter_json)
        return self.api("GET", "/_matrix/client/v3/sync", token, params=params)

    def devices(self, token: str) -> list[str]:
        """The device ids of the token's user."""
        return sorted(d["device_id"] for d in self.api("GET", "/_matrix/client/v3/devices",
                                                        token)["devices"])

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after a grace period; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout=STOP_GRACE_SECONDS)


def unique_name(prefix: str) -> str:
    """A localpart no other test in this server's life has used."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _answering(server: Homeserver) -> str | None:
    if server.process.poll() is not None:
        return "exited"
    try:
        ok = requests.get(server.url + "/_matrix/client/versions", timeout=2).ok
    except requests.RequestException:
        return None
    return "up" if ok else None


def start_homeserver(python: Path, workdir: Path, timeout: float = START_TIMEOUT_SECONDS,
                     overrides: dict[str, Any] | None = None) -> Homeserver:
    """Start Synapse with a fresh config and database in `workdir`; wait until it answers.

    `overrides` replaces top-level keys of the config (a key set to None is dropped), for a
    test that needs a server unlike the shared one.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    shared_secret = secrets.token_hex(32)
    config = {**homeserver_config(workdir, port, shared_secret), **(overrides or {})}
    config = {key: value for key, value in config.items() if value is not None}
    config_path = workdir / "homeserver.yaml"
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    _write_signing_key(workdir / "signing.key")
    log_path = workdir / "synapse.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        # No log_config: Synapse logs to stderr, which lands in this file with its stdout.
        process = subprocess.Popen(
            [str(python), "-m", "synapse.app.homeserver", "--config-path", str(config_path)],
            cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    server = Homeserver(f"http://127.0.0.1:{port}", SERVER_NAME, shared_secret, workdir,
                        log_path, process)
    try:
        state = wait_until(lambda: _answering(server), timeout, interval=0.1,
                           message=f"Synapse answering on {server.url}")
    except AssertionError as exc:
        server.stop()
        raise AssertionError(f"{exc}\n--- synapse log ---\n{server.log_tail()}") from None
    if state != "up":
        raise AssertionError(f"Synapse exited with {process.returncode} while starting\n"
                             f"--- synapse log ---\n{server.log_tail()}")
    server.started_in_seconds = time.monotonic() - started
    logger.info("Synapse up", extra={"url": server.url,
                                     "seconds": round(server.started_in_seconds, 1)})
    return server


@pytest.fixture(scope="session")
def synapse_install() -> SynapseInstall:
    """The cached Synapse install (made on first use); skips the test if there is none."""
    install = install_synapse()
    if install.python is None:
        pytest.skip(install.reason)
    return install


@pytest.fixture(scope="session")
def synapse(synapse_install: SynapseInstall,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    """One running Synapse for the whole test session, stopped at its end."""
    assert synapse_install.python is not None
    server = start_homeserver(synapse_install.python, tmp_path_factory.mktemp("synapse"))
    try:
        yield server
    finally:
        code = server.stop()
        # A clean SIGTERM exit is 0; anything else is worth a look in the kept log.
        if code not in (0, -signal.SIGTERM):
            logger.warning("Synapse stopped badly", extra={"code": code,
                                                           "log": str(server.log_path)})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Add the tail of Synapse's log to the report of a failing test that used it."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and "synapse" in getattr(item, "fixturenames", ()):
        server = getattr(item, "funcargs", {}).get("synapse")
        if isinstance(server, Homeserver):
            report.sections.append(("synapse log (last lines)", server.log_tail()))
