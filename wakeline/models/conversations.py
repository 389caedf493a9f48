"""Conversation bookkeeping outside admission: ownership lookups and workspace cleanups.

Ownership: a conversation created by a Comment in a project-scoped route waits
(`pending`) until the tracker has looked the issue up; what it found is
recorded here, or the failed attempt with its backoff. Workspaces: the branch a
conversation's worktree uses, and the cleanup owed after a retirement or reset,
done by the supervisor once no turn runs in it (and again at start-up).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from peewee import Database

from wakeline.models.fifo import Fifo
from wakeline.models.states import Ownership
from wakeline.models.tables import Tables


@dataclass(frozen=True)
class OwnershipCheck:
    """A conversation whose route must learn, from Linear, whether it owns the issue."""

    conversation_id: str
    issue_id: str
    attempts: int


@dataclass(frozen=True)
class Cleanup:
    """A worktree owed its retirement."""

    conversation_id: str
    route: str | None
    branch: str


class ConversationRecords:
    """Ownership and workspace records over one database."""

    def __init__(self, db: Database, tables: Tables, fifo: Fifo) -> None:
        self._db = db
        self._t = tables
        self._fifo = fifo

    # --- ownership -------------------------------------------------------------------------

    def ownership_due(self, now: int, ids: Iterable[str] | None = None, limit: int = 50
                      ) -> list[OwnershipCheck]:
        """Pending conversations whose lookup is due (or exactly `ids`, when given)."""
        c = self._t.conversations
        q = c.select(c.id, c.issue_id, c.ownership_attempts).where(
            (c.ownership == Ownership.PENDING.value) & c.issue_id.is_null(False))
        wanted = list(ids) if ids is not None else None
        if wanted is not None:
            q = q.where(c.id.in_(wanted))
        else:
            q = q.where(c.ownership_next_at.is_null() | (c.ownership_next_at <= now))
        return [OwnershipCheck(r.id, r.issue_id, r.ownership_attempts)
                for r in q.order_by(c.ownership_next_at).limit(limit)]

    def settle_ownership(self, conversation_id: str, now: int, *, route: str | None,
                         project_id: str | None, answer: dict[str, Any], tainted: bool = False
                         ) -> bool:
        """Record a lookup's answer: owned by `route`, or (None) not owned.

        Not owned completes the conversation's Issue and Comment deliveries as
        `not_owned`. Returns False when the conversation was no longer pending (a
        signed Issue payload answered first), True when it should be woken.
        """
        c = self._t.conversations
        with self._db.atomic():
            fields: dict[Any, Any] = {
                c.ownership: (Ownership.OWNED if route else Ownership.NOT_OWNED).value,
                c.project_id: project_id, c.ownership_answer: json.dumps(answer),
                c.ownership_error: None, c.ownership_next_at: None, c.updated_at: now,
            }
            if route:
                fields[c.route] = route
                if tainted:
                    fields[c.tainted] = True
            changed = c.update(fields).where(
                (c.id == conversation_id) & (c.ownership == Ownership.PENDING.value)).execute()
            if changed and not route:
                self._fifo.complete_not_owned(conversation_id, now)
            return bool(changed)

    def ownership_failed(self, conversation_id: str, now: int, error: str,
                         backoff_seconds: Sequence[float]) -> float:
        """A lookup found no answer (Linear unreachable, the budget spent): wait and try again.

        Returns the seconds until the next attempt; the last backoff step repeats.
        """
        c = self._t.conversations
        with self._db.atomic():
            row = c.get_or_none(c.id == conversation_id)
            if row is None or row.ownership != Ownership.PENDING:
                return 0
            delay = backoff_seconds[min(row.ownership_attempts, len(backoff_seconds) - 1)]
            c.update(ownership_attempts=row.ownership_attempts + 1, ownership_error=error[:500],
                     ownership_next_at=now + int(delay * 1000)).where(c.id == conversation_id).execute()
            return delay

    # --- workspaces ------------------------------------------------------------------------

    def record_workspace(self, conversation_id: str, branch: str | None) -> None:
        """Remember the worktree's branch, before the agent works on it."""
        c = self._t.conversations
        with self._db.atomic():
            c.update(workspace_branch=branch).where(c.id == conversation_id).execute()

    def cleanups_due(self, ids: Iterable[str] | None = None) -> list[Cleanup]:
        """Worktrees owed their retirement (of `ids` only, when given)."""
        c = self._t.conversations
        q = c.select(c.id, c.route, c.workspace_branch).where(c.workspace_cleanup == True)  # noqa: E712
        if ids is not None:
            q = q.where(c.id.in_(list(ids)))
        return [Cleanup(r.id, r.route, r.workspace_branch) for r in q]

    def workspace_retired(self, conversation_id: str, kept: str | None) -> None:
        """The cleanup ran: removed (`kept` None), or kept whole and why."""
        c = self._t.conversations
        with self._db.atomic():
            c.update(workspace_cleanup=False, workspace_kept=kept).where(
                (c.id == conversation_id) & (c.workspace_cleanup == True)).execute()  # noqa: E712
