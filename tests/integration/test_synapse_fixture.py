"""The Synapse fixture, proved with the real client the app will use: matrix-nio with E2EE.

What the Matrix routes will rely on, each shown against a real homeserver: an owner device with
a fixed id whose login (a token on disk) and crypto store survive a restart without logging in
again; the first sync taken only for its cursor; text from another user reaching the owner,
decrypted in a megolm room; the sync loop in its own thread and asyncio loop, handing each page
to a plain callback in another thread and syncing again only from the cursor that callback
returns; `limited` timelines; and the server's `/sync` answer cache being off.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import pytest

# This module loads tests.support.synapse as a plugin (below), and pytest rewrites a plugin's
# asserts only if told before the module is first imported, which is here.
pytest.register_assert_rewrite("tests.support.synapse")

from tests.helpers import wait_until
from tests.support.synapse import (
    Homeserver,
    Registered,
    SynapseInstall,
    start_homeserver,
    unique_name,
)

pytest.importorskip("nio", reason="matrix-nio is not installed: pip install 'matrix-nio[e2e]'")

from nio import (  # only once we know nio is there
    AsyncClient,
    AsyncClientConfig,
    JoinResponse,
    LoginResponse,
    MegolmEvent,
    RoomMessageText,
    RoomSendResponse,
    SyncResponse,
)
from nio.crypto import ENCRYPTION_ENABLED
from nio.exceptions import EncryptionError

if not ENCRYPTION_ENABLED:
    pytest.skip("matrix-nio is installed without its e2e extra: pip install 'matrix-nio[e2e]'",
                allow_module_level=True)

pytestmark = pytest.mark.slow
# The session-scoped homeserver; a root conftest naming the same plugin shares it further.
pytest_plugins = ["tests.support.synapse"]

T = TypeVar("T")
DEVICE_ID = "WAKELINE"
WAIT_SECONDS = 30.0
# The sync thread's long poll. Synapse answers as soon as something arrives, and stop()
# cancels a poll in flight, so its length costs no test any time.
POLL_MS = 10_000


def client_config() -> AsyncClientConfig:
    """How the app configures nio: E2EE on, and the sync cursor kept by the app, not nio.

    nio's own `store_sync_tokens` would save each page's cursor as soon as the page arrives,
    before the app has made its events durable; the app passes `since` itself instead.
    """
    return AsyncClientConfig(encryption_enabled=True, store_sync_tokens=False,
                             pickle_key="wakeline-test-pickle-key")


@dataclass(frozen=True)
class Owner:
    """The owner identity the app acts as: config (user, device) plus the files it keeps."""

    url: str
    user_id: str
    password: str
    token_file: Path
    store: Path
    device_id: str = DEVICE_ID

    async def first_login(self) -> AsyncClient:
        """Log in once as device WAKELINE, save the token, publish the device's keys."""
        self.store.mkdir(parents=True, exist_ok=True)
        client = AsyncClient(self.url, self.user_id, device_id=self.device_id,
                             store_path=str(self.store), config=client_config())
        login = await client.login(self.password, device_name="wakeline")
        assert isinstance(login, LoginResponse), login
        assert login.device_id == self.device_id
        self.token_file.write_text(login.access_token, encoding="utf-8")
        await crypto_chores(client)  # keys_upload: identity and one-time keys
        return client

    def restore(self) -> AsyncClient:
        """A client from the saved token and the crypto store, as the app starts: no login."""
        client = AsyncClient(self.url, self.user_id, device_id=self.device_id,
                             store_path=str(self.store), config=client_config())
        client.restore_login(self.user_id, self.device_id,
                             self.token_file.read_text(encoding="utf-8").strip())
        client.load_store()  # restore_login already loaded it; a no-op kept for clarity
        assert client.olm is not None, "the crypto store did not load"
        return client


async def crypto_chores(client: AsyncClient) -> None:
    """What `sync_forever` does between syncs, for a client that calls `sync` itself."""
    if client.should_upload_keys:
        await client.keys_upload()
    if client.should_query_keys:
        await client.keys_query()
    if client.should_claim_keys:
        await client.keys_claim(client.get_users_for_key_claiming())
    await client.send_to_device_messages()


