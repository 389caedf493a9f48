"""Discord is optional: its config, its token, and nothing of discord.py without a token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from pydantic import SecretStr

from wakeline.app import discord_service
from wakeline.cli import _conversation_text
from wakeline.config import Config, parse_config
from wakeline.errors import ConfigError
from wakeline.secrets import Secrets, load_secrets


def test_discord_is_off_by_default(make_config: Callable[..., Config]) -> None:
    config = make_config()
    assert config.discord.api_url == "https://discord.com/api/v10"
    assert config.discord.token_file == "var/secrets/discord-bot-token"
    assert config.discord.allowed_user_ids == [] and config.routes[0].discord_channel_id == ""


@pytest.mark.parametrize("raw,key", [
    ({"routes": [{"name": "r", "discord_channel_id": "#general"}]}, "routes.0.discord_channel_id"),
    ({"discord": {"allowed_user_ids": ["ada"]}}, "discord.allowed_user_ids.0"),
    ({"discord": {"guild_id": "abc"}}, "discord.guild_id"),
    ({"discord": {"token": "inline"}}, "discord.token"),
])
def test_a_bad_discord_value_names_its_key(raw: dict[str, Any], key: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, tmp_path)
    assert caught.value.key == key


def test_the_token_comes_from_the_environment_before_the_file(
        make_config: Callable[..., Config], tmp_path: Path) -> None:
    config = make_config(discord={"token_file": "bot-token"})
    (tmp_path / "bot-token").write_text("from-the-file\n")
    assert load_secrets(config, {}).discord_token == SecretStr("from-the-file")
    env = load_secrets(config, {"WAKELINE_DISCORD_TOKEN": "from-the-env"})
    assert env.discord_token == SecretStr("from-the-env")
    assert "from-the-env" in env.values()  # every scrubber knows it


def test_without_a_token_there_is_no_discord_service(make_config: Callable[..., Config],
                                                     secrets: Secrets) -> None:
    config = make_config(routes=[{"name": "r", "teams": ["ENG"], "discord_channel_id": "1"}])
    assert discord_service(config, secrets, None, None, None, None, None) is None  # type: ignore[arg-type]


def test_the_default_install_never_imports_discord_py() -> None:
    code = ("import sys, wakeline.app, wakeline.cli, wakeline.http.operator; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('discord', 'aiohttp')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_conversations_show_prints_the_control_thread() -> None:
    view: dict[str, Any] = {
        "id": "cv_1", "state": "idle", "outcome": None, "pending": 0, "claimed": 0,
        "title": "[OPS-1] t", "subject": {"key": "issue-1"}, "route": "ops", "session": "ses_1",
        "updatedAt": None, "control": {"provider": "discord", "threadId": "900",
                                       "title": "[OPS-1] t", "archived": True, "locked": True}}
    assert 'control: discord thread 900 "[OPS-1] t" (archived and locked)' in \
        _conversation_text(view)
    view["control"] = None
    assert "control:" not in _conversation_text(view)
