"""The fake Discord (`tests/fakes/discord.py`) against the real discord.py client.

The client runs as the app will run it: in its own thread with its own asyncio loop, its REST
pointed at the fake's `/api/v10` and its Gateway at the address `GET /gateway/bot` names
(`gateway_url_from` and `discord_py_at` below are the technique to copy). The app's own REST
calls go through `requests`, as here.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import requests

with warnings.catch_warnings():
    # discord.py 2.7.1 imports the standard library's `audioop` (voice), deprecated on Python
    # 3.11 and 3.12; warnings are errors here, so ignore that one warning, at import only.
    warnings.filterwarnings("ignore", message="'audioop' is deprecated",
                            category=DeprecationWarning)
    # discord.py is an optional extra (`make test` installs it): without it this module skips.
    pytest.importorskip("discord")
    import discord
    import yarl  # discord.py's (aiohttp's) own dependency
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

from tests.fakes.discord import INTENT_MESSAGE_CONTENT, PRIVILEGED_INTENTS, FakeDiscord
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

T = TypeVar("T")
TOKEN = "test-discord-bot-token"
INTENTS = discord.Intents(guilds=True, guild_messages=True, message_content=True)
PERSON = "555000000000000001"


def gateway_url_from(api_url: str, token: str) -> str:
    """The Gateway address, as the app finds it: `GET {api_url}/gateway/bot`."""
    answer = requests.get(f"{api_url}/gateway/bot", timeout=10,
                          headers={"Authorization": f"Bot {token}"})
    answer.raise_for_status()
    return str(answer.json()["url"])


@contextmanager
def discord_py_at(api_url: str, gateway_url: str) -> Iterator[None]:
    """Point discord.py 2.7.1's REST at `api_url` and its Gateway at `gateway_url`.

    discord.py has no per-client option for either: every REST route is built from the class
    attribute `Route.BASE`, and a Gateway connection goes to the class attribute
    `DiscordWebSocket.DEFAULT_GATEWAY` unless discord.py holds an address of its own (READY's
    `resume_gateway_url`, kept for RESUMEs; INVALID_SESSION resets it to DEFAULT_GATEWAY).
    Both are process-wide, so they are restored when the block ends.
    """
    saved = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    Route.BASE = api_url.rstrip("/")
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
    try:
        yield
    finally:
        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = saved


@dataclass(frozen=True)
class Seen:
    """What `on_message` saw, copied out of the client's thread."""

    message_id: int
    channel_id: int
    channel_kind: str  # the class discord.py resolved the channel to: Thread, TextChannel...
    message_type: str
    author_id: int
    author_bot: bool
    content: str


class RecordingClient(discord.Client):
    """A plain discord.py Client that records what reaches its event handlers."""

    def __init__(self, intents: discord.Intents = INTENTS) -> None:
        # guild_ready_timeout: discord.py waits this long after the last GUILD_CREATE before
        # on_ready (2 s by default); the fake sends its one guild at once.
        super().__init__(intents=intents, guild_ready_timeout=0.1)
        self.seen: list[Seen] = []
        self.readies = 0
        self.resumes = 0

    async def on_ready(self) -> None:
        """Count READYs: a fresh IDENTIFY (new session) dispatches on_ready again."""
        self.readies += 1

    async def on_resumed(self) -> None:
        """Count RESUMEDs: the session went on, nothing was missed."""
        self.resumes += 1

    async def on_message(self, message: discord.Message) -> None:
        """Record every message, the bot's own included (the app filters those)."""
        self.seen.append(Seen(message.id, message.channel.id, type(message.channel).__name__,
                              message.type.name, message.author.id, message.author.bot,
                              message.content))

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """Identify at once: discord.py's default sleeps 5 s before every IDENTIFY but the
        first, for Discord's identify rate limit, which the fake does not have."""


