"""The Discord Gateway: discord.py in a thread of its own, with its own asyncio loop.

The only module that imports discord.py (an optional extra), and only imported when a
bot token is configured. It never touches the store or another actor's state: each
message becomes a `ThreadMessage`, each click on a button (an INTERACTION_CREATE of type
3, which discord.py hands to `on_interaction`; wakeline registers no views, so discord.py
answers none itself) a `Click`, and each new session a notice, told to a sink (the
DiscordControl actor's proxy) without waiting.

discord.py 2.7.1 has no per-client setting for either address, so `pointed_at` sets
the class attributes it reads: `Route.BASE` (REST: the login) and
`DiscordWebSocket.DEFAULT_GATEWAY` (the address `GET {api_url}/gateway/bot` named,
which a plain Client never asks for itself). They are process-wide: one Gateway per
process. discord.py reconnects a dropped connection with backoff and RESUMEs; when
Discord refuses the resume it identifies again, `on_ready` fires once more and the
sink catches up over REST. A client that cannot even log in (Discord down) is started
again with backoff here; a refused token or a forbidden intent stops for good.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Protocol, Sequence

with warnings.catch_warnings():
    # discord.py imports the standard library's deprecated `audioop` (voice), which wakeline
    # never uses; that one warning is silenced, at import only.
    warnings.filterwarnings("ignore", message="'audioop' is deprecated",
                            category=DeprecationWarning)
    import discord
    import yarl
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

from wakeline.errors import DiscordUnauthorized
from wakeline.providers.discord.buttons import Click
from wakeline.providers.discord.messages import PERSON_TYPES, ThreadMessage, attachment_of

log = logging.getLogger(__name__)

INTENTS = discord.Intents(guilds=True, guild_messages=True, message_content=True)
RETRY_SECONDS: tuple[float, ...] = (1, 2, 5, 10, 30, 60)
HEALTHY_SECONDS = 60.0  # a client that lived this long starts the backoff over
STOP_TIMEOUT_SECONDS = 30.0
# The loop's blocking calls (the Gateway's address, aiohttp's DNS lookups) run on this many
# named threads, not on asyncio's default pool (unnamed, up to 32 with the CPUs).
GATEWAY_IO_THREADS = 1


class Sink(Protocol):
    """Who the Gateway tells (the DiscordControl proxy: each call is a non-blocking tell)."""

    def message(self, message: ThreadMessage) -> None: ...
    def click(self, click: Click) -> None: ...
    def disconnected(self) -> None: ...
    def ready(self) -> None: ...
    def resumed(self) -> None: ...
    def failed(self, reason: str) -> None: ...


@contextmanager
def pointed_at(api_url: str, gateway_url: str) -> Iterator[None]:
    """discord.py's REST at `api_url` and its Gateway at `gateway_url`, restored after."""
    saved = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    Route.BASE = api_url.rstrip("/")
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
    try:
        yield
    finally:
        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = saved


def thread_message(message: discord.Message) -> ThreadMessage:
    """A discord.py message, typed: the channel id is the key (a thread discord.py has not
    cached arrives as another channel class, with the same id)."""
    author = message.author
    return ThreadMessage(
        thread_id=str(message.channel.id), message_id=str(message.id),
        guild_id=str(message.guild.id) if message.guild is not None else None,
        author_id=str(author.id), author_name=getattr(author, "global_name", None) or author.name,
        is_bot=bool(author.bot), is_system=message.type.value not in PERSON_TYPES,
        content=message.content or "",
        attachments=tuple(attachment_of({"filename": a.filename, "url": a.url, "size": a.size,
                                         "content_type": a.content_type})
                          for a in message.attachments))


def click_of(interaction: discord.Interaction) -> Click | None:
    """A click on a message's component, typed; None for any other interaction. The channel
    is the one the interaction names (discord.py builds it even when not cached), else the
    message's."""
    if interaction.type is not discord.InteractionType.component:
        return None
    data = interaction.data or {}
    message = interaction.message
    channel = interaction.channel or (message.channel if message is not None else None)
    user = interaction.user
    return Click(
        interaction_id=str(interaction.id), token=interaction.token,
        custom_id=str(data.get("custom_id", "")),
        channel_id=str(channel.id) if channel is not None else "",
        message_id=str(message.id) if message is not None else None,
        guild_id=str(interaction.guild_id) if interaction.guild_id else None,
        user_id=str(user.id) if user else "", is_bot=bool(getattr(user, "bot", True)),
        can_post=bool(interaction.permissions.send_messages_in_threads))


