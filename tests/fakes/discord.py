"""A fake Discord: REST under `/api/v10` and the Gateway at `/gateway`, on 127.0.0.1.

One aiohttp server (aiohttp is discord.py's own dependency) runs in its own thread and event
loop, the way `FakeLinear` runs in a daemon thread: `start()`, `stop()`, `api_url`,
`gateway_url`. It keeps one guild with one text channel (`guild_id`, `channel_id`), the bot
user (`bot_id`) and its application, and answers as Discord does:

- REST: `GET /gateway/bot`, `GET /gateway`, `GET /users/@me`, `GET /oauth2/applications/@me`
  (and `/applications/@me`), `GET|PATCH|DELETE /channels/{id}`, `POST /channels/{id}/threads`
  (thread without a message; `type` defaults to 12, a private thread, as on Discord),
  `POST|GET /channels/{id}/messages` (the list is newest first, `after`/`before`/`around`,
  `limit` 1-100; a post with `enforce_nonce` and a nonce already used by its author in that
  channel answers the first message instead of posting again), `GET /guilds/{id}` (its
  roles: `@everyone` and the bot's managed role) and `GET /guilds/{id}/members/{user}`.
  `PATCH /channels/{id}/messages/{message}` (the bot's own messages: content and components),
  `POST /interactions/{id}/{token}/callback` (no bot token, as on Discord: the interaction's
  own token; answered once, within `interaction_deadline_s` of the click, else 10062
  "Unknown interaction"; types 4 (ephemeral with flag 64), 5, 6 and 7 UPDATE_MESSAGE).
  A message may carry components (action rows, type 1, of up to five buttons, type 2),
  checked as Discord checks them (50035 for a bad one).
  Errors use Discord's JSON shape (`{"message", "code"}`, 50035 with
  `errors` for an invalid form body, 10003 for an unknown channel). Every answer carries
  `Via: 1.1 google` and per-route `X-RateLimit-*` headers; a bucket past its limit is
  answered 429 as Discord does; `rate_limit_next` scripts a 429.
- Gateway: HELLO, IDENTIFY -> READY (guild unavailable) + GUILD_CREATE (channels and active
  threads), heartbeat ACKs, RESUME -> replay of the missed dispatches + RESUMED, or
  INVALID_SESSION (`d: false`) when the session is gone. Frames are plain JSON text, or
  compressed when the query asks `compress=zlib-stream` (what discord.py 2.7.1 asks) or
  `compress=zstd-stream` (asked when `zstandard` is installed, e.g. `discord.py[speed]`).
  Dispatches honour the IDENTIFY's intents (no MESSAGE_CREATE without GUILD_MESSAGES, empty
  `content` without MESSAGE_CONTENT for others' messages, as Discord does). `click` sends an
  INTERACTION_CREATE (type 3, MESSAGE_COMPONENT) to every session, as Discord sends
  interactions whatever the intents.

Pointing discord.py 2.7.1 at it: there is no per-client option for either address. Every REST
route is built from the class attribute `Route.BASE`; a Gateway connection goes to the class
attribute `DiscordWebSocket.DEFAULT_GATEWAY` unless discord.py holds an address of its own
(READY's `resume_gateway_url`, kept for RESUMEs; discord.py resets its address to
`DEFAULT_GATEWAY` on INVALID_SESSION, and `AutoShardedClient` re-identifies there)::

    import requests, yarl
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

    gateway_url = requests.get(f"{api_url}/gateway/bot", timeout=10,
                               headers={"Authorization": f"Bot {token}"}).json()["url"]
    Route.BASE = api_url                                     # REST
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)  # Gateway
    await client.start(token)

Test API (callable from any thread): `post_user_message` (with `attachments`),
`add_text_channel`, `add_thread`, `update_thread`, `delete_channel`, `channel`, `messages`,
`set_role_permissions`, `set_overwrites`, `requests`, `requests_to`, `rate_limit_next`,
`fail_next`, `clear_scripts`, `drop_gateway`, `hold_gateway`, `request_reconnect`,
`identifies`, `resumes`, `gateway_connections`, `session_ids`, `click`, `interactions`
(each click and the callbacks it got), `message`.
"""

from __future__ import annotations

import asyncio
import copy
import fnmatch
import hashlib
import json
import math
import re
import socket
import threading
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiohttp import WSMsgType, web

try:  # discord.py asks for zstd-stream instead of zlib-stream when zstandard is importable
    import zstandard
except ImportError:  # pragma: no cover - depends on the environment
    zstandard = None

T = TypeVar("T")
Json = dict[str, Any]

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
# Gateway intents (discord.com/developers/docs/events/gateway#gateway-intents).
INTENT_GUILDS = 1 << 0
INTENT_GUILD_MEMBERS = 1 << 1
INTENT_GUILD_PRESENCES = 1 << 8
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = INTENT_GUILD_MEMBERS | INTENT_GUILD_PRESENCES | INTENT_MESSAGE_CONTENT
TEXT_CHANNEL, PUBLIC_THREAD, PRIVATE_THREAD = 0, 11, 12
THREAD_TYPES = (10, PUBLIC_THREAD, PRIVATE_THREAD)
ARCHIVE_DURATIONS = (60, 1440, 4320, 10080)
MAX_CONTENT = 2000
# @everyone's permissions in the fake's guild; the bot's own role adds Manage Threads (34),
# which a control thread needs to lock, and View/Send/History/Create Public Threads/Send in
# Threads again (as a bot's invite would ask).
EVERYONE_PERMISSIONS = 1071698660929
BOT_ROLE_PERMISSIONS = (1 << 10) | (1 << 11) | (1 << 16) | (1 << 34) | (1 << 35) | (1 << 38)
# Interactions (discord.com/developers/docs/interactions/receiving-and-responding).
MESSAGE_COMPONENT = 3
ACTION_ROW, BUTTON = 1, 2
LINK_BUTTON_STYLE = 5
EPHEMERAL = 1 << 6
CALLBACK_TYPES = (4, 5, 6, 7)
SEND_MESSAGES_IN_THREADS = 1 << 38
# What a caller may wait for a call onto the fake's loop: generous, only a hung loop hits it.
CALL_TIMEOUT_S = 10.0


def _seconds(value: float) -> float:
    """Seconds rounded up to the millisecond: a wait rounded down lets a client retry early."""
    return math.ceil(max(value, 0.0) * 1000) / 1000


def _answer(payload: Any, status: int = 200) -> web.Response:
    """A JSON answer whose Content-Type is exactly `application/json`, as Discord sends it:
    discord.py parses a body as JSON only on that exact header value (no charset)."""
    return web.Response(body=json.dumps(payload).encode(), status=status,
                        content_type="application/json")


class DiscordError(Exception):
    """A Discord error answer: HTTP status plus Discord's JSON error body."""

    def __init__(self, status: int, code: int, message: str, errors: Json | None = None) -> None:
        super().__init__(f"{status} {code} {message}")
        self.status = status
        self.headers: dict[str, str] = {}
        self.body: Json = {"message": message, "code": code}
        if errors is not None:
            self.body["errors"] = errors


