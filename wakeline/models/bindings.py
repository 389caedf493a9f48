"""Control bindings: which human-facing thread shows each conversation.

A binding maps one conversation to its current control thread (one per
conversation; a thread belongs to at most one conversation) and is the
authoritative lookup from a thread id back to its conversation. It mirrors the
thread's presentation state (title, archived, locked) and keeps the id of the
last message seen there, the cursor a catch-up resumes from. Terminal intent is
never stored here: it lives on the conversation, and the control reapplies it.

The store records what the control decides; it knows no provider's API. Every
write is one transaction. A thread that disappears is replaced with `rebind`,
which moves the binding in one statement guarded by the thread it replaces, so
the conversation, its session and its workspace never change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from peewee import IntegrityError, SqliteDatabase

from wakeline.errors import BindingConflict

_COLUMNS = ("conversation_id, provider, thread_id, parent_id, title, archived, locked,"
            " last_message_id")
_OF = f"SELECT {_COLUMNS} FROM control_bindings WHERE conversation_id = ?"
_BY_THREAD = f"SELECT {_COLUMNS} FROM control_bindings WHERE provider = ? AND thread_id = ?"
_BIND = (
    "INSERT INTO control_bindings (conversation_id, provider, thread_id, parent_id, title,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_REBIND = (
    "UPDATE control_bindings SET thread_id = ?, parent_id = ?, archived = 0, locked = 0,"
    " last_message_id = NULL, updated_at = ? WHERE conversation_id = ? AND thread_id = ?"
)
_MIRROR = ("UPDATE control_bindings SET archived = ?, locked = ?, updated_at = ?"
           " WHERE conversation_id = ? AND thread_id = ?")
# The cursor only moves forward: a late Gateway message must not move it back.
_SEEN = ("UPDATE control_bindings SET last_message_id = ? WHERE provider = ? AND thread_id = ?"
         " AND (last_message_id IS NULL OR last_message_id < ?)")
_TARGET = ("SELECT id, namespace, key, route, terminal, issue_id, issue_identifier, title"
           " FROM conversations WHERE id = ?")
_TERMINAL_OPEN = (
    "SELECT b.conversation_id FROM control_bindings b JOIN conversations c"
    " ON c.id = b.conversation_id WHERE b.provider = ? AND c.terminal = 1"
    " AND (b.archived = 0 OR b.locked = 0) ORDER BY b.updated_at"
)
# The results a thread still owes, oldest first (a turn's answer, error, question or stop).
_UNANSWERED = (
    "SELECT r.id, r.result, r.output FROM turn_results r JOIN control_bindings b"
    " ON b.conversation_id = r.conversation_id WHERE r.conversation_id = ?"
    " AND r.id > COALESCE(b.answered_through, 0) AND r.result IN ({kinds}) ORDER BY r.id"
)
_ANSWERED = ("UPDATE control_bindings SET answered_through = ? WHERE conversation_id = ?"
             " AND (answered_through IS NULL OR answered_through < ?)")
_OWING = (
    "SELECT b.conversation_id FROM control_bindings b JOIN conversations c"
    " ON c.id = b.conversation_id WHERE b.provider = ? AND c.terminal = 0 AND EXISTS"
    " (SELECT 1 FROM turn_results r WHERE r.conversation_id = b.conversation_id"
    " AND r.id > COALESCE(b.answered_through, 0) AND r.result IN ({kinds}))"
)
_OPEN = (
    f"SELECT {', '.join('b.' + c.strip() for c in _COLUMNS.split(','))} FROM control_bindings b"
    " JOIN conversations c ON c.id = b.conversation_id WHERE b.provider = ? AND c.terminal = 0"
    " ORDER BY b.updated_at"
)


@dataclass(frozen=True)
class Binding:
    """A conversation's control thread, as last recorded."""

    conversation_id: str
    provider: str
    thread_id: str
    parent_id: str
    title: str
    archived: bool
    locked: bool
    last_message_id: int | None = None

    @classmethod
    def from_row(cls, row: Any) -> Binding:
        """From a `_COLUMNS` row."""
        return cls(row[0], row[1], row[2], row[3], row[4], bool(row[5]), bool(row[6]), row[7])

    def to_json(self) -> dict[str, Any]:
        """The operator view's `control` object."""
        return {"provider": self.provider, "threadId": self.thread_id, "title": self.title,
                "archived": self.archived, "locked": self.locked, "parentId": self.parent_id}


@dataclass(frozen=True)
class OwedAnswer:
    """A turn result its thread has not shown yet: the `turn_results` row id, how the turn
    ended, and its output."""

    result_id: int
    result: str
    output: str


@dataclass(frozen=True)
class ControlTarget:
    """What a control needs of a conversation: its subject, route, lifecycle and names."""

    conversation_id: str
    namespace: str
    key: str
    route: str | None
    terminal: bool
    issue_id: str | None
    issue_identifier: str | None
    title: str