class ClientThread:
    """A discord.py client in its own thread and asyncio loop, as the app will run it."""

    def __init__(self, make_client: Callable[[], RecordingClient], token: str = TOKEN) -> None:
        self._make_client = make_client
        self._token = token
        self._created = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),),
                                        name="discord-client", daemon=True)
        self.client: RecordingClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None

    def start(self) -> ClientThread:
        """Start the thread; the client logs in and connects there."""
        self._thread.start()
        assert self._created.wait(10), "the client thread did not start"
        return self

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.client = self._make_client()
        self._created.set()
        try:
            await self.client.start(self._token)
        except Exception as exc:  # noqa: BLE001 - kept for the test to assert on
            self.error = exc
        finally:
            await self.client.close()

    def call(self, make: Callable[[RecordingClient], Coroutine[Any, Any, T]]) -> T:
        """Run `make(client)` on the client's loop and return its result."""
        assert self.loop is not None and self.client is not None
        return asyncio.run_coroutine_threadsafe(make(self.client), self.loop).result(30)

    def stop(self) -> None:
        """Close the client (its HTTP session, websocket and heartbeat thread); end the thread."""
        if self._thread.is_alive() and self.loop is not None and self.client is not None:
            asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(30)
        self._thread.join(30)
        assert not self._thread.is_alive(), "the client thread did not end"
        wait_until(lambda: not [t for t in threading.enumerate()
                                if t.name.startswith("keep-alive-handler")],
                   message="discord.py's heartbeat threads ended")


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeDiscord]:
    """A started fake Discord, stopped after the test; options by indirect parametrization."""
    server = FakeDiscord(token=TOKEN, **getattr(request, "param", {})).start()
    yield server
    server.stop()


@pytest.fixture
def connect(fake: FakeDiscord) -> Iterator[Callable[..., ClientThread]]:
    """Connect a RecordingClient to the fake (waiting for on_ready unless told not to)."""
    runners: list[ClientThread] = []
    with discord_py_at(fake.api_url, gateway_url_from(fake.api_url, TOKEN)):

        def start(make: Callable[[], RecordingClient] = RecordingClient,
                  ready: bool = True) -> ClientThread:
            runner = ClientThread(make).start()
            runners.append(runner)
            if ready:
                wait_until(lambda: runner.client is not None and runner.client.readies >= 1,
                           message="on_ready")
            return runner

        yield start
        for runner in runners:
            runner.stop()


def headers() -> dict[str, str]:
    """The app's REST headers: the bot token, as discord.py sends it."""
    return {"Authorization": f"Bot {TOKEN}"}


def seen_in(runner: ClientThread, channel_id: str) -> list[Seen]:
    """Messages the client saw in one channel or thread."""
    assert runner.client is not None
    return [s for s in list(runner.client.seen) if s.channel_id == int(channel_id)]


# ----------------------------------------------------------------------------- (a) connecting


