"""Fixtures for turn tests: a real service whose agent is tests/fakes/agent.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest
import requests
from pydantic import SecretStr

from tests.conftest import OPERATOR_TOKEN, signed
from tests.fakes.linear import FakeLinear
from wakeline.app import Service, build_service
from wakeline.config import Config
from wakeline.secrets import Secrets

AGENT = Path(__file__).resolve().parents[2] / "fakes" / "agent.py"


class Harness:
    """A running service plus helpers to feed it and read what its agent did."""

    def __init__(self, service: Service, log: Path, linear: FakeLinear) -> None:
        self.service = service
        self.log = log
        self.linear = linear
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {OPERATOR_TOKEN}"

    def deliver(self, body: dict[str, Any], delivery: str | None = None) -> dict[str, Any]:
        raw, headers = signed(body, delivery=delivery)
        resp = requests.post(self.service.ingress.url + "/webhooks/linear", data=raw, headers=headers,
                             timeout=10)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        return self.http.request(method, self.service.operator.url + path, timeout=10, **kw)

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        return self.api("GET", f"/v1/conversations/{conversation_id}").json()

    def only_conversation(self) -> dict[str, Any]:
        convs = self.api("GET", "/v1/conversations").json()["conversations"]
        issue = [c for c in convs if c["kind"] == "issue"]
        assert len(issue) == 1, issue
        return self.conversation(issue[0]["id"])


@pytest.fixture
def harness(make_config: Callable[..., Config], secrets: Secrets, tmp_path: Path
            ) -> Iterator[Callable[..., Harness]]:
    """Start a service whose agent runs `agent.py MODE ARG` (or `script`); agent keywords
    override [agent]."""
    started: list[Service] = []

    def start(mode: str = "ok", arg: str = "", *, linear: FakeLinear | None = None,
              routes: list[dict[str, Any]] | None = None, credential: bool = True,
              linear_config: dict[str, Any] | None = None, client_secret: str | None = None,
              script: Path = AGENT, command: list[str] | None = None,
              env: dict[str, str] | None = None, **agent: Any) -> Harness:
        argv = command or [sys.executable, str(script), mode] + ([arg] if arg else [])
        fake = linear or FakeLinear()
        fakes.append(fake.start())
        config = make_config(
            state_dir=f"state{len(started)}",
            agent={"command": argv, **agent},
            linear={"api_url": fake.url, **(linear_config or {})},
            routes=routes or [{"name": "eng", "teams": ["ENG"]},
                              {"name": "ops", "teams": ["OPS"], "mode": "issue"}],
        )
        log = tmp_path / f"agent-runs{len(started)}.jsonl"
        base = {"PATH": "/usr/bin:/bin", "FAKE_AGENT_LOG": str(log),
                "WAKELINE_LINEAR_API_KEY": "must-not-leak", "UNRELATED": "kept", **(env or {})}
        keys = secrets if credential else replace(secrets, linear_api_key=None)
        if client_secret is not None:
            keys = replace(keys, client_secret=SecretStr(client_secret))
        service = build_service(config, keys, base_env=base, tick_seconds=0.05,
                                ownership_backoff_seconds=(0.2,))
        service.turn_env.kill_grace_seconds = 0.5
        service.start()
        started.append(service)
        harness = Harness(service, log, fake)

        def restart() -> None:
            """Stop this service and start another on the same state, as after a crash."""
            harness.service.stop()
            again = build_service(config, keys, base_env=base, tick_seconds=0.05,
                                  ownership_backoff_seconds=(0.2,))
            again.turn_env.kill_grace_seconds = 0.5
            again.start()
            started.append(again)
            harness.service = again

        harness.restart = restart  # type: ignore[attr-defined]
        return harness

    fakes: list[FakeLinear] = []
    yield start
    for service in started:
        service.stop()
    for fake in fakes:
        fake.stop()
