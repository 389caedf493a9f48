"""Echo memory's durable half: write intents, held deliveries, and what is remembered how long.

An intent is an effect of kind `mutation`: a `linear graphql` update recorded
before it leaves, with the event it expects back (kind, action, subject), the
account that writes it, and a fingerprint of the fields it writes. While an
intent is unresolved, admission holds a delivery of the same account, kind,
action and subject (`hold`); once every intent a held delivery waits for has an
answer, `resolve` completes it as our own echo when a confirmed intent's
fingerprint matches its evidence exactly, and otherwise releases it into its FIFO
position and the inbox. The EchoMemory actor drives `resolve`, `release_unsent`
and `prune`; admission only reads.

A held delivery is checked against every confirmed intent of its subject inside
the echo window, not only those it waits for: when two writes to one issue
overlap, the first one's echo can arrive while the second is in flight, and the
first one's retained evidence is what proves it ours.

    held --a confirmed fingerprint of its subject matches---------> completed (self_echo)
      \\--every intent it waits for answered, none matches---------> pending, inbox message
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from peewee import Database

from wakeline.clock import iso
from wakeline.models.dialect import dialect_of
from wakeline.models.envelopes import EventEvidence
from wakeline.models.outbox import EffectKind, EffectState
from wakeline.models.schema import INBOX_CONVERSATION_ID, INBOX_LOCK
from wakeline.models.states import DeliveryState, TurnResultKind
from wakeline.models.tables import Tables

# A delivery is a candidate echo of a write attempted at most this long before it.
CANDIDATE_WINDOW_MS = 24 * 3600 * 1000
# Answered intents (their fingerprints) and resolved holds are kept this long, for provider
# retries and overlapping routes; an `outcome_unknown` one is never pruned by time.
EVIDENCE_KEPT_MS = 7 * 24 * 3600 * 1000
# `linear.echo_window_seconds`' default: an answered update's echo is ours this long after.
ECHO_WINDOW_MS = 90_000
# Ids a `linear graphql` create chose: Linear retries a webhook for hours at most.
OWN_CREATES_KEPT_MS = 30 * 24 * 3600 * 1000
UNRESOLVED = frozenset({EffectState.PREPARED.value, EffectState.DISPATCHED.value,
                        EffectState.OUTCOME_UNKNOWN.value})

_INTENTS = (
    "SELECT id, account, event_kind, event_action, subject, state, fingerprint, created_at,"
    " settled_at FROM effects WHERE kind IN ('mutation', 'update') AND subject IN ({marks})"
)
_HOLD = (
    "INSERT INTO held_deliveries (receipt_id, fifo_id, conversation_id, evidence, intents,"
    " inbox_event, headline, received_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'held')"
)


@dataclass(frozen=True)
class Intent:
    """An update about to be written, and the echo it will cause."""

    summary: str
    event_kind: str
    action: str
    subject: str
    fingerprint: dict[str, str]
    mutation_hash: str


@dataclass(frozen=True)
class IntentRow:
    """An intent as admission reads it."""

    id: str
    account: str | None
    event_kind: str
    action: str
    subject: str
    state: str
    fingerprint: dict[str, str]
    created_at: int
    settled_at: int | None

    def expects(self, evidence: EventEvidence) -> bool:
        """Same account, kind, action and subject: the event may be this write's echo."""
        return (self.account is not None and self.account == evidence.actor_id
                and (self.event_kind, self.action, self.subject)
                == (evidence.kind, evidence.action, evidence.subject))


@dataclass
class Resolution:
    """What resolving held deliveries did: echoes completed, releases and whom to wake."""

    echoes: int = 0
    released: int = 0
    wake_ids: list[str] = field(default_factory=list)


def matches(fingerprint: Mapping[str, str], evidence: Mapping[str, Any] | EventEvidence) -> bool:
    """Exact evidence: something changed, and every changed field is one we wrote, with the
    value we wrote. A person's edit of any other field, or to another value, does not match."""
    changed = evidence.changed if isinstance(evidence, EventEvidence) else evidence["changed"]
    digests = evidence.digests if isinstance(evidence, EventEvidence) else evidence["digests"]
    return bool(changed) and all(c in fingerprint and fingerprint[c] == digests.get(c)
                                 for c in changed)


