"""Discord is optional: its config, its token, and nothing of discord.py without a token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from pydantic import SecretStr

from wakeline.app import discord_part
from wakeline.commands.operate import conversation_text
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
    nothing: Any = None
    assert discord_part(config, secrets, nothing, nothing, nothing, nothing, nothing, nothing,
                        nothing) is None


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
        conversation_text(view)
    view["control"] = None
    assert "control:" not in conversation_text(view)


def test_the_doctor_wants_the_token_file_owner_only(make_config: Callable[..., Config],
                                                    tmp_path: Path) -> None:
    from wakeline.providers.discord.doctor import token_check

    config = make_config(discord={"token_file": "bot-token"},
                         routes=[{"name": "ops", "teams": ["OPS"], "discord_channel_id": "1"}])
    missing = token_check(config, token_set=False, from_env=False)
    assert missing is not None and not missing.ok and "ops" in missing.detail
    assert "WAKELINE_DISCORD_TOKEN" in (missing.fix or "")
    token = tmp_path / "bot-token"
    token.write_text("t0ken\n")
    token.chmod(0o644)
    loose = token_check(config, token_set=True, from_env=False)
    assert loose is not None and not loose.ok and loose.fix == f"chmod 600 {token}"
    token.chmod(0o600)
    assert token_check(config, token_set=True, from_env=False).ok  # type: ignore[union-attr]
    from_env = token_check(config, token_set=True, from_env=True)
    assert from_env is not None and from_env.detail.startswith("env")
    assert token_check(make_config(), token_set=False, from_env=False) is None  # Discord unused


def test_permissions_are_computed_as_discord_does() -> None:
    from wakeline.providers.discord.doctor import NEEDED, permissions
    from wakeline.providers.discord.rest import Channel

    needed = sum(NEEDED.values())
    guild = {"id": "1", "owner_id": "9", "roles": [{"id": "1", "permissions": str(1 << 10)},
                                                   {"id": "2", "permissions": str(needed)}]}
    member = {"roles": ["2"]}

    def channel(*overwrites: dict[str, Any]) -> Channel:
        return Channel("5", 0, "agents", None, "1", False, False, tuple(overwrites))

    assert permissions(guild, member, channel(), "7") & needed == needed
    denied = channel({"id": "2", "type": 0, "allow": "0", "deny": str(NEEDED["Manage Threads"])})
    assert not permissions(guild, member, denied, "7") & NEEDED["Manage Threads"]
    again = channel({"id": "2", "type": 0, "allow": "0", "deny": str(NEEDED["Manage Threads"])},
                    {"id": "7", "type": 1, "allow": str(NEEDED["Manage Threads"]), "deny": "0"})
    assert permissions(guild, member, again, "7") & NEEDED["Manage Threads"]
    everyone_off = channel({"id": "1", "type": 0, "allow": "0", "deny": str(1 << 10)})
    assert permissions(guild, {"roles": []}, everyone_off, "7") & (1 << 10) == 0
    admin = {**guild, "roles": [*guild["roles"], {"id": "3", "permissions": str(1 << 3)}]}
    assert permissions(admin, {"roles": ["3"]}, denied, "7") & needed == needed
