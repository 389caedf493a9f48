"""Waiting-turn flags: wakes of a conversation coalesced into one engine job.

Where hosts share the database (engine "dbos", decision 0025), a turn runs as a job of the
engine's queue, and a wake must not mean a job each: a burst of deliveries would queue a
burst of jobs that find nothing to claim. A conversation's flag is set by the first wake
after its job began (`flip`, which also moves the conversation's generation on): only that
wake enqueues a job, named by the generation, so enqueueing it twice is one job. The job's
first step clears the flag (`begin`), and a wake after that flips it again for the next
job, which waits behind the running one. A crash between a flip and its enqueue leaves the
flag set: `waiting` lists such conversations for the engine to enqueue again.
"""

from __future__ import annotations

from typing import Iterable

from peewee import Database

_FLIP = (
    "UPDATE conversations SET wake_waiting = 1, wake_gen = wake_gen + 1"
    " WHERE wake_waiting = 0 AND id IN ({marks}) RETURNING id, wake_gen"
)
_BEGIN = "UPDATE conversations SET wake_waiting = 0 WHERE id = ? AND wake_gen = ?"
_WAITING = "SELECT id, wake_gen FROM conversations WHERE wake_waiting = 1"


class WakeFlags:
    """The conversations' waiting-turn flags, over one database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def flip(self, conversation_ids: Iterable[str]) -> list[tuple[str, int]]:
        """Set the flag of each conversation whose job has begun (or that has none): those
        need a job, named by the generation returned. The others ride the job already due."""
        ids = sorted(set(conversation_ids))
        if not ids:
            return []
        with self._db.atomic():
            rows = self._db.execute_sql(_FLIP.format(marks=", ".join("?" * len(ids))),
                                        ids).fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]

    def begin(self, conversation_id: str, generation: int) -> None:
        """A job of this generation begins: wakes from now on need a job of their own."""
        with self._db.atomic():
            self._db.execute_sql(_BEGIN, (conversation_id, generation))

    def waiting(self) -> list[tuple[str, int]]:
        """Conversations whose flag is set: each needs its generation's job (enqueued again
        after a crash; an existing job of that name is not enqueued twice)."""
        return [(str(r[0]), int(r[1])) for r in self._db.execute_sql(_WAITING).fetchall()]
