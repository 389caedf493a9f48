"""matrix-nio, and nothing else of Matrix's wire: the one module that imports nio.

A `NioClient` acts as one connection's owner device: it restores the login from the stored
token and the device's crypto store (`<state_dir>/matrix/<connection>/`), never logging in
again; syncs from the cursor wakeline keeps (nio's own `store_sync_tokens` would save each
page's cursor before its events are durable); decrypts what nio left encrypted in a page
fetched again from a kept cursor; does the key chores `sync_forever` would do; and answers
the route checks, the reads and the sends. Every coroutine here runs on the connection's own
loop thread (`sync.py`): the aiohttp session belongs to that loop.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from nio import (
    AsyncClient,
    AsyncClientConfig,
    JoinedMembersResponse,
    JoinedRoomsResponse,
    MegolmEvent,
    RoomMessagesResponse,
    RoomSendResponse,
    SyncResponse,
    WhoamiResponse,
)
from nio.crypto import ENCRYPTION_ENABLED
from nio.exceptions import EncryptionError

from wakeline.config import MatrixConnectionConfig
from wakeline.providers.matrix.events import RoomTimeline, SyncPage, TimelineEvent
from wakeline.providers.matrix.routes import Identity

log = logging.getLogger(__name__)

# The most timeline events one room may bring in one page. Synapse's default is 10: a burst
# larger than that while wakeline was down would be a `limited` gap, which is never filled.
TIMELINE_LIMIT = 100
SYNC_FILTER = {"room": {"timeline": {"limit": TIMELINE_LIMIT}},
               "presence": {"not_types": ["*"]}, "account_data": {"not_types": ["*"]}}
# One request's own bound (a sync's long poll is added to it); a slow homeserver answers
# within it or the call fails and the loop backs off.
REQUEST_TIMEOUT_SECONDS = 30.0
READ_MAX_EVENTS = 100


class MatrixError(Exception):
    """A homeserver could not be asked, or failed to answer: worth another try later."""


class MatrixRefused(MatrixError):
    """The homeserver refused, with a Matrix error code: another try will not help
    (not in the room, forbidden, unknown room...)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


# Refusals that are about the moment, not the request: tried again like a dead homeserver.
TRANSIENT_CODES = frozenset({"M_LIMIT_EXCEEDED", "M_UNKNOWN", ""})


def _pickle_key(token: str) -> str:
    # nio encrypts the crypto store's secrets with this; the access token is the one secret
    # that lives with the store, and it never changes for the device.
    import hashlib

    return hashlib.sha256(b"wakeline-matrix-store:" + token.encode()).hexdigest()


