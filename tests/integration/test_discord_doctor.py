"""The doctor's Discord channel checks against the project's fake Discord on loopback.

Each failure a person can meet while setting up control threads gets its own answer and a
fix: a refused token, Discord out of reach, a channel id that names nothing, a channel the
bot cannot see, a thread or a channel of another guild where a text channel belongs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

# The fake Discord runs on aiohttp, which the `discord` extra brings (`make test` installs it).
pytest.importorskip("aiohttp")

from tests.fakes.discord import FakeDiscord  # noqa: E402
from tests.helpers import free_port  # noqa: E402
from wakeline.config import Config  # noqa: E402
from wakeline.providers.discord.doctor import channel_checks  # noqa: E402
from wakeline.providers.discord.rest import DiscordRest  # noqa: E402

TOKEN = "doctor-bot-token-5e4d3c2b1a"


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    discord = FakeDiscord(token=TOKEN).start()
    yield discord
    discord.stop()


def checks(config: Config, api_url: str, token: str = TOKEN) -> list[dict[str, Any]]:
    rest = DiscordRest(api_url, token, max_attempts=1, max_wait_seconds=0)
    return [c.to_json() for c in channel_checks(config, rest)]


def routed(make_config: Callable[..., Config], channel_id: str, **discord: Any) -> Config:
    return make_config(discord=discord, routes=[
        {"name": "ops", "teams": ["OPS"], "mode": "issue", "discord_channel_id": channel_id}])


def test_a_good_channel_passes(make_config: Callable[..., Config], fake: FakeDiscord) -> None:
    [check] = checks(routed(make_config, fake.channel_id, guild_id=fake.guild_id), fake.api_url)
    assert check["name"] == "route ops discord channel" and check["ok"], check


def test_a_refused_token_is_one_failure_that_says_how_to_get_another(
        make_config: Callable[..., Config], fake: FakeDiscord) -> None:
    [check] = checks(routed(make_config, fake.channel_id), fake.api_url, token="not-the-token")
    assert check["name"] == "discord_api" and not check["ok"]
    assert "refused the bot token" in check["detail"] and "Reset Token" in check["fix"]
    assert "not-the-token" not in repr(check)


def test_discord_out_of_reach_names_the_api_url(make_config: Callable[..., Config]) -> None:
    url = f"http://127.0.0.1:{free_port()}/api/v10"  # nothing listens there
    [check] = checks(routed(make_config, "123", api_url=url), url)
    assert check["name"] == "discord_api" and not check["ok"]
    assert "cannot be reached" in check["detail"] and url in check["fix"]


def test_a_channel_id_that_names_nothing(make_config: Callable[..., Config],
                                         fake: FakeDiscord) -> None:
    [check] = checks(routed(make_config, "4242"), fake.api_url)
    assert not check["ok"] and check["detail"] == "channel 4242 does not exist"
    assert "routes.0.discord_channel_id" in check["fix"] and "Copy Channel ID" in check["fix"]


def test_a_channel_the_bot_cannot_see(make_config: Callable[..., Config],
                                      fake: FakeDiscord) -> None:
    fake.fail_next("GET", f"/channels/{fake.channel_id}", 403,
                   {"message": "Missing Access", "code": 50001})
    [check] = checks(routed(make_config, fake.channel_id), fake.api_url)
    assert not check["ok"] and "cannot see channel" in check["detail"]
    assert "View Channel" in check["fix"]


def test_a_thread_is_not_a_parent_channel(make_config: Callable[..., Config],
                                          fake: FakeDiscord) -> None:
    thread = fake.add_thread(fake.channel_id, "a thread")
    [check] = checks(routed(make_config, thread["id"]), fake.api_url)
    assert not check["ok"] and "is not a text channel" in check["detail"]
    assert "point routes.0.discord_channel_id at a text channel" in check["fix"]


def test_a_channel_of_another_guild(make_config: Callable[..., Config], fake: FakeDiscord) -> None:
    [check] = checks(routed(make_config, fake.channel_id, guild_id="777"), fake.api_url)
    assert not check["ok"]
    assert f"is in guild {fake.guild_id}, not discord.guild_id 777" in check["detail"]