async def sync_page(client: AsyncClient, since: str | None, timeout_ms: int = 0,
                    **kwargs: Any) -> SyncResponse:
    """One sync from `since` (the app's cursor, never nio's), then the crypto chores."""
    page = await client.sync(timeout=timeout_ms, since=since, **kwargs)
    assert isinstance(page, SyncResponse), page
    decrypt_leftovers(client, page)
    await crypto_chores(client)
    return page


def decrypt_leftovers(client: AsyncClient, page: SyncResponse) -> None:
    """Decrypt, in place, the megolm events nio left encrypted in a page.

    nio skips all processing of a page whose `next_batch` equals the last one it processed:
    exactly the page a client gets again when it syncs from a cursor it kept (a page the app
    could not make durable). Decrypting one event again is allowed (nio's replay check is
    per event id), so this is safe for any page. What still fails stays a MegolmEvent.
    """
    for room_id, room in page.rooms.join.items():
        for index, event in enumerate(room.timeline.events):
            if isinstance(event, MegolmEvent):
                event.room_id = room_id  # nio sets it only while processing a page
                try:
                    room.timeline.events[index] = client.decrypt_event(event)
                except EncryptionError:
                    pass  # no key (yet): the caller keeps its old cursor


def texts(page: SyncResponse, room_id: str) -> list[tuple[str, str]]:
    """(sender, body) of the page's `m.text` messages in the room."""
    room = page.rooms.join.get(room_id)
    if room is None:
        return []
    return [(event.sender, event.body) for event in room.timeline.events
            if isinstance(event, RoomMessageText) and event.source["content"].get("msgtype")
            == "m.text"]


def undecrypted(page: SyncResponse, room_id: str) -> list[MegolmEvent]:
    """The room's timeline events nio could not decrypt (the app keeps the old cursor)."""
    room = page.rooms.join.get(room_id)
    return [e for e in room.timeline.events if isinstance(e, MegolmEvent)] if room else []


class Clients:
    """The test thread's asyncio loop and every nio client opened on it, closed at the end."""

    def __init__(self, runner: asyncio.Runner) -> None:
        self._runner = runner
        self._open: list[AsyncClient] = []

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the test thread's one loop (nio's HTTP session is bound to it)."""
        return self._runner.run(coro)

    def keep(self, client: AsyncClient) -> AsyncClient:
        """Close `client` at teardown unless the test closed it already."""
        self._open.append(client)
        return client

    def close(self, client: AsyncClient) -> None:
        """Close one client now (its aiohttp session and connections)."""
        self.run(client.close())

    def close_all(self) -> None:
        """Close every kept client."""
        for client in self._open:
            self.run(client.close())


@pytest.fixture
def clients() -> Iterator[Clients]:
    """A loop for nio calls made from the test thread, and teardown that closes its clients."""
    with asyncio.Runner() as runner:
        kept = Clients(runner)
        try:
            yield kept
        finally:
            kept.close_all()


@dataclass(frozen=True)
class People:
    """The owner (as the app's config and files describe it) and alice, who writes to it."""

    owner: Owner
    me: Registered  # the owner's registration (its own device and token, for plain HTTP)
    alice: Registered


@pytest.fixture
def people(synapse: Homeserver, tmp_path: Path) -> People:
    """Fresh `me-*` and `alice-*` users (the shared server outlives the test)."""
    me = synapse.register(unique_name("me"))
    alice = synapse.register(unique_name("alice"))
    owner = Owner(synapse.url, me.user_id, me.password, tmp_path / "matrix-me-token",
                  tmp_path / "owner-store")
    return People(owner, me, alice)


async def alice_client(synapse: Homeserver, alice: Registered, store: Path,
                       room_id: str) -> AsyncClient:
    """Alice on nio with her own device and store, joined to the room and synced once."""
    store.mkdir(parents=True, exist_ok=True)
    client = AsyncClient(synapse.url, alice.user_id, store_path=str(store),
                         config=client_config())
    login = await client.login(alice.password, device_name="alice-phone")
    assert isinstance(login, LoginResponse), login
    await crypto_chores(client)
    joined = await client.join(room_id)
    assert isinstance(joined, JoinResponse), joined
    # The room's state (encryption, members) reaches nio only through a sync.
    await sync_page(client, None)
    return client


async def send_encrypted(client: AsyncClient, room_id: str, body: str) -> str:
    """Send `m.text` into a megolm room, sharing the session with devices nobody verified."""
    sent = await client.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": body},
                                  ignore_unverified_devices=True)
    assert isinstance(sent, RoomSendResponse), sent
    return str(sent.event_id)


