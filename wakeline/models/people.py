"""Who Linear says each user is, and the deliveries waiting for that answer.

`linear_users` keeps Linear's answer to `user(id) { app }` per user id: a person, an
app, or gone (no such user). An app stays an app: a later answer never overwrites it.

`person_checks` lists FIFO entries held because the rule that decides them needs a
person and their actor was not known yet. Admission writes a row with the held
entry (`hold`); the tracker asks Linear about each actor whose attempt is due and
records the answer or the failure with its backoff; the entry is then decided again
through admission (`Admissions.recheck`), which removes the row. A row whose entry
is no longer held (a reset or a terminal state completed it meanwhile) is removed
the same way and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from peewee import Database

_HOLD = ("INSERT INTO person_checks (fifo_id, conversation_id, actor_id, created_at)"
         " VALUES (?, ?, ?, ?)")
_LEARN = (
    "INSERT INTO linear_users (id, kind, checked_at) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE"
    " SET kind = CASE WHEN linear_users.kind = 'app' THEN 'app' ELSE excluded.kind END,"
    " checked_at = excluded.checked_at"
)
_DUE = ("SELECT actor_id, MIN(attempts) FROM person_checks WHERE next_at IS NULL OR next_at <= ?"
        " GROUP BY actor_id ORDER BY MIN(created_at) LIMIT ?")
_WAITING = (
    "SELECT p.fifo_id, d.envelope, d.headline, d.received_at, r.delivery_id, r.body_sha256,"
    " r.event_type, r.action, r.webhook_at, c.namespace, c.key FROM person_checks p"
    " JOIN deliveries d ON d.id = p.fifo_id JOIN receipts r ON r.id = d.receipt_id"
    " JOIN conversations c ON c.id = p.conversation_id WHERE p.actor_id = ? ORDER BY p.fifo_id"
)


@dataclass(frozen=True)
class HeldForPerson:
    """A FIFO entry waiting for its actor's answer, with what deciding it again needs."""

    fifo_id: int
    envelope: str
    headline: str
    received_at: int
    delivery_id: str
    body_sha256: str
    event_type: str
    action: str
    webhook_at: int
    namespace: str
    key: str


class PeopleRecords:
    """Linear's answers about users, and the checks waiting for them, over one database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def known(self) -> list[tuple[str, str]]:
        """Every (user id, kind) Linear answered for."""
        return [(r[0], r[1]) for r in self._db.execute_sql(
            "SELECT id, kind FROM linear_users").fetchall()]

    def kind_of(self, user_id: str) -> str | None:
        """What Linear said of this user, if it was asked (another host may have asked)."""
        row = self._db.execute_sql("SELECT kind FROM linear_users WHERE id = ?",
                                   (user_id,)).fetchone()
        return str(row[0]) if row else None

    def learn(self, user_id: str, kind: str, now: int) -> str:
        """Record Linear's answer; returns the kind kept (an app stays an app)."""
        with self._db.atomic():
            self._db.execute_sql(_LEARN, (user_id, kind, now))
            return str(self._db.execute_sql("SELECT kind FROM linear_users WHERE id = ?",
                                            (user_id,)).fetchone()[0])

    @staticmethod
    def hold(conn: Any, fifo_id: int, conversation_id: str, actor_id: str, now: int) -> None:
        """Inside admission: the entry `fifo_id` waits until Linear says who `actor_id` is."""
        conn.execute(_HOLD, (fifo_id, conversation_id, actor_id, now))

    @staticmethod
    def checked(conn: Any, fifo_id: int) -> None:
        """Inside admission: the entry was decided again; it waits no more."""
        conn.execute("DELETE FROM person_checks WHERE fifo_id = ?", (fifo_id,))

    def due(self, now: int, limit: int = 50) -> list[tuple[str, int]]:
        """Actors whose lookup is due, with the attempts made so far, oldest wait first."""
        return [(str(r[0]), int(r[1])) for r in self._db.execute_sql(_DUE, (now, limit)).fetchall()]

    def failed(self, actor_id: str, now: int, error: str, backoff_seconds: Sequence[float]
               ) -> float:
        """A lookup found no answer: its checks wait and ask again; returns the wait (s)."""
        with self._db.atomic():
            row = self._db.execute_sql("SELECT MIN(attempts) FROM person_checks WHERE actor_id = ?",
                                       (actor_id,)).fetchone()
            attempts = int(row[0] or 0) if row else 0
            delay = backoff_seconds[min(attempts, len(backoff_seconds) - 1)]
            self._db.execute_sql(
                "UPDATE person_checks SET attempts = attempts + 1, error = ?, next_at = ?"
                " WHERE actor_id = ?", (error[:500], now + int(delay * 1000), actor_id))
            return delay

    def drop_settled(self, actor_id: str) -> int:
        """Forget this actor's checks whose entry is no longer held (a reset or a terminal
        state completed it): nothing is left to decide."""
        with self._db.atomic():
            return int(self._db.execute_sql(
                "DELETE FROM person_checks WHERE actor_id = ? AND fifo_id NOT IN"
                " (SELECT id FROM deliveries WHERE state = 'held')", (actor_id,)).rowcount)

    def waiting(self, actor_id: str) -> list[HeldForPerson]:
        """The entries waiting for this actor, in FIFO order."""
        return [HeldForPerson(int(r[0]), r[1], r[2], int(r[3]), r[4], r[5], r[6], r[7], int(r[8]),
                              r[9], r[10])
                for r in self._db.execute_sql(_WAITING, (actor_id,)).fetchall()]

    def count(self) -> int:
        """How many entries wait for an answer (status, doctor)."""
        return int(self._db.execute_sql("SELECT COUNT(*) FROM person_checks").fetchone()[0])
