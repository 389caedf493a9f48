"""The admission transaction: a group of deliveries, one IMMEDIATE transaction.

This is the ingress's hot path, run on the single admission writer thread, so
it is written for few statements: every `execute` releases and re-takes the
GIL, and under load each re-take waits behind the request threads. A comment
costs two statements (receipt, inbox message); the follow switch, the
self-echo evidence and the conversations the group's events name are each read
once per group; fixed SQL on the connection avoids peewee's query building. If
one delivery fails, the group is rolled back and each delivery is admitted
alone, so the failing one cannot take its neighbours down. Rare paths (agent
sessions' bookkeeping, lifecycle changes, stops, project moves) reuse the
FIFO's methods inside the same transaction.

The store decides nothing about routing: each plan's `decide` does, given the
conversation as this transaction sees it, and the transaction records the
`Decision` it returns.

Echoes are classified first, on exact evidence only: an object id one of our
creates chose (`self_echo`); an update matching a confirmed intent's fingerprint
inside the echo window (`self_echo`, even while another write to the same object
is in flight); or an update of the same account, kind, action and subject as an
intent still in flight (`held`: its FIFO entry waits in place and its inbox
message is kept back until echo memory resolves it).
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass, replace
from typing import Any, Sequence

from peewee import Database, DatabaseError

from wakeline.errors import Unavailable
from wakeline.models.dialect import Dialect, dialect_of
from wakeline.models.echoes import CANDIDATE_WINDOW_MS, UNRESOLVED, Echoes, IntentRow, explains
from wakeline.models.envelopes import DataChange, InboundDelivery, Subject, dump_envelope
from wakeline.models.fifo import Fifo
from wakeline.models.outbox import EffectSpec, Outbox
from wakeline.models.people import PeopleRecords
from wakeline.models.plan_gate import PlanGates
from wakeline.models.plans import (
    AdmissionPlan,
    ConversationFacts,
    Decision,
    Move,
    NewConversation,
    Terminal,
)
from wakeline.models.schema import INBOX_CONVERSATION_ID, INBOX_LOCK
from wakeline.models.states import (
    ConversationKind,
    DeliveryState,
    Outcome,
    Ownership,
    TurnResultKind,
)

log = logging.getLogger(__name__)


class _DeliveryFailed(Exception):
    """One delivery of a group failed; the group's transaction is rolled back."""

FOLLOWING_KEY = "inbox.following"

_FIRST = "SELECT outcome FROM receipts WHERE delivery_id = ? OR body_sha256 = ? LIMIT 1"
# Our own writes: effects, and the objects `linear graphql` mutations created.
_OWN_WRITES = ("SELECT id, created_at FROM effects WHERE id IN ({marks})"
               " UNION ALL SELECT id, created_at FROM own_creates WHERE id IN ({marks})")
# A replay conflicts on delivery_id or body_sha256: nothing is written and no id returned.
_RECEIPT = (
    "INSERT INTO receipts (delivery_id, body_sha256, event_type, action, received_at, webhook_at,"
    " outcome, reason, conversation_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
    " RETURNING id"
)
_RECEIPT_CONVERSATION = "UPDATE receipts SET conversation_id = ? WHERE id = ?"
_INBOX = (
    "INSERT INTO inbox_messages (receipt_id, received_at, headline, event, size_bytes, wakes)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_DELIVERY = (
    "INSERT INTO deliveries (conversation_id, receipt_id, state, completion, completed_at, envelope,"
    " headline, received_at, size_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
)
# Locked in id order (PostgreSQL): the group's FIFO entries of a conversation take their
# sequence numbers while no other host's admission or claim of it is in between.
_FIND_CONVERSATIONS = (
    "SELECT c.key, c.id, c.title, c.terminal, c.reset_at, c.route, c.ownership, c.project_id,"
    " g.phase, g.rev, g.lease_since FROM conversations c"
    " LEFT JOIN plan_gates g ON g.conversation_id = c.id"
    " WHERE c.namespace = ? AND c.key IN ({marks}) ORDER BY c.id{lock}"
)
_NEW_CONVERSATION = (
    "INSERT INTO conversations (id, namespace, key, kind, title, route, created_at, updated_at,"
    " issue_id, issue_identifier, tainted, ownership, project_id, ownership_next_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_MOVE = (
    "UPDATE conversations SET route = COALESCE(?, route), ownership = ?, project_id = ?,"
    " tainted = CASE WHEN ? = 1 THEN 1 ELSE tainted END, ownership_next_at = NULL,"
    " ownership_error = NULL, updated_at = ? WHERE id = ?"
)
_TERMINAL = (
    "UPDATE conversations SET terminal = 1, outcome = ?, terminal_state_id = ?, done_state_id = ?,"
    " updated_at = ? WHERE id = ?"
)
_OPEN = (
    "UPDATE conversations SET terminal = 0, outcome = NULL, terminal_state_id = NULL,"
    " done_state_id = NULL, updated_at = ? WHERE id = ?"
)
_FOLLOWING = "SELECT value FROM settings WHERE key = ?"
_INBOX_OUTCOMES = frozenset({Outcome.ACCEPTED, Outcome.IGNORED})