def bodies(page: dict[str, Any], room_id: str) -> list[str]:
    """The message bodies of a raw `/sync` page's timeline in one room."""
    events = page["rooms"]["join"][room_id]["timeline"]["events"]
    return [e["content"]["body"] for e in events if e["type"] == "m.room.message"]


def test_sync_response_cache_is_off(synapse: Homeserver, people: People) -> None:
    """Asking again from the same cursor sees events that arrived since the first answer."""
    token, alice = people.me.access_token, people.alice
    room = synapse.create_room(token, invite=[alice.user_id])
    synapse.join(alice.access_token, room)
    cursor = synapse.sync(token)["next_batch"]
    synapse.send_text(alice.access_token, room, "one")
    first = synapse.sync(token, since=cursor)
    synapse.send_text(alice.access_token, room, "two")
    again = synapse.sync(token, since=cursor)

    assert bodies(first, room) == ["one"]
    assert bodies(again, room) == ["one", "two"]
    assert again["next_batch"] != first["next_batch"]


def test_synapse_caches_sync_answers_by_default(synapse_install: SynapseInstall,
                                                tmp_path: Path) -> None:
    """Synapse's default (the key dropped): the same request within 2 minutes gets the old
    page, so the test above would fail without `caches.sync_response_cache_duration: 0`."""
    assert synapse_install.python is not None
    server = start_homeserver(synapse_install.python, tmp_path / "cached",
                              overrides={"caches": None})
    try:
        me, alice = server.register("me"), server.register("alice")
        room = server.create_room(me.access_token, invite=[alice.user_id])
        server.join(alice.access_token, room)
        cursor = server.sync(me.access_token)["next_batch"]
        server.send_text(alice.access_token, room, "one")
        first = server.sync(me.access_token, since=cursor)
        server.send_text(alice.access_token, room, "two")
        again = server.sync(me.access_token, since=cursor)
        # The same page (only the events' `unsigned.age` is computed afresh).
        assert bodies(again, room) == bodies(first, room) == ["one"]
        assert again["next_batch"] == first["next_batch"]
    finally:
        server.stop()


def test_plain_room_text_reaches_the_owner(synapse: Homeserver, people: People,
                                           clients: Clients) -> None:
    """The first sync is taken for its cursor only; the next one brings alice's new text."""
    alice = people.alice
    room = synapse.create_room(people.me.access_token, invite=[alice.user_id])
    synapse.join(alice.access_token, room)
    synapse.send_text(alice.access_token, room, "history, not live")
    owner = clients.keep(clients.run(people.owner.first_login()))

    first = clients.run(sync_page(owner, None))
    # The first page carries history; the app keeps only its cursor.
    assert texts(first, room) == [(alice.user_id, "history, not live")]
    event_id = synapse.send_text(alice.access_token, room, "hello owner")
    page = clients.run(sync_page(owner, first.next_batch))

    assert texts(page, room) == [(alice.user_id, "hello owner")]
    assert [e.event_id for e in page.rooms.join[room].timeline.events] == [event_id]


