"""The outbox of writes to Linear (outbound effects).

An effect is prepared in the same transaction as the decision that causes it
(admission, finalisation, a stall), so a crash can neither lose it nor send it
twice: `prepared` effects are sent after a restart; `dispatched` ones may have
reached Linear and become `outcome_unknown`, never re-sent, until an operator
verifies the write is absent and releases them. The body is dropped once an
effect settles; a hash of it stays for investigations.

    prepared --mark_dispatched--> dispatched --settle--> confirmed | rejected
        |                              |
        +--(no credential)--> rejected +--(crash)--> outcome_unknown --operator--> released
"""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Iterable

from peewee import Database

from wakeline.clock import iso
from wakeline.models.tables import Tables


class EffectState(StrEnum):
    """Where an outbound write stands."""

    PREPARED = "prepared"
    DISPATCHED = "dispatched"
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    OUTCOME_UNKNOWN = "outcome_unknown"
    RELEASED = "released"


class EffectKind(StrEnum):
    """What the write creates in Linear."""

    AGENT_ACTIVITY = "agent_activity"
    COMMENT = "comment"
    # A write sent through `linear graphql` whose echo ids cannot tell apart: recorded as an
    # intent before it leaves, never sent by the outbox and never with a body.
    MUTATION = "mutation"
    # An update wakeline decides itself (an issue's workflow state, its plan comment): sent by
    # the outbox like the others, and an intent at once, so its echo is known for ours.
    UPDATE = "update"


@dataclass(frozen=True)
class Expectation:
    """The echo an update will cause, for echo memory: by whom, of what, with which values
    (`fingerprint`: a digest per written field, never the values)."""

    account: str | None
    event_kind: str
    subject: str
    fingerprint: dict[str, str]


@dataclass(frozen=True)
class EffectSpec:
    """A write to prepare: an agent activity on a session, or a comment on an issue."""

    kind: EffectKind
    target: str
    body: str
    activity_type: str | None = None
    conversation_id: str | None = None
    # An elicitation's choices, (label, value) each: it goes out with `signal: "select"`.
    options: tuple[tuple[str, str], ...] = ()
    # An update: the mutation's root field (`issueUpdate`, `commentUpdate`), its input, and
    # the echo it will cause.
    update_field: str | None = None
    update_input: dict[str, Any] | None = None
    expects: Expectation | None = None
    effect_id: str | None = None  # chosen by the caller (the plan comment's id is needed at once)

    def summary(self) -> str:
        """A body-free description for listings."""
        if self.kind is EffectKind.UPDATE:
            return f"{self.update_field} on {self.target} ({', '.join(sorted(self.update_input or {}))})"
        what = f"{self.activity_type} activity" if self.activity_type else "comment"
        return f"{what} on {self.target}"


@dataclass(frozen=True)
class SessionReply:
    """The same activity for every agent session a decision affects: its kind and body."""

    kind: str
    body: str

    def to(self, sessions: Iterable[str], conversation_id: str | None) -> list[EffectSpec]:
        """One activity effect per session."""
        return [EffectSpec(EffectKind.AGENT_ACTIVITY, s, self.body, self.kind, conversation_id)
                for s in sessions]


@dataclass(frozen=True)
class PendingEffect:
    """A prepared effect, ready for the wire."""

    id: str
    kind: EffectKind
    target: str
    body: str
    activity_type: str | None
    options: tuple[tuple[str, str], ...] = ()
    update_field: str | None = None
    update_input: dict[str, Any] | None = None


_PREPARE = (
    "INSERT INTO effects (id, kind, conversation_id, target, summary, body, mutation_hash, state,"
    " created_at, seq) VALUES (?, ?, ?, ?, ?, ?, ?, 'prepared', ?, ?)"
)
# `seq` breaks ties within a millisecond: the order they were prepared in (by this process;
# effects of two hosts in the same millisecond have no order to keep).
_EXPECTS = (
    "UPDATE effects SET account = ?, event_kind = ?, event_action = 'update', subject = ?,"
    " fingerprint = ? WHERE id = ?"
)
_PREPARED = (
    "SELECT id, kind, target, body FROM effects WHERE state = 'prepared' AND kind != 'mutation'"
    " ORDER BY created_at, seq LIMIT ?"
)
_SEQ = itertools.count(1)
_DISPATCH = (
    "UPDATE effects SET state = 'dispatched', dispatched_at = ? WHERE id = ? AND state = 'prepared'"
)
_SETTLE = (
    "UPDATE effects SET state = ?, settled_at = ?, error = ?, body = NULL, result_ids = ? WHERE id = ?"
)
_UNSETTLED = "SELECT COUNT(*) FROM effects WHERE state IN ('prepared', 'dispatched')"
UNSETTLED_OF = _UNSETTLED + " AND conversation_id = ?"  # one conversation's, for fixed SQL


