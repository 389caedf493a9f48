"""Shared fixtures: the frozen clock, configs, a real store, signed deliveries, servers."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pykka
import pytest
from falcon import testing
from freezegun import freeze_time
from pydantic import SecretStr

from wakeline.admission.writer import AdmissionWriter
from wakeline.app import Service, build_service
from wakeline.clock import SystemClock, to_ms
from wakeline.config import Config, parse_config
from wakeline.http.ingress import create_ingress_app
from wakeline.http.operator import create_operator_app
from wakeline.models.inbox import Inbox
from wakeline.service.metrics import Metrics
from wakeline.models.store import Store
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.providers.linear.signature import sign
from wakeline.secrets import Secrets
from wakeline.turns.tokens import TokenRegistry

WEBHOOK_SECRET = "test-webhook-secret-0123456789abcdef"
OPERATOR_TOKEN = "test-operator-token-0123456789abcdef"
LINEAR_KEY = "lin_api_TESTKEY0123456789abcdefghijkl"
ORG = "org-test"
FROZEN_AT = "2026-11-29T12:00:00Z"

# The session's throwaway PostgreSQL cluster (`postgres`, `postgres_url`), started on first use,
# and the end-of-session check that nothing a test started outlives it.
pytest_plugins = ["tests.support.postgres", "tests.support.leftovers"]


@pytest.fixture(autouse=True)
def _stop_actors() -> Iterator[None]:
    """No actor outlives its test."""
    yield
    pykka.ActorRegistry.stop_all()


@pytest.fixture
def frozen() -> Iterator[Any]:
    """The frozen clock: `frozen.tick(seconds)` moves it."""
    with freeze_time(FROZEN_AT) as frozen_time:
        yield frozen_time


@pytest.fixture
def clock() -> SystemClock:
    """The service clock (reads the standard library, which freezegun patches)."""
    return SystemClock()


# `WAKELINE_TEST_DATABASE=postgres`: the `config` and `store` fixtures (and so every service a
# test builds from `make_config`) use a fresh database of the session's throwaway PostgreSQL
# cluster (engine "dbos"), instead of SQLite in tmp_path. Tests that open a SQLite file by path
# themselves stay on SQLite.
TEST_DATABASE_ENV = "WAKELINE_TEST_DATABASE"


def on_postgres() -> bool:
    """Whether this test session runs the store on PostgreSQL."""
    return os.environ.get(TEST_DATABASE_ENV, "sqlite").lower() in ("postgres", "postgresql")


# For a test that reaches into the SQLite file itself (fault injection, a crash simulated by
# writing the file): it has no PostgreSQL form, so it skips on PostgreSQL, saying why.
sqlite_only = pytest.mark.skipif(on_postgres(), reason="writes the SQLite file directly")


@pytest.fixture
def database_url(request: pytest.FixtureRequest) -> str | None:
    """A fresh PostgreSQL database's URL when the session runs on PostgreSQL, else None."""
    return request.getfixturevalue("postgres_url") if on_postgres() else None


@pytest.fixture
def make_config(tmp_path: Path, database_url: str | None,
                request: pytest.FixtureRequest) -> Callable[..., Config]:
    """Build a Config rooted in tmp_path, with free ports; keyword sections override
    (`source`: the config file it was read from).

    On PostgreSQL each state dir gets its own database, as each gets its own SQLite file."""
    databases: dict[str, str] = {}

    def make(**overrides: Any) -> Config:
        raw: dict[str, Any] = {
            "state_dir": "state",
            "server": {"webhook_host": "127.0.0.1", "webhook_port": 0, "operator_port": 0,
                       "threads": 4},
            # Never Linear itself: port 9 on loopback refuses at once unless a test starts a fake.
            "linear": {"api_url": "http://127.0.0.1:9/graphql"},
            # Unconfined unless a test asks: the fake agents report through files in tmp_path,
            # which a confined turn cannot see (tests/integration/actors/test_sandbox*.py).
            "sandbox": {"mode": "none"},
        }
        if database_url is not None:
            state = str(overrides.get("state_dir", raw["state_dir"]))
            if state not in databases:
                databases[state] = database_url if not databases else \
                    request.getfixturevalue("postgres").create_database()
            raw["scale"] = {"engine": "dbos", "database_url": databases[state]}
        source = overrides.pop("source", None)  # the config file it stands for, if any
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(raw.get(key), dict):
                raw[key] = {**raw[key], **value}
            else:
                raw[key] = value
        return parse_config(raw, tmp_path, source=source)

    return make


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    """The default test config: one agent route for ENG, one issue route for OPS."""
    return make_config(
        routes=[
            {"name": "eng", "teams": ["ENG"], "mode": "agent"},
            {"name": "ops", "teams": ["OPS"], "mode": "issue"},
        ]
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository in tmp_path, on `main` with one commit holding README.md."""
    from tests.helpers import make_repo

    return make_repo(tmp_path / "repo")


@pytest.fixture
def secrets() -> Secrets:
    """Known test secrets."""
    return Secrets(
        webhook_secret=SecretStr(WEBHOOK_SECRET),
        linear_api_key=SecretStr(LINEAR_KEY),
        operator_token=SecretStr(OPERATOR_TOKEN),
    )


@pytest.fixture
def store(config: Config, clock: SystemClock) -> Iterator[Store]:
    """A real store: SQLite in tmp_path, or the test's PostgreSQL database."""
    from wakeline.scheduling.engine import store_target

    s = Store.open(store_target(config), clock)
    yield s
    s.dispose()


@pytest.fixture
def writer(store: Store) -> Iterator[AdmissionWriter]:
    """A running admission writer over the store."""
    w = AdmissionWriter(store)
    w.start()
    yield w
    w.stop()


@pytest.fixture
def ingress(config: Config, writer: AdmissionWriter, clock: SystemClock) -> testing.TestClient:
    """falcon TestClient of the public app, over a real store and writer."""
    webhooks = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=config.linear.freshness_seconds,
                              organization_id=config.linear.organization_id)
    return testing.TestClient(create_ingress_app(config, webhooks, writer, clock, Metrics()))