def test_encrypted_room_decrypts_across_a_restart(synapse: Homeserver, people: People,
                                                  clients: Clients, tmp_path: Path) -> None:
    """Alice's megolm text is decrypted; so is the next after a restart from token and store;
    and the restored owner can answer into the room with devices it chose to trust."""
    owner, alice = people.owner, people.alice
    first_client = clients.keep(clients.run(owner.first_login()))
    room = synapse.create_room(people.me.access_token, encrypted=True, invite=[alice.user_id])
    sender = clients.keep(clients.run(alice_client(synapse, alice, tmp_path / "alice", room)))
    cursor = clients.run(sync_page(first_client, None)).next_batch

    clients.run(send_encrypted(sender, room, "secret one"))
    page = clients.run(sync_page(first_client, cursor))
    assert undecrypted(page, room) == []
    assert texts(page, room) == [(alice.user_id, "secret one")]
    event = next(e for e in page.rooms.join[room].timeline.events
                 if isinstance(e, RoomMessageText))
    assert event.decrypted  # it came as m.room.encrypted; `source` is the decrypted payload
    cursor = page.next_batch
    identity = first_client.olm.account.identity_keys if first_client.olm else None
    clients.close(first_client)

    restarted = clients.keep(owner.restore())
    assert restarted.olm is not None and restarted.olm.account.identity_keys == identity
    clients.run(send_encrypted(sender, room, "secret two"))
    # full_state on the first sync after a restart: nio keeps no room state between runs,
    # and it needs the room's members to send into it.
    page = clients.run(sync_page(restarted, cursor, full_state=True))
    assert undecrypted(page, room) == []
    assert texts(page, room) == [(alice.user_id, "secret two")]
    # Asked again from the same cursor, the same page comes, and nio leaves it encrypted.
    again = clients.run(restarted.sync(timeout=0, since=cursor))
    assert isinstance(again, SyncResponse), again
    assert again.next_batch == page.next_batch and len(undecrypted(again, room)) == 1
    decrypt_leftovers(restarted, again)
    assert texts(again, room) == [(alice.user_id, "secret two")]
    # Still the one WAKELINE device next to the registration's: the restart did not log in.
    assert synapse.devices(people.me.access_token) == sorted([people.me.device_id, DEVICE_ID])

    async def answer() -> None:
        # Trust alice's devices explicitly instead of ignoring unverified ones.
        await restarted.joined_members(room)
        if restarted.should_query_keys:
            await restarted.keys_query()
        for device in restarted.device_store.active_user_devices(alice.user_id):
            restarted.verify_device(device)
        sent = await restarted.room_send(room, "m.room.message",
                                         {"msgtype": "m.text", "body": "owner answers"})
        assert isinstance(sent, RoomSendResponse), sent

    clients.run(answer())
    seen = clients.run(sync_page(sender, sender.next_batch))
    # Alice's page has her own two texts too (she decrypts her own session); then the answer.
    assert texts(seen, room)[-1] == (people.me.user_id, "owner answers")
    assert undecrypted(seen, room) == []


@dataclass
class Handled:
    """What the test's page handler saw, page by page."""

    pages: list[SyncResponse] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)
    texts: list[tuple[str, str]] = field(default_factory=list)
    # How many syncs the loop had started when each call began and when it returned.
    syncs_around: list[tuple[int, int]] = field(default_factory=list)


class SyncThread:
    """nio's sync loop in its own thread with its own asyncio loop.

    Each page goes to `handler` on another thread (standing in for the actor the app tells),
    and the loop awaits its answer before syncing again: the handler returns the cursor to
    sync from next (the page's `next_batch` once its events are durable), or None to keep the
    old one (an undecryptable event, a failed write). The client is made, used and closed only
    inside the loop's thread, as its aiohttp session belongs to that loop.
    """

    def __init__(self, open_client: Callable[[], AsyncClient],
                 handler: Callable[[SyncResponse], str | None], since: str | None = None,
                 poll_ms: int = POLL_MS) -> None:
        self._open_client = open_client
        self._handler = handler
        self._poll_ms = poll_ms
        self.since = since
        self.syncs_started = 0
        # (since, next_batch, the handler's answer) of each page, in order
        self.history: list[tuple[str | None, str, str | None]] = []
        self.error: BaseException | None = None
        self._handler_pool = ThreadPoolExecutor(1, thread_name_prefix="matrix-handler")
        self._thread = threading.Thread(target=self._run, name="matrix-sync", daemon=True)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> SyncThread:
        """Start the thread and wait until its loop is running."""
        self._thread.start()
        assert self._ready.wait(WAIT_SECONDS), "sync thread did not start"
        return self

    def stop(self, timeout: float = WAIT_SECONDS) -> None:
        """Cancel the loop's task (an in-flight long poll too), join, re-raise its error."""
        if self._loop is not None and self._task is not None and self._thread.is_alive():
            try:
                self._loop.call_soon_threadsafe(self._task.cancel)
            except RuntimeError:
                pass  # the loop ended on its own (an error) since is_alive() answered
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "sync thread did not stop"
        self._handler_pool.shutdown(wait=True)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        # asyncio.run: a fresh loop for this thread, closed (async generators, default
        # executor) when the main task ends.
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._ready.set()
        client: AsyncClient | None = None
        try:
            client = self._open_client()
            while True:
                self.syncs_started += 1
                page = await sync_page(client, self.since, self._poll_ms)
                # The handler's thread does the work; this loop only waits for its answer.
                cursor = await self._loop.run_in_executor(self._handler_pool, self._handler,
                                                          page)
                self.history.append((self.since, str(page.next_batch), cursor))
                if cursor is not None:
                    self.since = cursor
        except asyncio.CancelledError:
            pass  # stop() asked
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that calls stop()
            self.error = exc
        finally:
            if client is not None:
                await client.close()