def test_the_client_connects_to_the_gateway_that_gateway_bot_names(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    runner = connect()

    async def state(client: discord.Client) -> tuple[Any, ...]:
        guild = client.get_guild(int(fake.guild_id))
        assert client.user is not None and guild is not None
        return client.user.id, guild.unavailable, [c.id for c in guild.text_channels]

    user_id, unavailable, channels = runner.call(state)
    assert (user_id, unavailable, channels) == (int(fake.bot_id), False, [int(fake.channel_id)])
    # Our GET /gateway/bot, then discord.py's login; a plain Client never asks /gateway/bot.
    assert [(r.method, r.path) for r in fake.requests] == [
        ("GET", "/gateway/bot"), ("GET", "/users/@me"), ("GET", "/oauth2/applications/@me")]
    assert all(r.headers["Authorization"] == f"Bot {TOKEN}" for r in fake.requests)
    # What discord.py 2.7.1 asks of the Gateway: zlib-stream, or zstd-stream whenever the
    # zstandard package is importable (discord.py[speed] installs it); the fake serves both.
    compress = "zstd-stream" if importlib.util.find_spec("zstandard") else "zlib-stream"
    assert fake.gateway_connections == [{"v": "10", "encoding": "json", "compress": compress}]
    identify = fake.identifies[0]
    assert identify["token"] == TOKEN and identify["properties"]["browser"] == "discord.py"


# ----------------------------------------------------------------------------- (b) messages


def test_messages_in_threads_reach_on_message_with_the_thread_as_channel(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    seeded = fake.add_thread(fake.channel_id, "[ENG-1] seeded before connecting")
    runner = connect()
    # A thread made after connecting reaches discord.py's cache by THREAD_CREATE.
    made = requests.post(f"{fake.api_url}/channels/{fake.channel_id}/threads", timeout=10,
                         headers=headers(), json={"name": "[ENG-2] made", "type": 11}).json()

    person = fake.post_user_message(seeded["id"], PERSON, "hello from a person")
    fake.post_user_message(made["id"], PERSON, "!status")
    mine = requests.post(f"{fake.api_url}/channels/{made['id']}/messages", timeout=10,
                         headers=headers(), json={"content": "an answer"}).json()

    wait_until(lambda: len(seen_in(runner, made["id"])) == 2, message="both messages in made")
    [first] = wait_until(lambda: seen_in(runner, seeded["id"]), message="the seeded thread's")
    assert first == Seen(int(person["id"]), int(seeded["id"]), "Thread", "default",
                         int(PERSON), False, "hello from a person")
    by_person, by_bot = seen_in(runner, made["id"])
    assert (by_person.channel_kind, by_person.author_bot, by_person.content) == \
        ("Thread", False, "!status")
    assert (by_bot.message_id, by_bot.author_id, by_bot.author_bot, by_bot.content) == \
        (int(mine["id"]), int(fake.bot_id), True, "an answer")
    # A public thread made without a message announces itself in the parent channel.
    [announce] = wait_until(lambda: seen_in(runner, fake.channel_id), message="THREAD_CREATED")
    assert (announce.message_type, announce.author_bot, announce.content) == \
        ("thread_created", True, "[ENG-2] made")


def test_discord_py_caches_only_active_threads(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    runner = connect()
    thread = requests.post(f"{fake.api_url}/channels/{fake.channel_id}/threads", timeout=10,
                           headers=headers(), json={"name": "cached?", "type": 11}).json()

    async def cached(client: discord.Client) -> bool:
        guild = client.get_guild(int(fake.guild_id))
        return guild is not None and guild.get_thread(int(thread["id"])) is not None

    wait_until(lambda: runner.call(cached), message="THREAD_CREATE cached the thread")
    requests.patch(f"{fake.api_url}/channels/{thread['id']}", json={"archived": True},
                   headers=headers(), timeout=10)
    # discord.py drops a thread from its cache when THREAD_UPDATE says it is archived...
    wait_until(lambda: not runner.call(cached), message="the archived thread leaving the cache")
    # ...and a person's message unarchives it (THREAD_UPDATE first), so it is a Thread again.
    fake.post_user_message(thread["id"], PERSON, "wake up")
    [seen] = wait_until(lambda: seen_in(runner, thread["id"]), message="the message")
    assert seen.channel_kind == "Thread" and runner.call(cached)
    fake.delete_channel(thread["id"])
    wait_until(lambda: not runner.call(cached), message="THREAD_DELETE")


# ----------------------------------------------------------------------------- (c) REST


def test_a_thread_lives_and_dies_through_rest(fake: FakeDiscord) -> None:
    api = fake.api_url
    created = requests.post(f"{api}/channels/{fake.channel_id}/threads", headers=headers(),
                            json={"name": "[ENG-123] Fix it", "type": 11,
                                  "auto_archive_duration": 10080}, timeout=10)
    assert created.status_code == 201
    thread = created.json()
    assert (thread["type"], thread["parent_id"], thread["guild_id"]) == \
        (11, fake.channel_id, fake.guild_id)
    assert thread["thread_metadata"]["archived"] is False
    assert thread["thread_metadata"]["auto_archive_duration"] == 10080
    # Without `type`, Discord (and the fake) make a private thread.
    private = requests.post(f"{api}/channels/{fake.channel_id}/threads", headers=headers(),
                            json={"name": "no type"}, timeout=10).json()
    assert private["type"] == 12

    url = f"{api}/channels/{thread['id']}"
    posted = requests.post(f"{url}/messages", json={"content": "x" * 2000}, headers=headers(),
                           timeout=10)
    assert posted.status_code == 200 and posted.json()["author"]["id"] == fake.bot_id
    too_long = requests.post(f"{url}/messages", json={"content": "x" * 2001},
                             headers=headers(), timeout=10)
    assert too_long.status_code == 400
    assert too_long.json()["code"] == 50035 and "content" in too_long.json()["errors"]

    closed = requests.patch(url, json={"archived": True, "locked": True}, headers=headers(),
                            timeout=10)
    assert closed.status_code == 200
    fetched = requests.get(url, headers=headers(), timeout=10).json()
    assert (fetched["thread_metadata"]["archived"], fetched["thread_metadata"]["locked"]) == \
        (True, True)
    renamed = requests.patch(url, json={"name": "renamed"}, headers=headers(), timeout=10)
    assert (renamed.status_code, renamed.json()["code"]) == (400, 50083)
    reopened = requests.patch(url, json={"archived": False, "locked": False},
                              headers=headers(), timeout=10).json()
    assert reopened["thread_metadata"]["archived"] is False

    assert requests.delete(url, headers=headers(), timeout=10).status_code == 200
    for gone in (requests.get(url, headers=headers(), timeout=10),
                 requests.post(f"{url}/messages", json={"content": "late"}, headers=headers(),
                               timeout=10)):
        assert gone.status_code == 404
        assert gone.json() == {"message": "Unknown Channel", "code": 10003}
    assert fake.channel(thread["id"]) is None

    anonymous = requests.get(f"{api}/channels/{fake.channel_id}", timeout=10)
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, 0)
    assert sum(r.status == 401 for r in fake.requests) == 1


def test_message_lists_are_newest_first_around_the_cursor(fake: FakeDiscord) -> None:
    thread = fake.add_thread(fake.channel_id, "history")
    ids = [fake.post_user_message(thread["id"], PERSON, f"m{i}")["id"] for i in range(5)]
    url = f"{fake.api_url}/channels/{thread['id']}/messages"

    def page(**params: Any) -> list[str]:
        answer = requests.get(url, params=params, headers=headers(), timeout=10)
        assert answer.status_code == 200, answer.text
        return [m["id"] for m in answer.json()]

    assert [int(i) for i in ids] == sorted(int(i) for i in ids)  # snowflakes grow
    # `after`: the messages right after the cursor, newest first (discord.py pages on [0]).
    assert page(after=ids[1], limit=2) == [ids[3], ids[2]]
    assert page(after=ids[1]) == [ids[4], ids[3], ids[2]]
    assert page(limit=2) == [ids[4], ids[3]]
    assert page(before=ids[2]) == [ids[1], ids[0]]
    assert page(after=ids[4]) == []
    too_many = requests.get(url, params={"limit": 101}, headers=headers(), timeout=10)
    assert (too_many.status_code, too_many.json()["code"]) == (400, 50035)


def test_scripted_failures_answer_once_then_normally(fake: FakeDiscord) -> None:
    fake.fail_next("GET", "/channels/*", 502)
    url = f"{fake.api_url}/channels/{fake.channel_id}"
    statuses = [requests.get(url, headers=headers(), timeout=10).status_code for _ in range(2)]
    assert statuses == [502, 200]
    assert [r.status for r in fake.requests_to("GET", "/channels/*")] == [502, 200]


# ----------------------------------------------------------------------------- (d) 429s


def test_discord_py_waits_out_a_429_then_retries(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    thread = fake.add_thread(fake.channel_id, "limited")
    runner = connect()
    fake.rate_limit_next("GET", f"/channels/{thread['id']}", retry_after=0.3)

    async def fetch(client: discord.Client) -> int:
        return (await client.fetch_channel(int(thread["id"]))).id

    assert runner.call(fetch) == int(thread["id"])
    limited, retried = fake.requests_to("GET", f"/channels/{thread['id']}")
    assert (limited.status, retried.status) == (429, 200)
    assert retried.at - limited.at >= 0.3


def test_a_429_carries_discords_headers_and_the_wait_is_enough(fake: FakeDiscord) -> None:
    url = f"{fake.api_url}/channels/{fake.channel_id}/messages"
    fake.rate_limit_next("POST", "/channels/*/messages", retry_after=0.25)
    limited = requests.post(url, json={"content": "one"}, headers=headers(), timeout=10)
    assert limited.status_code == 429
    assert limited.json() == {"message": "You are being rate limited.", "retry_after": 0.25,
                              "global": False}
    for name in ("Via", "Retry-After", "X-RateLimit-Bucket", "X-RateLimit-Reset-After"):
        assert limited.headers[name]
    assert limited.headers["X-RateLimit-Remaining"] == "0"
    # The app's REST client waits `retry_after` and retries once.
    time.sleep(limited.json()["retry_after"])
    again = requests.post(url, json={"content": "one"}, headers=headers(), timeout=10)
    assert again.status_code == 200
    assert again.headers["X-RateLimit-Bucket"] == limited.headers["X-RateLimit-Bucket"]
    assert int(again.headers["X-RateLimit-Remaining"]) == fake.rate_limit - 1
    assert [m["content"] for m in fake.messages(fake.channel_id)] == ["one"]


@pytest.mark.parametrize("fake", [{"rate_limit": 2, "rate_window_s": 0.5}], indirect=True)
def test_discord_py_honours_the_bucket_headers_without_a_429(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    runner = connect()

    async def send_three(client: discord.Client) -> None:
        channel = client.get_channel(int(fake.channel_id))
        assert isinstance(channel, discord.TextChannel)
        for text in ("one", "two", "three"):
            await channel.send(text)

    runner.call(send_three)
    sends = fake.requests_to("POST", "/channels/*/messages")
    # The bucket said Remaining: 0 after two; discord.py waited for the window instead of
    # storming into 429s.
    assert [r.status for r in sends] == [200, 200, 200]
    assert sends[2].at - sends[0].at >= 0.5 - 0.01


# ----------------------------------------------------------------------------- (e) reconnects


def test_a_dropped_connection_resumes_and_replays_what_it_missed(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    thread = fake.add_thread(fake.channel_id, "resumable")
    runner = connect()
    gate = fake.hold_gateway()  # hold the reconnect before HELLO so the message is missed
    fake.drop_gateway(resumable=True)
    wait_until(lambda: len(fake.gateway_connections) == 2, message="the client reconnecting")
    missed = fake.post_user_message(thread["id"], PERSON, "while you were away")
    gate.release()

    [seen] = wait_until(lambda: seen_in(runner, thread["id"]), message="the missed message")
    assert (seen.message_id, seen.content) == (int(missed["id"]), "while you were away")
    [resume] = fake.resumes
    assert resume["session_id"] == fake.session_ids[0] and resume["token"] == TOKEN
    assert resume["seq"] >= 2  # at least READY and GUILD_CREATE were acknowledged
    assert len(fake.identifies) == 1
    client = runner.client
    assert client is not None
    wait_until(lambda: client.resumes == 1, message="on_resumed")
    assert client.readies == 1
    # The resumed session goes on carrying new messages.
    fake.post_user_message(thread["id"], PERSON, "and now")
    wait_until(lambda: len(seen_in(runner, thread["id"])) == 2, message="the next message")


def test_a_reconnect_request_resumes(fake: FakeDiscord,
                                     connect: Callable[..., ClientThread]) -> None:
    runner = connect()
    fake.request_reconnect()
    client = runner.client
    assert client is not None
    wait_until(lambda: client.resumes == 1, message="on_resumed after op 7")
    assert (len(fake.identifies), len(fake.resumes)) == (1, 1)


def test_an_invalid_session_identifies_again_and_rest_catches_up(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    thread = fake.add_thread(fake.channel_id, "invalidated")
    runner = connect()
    last_seen = fake.post_user_message(thread["id"], PERSON, "seen")
    wait_until(lambda: seen_in(runner, thread["id"]), message="the first message")
    gate = fake.hold_gateway()
    fake.drop_gateway(resumable=False)
    wait_until(lambda: len(fake.gateway_connections) == 2, message="the client reconnecting")
    lost = fake.post_user_message(thread["id"], PERSON, "sent while the session died")
    gate.release()

    client = runner.client
    assert client is not None
    wait_until(lambda: client.readies == 2, message="a second on_ready (new session)")
    assert len(fake.resumes) == 1 and len(fake.identifies) == 2
    first, second = fake.session_ids
    assert first != second and fake.resumes[0]["session_id"] == first
    assert [s.content for s in seen_in(runner, thread["id"])] == ["seen"]
    # The app's catch-up: the messages after the last one it saw.
    caught_up = requests.get(f"{fake.api_url}/channels/{thread['id']}/messages",
                             params={"after": last_seen["id"], "limit": 100},
                             headers=headers(), timeout=10).json()
    assert [m["id"] for m in caught_up] == [lost["id"]]
    fake.post_user_message(thread["id"], PERSON, "after the new session")
    wait_until(lambda: len(seen_in(runner, thread["id"])) == 2, message="the new session's")


# ----------------------------------------------------------------------------- (f) intents


def test_identify_carries_the_apps_intents(fake: FakeDiscord,
                                           connect: Callable[..., ClientThread]) -> None:
    connect()
    assert fake.identifies[0]["intents"] == INTENTS.value == (1 << 0) | (1 << 9) | (1 << 15)


def test_without_message_content_others_messages_arrive_empty(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    thread = fake.add_thread(fake.channel_id, "no content intent")
    runner = connect(lambda: RecordingClient(discord.Intents(guilds=True, guild_messages=True)))
    fake.post_user_message(thread["id"], PERSON, "!stop")
    requests.post(f"{fake.api_url}/channels/{thread['id']}/messages", headers=headers(),
                  json={"content": "the bot's own"}, timeout=10)
    wait_until(lambda: len(seen_in(runner, thread["id"])) == 2, message="both messages")
    assert [s.content for s in seen_in(runner, thread["id"])] == ["", "the bot's own"]


@pytest.mark.parametrize(
    "fake", [{"allowed_privileged_intents": PRIVILEGED_INTENTS & ~INTENT_MESSAGE_CONTENT}],
    indirect=True)
def test_a_privileged_intent_the_app_may_not_use_ends_the_client(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    runner = connect(ready=False)
    wait_until(lambda: runner.error is not None, message="the client giving up")
    assert isinstance(runner.error, discord.PrivilegedIntentsRequired)
    assert runner.client is not None and runner.client.readies == 0


# ----------------------------------------------------------------------------- (e) components


def test_a_click_on_discord_py_s_buttons_comes_as_an_interaction_its_answer_edits_the_post(
        fake: FakeDiscord, connect: Callable[..., ClientThread]) -> None:
    thread = fake.add_thread(fake.channel_id, "buttons")["id"]
    clicks: list[tuple[Any, ...]] = []

    class Buttons(discord.ui.View):
        @discord.ui.button(label="Approve", style=discord.ButtonStyle.success,
                           custom_id="test:approve")
        async def approve(self, interaction: discord.Interaction,
                          button: discord.ui.Button[Any]) -> None:
            assert interaction.channel is not None and interaction.message is not None
            clicks.append((interaction.user.id, interaction.user.bot, interaction.channel.id,
                           interaction.message.id, (interaction.data or {}).get("custom_id"),
                           interaction.permissions.send_messages_in_threads))
            button.disabled = True
            await interaction.response.edit_message(content="approved", view=self)

    runner = connect()

    async def send(client: discord.Client) -> int:
        channel = await client.fetch_channel(int(thread))
        assert isinstance(channel, discord.Thread)
        return (await channel.send("pick one", view=Buttons(timeout=None))).id

    message_id = str(runner.call(send))
    posted = fake.message(thread, message_id)
    assert posted["components"][0]["type"] == 1
    assert [(b["type"], b["custom_id"]) for b in posted["components"][0]["components"]] == \
        [(2, "test:approve")]

    clicked = fake.click(thread, message_id, "test:approve", PERSON)
    wait_until(lambda: clicks, message="discord.py's view got the click")
    assert clicks == [(int(PERSON), False, int(thread), int(message_id), "test:approve", True)]
    answered = wait_until(lambda: next(i for i in fake.interactions if i.id == clicked.id).answered,
                          message="the interaction's answer")
    assert (answered["type"], answered["status"]) == (7, 204)
    edited = fake.message(thread, message_id)
    assert edited["content"] == "approved"
    assert edited["components"][0]["components"][0]["disabled"] is True
    with pytest.raises(AssertionError, match="no enabled button"):
        fake.click(thread, message_id, "test:approve", PERSON)  # a disabled button takes none


def test_an_interaction_is_answered_once_with_its_own_token_and_in_time(
        fake: FakeDiscord) -> None:
    thread = fake.add_thread(fake.channel_id, "buttons")["id"]
    buttons = [{"type": 1, "components": [
        {"type": 2, "style": 3, "label": "Yes", "custom_id": "yes"},
        {"type": 2, "style": 4, "label": "No", "custom_id": "no"}]}]
    post = requests.post(f"{fake.api_url}/channels/{thread}/messages", timeout=10,
                         headers=headers(), json={"content": "?", "components": buttons})
    assert post.status_code == 200
    bad = requests.post(f"{fake.api_url}/channels/{thread}/messages", timeout=10,
                        headers=headers(), json={"content": "?", "components": [
                            {"type": 1, "components": [{"type": 2, "style": 3, "label": "x",
                                                        "custom_id": "y" * 101}]}]})
    assert (bad.status_code, bad.json()["code"]) == (400, 50035)

    def callback(interaction: Any, token: str | None = None, **answer: Any) -> requests.Response:
        # No bot token: an interaction's own token authorises its answer, as on Discord.
        return requests.post(f"{fake.api_url}/interactions/{interaction.id}/"
                             f"{token or interaction.token}/callback", json=answer, timeout=10)

    first = fake.click(thread, post.json()["id"], "yes", PERSON)
    assert callback(first, token="not-its-token", type=6).json()["code"] == 10062
    only_me = callback(first, type=4, data={"content": "just you", "flags": 64})
    assert only_me.status_code == 204
    assert callback(first, type=6).json()["code"] == 40060  # answered once
    assert "just you" not in [m["content"] for m in fake.messages(thread)]  # ephemeral

    fake.interaction_deadline_s = 0.0  # every answer from now on comes after Discord's 3 s
    late = fake.click(thread, post.json()["id"], "no", PERSON)
    assert callback(late, type=6).json()["code"] == 10062
    assert [(c["type"], c["status"]) for i in fake.interactions for c in i.callbacks] == [
        (6, 404), (4, 204), (6, 400), (6, 404)]
