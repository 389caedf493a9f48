"""Conversation bookkeeping outside admission: ownership lookups, repositories, workspaces.

Ownership: a conversation created by a Comment in a project-scoped route waits
(`pending`) until the tracker has looked the issue up; what it found is
recorded here, or the failed attempt with its backoff. Repositories: the entry of
its route's `repos` a conversation works in, chosen once (a reset clears it), or the
question that waits for the person's pick (decision 0038). Workspaces: the branch (and
repository) a conversation's worktree uses, and the cleanup owed after a retirement or
reset, done by the supervisor once no turn runs in it (and again at start-up).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from peewee import Database, fn

from wakeline.models.envelopes import parse_envelope
from wakeline.models.fifo import Fifo, FifoEntry
from wakeline.models.states import DeliveryState, Ownership, TurnResultKind
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
    repo: str | None = None  # the route's `repos` entry it was made in


@dataclass(frozen=True)
class RepoState:
    """Which of its route's `repos` a conversation works in, or waits to be told."""

    repo: str | None  # chosen (until a reset)
    asked: int | None  # the person was asked: the first FIFO entry that waits for the pick
    workspace_repo: str | None  # the entry its worktree was made in


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

    # --- repositories ----------------------------------------------------------------------
    # Each write names the session the turn was claimed in: a reset since (a new session)
    # cleared the choice, and a turn that was running then must not set it again.

    def repo_state(self, conversation_id: str) -> RepoState:
        """The conversation's repository, chosen or asked for, and its worktree's."""
        c = self._t.conversations
        row = c.select(c.repo, c.repo_asked, c.workspace_repo).where(
            c.id == conversation_id).tuples().first()
        return RepoState(*row) if row else RepoState(None, None, None)

    def choose_repo(self, conversation_id: str, name: str, session_id: str) -> bool:
        """Record the repository the conversation works in (from now until a reset)."""
        c = self._t.conversations
        with self._db.atomic():
            return c.update(repo=name, repo_asked=None).where(
                (c.id == conversation_id) & (c.session_id == session_id)).execute() == 1

    def ask_repo(self, conversation_id: str, session_id: str, first_seq: int) -> bool:
        """The person is asked which repository: the entries from `first_seq` on (the
        asking turn's) wait for the pick; a question asked again keeps the first one's."""
        c = self._t.conversations
        with self._db.atomic():
            return c.update(repo_asked=fn.COALESCE(c.repo_asked, first_seq)).where(
                (c.id == conversation_id) & (c.session_id == session_id)).execute() == 1

    def pick_repo(self, conversation_id: str, name: str, session_id: str, turn_id: str,
                  before_seq: int) -> tuple[FifoEntry, ...] | None:
        """The person picked `name`: record it, and let the entries that waited for the pick
        (completed as the question, from the first asked one up to `before_seq`) ride the
        running turn `turn_id` again. One transaction; returns every entry the turn now
        carries, or None when the turn or the question is gone (a reset, another pick)."""
        c, d, t = self._t.conversations, self._t.deliveries, self._t.turns
        with self._db.atomic():
            row = c.select(c.repo_asked).where(
                (c.id == conversation_id) & (c.session_id == session_id)).tuples().first()
            if row is None or row[0] is None or not t.select().where(t.id == turn_id).exists():
                return None
            d.update(state=DeliveryState.CLAIMED.value, turn_id=turn_id, completed_at=None,
                     completion=None).where(
                (d.conversation_id == conversation_id) & (d.id >= row[0]) & (d.id < before_seq)
                & (d.state == DeliveryState.COMPLETED.value)
                & (d.completion == TurnResultKind.ELICITATION.value)).execute()
            c.update(repo=name, repo_asked=None).where(c.id == conversation_id).execute()
            return tuple(FifoEntry(r.id, r.headline, r.received_at, parse_envelope(r.envelope))
                         for r in d.select().where(d.turn_id == turn_id).order_by(d.id))

    # --- workspaces ------------------------------------------------------------------------

    def record_workspace(self, conversation_id: str, branch: str | None,
                         repo: str | None = None) -> None:
        """Remember the worktree's branch (and the `repos` entry it is of), before the agent
        works on it."""
        c = self._t.conversations
        with self._db.atomic():
            c.update(workspace_branch=branch, workspace_repo=repo).where(
                c.id == conversation_id).execute()

    def cleanups_due(self, ids: Iterable[str] | None = None) -> list[Cleanup]:
        """Worktrees owed their retirement (of `ids` only, when given)."""
        c = self._t.conversations
        q = c.select(c.id, c.route, c.workspace_branch, c.workspace_repo).where(
            c.workspace_cleanup == True)  # noqa: E712
        if ids is not None:
            q = q.where(c.id.in_(list(ids)))
        return [Cleanup(r.id, r.route, r.workspace_branch, r.workspace_repo) for r in q]

    def workspace_retired(self, conversation_id: str, kept: str | None) -> None:
        """The cleanup ran: removed (`kept` None), or kept whole and why."""
        c = self._t.conversations
        with self._db.atomic():
            c.update(workspace_cleanup=False, workspace_kept=kept).where(
                (c.id == conversation_id) & (c.workspace_cleanup == True)).execute()  # noqa: E712