def test_sync_loop_in_its_own_thread_hands_pages_to_a_callback(
        synapse: Homeserver, people: People, clients: Clients, tmp_path: Path) -> None:
    """Pages go, one at a time, to a handler on another thread; the next sync starts from the
    cursor it returned, and a page it refuses (returns None) is fetched again, still decrypted."""
    owner, alice = people.owner, people.alice
    # Log in once on the test thread, as a setup command would; the sync thread restores.
    clients.close(clients.run(owner.first_login()))
    room = synapse.create_room(people.me.access_token, encrypted=True, invite=[alice.user_id])
    sender = clients.keep(clients.run(alice_client(synapse, alice, tmp_path / "alice", room)))
    handled = Handled()
    refused: list[SyncResponse] = []

    def handle(page: SyncResponse) -> str | None:
        handled.threads.add(threading.current_thread().name)
        handled.pages.append(page)
        if len(handled.pages) == 1:
            return str(page.next_batch)  # the first page: its cursor only
        assert undecrypted(page, room) == [], "an undecryptable event"
        found = texts(page, room)
        if found and not refused:
            refused.append(page)  # as if the write failed: keep the old cursor
            return None
        handled.texts.extend(found)
        return str(page.next_batch)

    def handler(page: SyncResponse) -> str | None:
        before = sync_thread.syncs_started
        try:
            return handle(page)
        finally:
            handled.syncs_around.append((before, sync_thread.syncs_started))

    sync_thread = SyncThread(owner.restore, handler).start()
    try:
        wait_until(lambda: len(handled.pages) >= 1, WAIT_SECONDS, message="first page")
        clients.run(send_encrypted(sender, room, "first in thread"))
        wait_until(lambda: handled.texts, WAIT_SECONDS, message="a handled text")
        clients.run(send_encrypted(sender, room, "second in thread"))
        wait_until(lambda: len(handled.texts) >= 2, WAIT_SECONDS, message="two handled texts")
    finally:
        sync_thread.stop()

    assert handled.texts == [(alice.user_id, "first in thread"),
                             (alice.user_id, "second in thread")]
    assert handled.threads == {"matrix-handler_0"}
    # No sync started while the handler ran (a cheap check: the handler is quick)...
    assert all(before == after for before, after in handled.syncs_around)
    # ...and each sync started from the handler's answer to the page before, or from the old
    # cursor again when it answered None: it could not have started before that answer.
    history = sync_thread.history
    for (since, _, answer), (next_since, _, _) in pairwise(history):
        assert next_since == (answer if answer is not None else since)
    # The refused page's text came again in the next page, decrypted again.
    again = handled.pages[next(i for i, p in enumerate(handled.pages) if p is refused[0]) + 1]
    assert texts(again, room)[:1] == texts(refused[0], room) == [(alice.user_id,
                                                                  "first in thread")]


def test_a_limited_timeline_is_flagged(synapse: Homeserver, people: People,
                                       clients: Clients) -> None:
    """More events than the filter's timeline limit: `limited` is set, with a `prev_batch`
    to page back from (the app takes that as a gap, never as backfill to admit)."""
    alice = people.alice
    room = synapse.create_room(people.me.access_token, invite=[alice.user_id])
    synapse.join(alice.access_token, room)
    owner = clients.keep(clients.run(people.owner.first_login()))
    cursor = clients.run(sync_page(owner, None)).next_batch
    for n in range(4):
        synapse.send_text(alice.access_token, room, f"burst {n}")

    page = clients.run(sync_page(owner, cursor,
                                 sync_filter={"room": {"timeline": {"limit": 2}}}))
    timeline = page.rooms.join[room].timeline
    assert timeline.limited is True and timeline.prev_batch
    assert texts(page, room) == [(alice.user_id, "burst 2"), (alice.user_id, "burst 3")]
    unlimited = clients.run(sync_page(owner, cursor))
    assert unlimited.rooms.join[room].timeline.limited is False