@pytest.fixture
def operator(config: Config, store: Store, clock: SystemClock) -> testing.TestClient:
    """falcon TestClient of the operator app."""
    inbox = Inbox(store)
    return testing.TestClient(
        create_operator_app(config, store, inbox, TokenRegistry(OPERATOR_TOKEN), clock, Metrics()),
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
    )


@pytest.fixture
def service(config: Config, secrets: Secrets) -> Iterator[Service]:
    """The whole service on real waitress listeners on 127.0.0.1."""
    svc = build_service(config, secrets)
    svc.start()
    yield svc
    svc.stop()


# --- deliveries ------------------------------------------------------------------------------


def now_ms() -> int:
    """Milliseconds now, by the (possibly frozen) standard clock."""
    return to_ms(SystemClock().now())


def comment_event(issue_id: str = "issue-1", identifier: str = "ENG-1", **extra: Any) -> dict[str, Any]:
    """A Comment create event as Linear sends it."""
    body: dict[str, Any] = {
        "type": "Comment",
        "action": "create",
        "organizationId": ORG,
        "createdAt": "2026-11-29T12:00:00.000Z",
        "url": f"https://linear.app/test/issue/{identifier}#comment",
        "actor": {"id": "user-1", "name": "Jane Doe", "email": "jane@example.com", "type": "user"},
        "data": {
            "id": f"comment-{uuid.uuid4()}",
            "body": "Please look at this",
            "issueId": issue_id,
            "issue": {"id": issue_id, "identifier": identifier, "title": "Fix the thing"},
        },
        "webhookTimestamp": now_ms(),
    }
    body.update(extra)
    return body


def issue_event(issue_id: str = "issue-2", identifier: str = "OPS-2", action: str = "update",
                **extra: Any) -> dict[str, Any]:
    """An Issue event."""
    team = identifier.split("-")[0]
    body: dict[str, Any] = {
        "type": "Issue",
        "action": action,
        "organizationId": ORG,
        "url": f"https://linear.app/test/issue/{identifier}",
        "actor": {"id": "user-1", "name": "Jane Doe"},
        "data": {
            "id": issue_id,
            "identifier": identifier,
            "title": "Rotate the logs",
            "team": {"id": "team-" + team, "key": team},
            "state": {"id": "state-todo", "name": "Todo", "type": "unstarted"},
        },
        "updatedFrom": {"title": "Old title"},
        "webhookTimestamp": now_ms(),
    }
    body.update(extra)
    return body


def session_event(action: str = "created", session_id: str = "session-1", issue_id: str = "issue-1",
                  identifier: str = "ENG-1", **extra: Any) -> dict[str, Any]:
    """An AgentSessionEvent."""
    body: dict[str, Any] = {
        "type": "AgentSessionEvent",
        "action": action,
        "organizationId": ORG,
        "agentSession": {
            "id": session_id,
            "issue": {"id": issue_id, "identifier": identifier, "title": "Fix the thing",
                      "team": {"key": identifier.split("-")[0]}},
            "creator": {"id": "user-1", "name": "Jane Doe"},
        },
        "promptContext": "<issue identifier=\"ENG-1\">Fix the thing</issue>",
        "webhookTimestamp": now_ms(),
    }
    if action == "prompted":
        body["agentActivity"] = {"id": f"act-{uuid.uuid4()}", "content": {"type": "prompt", "body": "go on"}}
    body.update(extra)
    return body


def signed(body: dict[str, Any] | bytes, *, delivery: str | None = None, secret: str = WEBHOOK_SECRET,
           signature: str | None = None) -> tuple[bytes, dict[str, str]]:
    """The raw body and headers of a signed delivery."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {
        "Content-Type": "application/json",
        "Linear-Signature": signature if signature is not None else sign(secret, raw),
        "Linear-Delivery": delivery or str(uuid.uuid4()),
        "Linear-Event": "test",
    }
    return raw, headers


def deliver(ingress: Any, body: dict[str, Any]) -> None:
    """Admit one delivery through an in-process ingress app; it must be accepted."""
    raw, headers = signed(body)
    resp = ingress.simulate_post("/webhooks/linear", body=raw, headers=headers)
    assert resp.json == {"outcome": "accepted"}, resp.json


def comments(ingress: Any, n: int, text: str = "Please look at this") -> None:
    """Admit `n` comment events, one per issue."""
    for i in range(n):
        body = comment_event(f"issue-{i}", f"ENG-{i}")
        body["data"]["body"] = text
        deliver(ingress, body)
