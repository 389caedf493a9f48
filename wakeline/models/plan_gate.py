"""The plan-approve-execute gate of one issue: its plan revisions, the approval, the lease.

A planning route's conversation has one row here once its workflow starts. The
layers above decide (a person's move, an approval, a planning turn's answer); this
module records it, inside the caller's transaction, so a decision and what it
causes (a FIFO entry, a state move to send) commit together. The execution lease is
the row's `lease_since`: at most one per issue, since the conversation is the issue.

    none --request--> planning --plan posted--> awaiting --approve--> approved (lease)
      ^                  ^  ^--revise (a comment)-----'                    |
      |                  '--------------------- request (withdraws) -------'
      '------------------------------ release (terminal) ------------------'

`executing` is `approved` with a turn running; views derive it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from peewee import Database

from wakeline.models.tables import Tables


class Phase(StrEnum):
    """Where an issue's workflow stands."""

    NONE = "none"
    PLANNING = "planning"
    AWAITING = "awaiting"
    APPROVED = "approved"
    EXECUTING = "executing"  # approved, a turn running (never stored)


@dataclass(frozen=True)
class Gate:
    """One conversation's gate, as stored."""

    conversation_id: str
    phase: Phase
    rev: int
    plan: str | None
    comment_id: str | None
    approved_rev: int | None
    approved_by: str | None
    approved_plan: str | None
    lease_since: int | None
    lease_delivery: str | None

    @property
    def leased(self) -> bool:
        """True while the execution lease is held."""
        return self.lease_since is not None


NO_GATE = Gate("", Phase.NONE, 0, None, None, None, None, None, None, None)


class PlanGates:
    """Gate rows over one database; every write joins the caller's transaction."""

    def __init__(self, db: Database, tables: Tables) -> None:
        self._db = db
        self._t = tables

    def get(self, conversation_id: str) -> Gate:
        """The conversation's gate (`NO_GATE` values when its workflow never started)."""
        row = self._t.plan_gates.get_or_none(self._t.plan_gates.conversation_id == conversation_id)
        return replace(NO_GATE, conversation_id=conversation_id) if row is None else _gate(row)

    def awaiting(self, limit: int) -> list[Gate]:
        """Plans that wait for a person's approval, the longest waiting first."""
        g = self._t.plan_gates
        rows = g.select().where(g.phase == Phase.AWAITING.value).order_by(g.updated_at).limit(limit)
        return [_gate(row) for row in rows]

    def request(self, conversation_id: str, now: int) -> None:
        """A person asked for a plan: every approval (and the lease) is withdrawn."""
        self._put(conversation_id, now, phase=Phase.PLANNING.value, approved_rev=None,
                  approved_by=None, approved_plan=None, lease_since=None, lease_delivery=None)

    def revise(self, conversation_id: str, now: int) -> None:
        """A comment on the waiting plan: plan again (the next revision)."""
        self._put(conversation_id, now, phase=Phase.PLANNING.value)

    def posted(self, conversation_id: str, rev: int, plan: str, comment_id: str, now: int) -> bool:
        """A planning turn's plan goes out as revision `rev`: it waits for approval. False
        (nothing changed) when the lease was taken meanwhile: a person moved the issue
        straight to In Progress while the agent planned, so this plan is moot."""
        g = self._t.plan_gates
        with self._db.atomic():
            return g.update(updated_at=now, phase=Phase.AWAITING.value, rev=rev, plan=plan,
                            comment_id=comment_id).where(
                (g.conversation_id == conversation_id) & g.lease_since.is_null()).execute() == 1

    def approve(self, conversation_id: str, approver: str, delivery_id: str, now: int) -> bool:
        """Take the execution lease for the plan shown now (its latest revision, if any).

        Returns:
            False when the lease is already held: one lease (and one execution) per issue.
        """
        gate = self.get(conversation_id)
        if gate.leased:
            return False
        self._put(conversation_id, now, phase=Phase.APPROVED.value,
                  approved_rev=gate.rev or None, approved_by=approver,
                  approved_plan=gate.plan if gate.rev else None, lease_since=now,
                  lease_delivery=delivery_id)
        return True

    def release(self, conversation_id: str, now: int) -> None:
        """Terminal: the lease is released and the workflow ends (revisions are kept)."""
        if self._t.plan_gates.get_or_none(self._t.plan_gates.conversation_id == conversation_id):
            self._put(conversation_id, now, phase=Phase.NONE.value, lease_since=None,
                      lease_delivery=None)

    def _put(self, conversation_id: str, now: int, **fields: object) -> None:
        g = self._t.plan_gates
        with self._db.atomic():
            if g.update(updated_at=now, **fields).where(g.conversation_id == conversation_id) \
                    .execute() == 0:
                g.insert(conversation_id=conversation_id, updated_at=now, **fields).execute()


def _gate(row: Any) -> Gate:
    return Gate(row.conversation_id, Phase(row.phase), row.rev, row.plan, row.comment_id,
                row.approved_rev, row.approved_by, row.approved_plan, row.lease_since,
                row.lease_delivery)