class Bindings:
    """Control bindings over one database; every write is one transaction."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    # --- reads -----------------------------------------------------------------------------

    def of(self, conversation_id: str) -> Binding | None:
        """The conversation's binding, or None."""
        row = self._db.execute_sql(_OF, (conversation_id,)).fetchone()
        return Binding.from_row(row) if row else None

    def by_thread(self, provider: str, thread_id: str) -> Binding | None:
        """The binding of a thread: the only way from a thread id to its conversation."""
        row = self._db.execute_sql(_BY_THREAD, (provider, thread_id)).fetchone()
        return Binding.from_row(row) if row else None

    def target(self, conversation_id: str) -> ControlTarget | None:
        """The conversation as a control sees it, or None when it does not exist."""
        row = self._db.execute_sql(_TARGET, (conversation_id,)).fetchone()
        if row is None:
            return None
        return ControlTarget(row[0], row[1], row[2], row[3], bool(row[4]), row[5], row[6],
                             row[7] or "")

    def terminal_unclosed(self, provider: str) -> list[str]:
        """Conversations with terminal intent whose thread is not yet archived and locked."""
        return [r[0] for r in self._db.execute_sql(_TERMINAL_OPEN, (provider,)).fetchall()]

    def open_bindings(self, provider: str) -> list[Binding]:
        """The bindings of every conversation without terminal intent (catch-up candidates)."""
        return [Binding.from_row(r) for r in self._db.execute_sql(_OPEN, (provider,)).fetchall()]

    def unanswered(self, conversation_id: str, kinds: tuple[str, ...]) -> list[OwedAnswer]:
        """The conversation's results of these kinds its thread has not shown, oldest first."""
        sql = _UNANSWERED.format(kinds=", ".join("?" * len(kinds)))
        rows = self._db.execute_sql(sql, (conversation_id, *kinds)).fetchall()
        return [OwedAnswer(int(r[0]), r[1], r[2] or "") for r in rows]

    def owing_answers(self, provider: str, kinds: tuple[str, ...]) -> list[str]:
        """Open conversations whose thread owes results of these kinds (a restart, an outage)."""
        sql = _OWING.format(kinds=", ".join("?" * len(kinds)))
        return [r[0] for r in self._db.execute_sql(sql, (provider, *kinds)).fetchall()]

    # --- writes ----------------------------------------------------------------------------

    def answered(self, conversation_id: str, result_id: int) -> None:
        """The thread shows every owed result up to `result_id` (the mark never moves back)."""
        with self._db.atomic():
            self._db.execute_sql(_ANSWERED, (result_id, conversation_id, result_id))

    def bind(self, binding: Binding, now: int) -> None:
        """Record a conversation's first thread.

        Raises:
            BindingConflict: the conversation already has a thread, or another holds this one.
        """
        try:
            with self._db.atomic():
                self._db.execute_sql(_BIND, (binding.conversation_id, binding.provider,
                                             binding.thread_id, binding.parent_id, binding.title,
                                             now, now))
        except IntegrityError as exc:
            raise BindingConflict(f"{binding.conversation_id} or thread {binding.thread_id} "
                                  "is bound already") from exc

    def rebind(self, conversation_id: str, old_thread_id: str, new_thread_id: str,
               parent_id: str, now: int) -> None:
        """Move the binding from a thread that is gone to its replacement, in one transaction.

        Only the binding changes: the conversation keeps its id, session and workspace. The
        replacement starts unarchived, unlocked and with no cursor.

        Raises:
            BindingConflict: the binding no longer names `old_thread_id` (someone else moved
                it), or another conversation holds `new_thread_id`; nothing changed.
        """
        try:
            with self._db.atomic():
                moved = self._db.execute_sql(
                    _REBIND, (new_thread_id, parent_id, now, conversation_id, old_thread_id)
                ).rowcount
                if moved != 1:
                    raise BindingConflict(f"{conversation_id} is no longer bound to "
                                          f"{old_thread_id}")
        except IntegrityError as exc:
            raise BindingConflict(f"thread {new_thread_id} is bound already") from exc

    def mirror(self, conversation_id: str, thread_id: str, *, archived: bool, locked: bool,
               now: int) -> None:
        """Record the thread's archived and locked state as Discord now shows it."""
        with self._db.atomic():
            self._db.execute_sql(_MIRROR, (int(archived), int(locked), now, conversation_id,
                                           thread_id))

    def seen(self, provider: str, thread_id: str, message_id: int) -> None:
        """Move the thread's catch-up cursor forward to `message_id` (never back)."""
        with self._db.atomic():
            self._db.execute_sql(_SEEN, (message_id, provider, thread_id, message_id))