def explains(intent: IntentRow, evidence: EventEvidence, received_ms: int,
             echo_window_ms: int) -> bool:
    """Exact proof that a delivery is this write's echo: a confirmed intent of the same
    account, kind, action and subject, answered at most `echo_window_ms` before the delivery
    arrived (or after it), whose fingerprint matches. A person's later edit is theirs."""
    return (intent.state == EffectState.CONFIRMED.value and intent.expects(evidence)
            and received_ms - (intent.settled_at or intent.created_at) <= echo_window_ms
            and matches(intent.fingerprint, evidence))


def evidence_json(evidence: EventEvidence) -> str:
    """The evidence a held delivery keeps: digests, never values."""
    return json.dumps({"kind": evidence.kind, "action": evidence.action, "subject": evidence.subject,
                       "actor": evidence.actor_id, "changed": list(evidence.changed),
                       "digests": evidence.digests})


def evidence_from_json(text: str) -> EventEvidence:
    """The evidence a held delivery kept, read back."""
    raw = json.loads(text)
    return EventEvidence(kind=raw["kind"], action=raw["action"], subject=raw["subject"],
                         actor_id=raw["actor"], changed=tuple(raw["changed"]),
                         digests=raw["digests"])


class Echoes:
    """Intents and held deliveries over one database."""

    def __init__(self, db: Database, tables: Tables, following: Callable[[], bool]) -> None:
        self._db = db
        self._dialect = dialect_of(db)
        self._t = tables
        self._following = following

    # --- intents -----------------------------------------------------------------------------

    def record_intents(self, intents: Sequence[Intent], account: str, now: int,
                       conversation_id: str | None = None) -> list[str]:
        """Record intents durably, before their write leaves; returns their effect ids."""
        ids = []
        with self._db.atomic():
            for intent in intents:
                effect_id = str(uuid.uuid4())
                self._t.effects.insert(
                    id=effect_id, kind=EffectKind.MUTATION.value, conversation_id=conversation_id,
                    target=intent.subject, summary=intent.summary, body=None,
                    mutation_hash=intent.mutation_hash, state=EffectState.PREPARED.value,
                    created_at=now, account=account, event_kind=intent.event_kind,
                    event_action=intent.action, subject=intent.subject,
                    fingerprint=json.dumps(intent.fingerprint),
                ).execute()
                ids.append(effect_id)
        return ids

    @staticmethod
    def intents_for(conn: Any, subjects: Iterable[str]) -> dict[str, list[IntentRow]]:
        """The intents about these subjects (inside the admission transaction)."""
        wanted = list(set(subjects))
        found: dict[str, list[IntentRow]] = {}
        if not wanted:
            return found
        for row in conn.execute(_INTENTS.format(marks=", ".join("?" * len(wanted))), wanted):
            intent = IntentRow(row[0], row[1], row[2], row[3], row[4], row[5],
                               json.loads(row[6] or "{}"), row[7], row[8])
            found.setdefault(intent.subject, []).append(intent)
        return found

    def release_unsent(self, now: int) -> int:
        """Start-up: an intent still `prepared` never reached the wire (its request died with
        the process), so it can cause no echo."""
        e = self._t.effects
        with self._db.atomic():
            return e.update(state=EffectState.RELEASED.value, settled_at=now,
                            error="never sent: the process stopped before the write left").where(
                (e.kind == EffectKind.MUTATION.value) & (e.state == EffectState.PREPARED.value)
            ).execute()

    # --- held deliveries ---------------------------------------------------------------------

    @staticmethod
    def hold(conn: Any, receipt_id: int, fifo_id: int | None,
             conversation_id: str | None, evidence: EventEvidence, intents: Sequence[str],
             inbox_event: str | None, headline: str, received_at: int) -> None:
        """Keep a candidate echo apart until its intents answer (inside admission)."""
        conn.execute(_HOLD, (receipt_id, fifo_id, conversation_id, evidence_json(evidence),
                             json.dumps(list(intents)), inbox_event, headline, received_at))

    def resolve(self, now: int, echo_window_ms: int = ECHO_WINDOW_MS) -> Resolution:
        """Settle held deliveries (one transaction): each one a confirmed intent of its subject
        proves ours is completed, whatever else it waits for; each one whose intents have all
        answered without such proof is released."""
        h, d = self._t.held, self._t.deliveries
        out = Resolution()
        with self._db.atomic():
            # One resolver at a time across hosts (PostgreSQL): a hold is settled once.
            self._dialect.lock(self._db, "echoes")
            held = list(h.select().where(h.state == "held"))
            if not held:
                return out
            evidence = {row.receipt_id: evidence_from_json(row.evidence) for row in held}
            intents = self.intents_for(self._db.raw(),
                                       (ev.subject for ev in evidence.values()))
            states = {i.id: i.state for rows in intents.values() for i in rows}
            following = self._following()
            for row in held:
                ev = evidence[row.receipt_id]
                echo = any(explains(i, ev, row.received_at, echo_window_ms)
                           for i in intents.get(ev.subject, ()))
                if not echo and any(states.get(i) in UNRESOLVED for i in json.loads(row.intents)):
                    continue  # still in flight, or quarantined until an operator decides
                if echo:
                    out.echoes += 1
                    if row.fifo_id is not None:
                        d.update(state=DeliveryState.COMPLETED.value, completed_at=now,
                                 completion=TurnResultKind.SELF_ECHO.value).where(
                            (d.id == row.fifo_id) & (d.state == DeliveryState.HELD.value)).execute()
                else:
                    out.released += 1
                    self._release(row, following, out)
                h.update(state="echo" if echo else "released", resolved_at=now).where(
                    h.receipt_id == row.receipt_id).execute()
        return out

    def _release(self, row: Any, following: bool, out: Resolution) -> None:
        """Back into its FIFO position, and into the inbox, as if it had never been held."""
        d, c = self._t.deliveries, self._t.conversations
        if row.fifo_id is not None:
            conv = c.get_or_none(c.id == row.conversation_id)
            if conv is not None and conv.reset_at is not None and row.received_at <= conv.reset_at:
                d.update(state=DeliveryState.COMPLETED.value, completed_at=conv.reset_at,
                         completion=TurnResultKind.RESET.value).where(
                    (d.id == row.fifo_id) & (d.state == DeliveryState.HELD.value)).execute()
            elif d.update(state=DeliveryState.PENDING.value).where(
                    (d.id == row.fifo_id) & (d.state == DeliveryState.HELD.value)).execute():
                out.wake_ids.append(row.conversation_id)
        if row.inbox_event is not None:
            self._dialect.lock(self._db, INBOX_LOCK)  # inbox ids commit in order (admissions.py)
            self._t.inbox.insert(receipt_id=row.receipt_id, received_at=row.received_at,
                                 headline=row.headline, event=row.inbox_event,
                                 size_bytes=len(row.inbox_event.encode("utf-8")),
                                 wakes=following).execute()
            if following:
                out.wake_ids.append(INBOX_CONVERSATION_ID)

    def held_for(self, effect_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Held deliveries (resolved or not) by the intent they wait for, without bodies."""
        h = self._t.held
        wanted = set(effect_ids)
        out: dict[str, list[dict[str, Any]]] = {}
        if not wanted:
            return out
        for row in h.select().order_by(h.receipt_id):
            view = {"receiptId": row.receipt_id, "fifoSeq": row.fifo_id,
                    "conversationId": row.conversation_id, "headline": row.headline,
                    "receivedAt": iso(row.received_at), "state": row.state,
                    "resolvedAt": iso(row.resolved_at) if row.resolved_at else None}
            for effect_id in json.loads(row.intents):
                if effect_id in wanted:
                    out.setdefault(effect_id, []).append(view)
        return out

    def held_count(self) -> int:
        """Deliveries held right now."""
        h = self._t.held
        return h.select().where(h.state == "held").count()

    # --- pruning -----------------------------------------------------------------------------

    def prune(self, now: int, evidence_kept_ms: int = EVIDENCE_KEPT_MS,
              own_creates_kept_ms: int = OWN_CREATES_KEPT_MS) -> int:
        """Forget what no echo can still need: answered intents and resolved holds older than
        `evidence_kept_ms`, own-create ids older than `own_creates_kept_ms`. Never an intent
        of unknown outcome, nor a delivery it holds."""
        e, h = self._t.effects, self._t.held
        cutoff = now - evidence_kept_ms
        with self._db.atomic():
            gone = h.delete().where((h.state != "held") & (h.resolved_at < cutoff)).execute()
            gone += e.delete().where(
                (e.kind == EffectKind.MUTATION.value) & e.state.not_in(list(UNRESOLVED))
                & (e.settled_at < cutoff)).execute()
            gone += self._db.execute_sql("DELETE FROM own_creates WHERE created_at < ?",
                                         (now - own_creates_kept_ms,)).rowcount
        return int(gone)
