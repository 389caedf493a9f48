"""What the doctor checks of Discord: the bot token, the Gateway, each route's parent channel.

The token check reads only the config and the file (the CLI runs it without a service);
the channel checks ask Discord (never Linear): the channel exists, is a text channel of
the configured guild, and the bot's permissions there, computed as Discord does from the
guild's roles, the bot's roles and the channel's overwrites, include everything a control
thread needs. Every failing check says how to fix it.
"""

from __future__ import annotations

import stat
from typing import Any

from wakeline.config import Config
from wakeline.errors import DiscordError, DiscordRejected, DiscordUnauthorized
from wakeline.providers.discord.rest import DiscordRest
from wakeline.service.parts import Check

ADMINISTRATOR = 1 << 3
# What a control thread needs on its parent channel, in Discord's own words.
NEEDED = {
    "View Channel": 1 << 10,
    "Send Messages": 1 << 11,
    "Read Message History": 1 << 16,
    "Manage Threads": 1 << 34,
    "Create Public Threads": 1 << 35,
    "Send Messages in Threads": 1 << 38,
}
TEXT_CHANNEL_TYPES = (0, 5)  # a text channel, an announcement channel
MISSING_ACCESS = 50001
FIND_CHANNEL = ("in Discord, turn on Developer Mode (User Settings > Advanced), right-click the "
                "channel, Copy Channel ID")


def routes_with_threads(config: Config) -> list[tuple[str, Any]]:
    """(config key of its channel, route) of every route, Linear's or Matrix's, with a
    `discord_channel_id`."""
    return [(f"routes.{i}.discord_channel_id", r) for i, r in enumerate(config.routes)
            if r.discord_channel_id] + \
        [(f"matrix.routes.{i}.discord_channel_id", r) for i, r in enumerate(config.matrix.routes)
         if r.discord_channel_id]


def token_check(config: Config, token_set: bool, from_env: bool) -> Check | None:
    """The bot token: present when a route needs it, and a file only its owner can read.
    None when Discord is not used at all."""
    routes = routes_with_threads(config)
    path = config.path(config.discord.token_file)
    if not token_set:
        if not routes:
            return None
        names = ", ".join(r.name for _, r in routes)
        return Check("discord_token", False, f"missing: routes {names} name a Discord channel but "
                     "Discord is off", f"put the bot token in {path} (chmod 600 {path}) or "
                     "$WAKELINE_DISCORD_TOKEN, then restart (docs/operations.md, Discord)")
    if from_env:
        return Check("discord_token", True, "env ($WAKELINE_DISCORD_TOKEN)")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return Check("discord_token", False, f"{path}: mode {mode:04o}, should be 0600",
                     f"chmod 600 {path}")
    return Check("discord_token", True, f"{path} (mode {mode:04o})"
                 + ("" if routes else "; no route names a discord_channel_id"))


def permissions(guild: dict[str, Any], member: dict[str, Any], channel: Any, user_id: str) -> int:
    """The bot's permissions in `channel`, as Discord computes them."""
    roles = {str(r["id"]): int(r.get("permissions", 0)) for r in guild.get("roles", ())}
    guild_id = str(guild.get("id"))
    mine = [str(r) for r in member.get("roles", ())]
    if str(guild.get("owner_id")) == user_id:
        return ~0
    allowed = roles.get(guild_id, 0)
    for role in mine:
        allowed |= roles.get(role, 0)
    if allowed & ADMINISTRATOR:
        return ~0
    overwrites = {str(o["id"]): o for o in channel.permission_overwrites}

    def apply(perms: int, allow: int, deny: int) -> int:
        return (perms & ~deny) | allow

    everyone = overwrites.get(guild_id)
    if everyone is not None:
        allowed = apply(allowed, int(everyone.get("allow", 0)), int(everyone.get("deny", 0)))
    allow = deny = 0
    for role in mine:
        found = overwrites.get(role)
        if found is not None and int(found.get("type", 0)) == 0:
            allow |= int(found.get("allow", 0))
            deny |= int(found.get("deny", 0))
    allowed = apply(allowed, allow, deny)
    own = overwrites.get(user_id)
    if own is not None and int(own.get("type", 1)) == 1:
        allowed = apply(allowed, int(own.get("allow", 0)), int(own.get("deny", 0)))
    return allowed


def channel_checks(config: Config, rest: DiscordRest) -> list[Check]:
    """Each route's parent channel: reachable, a text channel, and the bot may make threads."""
    routes = routes_with_threads(config)
    if not routes:
        return []
    try:
        me = rest.me()
    except DiscordUnauthorized:
        return [Check("discord_api", False, "Discord refused the bot token",
                      "copy the token again (developer portal > your app > Bot > Reset Token) "
                      "into discord.token_file, then restart")]
    except DiscordError as exc:
        return [Check("discord_api", False, f"Discord cannot be reached: {exc.detail}",
                      f"check discord.api_url ({config.discord.api_url}) and the network; "
                      "wakeline keeps retrying on its own")]
    return [_channel(config, rest, key, route, str(me["id"])) for key, route in routes]


def _channel(config: Config, rest: DiscordRest, key: str, route: Any, bot_id: str) -> Check:
    name = f"route {route.name} discord channel"
    channel_id = route.discord_channel_id
    try:
        channel = rest.channel(channel_id)
    except DiscordRejected as exc:
        if exc.status == 404:
            return Check(name, False, f"channel {channel_id} does not exist",
                         f"set {key} to the parent channel's id ({FIND_CHANNEL})")
        if exc.discord_code == MISSING_ACCESS or exc.status == 403:
            return Check(name, False, f"the bot cannot see channel {channel_id}",
                         "invite the bot to the server and give it View Channel there")
        return Check(name, False, exc.detail, f"check {key}")
    except DiscordError as exc:
        return Check(name, False, f"channel {channel_id}: {exc.detail}",
                     "Discord did not answer: try again later")
    if channel.type not in TEXT_CHANNEL_TYPES:
        return Check(name, False, f"#{channel.name} ({channel_id}) is not a text channel",
                     f"point {key} at a text channel: threads are made under it")
    guild = config.discord.guild_id
    if guild and channel.guild_id != guild:
        return Check(name, False, f"#{channel.name} is in guild {channel.guild_id}, not "
                     f"discord.guild_id {guild}", f"fix {key} or discord.guild_id")
    try:
        perms = permissions(rest.guild(str(channel.guild_id)),
                            rest.member(str(channel.guild_id), bot_id), channel, bot_id)
    except DiscordError as exc:
        return Check(name, False, f"#{channel.name}: cannot read the bot's permissions "
                     f"({exc.detail})", "try again later")
    missing = [label for label, bit in NEEDED.items() if not perms & bit]
    if missing:
        return Check(name, False, f"#{channel.name}: the bot lacks {', '.join(missing)}",
                     f"give the bot's role {', '.join(missing)} on #{channel.name} (Edit "
                     "Channel > Permissions) or in Server Settings > Roles")
    return Check(name, True, f"#{channel.name} ({channel_id}): the bot may create and manage "
                             "threads there")


def gateway_check(state: tuple[str, str], backlog: dict[str, int] | None = None) -> Check:
    """The Gateway as the control last heard of it, (state, detail), and what waits."""
    condition, detail = state
    if condition == "failed":
        return Check("discord_gateway", False, f"stopped: {detail}", "fix it, then restart")
    waiting = (f"; {backlog['jobs']} thread jobs waiting, {backlog['catchingUp']} threads "
               f"catching up" if backlog else "")
    return Check("discord_gateway", True, condition + (f" ({detail})" if detail else "")
                 + waiting)