class _Client(discord.Client):
    """A plain discord.py Client that tells the sink and nothing else."""

    def __init__(self, sink: Sink, identify_wait_seconds: float | None,
                 guild_ready_timeout: float) -> None:
        # No voice, no message or member cache: wakeline reads messages as they come.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        super().__init__(intents=INTENTS, guild_ready_timeout=guild_ready_timeout,
                         max_messages=None, chunk_guilds_at_startup=False,
                         member_cache_flags=discord.MemberCacheFlags.none())
        self._sink = sink
        self._identify_wait = identify_wait_seconds

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """Events go on until the client closes. discord.py still dispatches `disconnect`
        once `close()` has begun, by when its loop may be gone: that event's coroutine would
        never run (and warn)."""
        if not self.is_closed():
            super().dispatch(event, *args, **kwargs)

    async def on_ready(self) -> None:
        """A new session: the sink catches up on what it may have missed."""
        self._sink.ready()

    async def on_resumed(self) -> None:
        """The session went on; Discord replayed what was missed."""
        self._sink.resumed()

    async def on_disconnect(self) -> None:
        """The connection dropped: until the session resumes or is caught up, the sink
        holds what comes."""
        self._sink.disconnected()

    async def on_message(self, message: discord.Message) -> None:
        """Every guild message goes to the sink, which decides what counts."""
        if message.guild is not None:
            self._sink.message(thread_message(message))

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A click on a button goes to the sink, which decides and answers it."""
        click = click_of(interaction)
        if click is not None:
            self._sink.click(click)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py waits 5 s before every IDENTIFY but the first (Discord's identify
        limit); `identify_wait_seconds` changes that wait (tests against a fake use 0)."""
        if self._identify_wait is None:
            await super().before_identify_hook(shard_id, initial=initial)
        elif not initial and self._identify_wait > 0:
            await asyncio.sleep(self._identify_wait)


class Gateway:
    """Runs the Gateway client in its own thread; `start` and `stop` from the composition root.

    Args:
        token: the bot token (only ever handed to discord.py).
        api_url: `discord.api_url`.
        find_gateway: asks `GET {api_url}/gateway/bot` for the Gateway address (blocking;
            run off the loop).
        sink: who is told of messages and sessions.
    """

    def __init__(self, token: str, api_url: str, find_gateway: Callable[[], str], sink: Sink, *,
                 retry_seconds: Sequence[float] = RETRY_SECONDS,
                 identify_wait_seconds: float | None = None,
                 guild_ready_timeout: float = 2.0) -> None:
        self._token = token
        self._api_url = api_url
        self._find_gateway = find_gateway
        self._sink = sink
        self._retry = tuple(retry_seconds)
        self._identify_wait = identify_wait_seconds
        self._guild_ready_timeout = guild_ready_timeout
        self._thread = threading.Thread(target=self._run, name="discord-gateway", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._client: _Client | None = None
        self._started = threading.Event()

    def start(self) -> None:
        """Start the thread; it connects on its own, retrying while Discord cannot be reached."""
        self._thread.start()
        self._started.wait(10)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Close the client (its websocket and heartbeat thread) and end the thread."""
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout)
        self._thread.join(timeout)

    async def _shutdown(self) -> None:
        assert self._stopping is not None
        self._stopping.set()
        if self._client is not None:
            await self._client.close()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        # asyncio.run shuts it down with the loop.
        self._loop.set_default_executor(ThreadPoolExecutor(
            GATEWAY_IO_THREADS, thread_name_prefix="discord-gateway-io"))
        self._stopping = asyncio.Event()
        self._started.set()
        attempt = 0
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            began = loop.time()
            reason = await self._connect_once()
            if reason is not None or self._stopping.is_set():
                if reason is not None:
                    self._sink.failed(reason)
                return
            if loop.time() - began > HEALTHY_SECONDS:
                attempt = 0  # it worked for a while: start the backoff over
            wait = self._retry[min(attempt, len(self._retry) - 1)]
            attempt += 1
            try:
                await asyncio.wait_for(self._stopping.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def _connect_once(self) -> str | None:
        """One client's life; a reason when it must not be tried again, else None."""
        try:
            url = await asyncio.get_running_loop().run_in_executor(None, self._find_gateway)
        except DiscordUnauthorized:
            return "the bot token was refused: fix discord.token_file (or $WAKELINE_DISCORD_TOKEN)"
        except Exception as exc:  # Discord down, a 5xx: logged, tried again
            log.warning("discord gateway address not found", extra={"error": _name(exc)})
            return None
        assert self._stopping is not None
        if self._stopping.is_set():
            return None  # stopped while the address was being asked for
        client = self._client = _Client(self._sink, self._identify_wait, self._guild_ready_timeout)
        try:
            with pointed_at(self._api_url, url):
                await client.start(self._token)
        except discord.LoginFailure:
            return "the bot token was refused: fix discord.token_file (or $WAKELINE_DISCORD_TOKEN)"
        except discord.PrivilegedIntentsRequired:
            return ("the message content intent is off: turn it on for the bot in Discord's "
                    "developer portal (Bot > Privileged Gateway Intents)")
        except Exception as exc:  # a connection that could not be made: tried again
            log.warning("discord gateway disconnected", extra={"error": _name(exc)})
        finally:
            await client.close()
            self._client = None
        return None


def _name(exc: BaseException) -> Any:
    # The class only: a message could quote a request, and a request carries the token.
    return exc.__class__.__name__
