"""Matrix pages into the store: a page's eligible events and the sync cursor, one transaction.

A polling adapter may move its continuation cursor only once every eligible event of the
page it read is durable (decision 0024). So the events of one `/sync` page and the cursor
that follows it are written together: a crash either keeps both or loses both, and the page
is fetched again from the old cursor. A receipt per event makes that second fetch harmless:
its key is the event id, so an event seen again is a duplicate and changes nothing.

The store decides nothing about Matrix: the layer above hands it typed events (which route,
whether the event wakes its conversation) and the cursor to keep. A room is one conversation
(its subject is `matrix:<connection>` / the room id); Matrix conversations are tainted (their
turns hold a `room` token) and have no issue. Their `kind` stays `issue`, the schema's name
for a conversation that runs turns: the namespace says which provider it belongs to.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, Sequence

from peewee import Database

from wakeline.models.envelopes import MatrixMessage, Subject, dump_envelope
from wakeline.models.states import (
    ConversationKind,
    DeliveryState,
    Outcome,
    Ownership,
    TurnResultKind,
)

MATRIX_NAMESPACE = "matrix:{connection}"
EVENT_TYPE = "m.room.message"

_RECEIPT = (
    "INSERT INTO receipts (delivery_id, body_sha256, event_type, action, received_at, webhook_at,"
    " outcome, reason, conversation_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
    " RETURNING id"
)
_FIND = "SELECT id, reset_at, terminal FROM conversations WHERE namespace = ? AND key = ?"
_CREATE = (
    "INSERT INTO conversations (id, namespace, key, kind, title, route, created_at, updated_at,"
    " tainted, ownership) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?)"
)
_DELIVERY = (
    "INSERT INTO deliveries (conversation_id, receipt_id, state, completion, completed_at,"
    " envelope, headline, received_at, size_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_RECEIPT_CONVERSATION = "UPDATE receipts SET conversation_id = ? WHERE id = ?"
_TOUCH = "UPDATE conversations SET updated_at = ? WHERE id = ?"
_CURSOR = (
    "INSERT INTO matrix_cursors (connection, cursor, updated_at) VALUES (?, ?, ?)"
    " ON CONFLICT (connection) DO UPDATE SET cursor = excluded.cursor,"
    " updated_at = excluded.updated_at"
)


def room_subject(connection: str, room_id: str) -> Subject:
    """The subject of a room's conversation: `matrix:<connection>` plus the room id."""
    return Subject(namespace=MATRIX_NAMESPACE.format(connection=connection), key=room_id)


def receipt_key(connection: str, event_id: str) -> str:
    """A Matrix event's receipt key (its delivery id), namespaced apart from Linear's UUIDs."""
    return f"matrix:{connection}:{event_id}"


@dataclass(frozen=True)
class RoomEvent:
    """One eligible event of a page, typed by the Matrix adapter.

    `wakes`: the route's activation is `on_event` (a FIFO entry, the conversation woken);
    False records it only (`on_demand`). `title` names the conversation if it is created.
    """

    envelope: MatrixMessage
    headline: str
    title: str
    wakes: bool
    received_ms: int
    sent_ms: int

    @property
    def subject(self) -> Subject:
        """The room's conversation subject."""
        return room_subject(self.envelope.connection, self.envelope.room_id)

    @property
    def delivery_id(self) -> str:
        """The receipt key."""
        return receipt_key(self.envelope.connection, self.envelope.event_id)


@dataclass(frozen=True)
class RoomAdmitted:
    """What admitting one event did: its conversation, and whether it was seen before
    (`duplicate`) or joined the FIFO (`joined`)."""

    event: RoomEvent
    conversation_id: str | None
    duplicate: bool
    joined: bool