class NioClient:
    """One connection's owner device on nio; made, used and closed on its loop thread."""

    def __init__(self, name: str, conn: MatrixConnectionConfig, token: str, store: Path) -> None:
        if not ENCRYPTION_ENABLED:
            raise MatrixError("matrix-nio has no end-to-end encryption here: install "
                              "'wakeline[matrix]' (vodozemac)")
        store.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.name = name
        self.owner = conn.user_id
        config = AsyncClientConfig(
            encryption_enabled=True, store_sync_tokens=False, pickle_key=_pickle_key(token),
            # Errors come back to the loop, which backs off and says so (status, doctor),
            # instead of nio retrying a dead homeserver silently forever.
            max_timeouts=0, max_limit_exceeded=3, request_timeout=REQUEST_TIMEOUT_SECONDS)
        self._client = AsyncClient(conn.homeserver, conn.user_id, device_id=conn.device_id,
                                   store_path=str(store), config=config)
        # The stored token and the crypto store: never a new login, never a new device.
        self._client.restore_login(conn.user_id, conn.device_id, token)
        if self._client.olm is None:
            raise MatrixError(f"the crypto store in {store} did not load")
        self._synced = False

    @property
    def fingerprint(self) -> str | None:
        """The device's ed25519 key, for a person verifying it by hand."""
        olm = self._client.olm
        return str(olm.account.identity_keys["ed25519"]) if olm is not None else None

    async def close(self) -> None:
        """Close the HTTP session (and its connections)."""
        await self._client.close()

    # --- checks ----------------------------------------------------------------------------

    async def whoami(self) -> Identity:
        """Who the token belongs to."""
        answer = await self._client.whoami()
        if not isinstance(answer, WhoamiResponse):
            raise MatrixError(f"whoami refused: {_error(answer)}")
        return Identity(answer.user_id, answer.device_id)

    async def joined_rooms(self) -> list[str]:
        """The rooms the owner has joined."""
        answer = await self._client.joined_rooms()
        if not isinstance(answer, JoinedRoomsResponse):
            raise MatrixError(f"joined_rooms refused: {_error(answer)}")
        return list(answer.rooms)

    async def members(self, room_id: str) -> list[str]:
        """The user ids joined to a room."""
        answer = await self._client.joined_members(room_id)
        if not isinstance(answer, JoinedMembersResponse):
            raise MatrixError(f"members of {room_id} refused: {_error(answer)}")
        return [m.user_id for m in answer.members]

    # --- sync ------------------------------------------------------------------------------

    async def sync(self, since: str | None, timeout_ms: int) -> SyncPage:
        """One page from `since` (wakeline's cursor), decrypted as far as keys allow.

        The first sync after a start asks for the full state: nio keeps no room state
        between runs, and needs the members of a room to send into it.
        """
        answer = await self._client.sync(timeout=timeout_ms, since=since, sync_filter=SYNC_FILTER,
                                         full_state=not self._synced or None)
        if not isinstance(answer, SyncResponse):
            raise MatrixError(f"sync refused: {_error(answer)}")
        self._synced = True
        self._decrypt_leftovers(answer)
        await self.chores()
        return self._page(answer, first=since is None)

    def _decrypt_leftovers(self, page: SyncResponse) -> None:
        """Decrypt, in place, what nio left encrypted: it skips all processing of a page whose
        `next_batch` it has seen, which is exactly a page fetched again from a kept cursor."""
        for room_id, room in page.rooms.join.items():
            for index, event in enumerate(room.timeline.events):
                if isinstance(event, MegolmEvent):
                    event.room_id = room_id  # nio sets it only while processing a page
                    try:
                        room.timeline.events[index] = self._client.decrypt_event(event)
                    except EncryptionError:
                        pass  # no key (yet): the page keeps the cursor where it was

    async def chores(self) -> None:
        """The key uploads, queries and claims `sync_forever` does between syncs."""
        client = self._client
        if client.should_upload_keys:
            await client.keys_upload()
        if client.should_query_keys:
            await client.keys_query()
        if client.should_claim_keys:
            await client.keys_claim(client.get_users_for_key_claiming())
        await client.send_to_device_messages()

    def _page(self, answer: SyncResponse, *, first: bool) -> SyncPage:
        rooms = {}
        for room_id, joined in answer.rooms.join.items():
            nio_room = self._client.rooms.get(room_id)
            events = []
            for event in joined.timeline.events:
                source = getattr(event, "source", None)
                if isinstance(event, MegolmEvent):
                    events.append(TimelineEvent(source or {}, encrypted=True, undecryptable=True))
                    continue
                sender = source.get("sender") if isinstance(source, dict) else None
                name = nio_room.user_name(sender) if nio_room is not None and sender else None
                events.append(TimelineEvent(source if isinstance(source, dict) else {},
                                            encrypted=bool(getattr(event, "decrypted", False)),
                                            sender_name=name))
            rooms[room_id] = RoomTimeline(tuple(events), bool(joined.timeline.limited))
        return SyncPage(str(answer.next_batch), rooms, frozenset(answer.rooms.leave), first)

    # --- reads and sends -------------------------------------------------------------------

    async def recent(self, room_id: str, limit: int) -> list[dict[str, Any]]:
        """The room's latest events (decrypted where keys allow), oldest first."""
        answer = await self._client.room_messages(room_id, limit=min(limit, READ_MAX_EVENTS),
                                                  message_filter={"types": ["m.room.message",
                                                                            "m.room.encrypted"]})
        if not isinstance(answer, RoomMessagesResponse):
            raise MatrixError(f"messages of {room_id} refused: {_error(answer)}")
        out = []
        for event in reversed(answer.chunk):
            source = getattr(event, "source", None) or {}
            out.append({"source": source, "undecryptable": isinstance(event, MegolmEvent)})
        return out

    async def send_text(self, room_id: str, body: str, txn_id: str) -> str:
        """Send `m.text` once: the same `txn_id` again is the same event (the homeserver
        answers with the first one's id). Returns the event id."""
        answer = await self._client.room_send(
            room_id, "m.room.message", {"msgtype": "m.text", "body": body}, tx_id=txn_id,
            # The owner approved this text for this room as its members are: their devices
            # get the keys whether or not anyone verified them (docs/operations.md).
            ignore_unverified_devices=True)
        if not isinstance(answer, RoomSendResponse):
            code = str(getattr(answer, "status_code", None) or "")
            if code.startswith("M_") and code not in TRANSIENT_CODES:
                raise MatrixRefused(f"send refused: {_error(answer)}", code)
            raise MatrixError(f"send failed: {_error(answer)}")
        return str(answer.event_id)


def _error(answer: Any) -> str:
    """A refusal in a line: the Matrix error code and message, never a token."""
    code = getattr(answer, "status_code", None) or ""
    message = getattr(answer, "message", None) or type(answer).__name__
    return f"{code} {message}".strip()[:300]