def unknown_channel() -> DiscordError:
    """Discord's answer for a channel (or thread) that does not exist (any more)."""
    return DiscordError(404, 10003, "Unknown Channel")


def invalid_form(field_name: str, code: str, message: str) -> DiscordError:
    """Discord's 50035 "Invalid Form Body" for one field."""
    return DiscordError(400, 50035, "Invalid Form Body",
                        {field_name: {"_errors": [{"code": code, "message": message}]}})


@dataclass
class RecordedRequest:
    """One REST request the fake received, and the status it answered."""

    at: float  # time.monotonic() on arrival
    method: str
    path: str  # without the /api/v10 prefix, e.g. "/channels/123/messages"
    query: dict[str, str]
    json: Any
    headers: dict[str, str]
    status: int = 0


@dataclass
class _Scripted:
    """A scripted answer for the next `times` requests matching method and path glob."""

    method: str | None
    path: str
    status: int
    body: Json
    headers: dict[str, str]
    times: int


@dataclass
class _Bucket:
    """A fixed rate-limit window for one route and major parameter."""

    started: float
    count: int = 0


@dataclass
class _Close:
    """Outbox sentinel: close the socket with `code` once the frames before it are sent."""

    code: int
    reason: str = ""


@dataclass
class _Session:
    """A Gateway session: survives its connection so that a RESUME can replay what it missed."""

    session_id: str
    intents: int
    seq: int = 0
    sent: list[Json] = field(default_factory=list)  # every dispatch, for replay on RESUME
    connection: _Connection | None = None


@dataclass(eq=False)
class _Connection:
    """One Gateway websocket and its ordered outbox (compression must follow send order)."""

    ws: web.WebSocketResponse
    compress: str | None
    outbox: asyncio.Queue[Json | _Close] = field(default_factory=asyncio.Queue)
    session: _Session | None = None
    dropped: bool = False  # closed by the fake, not by the client
    closing: bool = False  # the writer is in the close handshake: let it finish
    finished: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Interaction:
    """One click as the fake dispatched it, and the callbacks it got (oldest first)."""

    id: str
    token: str
    channel_id: str
    message_id: str
    user_id: str
    custom_id: str
    at: float  # time.monotonic() when dispatched
    callbacks: list[Json] = field(default_factory=list)  # {"type", "data", "status"}

    @property
    def answered(self) -> Json | None:
        """The callback Discord took (the first with a 2xx), or None."""
        return next((c for c in self.callbacks if 200 <= c["status"] < 300), None)


