"""A person's Matrix client in a process of its own, driven by JSON lines (`Writer` in
`tests/support/matrix.py` runs it).

Another person's client is another process for real, and it must be one here too: nio's
crypto store rebinds process-wide peewee models around each call, so a second nio client
on another thread of the test process would pull the binding from under wakeline's.

Commands, one JSON object a line on stdin, each answered by one line on stdout:

- `{"op": "login", "url", "user_id", "password", "store"}`
- `{"op": "send", "room", "body"}`: `m.text`, encrypted for every device of the room's members
- `{"op": "read", "room"}`: the room's latest messages as `[sender, body]`, decrypted where
  this device has the keys (`null` where it has not)
- `{"op": "withhold", "room", "user", "device"}`: a new megolm session shared with every
  device but that one (blacklisted); answers the session's key at its first index
- `{"op": "share_key", "user", "device", "room", "session_id", "session_key"}`: send that
  key to the one device, late, over olm (as a client answering a key request would)
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from nio import (
    AsyncClient, AsyncClientConfig, LoginResponse, RoomSendResponse, SyncResponse,
    ToDeviceMessage,
)

MEGOLM = "m.megolm.v1.aes-sha2"


class Person:
    """One nio client and what the commands do with it."""

    def __init__(self) -> None:
        self.client: AsyncClient | None = None

    async def login(self, url: str, user_id: str, password: str, store: str) -> dict[str, Any]:
        self.client = AsyncClient(url, user_id, store_path=store, config=AsyncClientConfig(
            encryption_enabled=True, store_sync_tokens=False, pickle_key="wakeline-test-writer"))
        answer = await self.client.login(password, device_name="writer")
        assert isinstance(answer, LoginResponse), answer
        await self.sync()
        return {"device_id": answer.device_id}

    async def chores(self) -> None:
        client = self.client
        assert client is not None
        if client.should_upload_keys:
            await client.keys_upload()
        if client.should_query_keys:
            await client.keys_query()
        if client.should_claim_keys:
            await client.keys_claim(client.get_users_for_key_claiming())
        await client.send_to_device_messages()

    async def sync(self) -> None:
        assert self.client is not None
        answer = await self.client.sync(timeout=0, since=self.client.next_batch)
        assert isinstance(answer, SyncResponse), answer
        await self.chores()

    async def send(self, room: str, body: str) -> dict[str, Any]:
        assert self.client is not None
        await self.sync()
        answer = await self.client.room_send(room, "m.room.message",
                                             {"msgtype": "m.text", "body": body},
                                             ignore_unverified_devices=True)
        assert isinstance(answer, RoomSendResponse), answer
        return {"event_id": answer.event_id}

    async def read(self, room: str) -> dict[str, Any]:
        """The room's latest messages, decrypted where this device has the keys."""
        from nio import MegolmEvent, RoomMessagesResponse

        assert self.client is not None
        await self.sync()
        answer = await self.client.room_messages(room, limit=50)
        assert isinstance(answer, RoomMessagesResponse), answer
        out = []
        for event in reversed(answer.chunk):
            if isinstance(event, MegolmEvent):
                out.append([event.sender, None])
            elif getattr(event, "source", {}).get("type") == "m.room.message":
                out.append([event.sender, event.source["content"].get("body")])
        return {"messages": out}

    def _device(self, user: str, device: str) -> Any:
        assert self.client is not None
        return self.client.device_store[user][device]

    async def withhold(self, room: str, user: str, device: str) -> dict[str, Any]:
        client = self.client
        assert client is not None and client.olm is not None
        await self.sync()
        client.blacklist_device(self._device(user, device))
        client.olm.create_outbound_group_session(room)
        session = client.olm.outbound_group_sessions[room]
        key = {"session_id": session.id, "session_key": session.session_key}
        await client.share_group_session(room, ignore_unverified_devices=True)
        return key

    async def share_key(self, user: str, device: str, room: str, session_id: str,
                        session_key: str) -> dict[str, Any]:
        client = self.client
        assert client is not None and client.olm is not None
        target = self._device(user, device)
        client.unblacklist_device(target)
        if client.olm.session_store.get(target.curve25519) is None:
            await client.keys_claim({user: [device]})
        olm_session = client.olm.session_store.get(target.curve25519)
        assert olm_session is not None, "no olm session with the device"
        payload = client.olm._olm_encrypt(olm_session, target, "m.room_key", {
            "algorithm": MEGOLM, "room_id": room, "session_id": session_id,
            "session_key": session_key})
        answer = await client.to_device(ToDeviceMessage("m.room.encrypted", user, device, payload))
        return {"answer": type(answer).__name__}


async def main() -> None:
    person = Person()
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        op = command.pop("op")
        try:
            if op == "close":
                break
            result = await getattr(person, op)(**command)
            out = {"ok": True, **result}
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            out = {"ok": False, "error": f"{exc.__class__.__name__}: {exc}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    if person.client is not None:
        await person.client.close()


if __name__ == "__main__":
    asyncio.run(main())