class Outbox:
    """Effects over one database; callers hold the transaction for `prepare`.

    Every turn prepares, sends and settles its replies, so those run fixed SQL.
    """

    def __init__(self, db: Database, tables: Tables) -> None:
        self._db = db
        self._t = tables

    def prepare(self, specs: Iterable[EffectSpec], now: int) -> list[str]:
        """Record effects to send (inside the caller's transaction); returns their ids."""
        ids = []
        for spec in specs:
            effect_id = spec.effect_id or str(uuid.uuid4())
            payload: dict[str, Any] = {"type": spec.activity_type, "body": spec.body}
            if spec.options:
                payload["options"] = [list(o) for o in spec.options]
            if spec.kind is EffectKind.UPDATE:
                payload = {"field": spec.update_field, "input": spec.update_input}
            mutation_hash = hashlib.sha256(json.dumps([spec.kind, spec.target, payload]).encode()).hexdigest()
            self._db.execute_sql(_PREPARE, (effect_id, spec.kind.value, spec.conversation_id,
                                            spec.target, spec.summary(), json.dumps(payload),
                                            mutation_hash, now, next(_SEQ)))
            if spec.expects is not None:
                x = spec.expects
                self._db.execute_sql(_EXPECTS, (x.account, x.event_kind, x.subject,
                                                json.dumps(x.fingerprint), effect_id))
            ids.append(effect_id)
        return ids

    def prepared(self, limit: int = 50, exclude: Iterable[str] = ()) -> list[PendingEffect]:
        """Prepared effects, oldest first (intents are not the outbox's to send)."""
        skip = set(exclude)
        out = []
        for effect_id, kind, target, body in self._db.execute_sql(_PREPARED, (limit + len(skip),)):
            if effect_id in skip:
                continue
            payload = json.loads(body or "{}")
            out.append(PendingEffect(effect_id, EffectKind(kind), target, payload.get("body", ""),
                                     payload.get("type"),
                                     tuple((str(o[0]), str(o[1])) for o in payload.get("options") or ()),
                                     payload.get("field"), payload.get("input")))
        return out[:limit]

    def mark_dispatched(self, effect_id: str, now: int) -> bool:
        """Durably note that the write is about to leave; False if it is no longer prepared."""
        with self._db.atomic():
            return self._db.execute_sql(_DISPATCH, (now, effect_id)).rowcount == 1

    def mark_all_dispatched(self, effect_ids: Iterable[str], now: int) -> list[str]:
        """Durably note that these writes are about to leave (one transaction); returns the ids
        that were still prepared, which are the only ones that may go."""
        marked = []
        with self._db.atomic():
            for effect_id in effect_ids:
                if self._db.execute_sql(_DISPATCH, (now, effect_id)).rowcount == 1:
                    marked.append(effect_id)
        return marked

    def unmark(self, effect_id: str) -> None:
        """Back to prepared: the write never left (the budget refused it before dispatch)."""
        e = self._t.effects
        with self._db.atomic():
            e.update(state=EffectState.PREPARED.value, dispatched_at=None) \
                .where((e.id == effect_id) & (e.state == EffectState.DISPATCHED.value)).execute()

    def settle(self, effect_id: str, state: EffectState, now: int, *, error: str | None = None,
               result_ids: list[str] | None = None) -> None:
        """Record the outcome and drop the body."""
        self.settle_all([effect_id], state, now, error=error, result_ids=result_ids)

    def settle_all(self, effect_ids: Iterable[str], state: EffectState, now: int, *,
                   error: str | None = None, result_ids: list[str] | None = None) -> None:
        """Record the same outcome for several effects in one transaction; drop their bodies."""
        ids = json.dumps(result_ids) if result_ids else None
        with self._db.atomic():
            for effect_id in effect_ids:
                self._db.execute_sql(_SETTLE, (state.value, now, error, ids, effect_id))

    def recover(self, now: int) -> int:
        """Startup: a write that was dispatched but never settled may have happened."""
        e = self._t.effects
        with self._db.atomic():
            return e.update(state=EffectState.OUTCOME_UNKNOWN.value, settled_at=now, body=None,
                            error="the process stopped while the write was in flight") \
                .where(e.state == EffectState.DISPATCHED.value).execute()

    def release(self, effect_id: str, now: int) -> bool:
        """The operator verified an `outcome_unknown` write is absent in Linear."""
        e = self._t.effects
        with self._db.atomic():
            return bool(e.update(state=EffectState.RELEASED.value, settled_at=now)
                        .where((e.id == effect_id) & (e.state == EffectState.OUTCOME_UNKNOWN.value))
                        .execute())

    def unsettled(self, conversation_id: str | None = None) -> int:
        """Effects (of a conversation, or all) that have not reached Linear yet: prepared or
        in flight."""
        if conversation_id is None:
            return int(self._db.execute_sql(_UNSETTLED).fetchone()[0])
        return int(self._db.execute_sql(UNSETTLED_OF, (conversation_id,)).fetchone()[0])

    def listing(self, limit: int = 100, state: str | None = None) -> list[dict[str, Any]]:
        """Effects newest first, without bodies."""
        e = self._t.effects
        q = e.select()
        if state:
            q = q.where(e.state == state)
        return [_view(r) for r in q.order_by(e.created_at.desc(), e.id).limit(limit)]

    def get(self, effect_id: str) -> dict[str, Any] | None:
        """One effect as `listing` shows it, or None."""
        e = self._t.effects
        row = e.select().where(e.id == effect_id).first()
        return _view(row) if row is not None else None


def _view(r: Any) -> dict[str, Any]:
    view = {"id": r.id, "kind": r.kind, "conversationId": r.conversation_id, "target": r.target,
            "summary": r.summary, "state": r.state, "mutationHash": r.mutation_hash,
            "createdAt": iso(r.created_at), "dispatchedAt": iso(r.dispatched_at) if r.dispatched_at else None,
            "settledAt": iso(r.settled_at) if r.settled_at else None, "error": r.error,
            "resultIds": json.loads(r.result_ids) if r.result_ids else []}
    if r.subject is not None:  # an intent: the echo it expects, never what it wrote
        view["expects"] = {"account": r.account, "kind": r.event_kind, "action": r.event_action,
                           "subject": r.subject, "fields": sorted(json.loads(r.fingerprint or "{}"))}
    return view