class Gate:
    """Holds every new Gateway connection before its HELLO until `release()`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        self._loop = loop
        self._event = event

    def release(self) -> None:
        """Let the held connections (and later ones) get their HELLO."""
        self._loop.call_soon_threadsafe(self._event.set)


class FakeDiscord:
    """A fake Discord REST API and Gateway on 127.0.0.1; see the module docstring."""

    def __init__(self, token: str = "fake-bot-token", *, heartbeat_interval_ms: int = 41_250,
                 rate_limit: int = 50, rate_window_s: float = 1.0,
                 allowed_privileged_intents: int = PRIVILEGED_INTENTS,
                 clock: Callable[[], float] = time.time,
                 interaction_deadline_s: float = 3.0) -> None:
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rate_limit = rate_limit
        self.rate_window_s = rate_window_s
        # Privileged intents the application is allowed (the developer portal's switches).
        self.allowed_privileged_intents = allowed_privileged_intents
        self._clock = clock
        # Discord takes an interaction's first answer within 3 s of the click, never later.
        self.interaction_deadline_s = interaction_deadline_s
        self._interactions: dict[str, Interaction] = {}
        self._last_id = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._requests: list[RecordedRequest] = []
        self._scripts: list[_Scripted] = []
        self._buckets: dict[tuple[str, str, str], _Bucket] = {}
        self._channels: dict[str, Json] = {}
        self._messages: dict[str, list[Json]] = {}
        self._users: dict[str, Json] = {}
        self._sessions: dict[str, _Session] = {}
        self._connections: list[_Connection] = []
        self._received: list[Json] = []  # every Gateway payload a client sent
        self._connects: list[dict[str, str]] = []  # the query string of every Gateway connection
        self._session_ids: list[str] = []
        self._gate: asyncio.Event | None = None
        self._starts_left = 1000

        self.bot_id = self._next_id()
        self.application_id = self._next_id()
        self.guild_id = self._next_id()
        self.owner_id = self._next_id()
        # The bot's managed role: what a control thread needs on its parent channel.
        self.bot_role_id = self._next_id()
        self._role_permissions = {self.guild_id: EVERYONE_PERMISSIONS,
                                  self.bot_role_id: BOT_ROLE_PERMISSIONS}
        self._users[self.bot_id] = self._user(self.bot_id, "wakeline", bot=True)
        self._users[self.owner_id] = self._user(self.owner_id, "owner")
        self._guild_joined_at = self._iso()
        self.channel_id = self.add_text_channel("agents")["id"]

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> FakeDiscord:
        """Start the server in its own thread and event loop; returns self."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fake-discord", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), loop).result(CALL_TIMEOUT_S)
        return self

    def stop(self) -> None:
        """Close every Gateway connection and the server, then end the thread and its loop."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), loop).result(CALL_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CALL_TIMEOUT_S)
        loop.close()
        self._loop = self._thread = None

    @property
    def api_url(self) -> str:
        """The REST base, e.g. http://127.0.0.1:PORT/api/v10 (for `Route.BASE`)."""
        return f"http://127.0.0.1:{self._port}{API_PREFIX}"

    url = api_url

    @property
    def gateway_url(self) -> str:
        """The Gateway address `/gateway/bot` answers, without a query string."""
        return f"ws://127.0.0.1:{self._port}/gateway"

    async def _open(self) -> None:
        app = web.Application(middlewares=[self._edge])
        api = API_PREFIX
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway/", self._gateway)
        app.router.add_get(api + "/gateway", self._get_gateway)
        app.router.add_get(api + "/gateway/bot", self._get_gateway_bot)
        app.router.add_get(api + "/users/@me", self._get_me)
        app.router.add_get(api + "/oauth2/applications/@me", self._get_application)
        app.router.add_get(api + "/applications/@me", self._get_application)
        app.router.add_get(api + "/channels/{channel_id}", self._get_channel)
        app.router.add_patch(api + "/channels/{channel_id}", self._patch_channel)
        app.router.add_delete(api + "/channels/{channel_id}", self._delete_channel)
        app.router.add_post(api + "/channels/{channel_id}/threads", self._post_thread)
        app.router.add_post(api + "/channels/{channel_id}/messages", self._post_message)
        app.router.add_get(api + "/channels/{channel_id}/messages", self._get_messages)
        app.router.add_patch(api + "/channels/{channel_id}/messages/{message_id}",
                             self._patch_message)
        app.router.add_post(api + "/interactions/{interaction_id}/{token}/callback",
                            self._interaction_callback)
        app.router.add_get(api + "/guilds/{guild_id}", self._get_guild)
        app.router.add_get(api + "/guilds/{guild_id}/members/{user_id}", self._get_member)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def _close(self) -> None:
        # Open websockets would hold the runner's cleanup for its whole shutdown timeout.
        if self._gate is not None:
            self._gate.set()  # a held connection must get past HELLO to see its close
        open_ = list(self._connections)
        for conn in open_:
            conn.dropped = True
            conn.outbox.put_nowait(_Close(1001, "going away"))
        if open_:
            await asyncio.wait_for(asyncio.gather(*(c.finished.wait() for c in open_)),
                                   CALL_TIMEOUT_S)
        if self._runner is not None:
            await self._runner.cleanup()

    def _on_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` on the fake's loop (all state lives there) and return its result."""
        if self._loop is None or threading.current_thread() is self._thread:
            return fn(*args)

        async def call() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(CALL_TIMEOUT_S)

    # ---------------------------------------------------------------- ids and shapes

    def _next_id(self) -> str:
        """A snowflake: milliseconds since Discord's epoch << 22, strictly increasing."""
        stamp = (int(self._clock() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_id = max(stamp, self._last_id + 1)
        return str(self._last_id)

    def _iso(self) -> str:
        return datetime.fromtimestamp(self._clock(), UTC).isoformat()

    @staticmethod
    def _user(user_id: str, username: str, *, bot: bool = False) -> Json:
        user: Json = {"id": user_id, "username": username, "discriminator": "0",
                      "global_name": username, "avatar": None, "public_flags": 0}
        if bot:
            user["bot"] = True
        return user

    def _member(self, user_id: str | None = None) -> Json:
        roles = [self.bot_role_id] if user_id == self.bot_id else []
        return {"roles": roles, "joined_at": self._guild_joined_at, "deaf": False,
                "mute": False, "flags": 0, "pending": False, "nick": None, "avatar": None,
                "premium_since": None, "communication_disabled_until": None}

    def _roles(self) -> list[Json]:
        def role(role_id: str, name: str, position: int, managed: bool) -> Json:
            return {"id": role_id, "name": name,
                    "permissions": str(self._role_permissions[role_id]), "position": position,
                    "color": 0, "hoist": False, "managed": managed, "mentionable": False,
                    "flags": 0}

        return [role(self.guild_id, "@everyone", 0, False),
                role(self.bot_role_id, "wakeline", 1, True)]

    def _application(self) -> Json:
        # GATEWAY_MESSAGE_CONTENT_LIMITED: the portal switch is on (an app in < 100 guilds).
        flags = (1 << 19) if self.allowed_privileged_intents & INTENT_MESSAGE_CONTENT else 0
        return {"id": self.application_id, "name": "wakeline", "icon": None, "description": "",
                "summary": "", "rpc_origins": [], "bot_public": False,
                "bot_require_code_grant": False, "verify_key": "0" * 64, "team": None,
                "flags": flags, "interactions_endpoint_url": None,
                "owner": self._users[self.owner_id], "bot": self._users[self.bot_id]}

    def _guild(self) -> Json:
        channels = [c for c in self._channels.values() if c["type"] not in THREAD_TYPES]
        threads = [c for c in self._channels.values()
                   if c["type"] in THREAD_TYPES and not c["thread_metadata"]["archived"]]
        return {"id": self.guild_id, "name": "wakeline test guild", "icon": None,
                "owner_id": self.owner_id, "roles": self._roles(), "emojis": [], "stickers": [],
                "features": [], "member_count": 2, "large": False, "unavailable": False,
                "joined_at": self._guild_joined_at, "verification_level": 0,
                "default_message_notifications": 0, "explicit_content_filter": 0,
                "afk_timeout": 300, "mfa_level": 0, "nsfw_level": 0, "premium_tier": 0,
                "preferred_locale": "en-US", "system_channel_id": None,
                "members": [{**self._member(self.bot_id), "user": self._users[self.bot_id]}],
                "channels": copy.deepcopy(channels), "threads": copy.deepcopy(threads),
                "presences": [], "voice_states": [], "stage_instances": [],
                "guild_scheduled_events": [], "soundboard_sounds": []}

    # ---------------------------------------------------------------- test API: state

    def add_text_channel(self, name: str) -> Json:
        """Create a text channel (type 0) in the guild; dispatch CHANNEL_CREATE."""
        return self._on_loop(self._add_text_channel, name)

    def _add_text_channel(self, name: str) -> Json:
        channel: Json = {
            "id": self._next_id(), "type": TEXT_CHANNEL, "guild_id": self.guild_id,
            "name": name, "position": len(self._channels), "parent_id": None, "topic": None,
            "nsfw": False, "last_message_id": None, "rate_limit_per_user": 0,
            "permission_overwrites": [], "flags": 0, "default_auto_archive_duration": 1440}
        self._channels[channel["id"]] = channel
        self._messages[channel["id"]] = []
        self._dispatch("CHANNEL_CREATE", channel, INTENT_GUILDS)
        return copy.deepcopy(channel)

    def add_thread(self, parent_id: str, name: str, *, type: int = PUBLIC_THREAD,
                   archived: bool = False, locked: bool = False) -> Json:
        """Create a thread as a person (the guild's owner) would; THREAD_CREATE."""
        return self._on_loop(self._add_thread, parent_id, name, type, archived, locked,
                             self.owner_id)

    def _add_thread(self, parent_id: str, name: str, type_: int, archived: bool, locked: bool,
                    owner_id: str, duration: int | None = None) -> Json:
        parent = self._channels.get(parent_id)
        if parent is None:
            raise unknown_channel()
        thread: Json = {
            "id": self._next_id(), "type": type_, "guild_id": self.guild_id,
            "parent_id": parent_id, "owner_id": owner_id, "name": name,
            "last_message_id": None, "message_count": 0, "member_count": 1,
            "total_message_sent": 0, "rate_limit_per_user": 0, "flags": 0,
            "thread_metadata": {
                "archived": archived, "locked": locked, "archive_timestamp": self._iso(),
                "auto_archive_duration": duration or parent["default_auto_archive_duration"],
                "create_timestamp": self._iso()}}
        if type_ == PRIVATE_THREAD:
            thread["thread_metadata"]["invitable"] = True
        self._channels[thread["id"]] = thread
        self._messages[thread["id"]] = []
        self._dispatch("THREAD_CREATE", {**thread, "newly_created": True}, INTENT_GUILDS)
        if type_ != PRIVATE_THREAD:
            # Discord posts a THREAD_CREATED (type 18) message in the parent channel for a
            # public thread started without a message; content is the thread's name.
            self._add_message(parent, owner_id, name, type_=18,
                              reference={"channel_id": thread["id"], "guild_id": self.guild_id})
        return copy.deepcopy(thread)

    def update_thread(self, thread_id: str, **fields: Any) -> Json:
        """Change a thread as a person would (`archived`, `locked`, `name`); THREAD_UPDATE."""
        return self._on_loop(self._update_thread, thread_id, fields)

    def _update_thread(self, thread_id: str, fields: Json) -> Json:
        thread = self._channels.get(thread_id)
        if thread is None or thread["type"] not in THREAD_TYPES:
            raise unknown_channel()
        meta = thread["thread_metadata"]
        for key in ("archived", "locked", "auto_archive_duration", "invitable"):
            if key in fields:
                if key == "archived" and bool(fields[key]) != meta["archived"]:
                    meta["archive_timestamp"] = self._iso()
                meta[key] = fields[key]
        if "name" in fields:
            thread["name"] = fields["name"]
        self._dispatch("THREAD_UPDATE", thread, INTENT_GUILDS)
        return copy.deepcopy(thread)

    def delete_channel(self, channel_id: str) -> Json:
        """Delete a channel or thread as a person would; THREAD_DELETE / CHANNEL_DELETE."""
        return self._on_loop(self._remove_channel, channel_id)

    def _remove_channel(self, channel_id: str) -> Json:
        channel = self._channels.pop(channel_id, None)
        if channel is None:
            raise unknown_channel()
        self._messages.pop(channel_id, None)
        if channel["type"] in THREAD_TYPES:
            self._dispatch("THREAD_DELETE", {"id": channel_id, "guild_id": self.guild_id,
                                             "parent_id": channel["parent_id"],
                                             "type": channel["type"]}, INTENT_GUILDS)
        else:
            for child in [c for c in self._channels.values() if c.get("parent_id") == channel_id
                          and c["type"] in THREAD_TYPES]:
                self._channels.pop(child["id"])
                self._messages.pop(child["id"], None)
            self._dispatch("CHANNEL_DELETE", channel, INTENT_GUILDS)
        return copy.deepcopy(channel)

    def post_user_message(self, channel_id: str, author_id: str, content: str, *,
                          username: str | None = None,
                          attachments: list[str] | None = None) -> Json:
        """A person (not a bot) posts `content` in a channel or thread; MESSAGE_CREATE.

        `attachments` are file names, each attached as Discord shows an upload (id, url,
        size, content type). Like Discord, a message in an archived (unlocked) thread
        unarchives it first. Returns the message as REST shows it.
        """
        return self._on_loop(self._post_user_message, channel_id, author_id, content, username,
                             attachments or [])

    def _post_user_message(self, channel_id: str, author_id: str, content: str,
                           username: str | None, attachments: list[str]) -> Json:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise unknown_channel()
        self._users.setdefault(author_id, self._user(author_id, username or f"user{author_id}"))
        if channel["type"] in THREAD_TYPES and channel["thread_metadata"]["archived"]:
            if channel["thread_metadata"]["locked"]:
                raise DiscordError(400, 50083,
                                   "Operation cannot be performed on an archived thread")
            self._update_thread(channel_id, {"archived": False})
        files = [{"id": (file_id := self._next_id()), "filename": name, "size": 1234,
                  "url": f"https://cdn.discordapp.com/attachments/{channel_id}/{file_id}/{name}",
                  "proxy_url": f"https://media.discordapp.net/attachments/{channel_id}/"
                               f"{file_id}/{name}",
                  "content_type": "text/plain"} for name in attachments]
        return self._add_message(channel, author_id, content, attachments=files)

    def set_role_permissions(self, role: str, permissions: int) -> None:
        """Change a role's permissions (`"everyone"` or `"bot"`), as a server admin would."""
        role_id = self.guild_id if role == "everyone" else self.bot_role_id
        self._on_loop(self._role_permissions.__setitem__, role_id, permissions)

    def set_overwrites(self, channel_id: str, overwrites: list[Json]) -> None:
        """A channel's permission overwrites (`{"id", "type", "allow", "deny"}`, as strings)."""
        def put() -> None:
            self._channels[channel_id]["permission_overwrites"] = overwrites

        self._on_loop(put)

    def channel(self, channel_id: str) -> Json | None:
        """The stored channel or thread, or None once deleted."""
        return self._on_loop(lambda: copy.deepcopy(self._channels.get(channel_id)))

    def messages(self, channel_id: str) -> list[Json]:
        """Messages of a channel or thread, oldest first (REST shape)."""
        return self._on_loop(lambda: copy.deepcopy(self._messages.get(channel_id, [])))

    def message(self, channel_id: str, message_id: str) -> Json:
        """One message as it stands now (REST shape)."""
        return self._on_loop(lambda: copy.deepcopy(self._find_message(channel_id, message_id)))

    def click(self, channel_id: str, message_id: str, custom_id: str, user_id: str, *,
              username: str | None = None, bot: bool = False,
              permissions: int | None = None, stale: bool = False) -> Interaction:
        """A person (or, with `bot`, a bot) clicks a button of a message: INTERACTION_CREATE
        (type 3) to every session. Returns the interaction, whose `callbacks` fill in.

        Discord only takes a click on an enabled button the message shows; `stale` sends one
        anyway, as a client still showing the message before an edit (or a forger) does.
        `permissions` is the clicker's in the channel (default: everyone's in the guild).
        """
        return self._on_loop(self._click, channel_id, message_id, custom_id, user_id, username,
                             bot, permissions, stale)

    def _click(self, channel_id: str, message_id: str, custom_id: str, user_id: str,
               username: str | None, bot: bool, permissions: int | None,
               stale: bool) -> Interaction:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise unknown_channel()
        message = self._find_message(channel_id, message_id)
        buttons = [b for row in message["components"] for b in row.get("components", [])]
        if not stale and not any(b.get("custom_id") == custom_id and not b.get("disabled")
                                 for b in buttons):
            raise AssertionError(f"no enabled button {custom_id!r} on message {message_id}")
        user = self._users.setdefault(user_id, self._user(user_id, username or f"user{user_id}",
                                                          bot=bot))
        allowed = EVERYONE_PERMISSIONS if permissions is None else permissions
        interaction = Interaction(self._next_id(), "aW50ZXJhY3Rpb246" + hashlib.sha1(
            self._next_id().encode()).hexdigest(), channel_id, message_id, user_id, custom_id,
            time.monotonic())
        self._interactions[interaction.id] = interaction
        payload: Json = {
            "id": interaction.id, "application_id": self.application_id,
            "type": MESSAGE_COMPONENT, "token": interaction.token, "version": 1,
            "data": {"custom_id": custom_id, "component_type": BUTTON},
            "guild_id": self.guild_id,
            "guild": {"id": self.guild_id, "locale": "en-US", "features": []},
            "channel_id": channel_id, "channel": copy.deepcopy(channel),
            "member": {**self._member(user_id), "user": user, "permissions": str(allowed)},
            "message": {**copy.deepcopy(message), "guild_id": self.guild_id},
            "app_permissions": str(EVERYONE_PERMISSIONS | BOT_ROLE_PERMISSIONS),
            "locale": "en-US", "guild_locale": "en-US", "entitlements": [],
            "authorizing_integration_owners": {"0": self.guild_id}, "context": 0,
            "attachment_size_limit": 10_485_760}
        self._dispatch("INTERACTION_CREATE", payload, 0)
        return interaction

    @property
    def interactions(self) -> list[Interaction]:
        """Every click so far, oldest first, with the callbacks each got."""
        return self._on_loop(lambda: [copy.deepcopy(i) for i in self._interactions.values()])

    def _add_message(self, channel: Json, author_id: str, content: str, *, type_: int = 0,
                     reference: Json | None = None, nonce: Any = None,
                     attachments: list[Json] | None = None,
                     components: list[Json] | None = None) -> Json:
        mentions = [self._users[uid] for uid in re.findall(r"<@!?(\d+)>", content)
                    if uid in self._users]
        message: Json = {
            "id": self._next_id(), "type": type_, "channel_id": channel["id"],
            "author": self._users[author_id], "content": content, "timestamp": self._iso(),
            "edited_timestamp": None, "tts": False, "mention_everyone": False,
            "mentions": mentions, "mention_roles": [], "attachments": attachments or [],
            "embeds": [],
            "components": components or [], "pinned": False, "flags": 0}
        if reference is not None:
            message["message_reference"] = reference
        if nonce is not None:
            message["nonce"] = nonce
        self._messages[channel["id"]].append(message)
        channel["last_message_id"] = message["id"]
        if channel["type"] in THREAD_TYPES:
            channel["message_count"] += 1
            channel["total_message_sent"] += 1
        event = {**message, "guild_id": self.guild_id, "member": self._member(author_id)}
        self._dispatch("MESSAGE_CREATE", event, INTENT_GUILD_MESSAGES, self._visible_content)
        return copy.deepcopy(message)

    def _visible_content(self, session: _Session, data: Json) -> Json:
        # Without MESSAGE_CONTENT, Discord blanks others' messages unless they mention the bot.
        if session.intents & INTENT_MESSAGE_CONTENT or data["author"]["id"] == self.bot_id:
            return data
        if any(user["id"] == self.bot_id for user in data["mentions"]):
            return data
        return {**data, "content": "", "embeds": [], "attachments": [], "components": []}

    # ---------------------------------------------------------------- test API: REST record

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every REST request so far, oldest first."""
        return self._on_loop(lambda: list(self._requests))

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        """Recorded requests with this method whose path matches the glob `path`."""
        return [r for r in self.requests
                if r.method == method.upper() and fnmatch.fnmatchcase(r.path, path)]

    def rate_limit_next(self, method: str | None, path: str, *, retry_after: float = 0.25,
                        is_global: bool = False, times: int = 1) -> None:
        """Answer the next `times` matching requests 429, as Discord does (glob `path`)."""
        scope = "global" if is_global else "user"
        retry_after = _seconds(retry_after)
        body = {"message": "You are being rate limited.", "retry_after": retry_after,
                "global": is_global}
        headers = {"Retry-After": str(math.ceil(retry_after)), "X-RateLimit-Scope": scope,
                   "X-RateLimit-Limit": str(self.rate_limit), "X-RateLimit-Remaining": "0",
                   "X-RateLimit-Reset-After": f"{retry_after:.3f}",
                   "X-RateLimit-Reset": f"{self._clock() + retry_after:.3f}"}
        if is_global:
            headers["X-RateLimit-Global"] = "true"
        self._on_loop(self._scripts.append,
                      _Scripted(method and method.upper(), path, 429, body, headers, times))

    def clear_scripts(self) -> None:
        """Forget every scripted answer not given yet: Discord answers normally again."""
        self._on_loop(self._scripts.clear)

    def fail_next(self, method: str | None, path: str, status: int, body: Json | None = None,
                  *, times: int = 1) -> None:
        """Answer the next `times` matching requests with `status` (e.g. a 500 or 502)."""
        answer = body if body is not None else {"message": f"{status}: scripted", "code": 0}
        self._on_loop(self._scripts.append,
                      _Scripted(method and method.upper(), path, status, answer, {}, times))

    # ---------------------------------------------------------------- test API: Gateway

    @property
    def identifies(self) -> list[Json]:
        """The `d` of every IDENTIFY received (token, intents, properties, shard...)."""
        return self._on_loop(lambda: [p["d"] for p in self._received if p.get("op") == 2])

    @property
    def resumes(self) -> list[Json]:
        """The `d` of every RESUME received (token, session_id, seq)."""
        return self._on_loop(lambda: [p["d"] for p in self._received if p.get("op") == 6])

    @property
    def gateway_connections(self) -> list[dict[str, str]]:
        """The query string of every Gateway connection, e.g. {"v": "10", ...}."""
        return self._on_loop(lambda: [dict(q) for q in self._connects])

    @property
    def session_ids(self) -> list[str]:
        """Every session READY started, oldest first."""
        return self._on_loop(lambda: list(self._session_ids))

    def drop_gateway(self, *, resumable: bool = True, code: int = 4000) -> None:
        """Close every Gateway connection with `code`; discord.py will reconnect.

        With `resumable` the sessions live on and buffer dispatches for a RESUME; without, a
        RESUME is answered INVALID_SESSION (`d: false`) and the client must IDENTIFY again.
        """
        self._on_loop(self._drop, resumable, code)

    def _drop(self, resumable: bool, code: int) -> None:
        for conn in list(self._connections):
            conn.dropped = True
            if conn.session is not None:
                conn.session.connection = None
                if not resumable:
                    self._sessions.pop(conn.session.session_id, None)
            conn.outbox.put_nowait(_Close(code, "dropped by the test"))

    def hold_gateway(self) -> Gate:
        """Hold new Gateway connections before HELLO until the returned gate is released."""
        def hold() -> Gate:
            assert self._loop is not None
            self._gate = asyncio.Event()
            return Gate(self._loop, self._gate)

        return self._on_loop(hold)

    def request_reconnect(self) -> None:
        """Send op 7 RECONNECT on every connection, as Discord does before moving a session."""
        def reconnect() -> None:
            for conn in self._connections:
                conn.outbox.put_nowait(self._frame(7, None))

        self._on_loop(reconnect)

    # ---------------------------------------------------------------- Gateway

    @staticmethod
    def _frame(op: int, d: Any, s: int | None = None, t: str | None = None) -> Json:
        return {"op": op, "d": d, "s": s, "t": t}

    def _dispatch(self, event: str, data: Json, intent: int,
                  view: Callable[[_Session, Json], Json] | None = None) -> None:
        """Send a dispatch to every session whose intents ask for it; buffer it for RESUME."""
        for session in self._sessions.values():
            if intent and not session.intents & intent:
                continue
            self._send_dispatch(session, event, view(session, data) if view else data)

    def _send_dispatch(self, session: _Session, event: str, data: Json) -> None:
        session.seq += 1
        frame = self._frame(0, copy.deepcopy(data), session.seq, event)
        session.sent.append(frame)
        if session.connection is not None:
            session.connection.outbox.put_nowait(frame)

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self._connects.append(query)
        compress = query.get("compress")
        if query.get("encoding", "json") != "json" or compress not in (
                None, "zlib-stream", *(["zstd-stream"] if zstandard else [])):
            return _answer({"message": "unsupported encoding or compression", "code": 0},
                           status=400)
        ws = web.WebSocketResponse(max_msg_size=0, autoping=True)
        await ws.prepare(request)
        conn = _Connection(ws, compress)
        self._connections.append(conn)
        writer = asyncio.create_task(self._write(conn))
        try:
            if query.get("v") != "10":
                conn.outbox.put_nowait(_Close(4012, "Invalid API version"))
            else:
                if self._gate is not None:
                    await self._gate.wait()
                    self._gate = None
                conn.outbox.put_nowait(
                    self._frame(10, {"heartbeat_interval": self.heartbeat_interval_ms}))
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    self._receive(conn, msg.data)
                elif msg.type is WSMsgType.BINARY:
                    conn.outbox.put_nowait(_Close(4002, "Decode error"))
        finally:
            self._connections.remove(conn)
            session = conn.session
            if session is not None and session.connection is conn:
                session.connection = None
                # Discord ends a session when the client closes with 1000 or 1001.
                if not conn.dropped and ws.close_code in (1000, 1001):
                    self._sessions.pop(session.session_id, None)
            if not conn.closing:
                writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            conn.finished.set()
        return ws

    async def _write(self, conn: _Connection) -> None:
        """Send the outbox in order; one compressor per connection, shared by its frames."""
        zlib_stream = zlib.compressobj() if conn.compress == "zlib-stream" else None
        zstd_stream = (zstandard.ZstdCompressor().compressobj()
                       if conn.compress == "zstd-stream" and zstandard else None)
        while True:
            item = await conn.outbox.get()
            try:
                if isinstance(item, _Close):
                    conn.closing = True
                    await conn.ws.close(code=item.code, message=item.reason.encode())
                    return
                raw = json.dumps(item, separators=(",", ":")).encode()
                if zlib_stream is not None:
                    await conn.ws.send_bytes(zlib_stream.compress(raw)
                                             + zlib_stream.flush(zlib.Z_SYNC_FLUSH))
                elif zstd_stream is not None:
                    await conn.ws.send_bytes(zstd_stream.compress(raw) + zstd_stream.flush(
                        zstandard.COMPRESSOBJ_FLUSH_BLOCK))
                else:
                    await conn.ws.send_str(raw.decode())
            except (ConnectionError, RuntimeError):
                return  # the client went away; the reader ends the connection

    def _receive(self, conn: _Connection, text: str) -> None:
        try:
            payload = json.loads(text)
            op = payload["op"]
        except (ValueError, KeyError, TypeError):
            conn.outbox.put_nowait(_Close(4002, "Decode error"))
            return
        self._received.append(payload)
        data = payload.get("d")
        if op == 1:
            conn.outbox.put_nowait(self._frame(11, None))
        elif op == 2:
            self._identify(conn, data or {})
        elif op == 6:
            self._resume(conn, data or {})
        elif op in (3, 4, 8):
            pass  # presence, voice state, member requests: recorded, nothing to answer
        else:
            conn.outbox.put_nowait(_Close(4001, "Unknown opcode"))

    def _identify(self, conn: _Connection, data: Json) -> None:
        if data.get("token") != self.token:
            conn.outbox.put_nowait(_Close(4004, "Authentication failed."))
            return
        if conn.session is not None:
            conn.outbox.put_nowait(_Close(4005, "Already authenticated."))
            return
        intents = data.get("intents")
        if not isinstance(intents, int):
            conn.outbox.put_nowait(_Close(4013, "Invalid intent(s)."))
            return
        if intents & PRIVILEGED_INTENTS & ~self.allowed_privileged_intents:
            conn.outbox.put_nowait(_Close(4014, "Disallowed intent(s)."))
            return
        self._starts_left -= 1
        session = _Session(hashlib.sha1(self._next_id().encode()).hexdigest()[:32], intents)
        self._sessions[session.session_id] = session
        self._session_ids.append(session.session_id)
        session.connection = conn
        conn.session = session
        ready: Json = {
            "v": 10, "user": {**self._users[self.bot_id], "verified": True,
                              "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": self.guild_id, "unavailable": True}],
            "session_id": session.session_id, "session_type": "normal",
            "resume_gateway_url": self.gateway_url, "private_channels": [],
            "relationships": [], "presences": [], "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "application": {"id": self.application_id, "flags": self._application()["flags"]},
            "_trace": ["[\"fake-discord\"]"]}
        if "shard" in data:
            ready["shard"] = data["shard"]
        self._send_dispatch(session, "READY", ready)
        self._send_dispatch(session, "GUILD_CREATE", self._guild())

    def _resume(self, conn: _Connection, data: Json) -> None:
        if data.get("token") != self.token:
            conn.outbox.put_nowait(_Close(4004, "Authentication failed."))
            return
        session = self._sessions.get(str(data.get("session_id")))
        if session is None:
            conn.outbox.put_nowait(self._frame(9, False))
            return
        if session.connection is not None and session.connection is not conn:
            session.connection.session = None
        session.connection = conn
        conn.session = session
        seen = data.get("seq") or 0
        for frame in session.sent:
            if frame["s"] > seen:
                conn.outbox.put_nowait(frame)
        self._send_dispatch(session, "RESUMED", {"_trace": ["[\"fake-discord\"]"]})

    # ---------------------------------------------------------------- REST edge

    @web.middleware
    async def _edge(self, request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        """Record, authenticate, script and rate-limit every REST request; add headers."""
        if not request.path.startswith(API_PREFIX):
            return await handler(request)
        raw = await request.read() if request.can_read_body else b""
        record = RecordedRequest(time.monotonic(), request.method,
                                 request.path[len(API_PREFIX):], dict(request.query), None,
                                 dict(request.headers))
        self._requests.append(record)
        resource = request.match_info.route.resource
        template = resource.canonical[len(API_PREFIX):] if resource is not None else None
        headers: dict[str, str] = {}
        response: web.StreamResponse
        try:
            if raw:
                try:
                    record.json = json.loads(raw)
                except ValueError as exc:
                    raise DiscordError(400, 50109,
                                       "The request body contains invalid JSON.") from exc
            if template is None:
                status = 405 if request.match_info.http_exception and \
                    request.match_info.http_exception.status == 405 else 404
                raise DiscordError(status, 0, f"{status}: Not Found" if status == 404
                                   else "405: Method Not Allowed")
            # An interaction's callback is authorised by the interaction's own token, in the
            # path: Discord takes it without the bot's.
            if template not in ("/gateway", "/interactions/{interaction_id}/{token}/callback") \
                    and request.headers.get("Authorization") != f"Bot {self.token}":
                raise DiscordError(401, 0, "401: Unauthorized")
            scripted = self._scripted(request.method, record.path)
            if scripted is not None:
                headers.update(scripted.headers)
                headers.setdefault("X-RateLimit-Bucket", self._bucket_hash(request, template))
                response = _answer(scripted.body, status=scripted.status)
            else:
                headers.update(self._rate_limit(request, template))
                response = await handler(request)
        except DiscordError as error:
            response = _answer(error.body, status=error.status)
            headers.update(error.headers)
        # Discord sits behind Google's load balancer; discord.py reads a 429 without `Via`
        # as a Cloudflare ban and gives up instead of waiting.
        response.headers["Via"] = "1.1 google"
        response.headers.update(headers)
        record.status = response.status
        return response

    def _scripted(self, method: str, path: str) -> _Scripted | None:
        for script in self._scripts:
            if (script.method in (None, method)) and fnmatch.fnmatchcase(path, script.path):
                script.times -= 1
                if script.times <= 0:
                    self._scripts.remove(script)
                return script
        return None

    @staticmethod
    def _bucket_hash(request: web.Request, template: str) -> str:
        return hashlib.sha1(f"{request.method} {template}".encode()).hexdigest()[:16]

    def _rate_limit(self, request: web.Request, template: str) -> dict[str, str]:
        """Count the request in its bucket; 429 past the limit, else the bucket's headers."""
        major = request.match_info.get("channel_id", "")
        key = (request.method, template, major)
        now = time.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None or now - bucket.started >= self.rate_window_s:
            bucket = self._buckets[key] = _Bucket(now)
        reset_after = _seconds(bucket.started + self.rate_window_s - now)
        headers = {"X-RateLimit-Bucket": self._bucket_hash(request, template),
                   "X-RateLimit-Limit": str(self.rate_limit),
                   "X-RateLimit-Reset-After": f"{reset_after:.3f}",
                   "X-RateLimit-Reset": f"{self._clock() + reset_after:.3f}"}
        if bucket.count >= self.rate_limit:
            raise _BucketExhaustedError(reset_after, headers)
        bucket.count += 1
        headers["X-RateLimit-Remaining"] = str(self.rate_limit - bucket.count)
        return headers

    # ---------------------------------------------------------------- REST handlers

    @staticmethod
    async def _body(request: web.Request) -> Json:
        # aiohttp keeps the bytes the edge already read (and found to be valid JSON).
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        return body if isinstance(body, dict) else {}

    _ok = staticmethod(_answer)

    def _channel_or_404(self, request: web.Request) -> Json:
        channel = self._channels.get(request.match_info["channel_id"])
        if channel is None:
            raise unknown_channel()
        return channel

    async def _get_gateway(self, request: web.Request) -> web.Response:
        return self._ok({"url": self.gateway_url})

    async def _get_gateway_bot(self, request: web.Request) -> web.Response:
        return self._ok({"url": self.gateway_url, "shards": 1, "session_start_limit": {
            "total": 1000, "remaining": self._starts_left, "reset_after": 14_400_000,
            "max_concurrency": 1}})

    async def _get_me(self, request: web.Request) -> web.Response:
        return self._ok({**self._users[self.bot_id], "verified": True, "mfa_enabled": False,
                         "flags": 0, "email": None, "locale": "en-US"})

    async def _get_application(self, request: web.Request) -> web.Response:
        return self._ok(self._application())

    def _guild_or_404(self, request: web.Request) -> None:
        if request.match_info["guild_id"] != self.guild_id:
            raise DiscordError(404, 10004, "Unknown Guild")

    async def _get_guild(self, request: web.Request) -> web.Response:
        self._guild_or_404(request)
        guild = self._guild()
        return self._ok({k: guild[k] for k in ("id", "name", "icon", "owner_id", "roles",
                                               "features", "preferred_locale")})

    async def _get_member(self, request: web.Request) -> web.Response:
        self._guild_or_404(request)
        user = self._users.get(request.match_info["user_id"])
        if user is None:
            raise DiscordError(404, 10007, "Unknown Member")
        return self._ok({**self._member(user["id"]), "user": user})

    async def _get_channel(self, request: web.Request) -> web.Response:
        return self._ok(self._channel_or_404(request))

    async def _patch_channel(self, request: web.Request) -> web.Response:
        channel = self._channel_or_404(request)
        body = await self._body(request)
        if "name" in body:
            self._check_name(body["name"])
        if channel["type"] not in THREAD_TYPES:
            for key in ("name", "topic"):
                if key in body:
                    channel[key] = body[key]
            self._dispatch("CHANNEL_UPDATE", channel, INTENT_GUILDS)
            return self._ok(channel)
        if channel["thread_metadata"]["archived"] and body.get("archived") is not False:
            # Discord refuses to edit an archived thread unless the edit unarchives it.
            raise DiscordError(400, 50083, "Operation cannot be performed on an archived thread")
        duration = body.get("auto_archive_duration")
        if duration is not None and duration not in ARCHIVE_DURATIONS:
            raise invalid_form("auto_archive_duration", "BASE_TYPE_CHOICES",
                               f"Value must be one of {set(ARCHIVE_DURATIONS)}.")
        known = ("name", "archived", "locked", "auto_archive_duration", "invitable")
        return self._ok(self._update_thread(channel["id"],
                                            {k: v for k, v in body.items() if k in known}))

    async def _delete_channel(self, request: web.Request) -> web.Response:
        return self._ok(self._remove_channel(self._channel_or_404(request)["id"]))

    @staticmethod
    def _check_name(name: Any) -> None:
        if not isinstance(name, str) or not 1 <= len(name) <= 100:
            raise invalid_form("name", "BASE_TYPE_BAD_LENGTH",
                               "Must be between 1 and 100 in length.")

    @staticmethod
    def _check_components(components: Any) -> list[Json]:
        """Message components as Discord checks them: at most five action rows (type 1), each
        of one to five buttons (type 2) with a label of at most 80 characters and, but for a
        link button, a `custom_id` of 1-100 characters unique in the message."""
        if not isinstance(components, list) or len(components) > 5:
            raise invalid_form("components", "BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length.")
        seen: set[str] = set()
        for row in components:
            buttons = row.get("components") if isinstance(row, dict) else None
            if row.get("type") != ACTION_ROW or not isinstance(buttons, list) \
                    or not 1 <= len(buttons) <= 5:
                raise invalid_form("components", "COMPONENT_LAYOUT_WIDTH_EXCEEDED",
                                   "An action row holds one to five buttons.")
            for button in buttons:
                if not isinstance(button, dict) or button.get("type") != BUTTON \
                        or button.get("style") not in (1, 2, 3, 4, 5, 6):
                    raise invalid_form("components", "UNION_TYPE_CHOICES",
                                       "Value of field \"type\" must be one of (2,).")
                if len(str(button.get("label", ""))) > 80:
                    raise invalid_form("components", "BASE_TYPE_MAX_LENGTH",
                                       "Must be 80 or fewer in length.")
                if button["style"] == LINK_BUTTON_STYLE:
                    continue
                custom_id = button.get("custom_id")
                if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 100:
                    raise invalid_form("components", "BASE_TYPE_BAD_LENGTH",
                                       "Must be between 1 and 100 in length.")
                if custom_id in seen:
                    raise invalid_form("components", "COMPONENT_CUSTOM_ID_DUPLICATED",
                                       "Component custom id cannot be duplicated")
                seen.add(custom_id)
        return copy.deepcopy(components)

    async def _post_thread(self, request: web.Request) -> web.Response:
        parent = self._channel_or_404(request)
        if parent["type"] != TEXT_CHANNEL:
            raise DiscordError(400, 50024, "Cannot execute action on this channel type")
        body = await self._body(request)
        self._check_name(body.get("name"))
        type_ = body.get("type", PRIVATE_THREAD)  # Discord's default in API v9 and v10
        if type_ not in (PUBLIC_THREAD, PRIVATE_THREAD):
            raise invalid_form("type", "BASE_TYPE_CHOICES", "Value must be one of {11, 12}.")
        duration = body.get("auto_archive_duration")
        if duration is not None and duration not in ARCHIVE_DURATIONS:
            raise invalid_form("auto_archive_duration", "BASE_TYPE_CHOICES",
                               f"Value must be one of {set(ARCHIVE_DURATIONS)}.")
        thread = self._add_thread(parent["id"], body["name"], type_, False, False, self.bot_id,
                                  duration)
        return self._ok(thread, status=201)

    async def _post_message(self, request: web.Request) -> web.Response:
        channel = self._channel_or_404(request)
        body = await self._body(request)
        content = body.get("content", "")
        if not isinstance(content, str):
            raise invalid_form("content", "BASE_TYPE_STRING", "Must be a string.")
        if len(content) > MAX_CONTENT:
            raise invalid_form("content", "BASE_TYPE_MAX_LENGTH",
                               f"Must be {MAX_CONTENT} or fewer in length.")
        if not content.strip():
            raise DiscordError(400, 50006, "Cannot send an empty message")
        components = self._check_components(body.get("components", []))
        nonce = body.get("nonce")
        if body.get("enforce_nonce") and nonce is not None:
            # Discord answers a resend of a nonce its author used in the channel (within a few
            # minutes) with the first message, and posts nothing.
            for sent in self._messages[channel["id"]]:
                if sent.get("nonce") == nonce and sent["author"]["id"] == self.bot_id:
                    return self._ok(copy.deepcopy(sent))
        if channel["type"] in THREAD_TYPES and channel["thread_metadata"]["archived"]:
            if channel["thread_metadata"]["locked"]:
                raise DiscordError(400, 50083,
                                   "Operation cannot be performed on an archived thread")
            # Sending in an archived, unlocked thread unarchives it.
            self._update_thread(channel["id"], {"archived": False})
        return self._ok(self._add_message(channel, self.bot_id, content,
                                          nonce=body.get("nonce"), components=components))

    async def _get_messages(self, request: web.Request) -> web.Response:
        channel = self._channel_or_404(request)
        try:
            limit = int(request.query.get("limit", "50"))
            after, before, around = (int(request.query[k]) if k in request.query else None
                                     for k in ("after", "before", "around"))
        except ValueError as exc:
            raise invalid_form("limit", "NUMBER_TYPE_COERCE", "Value is not int.") from exc
        if not 1 <= limit <= 100:
            raise invalid_form("limit", "NUMBER_TYPE_MAX", "Int value should be between 1 "
                               "and 100.")
        stored = self._messages[channel["id"]]  # oldest first
        if after is not None:
            # The `limit` messages right after `after`, answered newest first.
            page = [m for m in stored if int(m["id"]) > after][:limit]
        elif around is not None:
            # Up to half the page before `around`, the rest from it on.
            older = [m for m in stored if int(m["id"]) < around]
            older = older[len(older) - limit // 2:] if limit // 2 else []
            page = older + [m for m in stored if int(m["id"]) >= around][:limit - len(older)]
        else:
            older = [m for m in stored if before is None or int(m["id"]) < before]
            page = older[-limit:]
        return self._ok(list(reversed(page)))


    async def _patch_message(self, request: web.Request) -> web.Response:
        channel = self._channel_or_404(request)
        body = await self._body(request)
        message = self._find_message(channel["id"], request.match_info["message_id"])
        if message["author"]["id"] != self.bot_id:
            raise DiscordError(403, 50005, "Cannot edit a message authored by another user")
        return self._ok(self._edit_message(channel, message, body))

    def _find_message(self, channel_id: str, message_id: str) -> Json:
        found = next((m for m in self._messages.get(channel_id, []) if m["id"] == message_id),
                     None)
        if found is None:
            raise DiscordError(404, 10008, "Unknown Message")
        return found

    def _edit_message(self, channel: Json, message: Json, fields: Json) -> Json:
        """Change a message's content and components (what an edit or an UPDATE_MESSAGE
        callback may change); MESSAGE_UPDATE."""
        if "content" in fields:
            content = fields["content"]
            if not isinstance(content, str) or len(content) > MAX_CONTENT:
                raise invalid_form("content", "BASE_TYPE_MAX_LENGTH",
                                   f"Must be {MAX_CONTENT} or fewer in length.")
            message["content"] = content
        if "components" in fields:
            message["components"] = self._check_components(fields["components"])
        if not message["content"].strip() and not message["components"]:
            raise DiscordError(400, 50006, "Cannot send an empty message")
        message["edited_timestamp"] = self._iso()
        event = {**message, "guild_id": self.guild_id}
        self._dispatch("MESSAGE_UPDATE", event, INTENT_GUILD_MESSAGES, self._visible_content)
        return copy.deepcopy(message)

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        interaction = self._interactions.get(request.match_info["interaction_id"])
        body = await self._body(request)
        record: Json = {"type": body.get("type"), "data": body.get("data"), "status": 0}
        try:
            if interaction is None or interaction.token != request.match_info["token"] \
                    or time.monotonic() - interaction.at > self.interaction_deadline_s:
                raise DiscordError(404, 10062, "Unknown interaction")
            if interaction.answered is not None:
                raise DiscordError(400, 40060, "Interaction has already been acknowledged.")
            kind, data = body.get("type"), body.get("data") or {}
            if kind not in CALLBACK_TYPES or not isinstance(data, dict):
                raise invalid_form("type", "BASE_TYPE_CHOICES", "Value must be one of "
                                   f"{set(CALLBACK_TYPES)}.")
            channel = self._channels.get(interaction.channel_id)
            if channel is None:
                raise unknown_channel()
            if kind == 7:
                self._edit_message(channel, self._find_message(channel["id"],
                                                               interaction.message_id), data)
            elif kind == 4 and not int(data.get("flags", 0)) & EPHEMERAL:
                content = data.get("content", "")
                if not isinstance(content, str) or not content.strip() \
                        or len(content) > MAX_CONTENT:
                    raise invalid_form("content", "BASE_TYPE_BAD_LENGTH",
                                       f"Must be between 1 and {MAX_CONTENT} in length.")
                self._add_message(channel, self.bot_id, content, type_=20,
                                  components=self._check_components(data.get("components", [])))
        except DiscordError as error:
            record["status"] = error.status
            if interaction is not None:
                interaction.callbacks.append(record)
            raise
        record["status"] = 204
        interaction.callbacks.append(record)
        return web.Response(status=204)


class _BucketExhaustedError(DiscordError):
    """A bucket past its limit: Discord's 429 with the bucket's headers."""

    def __init__(self, retry_after: float, headers: dict[str, str]) -> None:
        super().__init__(429, 0, "You are being rate limited.")
        self.body = {"message": "You are being rate limited.", "retry_after": retry_after,
                     "global": False}
        self.headers = {**headers, "X-RateLimit-Remaining": "0", "X-RateLimit-Scope": "user",
                        "Retry-After": str(math.ceil(retry_after))}