@dataclass(frozen=True)
class AdmissionResult:
    """What admitting one delivery did.

    `wake_ids`: conversations with new work (or a lifecycle change) to act on;
    `lookup_ids`: conversations that wait for the tracker to look up who owns the issue;
    `joined`: the conversation a new FIFO entry (or inbox wake) joined, for the journal;
    `events`: lifecycle and ownership changes it made, as (event, detail);
    `person_ids`: users the tracker must ask Linear about (a person or an app?) before the
    delivery's held entry is decided; `note`: why it was recorded without a turn.
    """

    outcome: Outcome
    reason: str | None = None
    conversation_id: str | None = None
    first_outcome: Outcome | None = None
    effects: int = 0
    wake_ids: tuple[str, ...] = ()
    lookup_ids: tuple[str, ...] = ()
    joined: str | None = None
    events: tuple[tuple[str, str], ...] = ()
    person_ids: tuple[str, ...] = ()
    note: str | None = None

    @property
    def wakes(self) -> bool:
        """True when a conversation got work (or a lifecycle change) to act on."""
        return bool(self.wake_ids)


@dataclass
class _Conversation:
    """A conversation as this transaction sees it (it may change within the group)."""

    id: str
    title: str
    terminal: bool
    reset_at: int | None
    route: str | None
    ownership: Ownership
    project_id: str | None
    plan_phase: str | None = None
    plan_rev: int | None = None
    lease_since: int | None = None

    def facts(self) -> ConversationFacts:
        return ConversationFacts(self.id, self.route, self.terminal, self.reset_at, self.ownership,
                                 self.project_id, self.plan_phase or "none", self.plan_rev or 0,
                                 self.lease_since is not None)


