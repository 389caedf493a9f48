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
DISCORD_TOKEN = "test-discord-bot-token-5u9QxW2eLr"


def discord_tuning() -> Any:
    """Short waits against the fake Discord (discord.py's own 5 s before a new IDENTIFY,
    its 2 s wait for guilds, the retries' backoff)."""
    from wakeline.providers.discord.part import DiscordTuning

    return DiscordTuning(backoff_seconds=(0.2, 0.3, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5),
                         gateway_retry_seconds=(0.2, 0.3, 0.5), identify_wait_seconds=0,
                         guild_ready_timeout=0.1, rest_max_wait_seconds=5.0)


class Harness:
    """A running service plus helpers to feed it and read what its agent did."""

    def __init__(self, service: Service, log: Path, linear: FakeLinear,
                 discord: Any = None) -> None:
        self.service = service
        self.log = log
        self.linear = linear
        self.discord = discord  # the FakeDiscord, when the service has a bot token
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
    override [agent]. `discord=True` (or a FakeDiscord) gives it a bot token, a fake Discord
    and, unless `routes` are given, both default routes a parent channel there. `sandbox`:
    the `[sandbox]` section (turns are unconfined otherwise); `source`: the config file the
    config stands for."""
    started: list[Service] = []

    def start(mode: str = "ok", arg: str = "", *, linear: FakeLinear | None = None,
              routes: list[dict[str, Any]] | None = None, credential: bool = True,
              linear_config: dict[str, Any] | None = None, client_secret: str | None = None,
              script: Path = AGENT, command: list[str] | None = None,
              env: dict[str, str] | None = None, discord: Any = None,
              discord_config: dict[str, Any] | None = None,
              sandbox: dict[str, Any] | None = None, source: Path | None = None,
              **agent: Any) -> Harness:
        argv = command or [sys.executable, str(script), mode] + ([arg] if arg else [])
        fake = linear or FakeLinear()
        fakes.append(fake.start())
        if discord is True:
            from tests.fakes.discord import FakeDiscord  # aiohttp: the discord extra's

            discord = FakeDiscord(token=DISCORD_TOKEN)
        if discord is not None and discord not in discord_fakes:
            # Ours to stop, and only after the services: their Gateway clients close first.
            discord_fakes.append(discord if discord._loop is not None else discord.start())
        channel = {"discord_channel_id": discord.channel_id} if discord is not None else {}
        extra: dict[str, Any] = {"sandbox": sandbox} if sandbox is not None else {}
        if source is not None:
            extra["source"] = source
        if discord is not None:
            extra["discord"] = {"api_url": discord.api_url, **(discord_config or {})}
        config = make_config(
            state_dir=f"state{len(started)}",
            agent={"command": argv, **agent},
            linear={"api_url": fake.url, **(linear_config or {})},
            routes=routes or [{"name": "eng", "teams": ["ENG"], **channel},
                              {"name": "ops", "teams": ["OPS"], "mode": "issue", **channel}],
            **extra,
        )
        log = tmp_path / f"agent-runs{len(started)}.jsonl"
        base = {"PATH": "/usr/bin:/bin", "FAKE_AGENT_LOG": str(log),
                "WAKELINE_LINEAR_API_KEY": "must-not-leak", "UNRELATED": "kept", **(env or {})}
        keys = secrets if credential else replace(secrets, linear_api_key=None)
        if client_secret is not None:
            keys = replace(keys, client_secret=SecretStr(client_secret))
        tuning = None
        if discord is not None:
            keys = replace(keys, discord_token=SecretStr(DISCORD_TOKEN))
            tuning = discord_tuning()
        service = build_service(config, keys, base_env=base, tick_seconds=0.05,
                                ownership_backoff_seconds=(0.2,), discord_tuning=tuning)
        service.turn_env.kill_grace_seconds = 0.5
        service.start()
        started.append(service)
        harness = Harness(service, log, fake, discord)

        def restart() -> None:
            """Stop this service and start another on the same state, as after a crash."""
            harness.service.stop()
            again = build_service(config, keys, base_env=base, tick_seconds=0.05,
                                  ownership_backoff_seconds=(0.2,), discord_tuning=tuning)
            again.turn_env.kill_grace_seconds = 0.5
            again.start()
            started.append(again)
            harness.service = again

        harness.restart = restart  # type: ignore[attr-defined]
        return harness

    fakes: list[FakeLinear] = []
    discord_fakes: list[Any] = []
    yield start
    for service in started:
        service.stop()
    for fake in fakes:
        fake.stop()
    for discord_fake in discord_fakes:  # after the services: their Gateways closed first
        discord_fake.stop()
