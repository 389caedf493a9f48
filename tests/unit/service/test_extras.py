"""The optional parts: which the config turns on, which are installed (by a finder handed in,
so no venv is needed here), and what `serve` and `doctor` say about a missing one."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any, Callable

import pytest
from falcon import testing
from pydantic import SecretStr

from wakeline.app import discord_part
from wakeline.service.checks import extras_checks, local_checks
from wakeline.clock import SystemClock
from wakeline.config import Config, parse_config
from wakeline.errors import ConfigError
from wakeline.service.extras import DBOS, DISCORD, MATRIX, discord_token_key, require_extras, wanted
from wakeline.http.operator import create_operator_app
from wakeline.models.inbox import Inbox
from wakeline.service.metrics import Metrics
from wakeline.models.store import Store
from wakeline.secrets import Secrets
from wakeline.turns.tokens import TokenRegistry

MATRIX_ME = {"homeserver": "https://matrix.example.org", "user_id": "@me:example.org",
             "access_token_file": "secrets/matrix-me"}
DBOS_ON = {"engine": "dbos", "database_url": "postgresql://wakeline@127.0.0.1:9/wakeline"}
TOKEN_ENV = {"WAKELINE_DISCORD_TOKEN": "bot-token-Xy7"}


def without(*modules: str) -> Callable[[str], Any]:
    """A finder for which `modules` are not installed and everything else is."""
    return lambda name: None if name in modules else object()


def every_part(tmp_path: Path) -> Config:
    return parse_config({"matrix": {"connections": {"me": MATRIX_ME}}, "scale": DBOS_ON},
                        tmp_path)


def test_nothing_optional_turned_on_needs_nothing(tmp_path: Path) -> None:
    config = parse_config({}, tmp_path)
    require_extras(config, {}, without(*DISCORD.modules, *MATRIX.modules, *DBOS.modules))
    assert wanted(config, None) == [] and extras_checks(config, None) == []


def test_the_key_that_turns_each_part_on(tmp_path: Path) -> None:
    config = every_part(tmp_path)
    assert [(w.key, w.extra.name) for w in wanted(config, "discord.token_file")] == [
        ("discord.token_file", "discord"), ("matrix.connections.me", "matrix"),
        ("scale.engine", "dbos")]


def test_the_discord_token_comes_from_the_environment_before_the_file(tmp_path: Path) -> None:
    config = parse_config({"discord": {"token_file": "bot-token"}}, tmp_path)
    assert discord_token_key(config, {}) is None
    (tmp_path / "bot-token").write_text("  \n")  # empty: no token, Discord off
    assert discord_token_key(config, {"WAKELINE_DISCORD_TOKEN": " "}) is None
    (tmp_path / "bot-token").write_text("bot-token-Xy7\n")
    assert discord_token_key(config, {}) == "discord.token_file"
    assert discord_token_key(config, TOKEN_ENV) == "WAKELINE_DISCORD_TOKEN"


@pytest.mark.parametrize("missing,key,part", [
    ("discord", "WAKELINE_DISCORD_TOKEN", "Discord"),
    ("vodozemac", "matrix.connections.me", "Matrix"),
    ("psycopg", "scale.engine", "DBOS"),
])
def test_serve_refuses_a_missing_part_naming_its_key_and_command(
        tmp_path: Path, missing: str, key: str, part: str) -> None:
    with pytest.raises(ConfigError) as caught:
        require_extras(every_part(tmp_path), TOKEN_ENV, without(missing))
    assert caught.value.key == key
    assert caught.value.reason == (f"{part} is configured but its extra is not installed (no "
                                   f"module {missing}): pip install 'wakeline[{part.lower()}]'")


def test_several_missing_parts_are_named_in_one_refusal(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        require_extras(every_part(tmp_path), TOKEN_ENV, without("aiohttp", "dbos", "psycopg"))
    assert caught.value.key == "WAKELINE_DISCORD_TOKEN"
    assert caught.value.reason == (
        "Discord is configured but its extra is not installed (no module aiohttp): "
        "pip install 'wakeline[discord]'; scale.engine: DBOS is configured but its extra is "
        "not installed (no module dbos, psycopg): pip install 'wakeline[dbos]'")


def test_every_part_installed_starts(tmp_path: Path) -> None:
    require_extras(every_part(tmp_path), TOKEN_ENV, without())
    checks = extras_checks(every_part(tmp_path), "WAKELINE_DISCORD_TOKEN", without())
    assert [(c.name, c.ok, c.detail, c.fix) for c in checks] == [
        ("discord extra", True, "WAKELINE_DISCORD_TOKEN: Discord is installed", None),
        ("matrix extra", True, "matrix.connections.me: Matrix is installed", None),
        ("dbos extra", True, "scale.engine: DBOS is installed", None)]


def test_a_finder_that_raises_counts_as_missing(tmp_path: Path) -> None:
    def broken(name: str) -> Any:
        raise ValueError(f"{name}.__spec__ is None")

    [found] = wanted(parse_config({"scale": DBOS_ON}, tmp_path), None, broken)
    assert found.missing == ("dbos", "psycopg")


def test_the_real_finder_imports_nothing(tmp_path: Path) -> None:
    config = parse_config({"scale": DBOS_ON}, tmp_path)
    [found] = wanted(config, None, lambda name: importlib.util.find_spec(f"{name}_not_here"))
    assert found.missing == DBOS.modules


def test_doctor_says_what_serve_says(tmp_path: Path) -> None:
    config = every_part(tmp_path)
    with pytest.raises(ConfigError) as caught:
        require_extras(config, {}, without("nio"))
    [check] = [c for c in extras_checks(config, None, without("nio")) if not c.ok]
    assert check.name == "matrix extra" and check.detail == str(caught.value)
    assert check.fix == ("pip install 'wakeline[matrix]' into the environment wakeline runs "
                         "from, or remove the [matrix.connections.*] sections; then restart")


def test_the_local_doctor_names_a_discord_channel_without_a_token(tmp_path: Path) -> None:
    config = parse_config({"routes": [{"name": "ops", "teams": ["OPS"],
                                       "discord_channel_id": "1"}]}, tmp_path)
    found = {c.name: c for c in local_checks(config)}
    assert found["discord_token"].ok is False
    assert "routes ops name a Discord channel but Discord is off" in found["discord_token"].detail
    assert "discord extra" not in found  # no token: Discord is off, its extra not needed
    found = {c.name: c for c in local_checks(config, TOKEN_ENV)}
    assert found["discord_token"].ok and found["discord extra"].detail.startswith(
        "WAKELINE_DISCORD_TOKEN: Discord ")


def test_serve_logs_the_discord_channels_that_have_no_token(
        tmp_path: Path, secrets: Secrets, caplog: pytest.LogCaptureFixture) -> None:
    config = parse_config({"routes": [{"name": "ops", "teams": ["OPS"],
                                       "discord_channel_id": "1"}]}, tmp_path)
    nothing: Any = None
    with caplog.at_level(logging.WARNING, logger="wakeline.app"):
        assert discord_part(config, secrets, nothing, nothing, nothing, nothing, nothing,
                            nothing, nothing) is None
    [record] = caplog.records
    assert "no bot token is set: Discord is off" in record.getMessage()
    assert record.keys == ["routes.0.discord_channel_id"]  # type: ignore[attr-defined]


def test_the_service_doctor_lists_the_parts_turned_on(make_config: Callable[..., Config],
                                                      store: Store) -> None:
    config = make_config(discord={"token_file": "bot-token"})
    (config.base_dir / "bot-token").write_text("bot-token-Xy7\n")
    secrets = Secrets(None, None, SecretStr("op"), discord_token=SecretStr("bot-token-Xy7"))
    app = create_operator_app(config, store, Inbox(store), TokenRegistry("op"), SystemClock(),
                              Metrics(), secrets=secrets)
    data = testing.TestClient(app, headers={"Authorization": "Bearer op"}).simulate_get(
        "/v1/doctor").json
    found = {c["name"]: c for c in data["checks"]}
    # `make test` installs every extra: the item passes, naming where the token came from.
    assert found["discord extra"] == {"name": "discord extra", "ok": True,
                                      "detail": "discord.token_file: Discord is installed"}
