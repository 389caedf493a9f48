"""Matrix worlds for tests: an owner device logged in once, people who write to it, rooms.

Built on the Synapse fixture (`tests/support/synapse.py`). The owner logs in once over plain
HTTP with the fixed device id `WAKELINE`, as the operations guide tells a person to, and the
token goes to a 0600 file; wakeline's nio client uploads the device's keys on its first
start. People who write in encrypted rooms use nio (`Writer`), on an asyncio loop of the
test's own thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from tests.support.synapse import Homeserver, Registered, unique_name

T = TypeVar("T")
DEVICE_ID = "WAKELINE"


def login_device(server: Homeserver, user: Registered, device_id: str = DEVICE_ID) -> str:
    """Log in once with a fixed device id (what `docs/operations.md` has a person do)."""
    answer = server.api("POST", "/_matrix/client/v3/login", body={
        "type": "m.login.password", "identifier": {"type": "m.id.user", "user": user.user_id},
        "password": user.password, "device_id": device_id,
        "initial_device_display_name": "wakeline"})
    return str(answer["access_token"])


def write_token(path: Path, token: str) -> Path:
    """The token file, 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return path


@dataclass
class World:
    """The owner (with its wakeline token), alice and bob, and a plain and an encrypted room
    both have joined."""

    server: Homeserver
    me: Registered
    alice: Registered
    bob: Registered
    token: str
    token_file: Path
    plain: str
    encrypted: str

    def send_event(self, who: Registered, room: str, event_type: str, content: dict[str, Any],
                   txn: str | None = None) -> str:
        """Send any event as `who` (plain HTTP); its id."""
        txn = txn or unique_name("t")
        path = f"/_matrix/client/v3/rooms/{quote(room)}/send/{event_type}/{txn}"
        return str(self.server.api("PUT", path, who.access_token, content)["event_id"])

    def redact(self, who: Registered, room: str, event_id: str) -> str:
        """Redact an event as `who`; the redaction's id."""
        path = (f"/_matrix/client/v3/rooms/{quote(room)}/redact/{quote(event_id)}/"
                f"{unique_name('r')}")
        return str(self.server.api("PUT", path, who.access_token, {})["event_id"])

    def owner_texts(self, room: str) -> list[tuple[str, str]]:
        """(event id, body) of the owner's messages in a plain room, oldest first."""
        answer = self.server.api("GET", f"/_matrix/client/v3/rooms/{quote(room)}/messages",
                                 self.alice.access_token, params={"dir": "b", "limit": 100})
        return [(e["event_id"], e["content"].get("body", "")) for e in reversed(answer["chunk"])
                if e["type"] == "m.room.message" and e["sender"] == self.me.user_id]

    def set_display_name(self, who: Registered, name: str) -> None:
        """Change a user's display name (in every room they are in)."""
        self.server.api("PUT", f"/_matrix/client/v3/profile/{quote(who.user_id)}/displayname",
                        who.access_token, {"displayname": name})


def make_world(server: Homeserver, tmp_path: Path) -> World:
    """Fresh users and rooms on the shared server (it outlives the test)."""
    me = server.register(unique_name("me"))
    alice = server.register(unique_name("alice"))
    bob = server.register(unique_name("bob"))
    token = login_device(server, me)
    plain = server.create_room(me.access_token, invite=[alice.user_id, bob.user_id], name="plain")
    encrypted = server.create_room(me.access_token, encrypted=True, invite=[alice.user_id],
                                   name="secret")
    for room in (plain, encrypted):
        server.join(alice.access_token, room)
    server.join(bob.access_token, plain)
    return World(server, me, alice, bob, token, write_token(tmp_path / "secrets" / "matrix-me",
                                                             token), plain, encrypted)


class Writer:
    """A person on nio with their own device, writing into encrypted rooms."""

    def __init__(self, server: Homeserver, user: Registered, store: Path) -> None:
        from nio import AsyncClient, AsyncClientConfig

        store.mkdir(parents=True, exist_ok=True)
        self._runner = asyncio.Runner()
        self.user = user
        self.client = AsyncClient(server.url, user.user_id, store_path=str(store),
                                  config=AsyncClientConfig(encryption_enabled=True,
                                                           store_sync_tokens=False,
                                                           pickle_key="wakeline-test-writer"))
        self.run(self._login(user.password))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on this writer's loop."""
        return self._runner.run(coro)

    async def _login(self, password: str) -> None:
        from nio import LoginResponse

        answer = await self.client.login(password, device_name="writer")
        assert isinstance(answer, LoginResponse), answer
        await self.chores()
        await self.sync()

    async def chores(self) -> None:
        """Key uploads, queries and claims (what `sync_forever` does between syncs)."""
        client = self.client
        if client.should_upload_keys:
            await client.keys_upload()
        if client.should_query_keys:
            await client.keys_query()
        if client.should_claim_keys:
            await client.keys_claim(client.get_users_for_key_claiming())
        await client.send_to_device_messages()

    async def sync(self) -> None:
        """One sync (room state, members, device lists)."""
        from nio import SyncResponse

        answer = await self.client.sync(timeout=0, since=self.client.next_batch)
        assert isinstance(answer, SyncResponse), answer
        await self.chores()

    def send(self, room: str, body: str) -> str:
        """Send `m.text`, encrypted, to every device of the room's members; its event id."""
        from nio import RoomSendResponse

        async def go() -> str:
            await self.sync()
            answer = await self.client.room_send(room, "m.room.message",
                                                 {"msgtype": "m.text", "body": body},
                                                 ignore_unverified_devices=True)
            assert isinstance(answer, RoomSendResponse), answer
            return str(answer.event_id)

        return self.run(go())

    def close(self) -> None:
        """Close the client and the loop."""
        self.run(self.client.close())
        self._runner.close()