class RoomAdmissions:
    """Matrix pages and cursors over one database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def cursor(self, connection: str) -> str | None:
        """The connection's committed sync cursor, or None before its first sync."""
        row = self._db.execute_sql("SELECT cursor FROM matrix_cursors WHERE connection = ?",
                                   (connection,)).fetchone()
        return str(row[0]) if row else None

    def admit_page(self, connection: str, events: Sequence[RoomEvent], cursor: str | None,
                   now: int) -> list[RoomAdmitted]:
        """Admit the page's events in order and store `cursor` (None keeps the old one): one
        IMMEDIATE transaction, so the cursor never moves past an event that is not durable."""
        with self._db.atomic():
            conn = self._db.raw()
            found: dict[Subject, tuple[str, int | None, bool]] = {}
            admitted = [self._admit(conn, event, found) for event in events]
            if cursor is not None:
                conn.execute(_CURSOR, (connection, cursor, now))
        return admitted

    def _admit(self, conn: Any, event: RoomEvent,
               found: dict[Subject, tuple[str, int | None, bool]]) -> RoomAdmitted:
        subject = event.subject
        known = found.get(subject) or self._conversation(conn, subject)
        wakes = event.wakes and not (known and known[2])  # a terminal conversation takes none
        reason = None if wakes else ("terminal" if event.wakes else "on_demand")
        outcome = Outcome.ACCEPTED if wakes else Outcome.IGNORED
        key = event.delivery_id
        rows = conn.execute(_RECEIPT, (
            key, hashlib.sha256(key.encode("utf-8")).hexdigest(), EVENT_TYPE, "m.text",
            event.received_ms, event.sent_ms, outcome.value, reason, None)).fetchall()
        if not rows:
            return RoomAdmitted(event, known[0] if known else None, duplicate=True, joined=False)
        receipt_id = int(rows[0][0])
        if known is None:
            # The room's first event: its conversation, created once and kept.
            known = ("cv_" + secrets.token_hex(8), None, False)
            conn.execute(_CREATE, (known[0], subject.namespace, subject.key,
                                   ConversationKind.ISSUE.value, event.title, event.envelope.route,
                                   event.received_ms, event.received_ms, Ownership.OWNED.value))
        found[subject] = known
        conv_id = known[0]
        conn.execute(_RECEIPT_CONVERSATION, (conv_id, receipt_id))
        conn.execute(_TOUCH, (event.received_ms, conv_id))
        if not wakes:
            return RoomAdmitted(event, conv_id, duplicate=False, joined=False)
        envelope = dump_envelope(event.envelope)
        # Received at or before a reset that committed first: the old context's, as recovery
        # would decide (the same rule as a Linear delivery's).
        reset_at = known[1]
        before_reset = reset_at is not None and event.received_ms <= reset_at
        conn.execute(_DELIVERY, (
            conv_id, receipt_id,
            (DeliveryState.COMPLETED if before_reset else DeliveryState.PENDING).value,
            TurnResultKind.RESET.value if before_reset else None,
            event.received_ms if before_reset else None, envelope, event.headline,
            event.received_ms, len(envelope.encode("utf-8"))))
        return RoomAdmitted(event, conv_id, duplicate=False, joined=not before_reset)

    @staticmethod
    def _conversation(conn: Any, subject: Subject
                      ) -> tuple[str, int | None, bool] | None:
        row = conn.execute(_FIND, (subject.namespace, subject.key)).fetchone()
        return (str(row[0]), row[1], bool(row[2])) if row else None

    def conversation_of(self, subject: Subject) -> str | None:
        """The id of the subject's conversation, if it exists."""
        row = self._db.execute_sql(_FIND, (subject.namespace, subject.key)).fetchone()
        return str(row[0]) if row else None

    def subject_of(self, conversation_id: str) -> Subject | None:
        """A conversation's subject (None for an unknown id)."""
        row = self._db.execute_sql("SELECT namespace, key FROM conversations WHERE id = ?",
                                   (conversation_id,)).fetchone()
        return Subject(namespace=row[0], key=row[1]) if row else None