class Admissions:
    """Writes admission groups; used by the admission writer thread only."""

    def __init__(self, db: Database, fifo: Fifo, outbox: Outbox, following_default: bool,
                 gates: PlanGates) -> None:
        self._db = db
        self._dialect = dialect_of(db)
        self._fifo = fifo
        self._outbox = outbox
        self._gates = gates
        self._following_default = following_default

    def admit(self, plans: Sequence[AdmissionPlan]) -> list[AdmissionResult | Unavailable]:
        """Commit a group in one transaction; one result per plan, in order.

        When the store cannot commit at all every entry is an `Unavailable` and
        nothing of the group is written.
        """
        try:
            return self._group(plans)
        except _DeliveryFailed:
            pass  # rolled back whole: admit each alone, so only the failing one is refused
        except DatabaseError as exc:
            log.warning("admission group failed", extra={"error": exc.__class__.__name__})
            return [Unavailable() for _ in plans]
        results: list[AdmissionResult | Unavailable] = []
        for plan in plans:
            try:
                results.extend(self._group([plan]))
            except (_DeliveryFailed, DatabaseError):
                results.append(Unavailable())
        return results

    def _group(self, plans: Sequence[AdmissionPlan]) -> list[AdmissionResult | Unavailable]:
        with self._db.atomic():
            conn = self._db.raw()
            # One read per group is one read per delivery: no switch can commit in between.
            following = self._following(conn)
            own = self._own_writes(conn, plans)
            convs = self._conversations(conn, plans, self._dialect)
            intents = Echoes.intents_for(
                conn, (p.delivery.evidence.subject for p in plans if p.delivery.evidence))
            results: list[AdmissionResult | Unavailable] = []
            for plan in plans:
                try:
                    results.append(self._admit(conn, plan, following, own, convs, intents))
                except Exception as exc:
                    log.warning(
                        "admission failed",
                        extra={"delivery_id": plan.delivery.delivery_id, "error": exc.__class__.__name__},
                        exc_info=not isinstance(exc, DatabaseError),
                    )
                    raise _DeliveryFailed() from exc
        return results

    def _following(self, conn: Any) -> bool:
        row = conn.execute(_FOLLOWING, (FOLLOWING_KEY,)).fetchone()
        return bool(json.loads(row[0])) if row else self._following_default

    @staticmethod
    def _own_writes(conn: Any, plans: Sequence[AdmissionPlan]) -> dict[str, int]:
        """When each of our own writes that the group's events name was prepared."""
        ids = list({p.delivery.envelope.object_id for p in plans
                    if isinstance(p.delivery.envelope, DataChange)})
        if not ids:
            return {}
        rows = conn.execute(_OWN_WRITES.format(marks=", ".join("?" * len(ids))), ids + ids).fetchall()
        return {row[0]: row[1] for row in rows}

    @staticmethod
    def _conversations(conn: Any, plans: Sequence[AdmissionPlan], dialect: Dialect
                       ) -> dict[Subject, _Conversation]:
        """The existing conversations of the group's subjects, one read per namespace."""
        keys: dict[str, set[str]] = {}
        for plan in plans:
            subject = plan.delivery.subject
            if plan.needs_conversation and subject is not None:
                keys.setdefault(subject.namespace, set()).add(subject.key)
        found: dict[Subject, _Conversation] = {}
        for namespace, wanted in keys.items():
            sql = _FIND_CONVERSATIONS.format(marks=", ".join("?" * len(wanted)),
                                             lock=dialect.for_update_of("c"))
            for key, *row in conn.execute(sql, (namespace, *wanted)).fetchall():
                found[Subject(namespace=namespace, key=key)] = _Conversation(
                    row[0], row[1], bool(row[2]), row[3], row[4], Ownership(row[5]), row[6],
                    row[7], row[8], row[9])
        return found

    def _admit(self, conn: Any, plan: AdmissionPlan, following: bool,
               own: dict[str, int], convs: dict[Subject, _Conversation],
               intents: dict[str, list[IntentRow]]) -> AdmissionResult:
        if plan.recheck_of is not None:
            return self._recheck(conn, plan, plan.recheck_of, convs)
        d, now = plan.delivery, plan.received_ms
        # Proof first: the echo of an answered write is ours even while a later write to the
        # same object is still in flight (overlapping writes); only without proof is it held.
        confirmed = self._is_confirmed_echo(plan, intents)
        hold = [] if confirmed else self._in_flight(plan, intents)
        if not hold and (confirmed or self._is_echo(plan, own)):
            if self._receipt(conn, plan, Outcome.SELF_ECHO, "own_write", None) is None:
                return self._duplicate(conn, d)
            return AdmissionResult(Outcome.SELF_ECHO, "own_write")
        conv = convs.get(d.subject) if plan.needs_conversation and d.subject is not None else None
        decision = plan.decide(conv.facts() if conv is not None else None)
        outcome, reason = (Outcome.HELD, None) if hold else (decision.outcome, decision.reason)
        linked = conv is not None and _touches(decision)
        receipt_id = self._receipt(conn, plan, outcome, reason,
                                   conv.id if linked and conv is not None else None)
        if receipt_id is None:
            return self._duplicate(conn, d)
        effects = list(decision.effects)
        changed, lookup = False, False
        fifo_id: int | None = None
        events: list[tuple[str, str]] = []
        person_ids: list[str] = []
        if conv is None and decision.create is not None and d.subject is not None:
            conv = convs[d.subject] = self._create(conn, plan, decision.create)
            conn.execute(_RECEIPT_CONVERSATION, (conv.id, receipt_id))
            lookup = conv.ownership is Ownership.PENDING
        to_fifo = decision.to_fifo and conv is not None
        if conv is not None:
            if plan.delivery.envelope is not None and decision.create and decision.create.title \
                    and not conv.title:
                conn.execute("UPDATE conversations SET title = ?, updated_at = ? WHERE id = ?",
                             (decision.create.title, now, conv.id))
                conv.title = decision.create.title
            if decision.move is not None:
                changed |= self._move(conn, conv, decision.move, now, events)
            changed |= self._apply_lifecycle(conn, conv, decision, now, events)
            if decision.stop_session:
                self._fifo.stop_session(conv.id, decision.stop_session, now)
                changed = True
            if decision.gate is not None:
                took, more = self._apply_gate(conv, decision, d.delivery_id, now, events)
                to_fifo = to_fifo and took
                effects += more
                changed = True
            session = decision.session_id
            if to_fifo and session is not None and decision.unknown_session_reply is not None \
                    and not self._fifo.knows_session(conv.id, session):
                # A follow-up to a session we never saw (created before install, state
                # lost): treat it as a fresh request, and say so at once as for `created`.
                effects += decision.unknown_session_reply.to([session], None)
            if session is not None:  # the issue's session: where its turns answer
                conn.execute("UPDATE conversations SET agent_session_id = ? WHERE id = ?",
                             (session, conv.id))
            if to_fifo:
                verify = decision.verify_actor
                fifo_id = self._enqueue(conn, conv, plan, receipt_id, held=bool(hold or verify))
                if fifo_id is not None and verify:
                    # Its actor decides it (a person or an app?): held in place until Linear says.
                    PeopleRecords.hold(conn, fifo_id, conv.id, verify, now)
                    person_ids.append(verify)
                to_fifo = fifo_id is not None and not hold and not verify
                if fifo_id is None and session is not None and decision.reset_reply is not None:
                    effects += decision.reset_reply.to([session], None)
        conversation_id = conv.id if conv is not None and (linked or decision.create) else None
        wake_ids: list[str] = []
        lookup_ids: list[str] = []
        if conv is not None and (to_fifo or changed):
            if conv.ownership is Ownership.PENDING:
                lookup_ids.append(conv.id)  # its first turn waits for the owner's lookup
            else:
                wake_ids.append(conv.id)
        elif lookup and conv is not None:
            lookup_ids.append(conv.id)
        event = None
        if d.inbox_event is not None and decision.outcome in _INBOX_OUTCOMES:
            event = json.dumps(d.inbox_event, ensure_ascii=False, separators=(",", ":"))
        if hold:
            assert d.evidence is not None
            # Kept back whole: a FIFO entry waiting in place, the inbox message for later.
            Echoes.hold(conn, receipt_id, fifo_id, conversation_id, d.evidence, hold, event,
                        d.headline, now)
        elif event is not None:
            # Only what arrives while following is on may wake an inbox turn. The cursor is
            # the id: messages take their ids one transaction at a time across hosts, so none
            # can commit below a boundary a reader has already passed.
            self._dialect.lock(self._db, INBOX_LOCK)
            conn.execute(_INBOX, (receipt_id, now, d.headline, event, len(event.encode("utf-8")),
                                  int(following)))
            if following:
                wake_ids.append(INBOX_CONVERSATION_ID)
        joined = conv.id if to_fifo and conv is not None else (
            INBOX_CONVERSATION_ID if INBOX_CONVERSATION_ID in wake_ids else None)
        if effects:
            self._outbox.prepare(
                [replace(s, conversation_id=s.conversation_id or conversation_id) for s in effects], now)
        return AdmissionResult(outcome, reason, conversation_id, effects=len(effects),
                               wake_ids=tuple(wake_ids), lookup_ids=tuple(lookup_ids),
                               joined=joined, events=tuple(events), person_ids=tuple(person_ids),
                               note=decision.note)

    def _recheck(self, conn: Any, plan: AdmissionPlan, fifo_id: int,
                 convs: dict[Subject, _Conversation]) -> AdmissionResult:
        """Decide again a FIFO entry held for its actor, now that Linear has said who it is.

        Still held: the decision is applied to it (a gate change, effects) and it becomes
        pending, or, refused (an app, a moot approval) or from before a committed reset,
        completes without a turn. No longer held (a reset or a terminal state completed
        it meanwhile): only its check goes.
        """
        d, now = plan.delivery, plan.received_ms
        row = conn.execute("SELECT state, received_at FROM deliveries WHERE id = ?",
                           (fifo_id,)).fetchone()
        conv = convs.get(d.subject) if d.subject is not None else None
        if row is None or row[0] != DeliveryState.HELD or conv is None:
            PeopleRecords.checked(conn, fifo_id)
            return AdmissionResult(Outcome.ACCEPTED)
        decision = plan.decide(conv.facts())
        if decision.verify_actor is not None:  # still not known: it keeps waiting
            return AdmissionResult(Outcome.HELD, conversation_id=conv.id,
                                   person_ids=(decision.verify_actor,))
        PeopleRecords.checked(conn, fifo_id)
        events: list[tuple[str, str]] = []
        effects = list(decision.effects)
        took = True
        if decision.gate is not None:
            took, more = self._apply_gate(conv, decision, d.delivery_id, now, events)
            effects += more
        before_reset = conv.reset_at is not None and row[1] <= conv.reset_at
        runs = decision.to_fifo and took and not before_reset
        if runs:
            conn.execute("UPDATE deliveries SET state = ? WHERE id = ?",
                         (DeliveryState.PENDING.value, fifo_id))
        else:
            completion = TurnResultKind.RESET if before_reset else TurnResultKind.REFUSED
            conn.execute("UPDATE deliveries SET state = ?, completed_at = ?, completion = ?"
                         " WHERE id = ?", (DeliveryState.COMPLETED.value, now, completion.value,
                                           fifo_id))
        if effects:
            self._outbox.prepare(
                [replace(s, conversation_id=s.conversation_id or conv.id) for s in effects], now)
        # Whatever it decided, what was behind it in the FIFO may run now.
        return AdmissionResult(Outcome.ACCEPTED, conversation_id=conv.id, effects=len(effects),
                               wake_ids=(conv.id,), joined=conv.id if runs else None,
                               events=tuple(events), note=decision.note)

    @staticmethod
    def _duplicate(conn: Any, d: InboundDelivery) -> AdmissionResult:
        first = conn.execute(_FIRST, (d.delivery_id, d.body_sha256)).fetchone()
        return AdmissionResult(Outcome.DUPLICATE, first_outcome=Outcome(first[0]))

    @staticmethod
    def _is_echo(plan: AdmissionPlan, own: dict[str, int]) -> bool:
        """Exact evidence only: the event names an object whose id we chose for our own write.

        Every create wakeline sends carries a client-chosen UUID, recorded before the request
        leaves; Linear's webhook about that object carries the same id. The creation is ours
        whenever it arrives; later changes count as echoes only within the window, so a
        person's edit afterwards is acted on as usual.
        """
        env = plan.delivery.envelope
        if not isinstance(env, DataChange) or env.object_id not in own:
            return False
        return env.action == "create" or plan.received_ms - own[env.object_id] <= plan.echo_window_ms

    @staticmethod
    def _in_flight(plan: AdmissionPlan, intents: dict[str, list[IntentRow]]) -> list[str]:
        """The unresolved intents this update may be the echo of: same account, kind, action
        and subject, attempted within the candidate window. A terminal-state callback is
        never held: its lifecycle must close the conversation whoever wrote it."""
        ev = plan.delivery.evidence
        if ev is None or ev.terminal:
            return []
        return [i.id for i in intents.get(ev.subject, ()) if i.expects(ev) and i.state in UNRESOLVED
                and plan.received_ms - i.created_at <= CANDIDATE_WINDOW_MS]

    @staticmethod
    def _is_confirmed_echo(plan: AdmissionPlan, intents: dict[str, list[IntentRow]]) -> bool:
        """The echo of an answered write: a confirmed intent of its subject whose fingerprint
        matches exactly, inside the echo window (`echoes.explains`)."""
        ev = plan.delivery.evidence
        return ev is not None and any(explains(i, ev, plan.received_ms, plan.echo_window_ms)
                                      for i in intents.get(ev.subject, ()))

    @staticmethod
    def _receipt(conn: Any, plan: AdmissionPlan, outcome: Outcome,
                 reason: str | None, conversation_id: str | None) -> int | None:
        """Insert the receipt; None when the delivery id or body was seen before."""
        d = plan.delivery
        rows = conn.execute(_RECEIPT, (d.delivery_id, d.body_sha256, d.event_type, d.action,
                                       plan.received_ms, d.webhook_ms, outcome.value, reason,
                                       conversation_id)).fetchall()
        return int(rows[0][0]) if rows else None

    @staticmethod
    def _enqueue(conn: Any, conv: _Conversation, plan: AdmissionPlan, receipt_id: int,
                 *, held: bool) -> int | None:
        """Add the FIFO entry (`held`, or pending); its id, or None when it arrived before a
        committed reset and is done already."""
        d = plan.delivery
        assert d.envelope is not None
        envelope = dump_envelope(d.envelope)
        # Received at or before a reset that committed first: it belongs to the old context,
        # exactly as startup recovery would decide.
        before_reset = conv.reset_at is not None and plan.received_ms <= conv.reset_at
        state = DeliveryState.COMPLETED if before_reset else (
            DeliveryState.HELD if held else DeliveryState.PENDING)
        rows = conn.execute(_DELIVERY, (conv.id, receipt_id, state.value,
                            TurnResultKind.RESET.value if before_reset else None,
                            plan.received_ms if before_reset else None, envelope, d.headline,
                            plan.received_ms, len(envelope.encode("utf-8")))).fetchall()
        return None if before_reset else int(rows[0][0])

    @staticmethod
    def _create(conn: Any, plan: AdmissionPlan, new: NewConversation) -> _Conversation:
        subject, now = plan.delivery.subject, plan.received_ms
        assert subject is not None
        envelope = plan.delivery.envelope
        issue = envelope.issue if envelope is not None else None
        conversation_id = "cv_" + secrets.token_hex(8)
        pending = new.ownership is Ownership.PENDING
        conn.execute(_NEW_CONVERSATION, (
            conversation_id, subject.namespace, subject.key, ConversationKind.ISSUE.value,
            new.title or "", new.route, now, now, subject.key, issue.identifier if issue else None,
            int(new.tainted), new.ownership.value, new.project_id, now if pending else None))
        return _Conversation(conversation_id, new.title or "", False, None, new.route, new.ownership,
                             new.project_id)

    def _move(self, conn: Any, conv: _Conversation, move: Move, now: int,
              events: list[tuple[str, str]]) -> bool:
        """A signed payload named the issue's project; True when the conversation may now run."""
        conn.execute(_MOVE, (move.route, move.ownership.value, move.project_id, int(move.tainted),
                             now, conv.id))
        before = conv.ownership
        conv.route = move.route or conv.route
        conv.ownership, conv.project_id = move.ownership, move.project_id
        if before is not move.ownership:
            events.append((move.ownership.value, move.project_id or "no project"))
        if before is Ownership.PENDING and move.ownership is Ownership.NOT_OWNED:
            self._fifo.complete_not_owned(conv.id, now)
        return before is not Ownership.OWNED and move.ownership is Ownership.OWNED

    def _apply_gate(self, conv: _Conversation, decision: Decision, delivery_id: str, now: int,
                    events: list[tuple[str, str]]) -> tuple[bool, list[EffectSpec]]:
        """Record what the delivery does to the gate; (whether it may run, effects to send)."""
        change = decision.gate
        assert change is not None
        gates = self._gates
        if change.action == "request":
            gates.request(conv.id, now)
            if conv.lease_since is not None or conv.plan_phase in ("approved",):
                events.append(("plan_withdrawn", ""))
            self._fifo.stop_running_turn(conv.id, now)
            conv.plan_phase, conv.lease_since = "planning", None
            events.append(("plan_requested", ""))
            return True, []
        if change.action == "revise":
            gates.revise(conv.id, now)
            conv.plan_phase = "planning"
            events.append(("plan_revision_requested", ""))
            return True, []
        if change.action == "approve":
            assert change.approver is not None
            if not gates.approve(conv.id, change.approver, delivery_id, now):
                events.append(("approval_refused", "the execution lease is already held"))
                return False, []
            if conv.plan_phase == "planning":
                # A direct move to In Progress while the agent plans: the plan under way is
                # moot (the latest posted one, if any, is what is approved); its turn stops.
                self._fifo.stop_running_turn(conv.id, now)
            conv.plan_phase, conv.lease_since = "approved", now
            rev = conv.plan_rev
            events.append(("approved", f"plan revision {rev} by {change.approver}" if rev
                           else f"without a plan, by {change.approver}"))
            return True, list(change.effects)
        events.append((change.event, change.reason or "refused"))
        return False, []

    def _apply_lifecycle(self, conn: Any, conv: _Conversation, decision: Decision,
                         now: int, events: list[tuple[str, str]]) -> bool:
        """Record terminal intent (retiring unfinished work) or clear it; True if it changed."""
        lifecycle = decision.lifecycle
        if lifecycle is None:
            return False
        terminal = isinstance(lifecycle, Terminal)
        if conv.terminal == terminal:
            return False
        conv.terminal = terminal
        if isinstance(lifecycle, Terminal):
            conn.execute(_TERMINAL, (lifecycle.outcome.value, lifecycle.state_id,
                                     lifecycle.done_state_id, now, conv.id))
            self._fifo.retire(conv.id, now, decision.retire_reply)
            if conv.plan_phase not in (None, "none"):
                self._gates.release(conv.id, now)  # the lease goes; no state is written back
                conv.plan_phase, conv.lease_since = "none", None
            events.append(("terminal", lifecycle.outcome.value))
        else:
            conn.execute(_OPEN, (now, conv.id))
            events.append(("reopened", ""))
        return True


def _touches(decision: Decision) -> bool:
    """True when the decision concerns the existing conversation (its receipt links to it)."""
    return bool(decision.to_fifo or decision.lifecycle is not None or decision.move is not None
                or decision.stop_session or decision.effects or decision.reason == "terminal"
                or decision.create is not None)
