"""The per-conversation FIFO: claims, finalisation, failures, resets, recovery.

Every method is one transaction. A turn record owns its conversation's claimed
deliveries; the `turns.conversation_id` UNIQUE constraint makes "at most one
claim per conversation" a property of the schema, not of the callers.

Every turn claims, ends and asks whether its conversation can run again, so those
paths (`claim` of a conversation without a surviving turn, `_end`, `runnable`) run
fixed SQL on the connection: peewee's query building cost more than SQLite itself.
Rarer paths (resumes, the inbox, resets, recovery) keep the query builder.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from peewee import Case, Database, fn

from wakeline.models.dialect import dialect_of
from wakeline.models.envelopes import (
    AgentSession,
    ControlMessage,
    DataChange,
    MatrixMessage,
    parse_envelope,
)
from wakeline.models.outbox import UNSETTLED_OF, EffectSpec, Outbox, SessionReply
from wakeline.models.schema import INBOX_CONVERSATION_ID
from wakeline.models.states import (
    ConversationKind,
    DeliveryState,
    Ownership,
    TurnResultKind,
    TurnState,
)
from wakeline.models.tables import Tables

BATCH_MAX_DELIVERIES = 50
BATCH_MAX_BYTES = 30_000
OUTPUT_MAX_CHARS = 64_000
# A turn whose runs keep ending with the process (it may be what kills it) stalls after this.
MAX_INTERRUPTED_ATTEMPTS = 5
# An execution turn (a planning route's, under its lease) runs at most this many times.
MAX_LEASED_ATTEMPTS = 3


@dataclass(frozen=True)
class FifoEntry:
    """One claimed delivery, as a turn sees it."""

    seq: int
    headline: str
    received_at: int
    envelope: DataChange | AgentSession | MatrixMessage | ControlMessage


@dataclass(frozen=True)
class ClaimedTurn:
    """A turn ready to run: its batch, attempt and conversation facts."""

    turn_id: str
    conversation_id: str
    attempt: int
    session_id: str
    kind: str
    route: str | None
    title: str
    issue_id: str | None
    issue_identifier: str | None
    tainted: bool
    entries: tuple[FifoEntry, ...]
    inbox_headlines: tuple[str, ...] = ()
    workspace_branch: str | None = None
    runner_session: str | None = None  # the agent CLI's own session, to resume
    agent_session: str | None = None  # the last Linear agent session of the issue
    # Replies of the conversation not yet settled when it was claimed: the agent waits for
    # them (an acknowledgement lands first). A reply prepared later is for a later turn.
    replies_waiting: bool = True


@dataclass(frozen=True)
class ResetOutcome:
    """What a context reset did."""

    session_id: str
    completed: int
    cleared_turn: str | None


# What waits in a FIFO for a claim: pending deliveries, and held ones that block those behind.
_WAITING = (DeliveryState.PENDING.value, DeliveryState.HELD.value)

_CONVERSATION = (
    "SELECT id, kind, terminal, ownership, session_id, route, title, issue_id, issue_identifier,"
    " tainted, workspace_branch, workspace_cleanup, workspace_kept, runner_session,"
    " agent_session_id FROM conversations WHERE id = ?"
)
# The claim locks its conversation's row (PostgreSQL): admissions of it on other hosts wait,
# and so does a second claim, which then sees this one's turn.
_CONVERSATION_LOCKED = _CONVERSATION + "{lock}"
_HAS_TURN = "SELECT 1 FROM turns WHERE conversation_id = ?"
_HEAD = (
    "SELECT id, size_bytes, state, headline, received_at, envelope FROM deliveries"
    " WHERE conversation_id = ? AND state IN ('pending', 'held') ORDER BY id LIMIT ?"
)
_NEW_TURN = (
    "INSERT INTO turns (id, conversation_id, state, attempt, created_at, started_at, host)"
    " VALUES (?, ?, 'running', 1, ?, ?, ?)"
)
_CLAIM = "UPDATE deliveries SET state = 'claimed', turn_id = ? WHERE id IN ({marks})"
_CLAIMED_CONVERSATION = (
    "UPDATE conversations SET session_id = ?, workspace_cleanup = 0, workspace_kept = NULL,"
    " updated_at = ? WHERE id = ?"
)
# Locked (PostgreSQL): a turn ends once, whichever host ends it.
_TURN_OF = "SELECT conversation_id, attempt, started_at FROM turns WHERE id = ?{lock}"
_COMPLETE_CLAIMS = (
    "UPDATE deliveries SET state = 'completed', completed_at = ?, completion = ?"
    " WHERE turn_id = ? AND state = 'claimed'"
)
_COUNT_OF_TURN = "SELECT COUNT(*) FROM deliveries WHERE turn_id = ?"
_RESULT = (
    "INSERT INTO turn_results (turn_id, conversation_id, result, exit_code, attempts, deliveries,"
    " output, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_DELETE_TURN = "DELETE FROM turns WHERE id = ?"
_RUNNABLE = (
    "SELECT c.kind, c.terminal, c.ownership, t.state, t.next_attempt_at, c.workspace_cleanup,"
    " (SELECT state FROM deliveries WHERE conversation_id = c.id AND state IN ('pending', 'held')"
    " ORDER BY id LIMIT 1) FROM conversations c LEFT JOIN turns t ON t.conversation_id = c.id"
    " WHERE c.id = ?"
)


@dataclass(frozen=True)
class _Conv:
    """A conversation row, as the claim reads it."""

    id: str
    kind: str
    terminal: int
    ownership: str
    session_id: str | None
    route: str | None
    title: str
    issue_id: str | None
    issue_identifier: str | None
    tainted: int
    workspace_branch: str | None
    workspace_cleanup: int
    workspace_kept: str | None
    runner_session: str | None
    agent_session_id: str | None


def _stopped_text(stop_by: str | None) -> str:
    """A stopped turn's recorded output, by who asked."""
    return "stopped by the operator" if stop_by == "operator" else "stopped from Linear"


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


class Fifo:
    """Claims and their lifecycle over one database."""

    def __init__(self, db: Database, tables: Tables, outbox: Outbox,
                 following: Callable[[], bool] = lambda: False, host: str | None = None) -> None:
        self._db = db
        self.host = host  # recorded on the turns this process runs (hosts sharing the database)
        self._dialect = dialect = dialect_of(db)
        self._conversation_sql = _CONVERSATION_LOCKED.format(lock=dialect.for_update)
        self._turn_of_sql = _TURN_OF.format(lock=dialect.for_update)
        self._t = tables
        self._outbox = outbox
        self._following = following

    # --- claims ----------------------------------------------------------------------------

    def claim(self, conversation_id: str, now: int, *, max_deliveries: int = BATCH_MAX_DELIVERIES,
              max_bytes: int = BATCH_MAX_BYTES) -> ClaimedTurn | None:
        """Resume the conversation's surviving turn, or claim its oldest pending batch.

        Returns None when there is nothing to run: no pending delivery, a stalled
        turn waiting for an operator, or a terminal conversation.
        """
        with self._db.atomic():
            conn = self._db.raw()
            row = conn.execute(self._conversation_sql, (conversation_id,)).fetchone()
            if row is None:
                return None
            if row[1] == ConversationKind.INBOX or conn.execute(_HAS_TURN, (conversation_id,)).fetchone():
                return self._claim_slow(conversation_id, now, max_deliveries, max_bytes)
            return self._claim_head(conn, _Conv(*row), now, max_deliveries, max_bytes)

    def _claim_head(self, conn: Any, conv: _Conv, now: int, max_deliveries: int,
                    max_bytes: int) -> ClaimedTurn | None:
        """The common claim: no surviving turn, the oldest pending batch of an issue conversation."""
        if conv.terminal or conv.ownership == Ownership.PENDING:
            return None  # closed, or waiting for the tracker to look up who owns the issue
        batch, used = [], 0
        for row in conn.execute(_HEAD, (conv.id, max_deliveries)).fetchall():
            if row[2] == DeliveryState.HELD or (batch and used + row[1] > max_bytes):
                break  # a held entry keeps its place: nothing behind it runs before it
            batch.append(row)
            used += row[1]
        if not batch:
            return None
        turn_id = _new_id("turn")
        conn.execute(_NEW_TURN, (turn_id, conv.id, now, now, self.host))
        conn.execute(_CLAIM.format(marks=", ".join("?" * len(batch))), (turn_id, *(r[0] for r in batch)))
        session_id = conv.session_id or _new_id("ses")
        if not conv.session_id or conv.workspace_cleanup or conv.workspace_kept:
            # The workspace is in use again: a cleanup owed since a retirement no longer applies.
            conn.execute(_CLAIMED_CONVERSATION, (session_id, now, conv.id))
        entries = tuple(FifoEntry(r[0], r[3], r[4], parse_envelope(r[5])) for r in batch)
        waiting = conn.execute(UNSETTLED_OF, (conv.id,)).fetchone()[0] > 0
        return ClaimedTurn(
            turn_id=turn_id, conversation_id=conv.id, attempt=1, session_id=session_id,
            kind=conv.kind, route=conv.route, title=conv.title, issue_id=conv.issue_id,
            issue_identifier=conv.issue_identifier, tainted=bool(conv.tainted), entries=entries,
            workspace_branch=conv.workspace_branch, runner_session=conv.runner_session,
            agent_session=conv.agent_session_id, replies_waiting=waiting,
        )

    def _claim_slow(self, conversation_id: str, now: int, max_deliveries: int,
                    max_bytes: int) -> ClaimedTurn | None:
        """A surviving turn (a retry, a stop), or the inbox: inside `claim`'s transaction."""
        t = self._t
        with self._db.atomic():
            conv = t.conversations.get_or_none(t.conversations.id == conversation_id)
            if conv is None:
                return None
            turn = t.turns.get_or_none(t.turns.conversation_id == conversation_id)
            if turn is not None and self._elsewhere(turn):
                return None  # running on another host that is alive: only a takeover frees it
            if turn is not None and not turn.stop_requested:
                return self._resume(conv, turn, now)
            if turn is not None:
                # A stop was asked for and it has not ended yet: it ends here, stopped, and
                # the work it gave back is claimed below.
                self._end(turn.id, TurnResultKind.STOPPED, now, output=_stopped_text(turn.stop_by))
            if conv.terminal or conv.ownership == Ownership.PENDING:
                return None  # closed, or waiting for the tracker to look up who owns the issue
            if conv.kind == ConversationKind.INBOX:
                return self._claim_inbox(conv, now)
            d = t.deliveries
            rows = list(
                d.select(d.id, d.size_bytes, d.state)
                .where((d.conversation_id == conversation_id) & d.state.in_(_WAITING))
                .order_by(d.id).limit(max_deliveries).tuples()
            )
            batch, used = [], 0
            for seq, size, state in rows:
                if state == DeliveryState.HELD or (batch and used + size > max_bytes):
                    break  # a held entry keeps its place: nothing behind it runs before it
                batch.append(seq)
                used += size
            if not batch:
                return None
            turn_id = _new_id("turn")
            t.turns.insert(id=turn_id, conversation_id=conversation_id, state=TurnState.RUNNING.value,
                           attempt=1, created_at=now, started_at=now, host=self.host).execute()
            d.update(state=DeliveryState.CLAIMED.value, turn_id=turn_id).where(d.id.in_(batch)).execute()
            # The workspace is in use again: a cleanup owed since a retirement no longer applies.
            fields: dict[Any, Any] = {t.conversations.workspace_cleanup: False,
                                      t.conversations.workspace_kept: None}
            if not conv.session_id:
                conv.session_id = _new_id("ses")
                fields.update({t.conversations.session_id: conv.session_id,
                               t.conversations.updated_at: now})
            t.conversations.update(fields).where(t.conversations.id == conversation_id).execute()
            return self._claimed(conv, turn_id, 1)

    def _resume(self, conv: Any, turn: Any, now: int) -> ClaimedTurn | None:
        """The surviving turn runs again, unless it must wait (backoff, operator, following)."""
        t = self._t
        if turn.state == TurnState.STALLED:
            return None
        if turn.state == TurnState.RETRY and (turn.next_attempt_at or 0) > now:
            return None  # its backoff is not over: a new delivery does not cut it short
        if conv.kind == ConversationKind.INBOX and not self._following():
            return None
        t.turns.update(state=TurnState.RUNNING.value, started_at=now, next_attempt_at=None,
                       host=self.host).where(t.turns.id == turn.id).execute()
        return self._claimed(conv, turn.id, turn.attempt)

    def _elsewhere(self, turn: Any) -> bool:
        """A turn another host is running: its host's start-up or a takeover marks it for a
        re-run first (`recover`), so no second host resumes it while it may still run."""
        return turn.state == TurnState.RUNNING and bool(turn.host) and turn.host != self.host

    def _claim_inbox(self, conv: Any, now: int) -> ClaimedTurn | None:
        # Following is checked again here, just before a queued inbox turn would start:
        # switched off, the turn is skipped and its messages stay unread and unsurfaced.
        if not self._following():
            return None
        m = self._t.inbox
        waiting = m.select(m.id).where((m.surfaced == False) & (m.wakes == True))  # noqa: E712
        if not waiting.exists():
            return None
        turn_id = _new_id("turn")
        self._t.turns.insert(id=turn_id, conversation_id=conv.id, state=TurnState.RUNNING.value,
                             attempt=1, created_at=now, started_at=now, host=self.host).execute()
        m.update(surfaced=True, surfaced_by=turn_id).where(m.id.in_(waiting)).execute()
        if not conv.session_id:
            conv.session_id = _new_id("ses")
            self._t.conversations.update(session_id=conv.session_id, updated_at=now) \
                .where(self._t.conversations.id == conv.id).execute()
        return self._claimed(conv, turn_id, 1)

    def _claimed(self, conv: Any, turn_id: str, attempt: int) -> ClaimedTurn:
        d = self._t.deliveries
        rows = d.select().where(d.turn_id == turn_id).order_by(d.id)
        entries = tuple(
            FifoEntry(r.id, r.headline, r.received_at, parse_envelope(r.envelope)) for r in rows
        )
        m = self._t.inbox
        inbox_headlines = tuple(
            r.headline for r in m.select(m.headline).where(m.surfaced_by == turn_id).order_by(m.id)
        ) if conv.kind == ConversationKind.INBOX else ()
        return ClaimedTurn(
            turn_id=turn_id,
            conversation_id=conv.id,
            attempt=attempt,
            session_id=conv.session_id or "",
            kind=conv.kind,
            route=conv.route,
            title=conv.title,
            issue_id=conv.issue_id,
            issue_identifier=conv.issue_identifier,
            tainted=bool(conv.tainted),
            entries=entries,
            inbox_headlines=inbox_headlines,
            workspace_branch=conv.workspace_branch,
            runner_session=conv.runner_session,
            agent_session=conv.agent_session_id,
            replies_waiting=self._outbox.unsettled(conv.id) > 0,
        )

    # --- endings ---------------------------------------------------------------------------

    def finalise(self, turn_id: str, result: TurnResultKind, now: int, *, exit_code: int | None = None,
                 output: str = "", effects: Iterable[EffectSpec] = (),
                 within: Callable[[], None] | None = None) -> bool:
        """Complete the turn's deliveries, record the result, prepare its replies and remove the
        turn: one transaction, which `within` joins last (raising in it rolls it all back).

        Returns False when the turn no longer exists (reset, retired or abandoned meanwhile).
        """
        with self._db.atomic():
            if not self._end(turn_id, result, now, exit_code=exit_code, output=output):
                return False
            self._outbox.prepare(effects, now)
            if within is not None:
                within()
            return True

    def _end(self, turn_id: str, result: TurnResultKind, now: int, *, exit_code: int | None = None,
             output: str = "") -> bool:
        conn = self._db.raw()
        turn = conn.execute(self._turn_of_sql, (turn_id,)).fetchone()
        if turn is None:
            return False
        conn.execute(_COMPLETE_CLAIMS, (now, result.value, turn_id))
        # Counted after: the deliveries a Linear stop completed early rode this turn too.
        count = conn.execute(_COUNT_OF_TURN, (turn_id,)).fetchone()[0]
        conn.execute(_RESULT, (turn_id, turn[0], result.value, exit_code, turn[1], count,
                               output[:OUTPUT_MAX_CHARS], turn[2], now))
        conn.execute(_DELETE_TURN, (turn_id,))
        return True

    def fail(self, turn_id: str, error: str, now: int, backoff_seconds: Sequence[int],
             stall_effects: Iterable[EffectSpec] = ()) -> TurnState | None:
        """Record a failed attempt; the turn keeps its claim.

        The turn waits `backoff_seconds[attempt - 1]` before its next attempt; after
        the last entry it is stalled until an operator retries or abandons it, and
        `stall_effects` are prepared in the same transaction.
        """
        t = self._t
        with self._db.atomic():
            turn = t.turns.get_or_none(t.turns.id == turn_id)
            if turn is None:
                return None
            if turn.attempt > len(backoff_seconds):
                state, next_at = TurnState.STALLED, None
            else:
                state, next_at = TurnState.RETRY, now + backoff_seconds[turn.attempt - 1] * 1000
            t.turns.update(state=state.value, next_attempt_at=next_at, last_error=error[:2000],
                           attempt=turn.attempt + (state is TurnState.RETRY)) \
                .where(t.turns.id == turn_id).execute()
            if state is TurnState.STALLED:
                self._outbox.prepare(stall_effects, now)
            return state

    def due_retries(self, now: int) -> list[str]:
        """Conversations whose failed turn may run again now."""
        tt = self._t.turns
        q = tt.select(tt.conversation_id).where(
            (tt.state == TurnState.RETRY.value) & (tt.next_attempt_at <= now)
        )
        if not self._following():
            q = q.where(tt.conversation_id != INBOX_CONVERSATION_ID)  # it waits for following
        return [r.conversation_id for r in q]

    def retry(self, conversation_id: str, now: int) -> bool:
        """Let a stalled turn run again at once, with a fresh attempt budget."""
        tt = self._t.turns
        with self._db.atomic():
            return bool(
                tt.update(state=TurnState.RETRY.value, next_attempt_at=now, attempt=1)
                .where((tt.conversation_id == conversation_id) & (tt.state == TurnState.STALLED.value))
                .execute()
            )

    def abandon(self, conversation_id: str, now: int) -> bool:
        """Give up on a stalled turn: its deliveries complete as abandoned."""
        tt = self._t.turns
        with self._db.atomic():
            turn = tt.get_or_none((tt.conversation_id == conversation_id) & (tt.state == TurnState.STALLED.value))
            return turn is not None and self._end(turn.id, TurnResultKind.ABANDONED, now,
                                                   output=turn.last_error or "")

    def reset(self, conversation_id: str, now: int, reply: SessionReply | None = None
              ) -> ResetOutcome | None:
        """A clear boundary at `now`: a new session; work received up to it is completed as reset.

        The current turn, if any, is removed with its claims; deliveries received
        after the boundary stay pending and start with the new session.
        """
        t = self._t
        with self._db.atomic():
            conv = t.conversations.get_or_none(t.conversations.id == conversation_id)
            if conv is None:
                return None
            self._answer_open_sessions(conversation_id, reply, now, received_before=now)
            turn = t.turns.get_or_none(t.turns.conversation_id == conversation_id)
            if turn is not None:
                self._end(turn.id, TurnResultKind.RESET, now)
            session_id = _new_id("ses")
            # The agent's own context goes with wakeline's, and so does the repository chosen
            # for it (decision 0038): the next turn starts fresh.
            t.conversations.update(session_id=session_id, reset_at=now, updated_at=now,
                                   runner_session=None, repo=None, repo_asked=None) \
                .where(t.conversations.id == conversation_id).execute()
            self._owe_cleanup(conversation_id)
            completed = self._complete_before_boundary(conversation_id, now)
            return ResetOutcome(session_id, completed, turn.id if turn else None)

    def _complete_before_boundary(self, conversation_id: str, boundary: int) -> int:
        d = self._t.deliveries
        live_turns = self._t.turns.select(self._t.turns.id)
        orphan_or_pending = (d.state == DeliveryState.PENDING.value) | (
            (d.state == DeliveryState.CLAIMED.value) & (d.turn_id.is_null() | d.turn_id.not_in(live_turns))
        )
        return (
            d.update(state=DeliveryState.COMPLETED.value, completed_at=boundary,
                     completion=TurnResultKind.RESET.value)
            .where((d.conversation_id == conversation_id) & (d.received_at <= boundary) & orphan_or_pending)
            .execute()
        )

    def retire(self, conversation_id: str, now: int, reply: SessionReply | None = None) -> int:
        """Terminal intent: remove the running turn and complete all unfinished work as retired.

        Sessions whose work is dropped get `reply`; the workspace is owed a cleanup.
        """
        self._answer_open_sessions(conversation_id, reply, now)
        self._owe_cleanup(conversation_id)
        self.set_runner_session(conversation_id, None)  # a reopened issue starts fresh
        return self._retire_work(conversation_id, now)

    def set_runner_session(self, conversation_id: str, runner_session: str | None) -> None:
        """Remember (or forget) the agent CLI's own session for the conversation's next turn."""
        c = self._t.conversations
        c.update(runner_session=runner_session).where(c.id == conversation_id).execute()

    def _retire_work(self, conversation_id: str, now: int) -> int:
        t, d = self._t, self._t.deliveries
        turn = t.turns.get_or_none(t.turns.conversation_id == conversation_id)
        if turn is not None:
            self._end(turn.id, TurnResultKind.RETIRED, now)
        return (
            d.update(state=DeliveryState.COMPLETED.value, completed_at=now,
                     completion=TurnResultKind.RETIRED.value)
            .where((d.conversation_id == conversation_id) & (d.state != DeliveryState.COMPLETED.value))
            .execute()
        )

    def complete_not_owned(self, conversation_id: str, now: int) -> int:
        """The route does not own the issue: its Issue and Comment deliveries complete as
        `not_owned`, with no turn (agent sessions, explicit delegation, stay)."""
        d = self._t.deliveries
        return (
            d.update(state=DeliveryState.COMPLETED.value, completed_at=now,
                     completion=TurnResultKind.NOT_OWNED.value)
            .where((d.conversation_id == conversation_id) & (d.state == DeliveryState.PENDING.value)
                   & (self._dialect.json_text(d.envelope, "kind") == "data_change"))
            .execute()
        )

    def _owe_cleanup(self, conversation_id: str) -> None:
        """A worktree's retirement is owed: done once no turn runs in it (and at start-up)."""
        c = self._t.conversations
        c.update(workspace_cleanup=True).where(
            (c.id == conversation_id) & c.workspace_branch.is_null(False)).execute()

    # --- recovery --------------------------------------------------------------------------

    def recover(self, now: int, rerun: SessionReply | None = None,
                interrupted: SessionReply | None = None,
                hosts: Sequence[str] | None = None) -> list[str]:
        """Startup repair; returns every conversation with work to run.

        Ends turns Linear asked to stop, applies reset boundaries, returns orphan
        claims to pending (sequence unchanged), marks turns that were running as due
        for a re-run (their sessions get `rerun`) or stalls those interrupted too often
        (their sessions get `interrupted`), and lists conversations with pending
        deliveries or due turns.

        `hosts`: only the turns these hosts ran (and turns no host claimed) are repaired:
        a host's own start-up, or its takeover of a dead host, where hosts share the
        database. None: every turn (one host). The other repairs are the same either way.
        """
        t, d = self._t, self._t.deliveries
        mine = (t.turns.host.in_(list(hosts)) | t.turns.host.is_null()) if hosts is not None \
            else (t.turns.id.is_null(False))
        with self._db.atomic():
            for turn in t.turns.select().where((t.turns.stop_requested == True) & mine):  # noqa: E712
                # A stop was asked for and the crash came first: it ends now, not re-run.
                self._end(turn.id, TurnResultKind.STOPPED, now, output=_stopped_text(turn.stop_by))
            g = t.plan_gates
            leased = t.turns.conversation_id.in_(
                g.select(g.conversation_id).where(g.lease_since.is_null(False)))
            was_running = (t.turns.state == TurnState.RUNNING.value) & mine
            # An execution under a lease resumes fewer times than other turns.
            too_often = (t.turns.attempt >= MAX_INTERRUPTED_ATTEMPTS) | (
                leased & (t.turns.attempt >= MAX_LEASED_ATTEMPTS))
            if rerun is not None:
                for turn in t.turns.select().where(was_running & ~too_often):
                    sessions = self._sessions_of_turn(turn.id)
                    self._outbox.prepare(rerun.to(sessions, turn.conversation_id), now)
            for conv in t.conversations.select(t.conversations.id, t.conversations.reset_at) \
                    .where(t.conversations.reset_at.is_null(False)):
                self._complete_before_boundary(conv.id, conv.reset_at)
            for conv in t.conversations.select(t.conversations.id).where(t.conversations.terminal == True):  # noqa: E712
                self._retire_work(conv.id, now)  # the cleanup it owes is already recorded
            live_turns = t.turns.select(t.turns.id)
            d.update(state=DeliveryState.PENDING.value, turn_id=None).where(
                (d.state == DeliveryState.CLAIMED.value) & (d.turn_id.is_null() | d.turn_id.not_in(live_turns))
            ).execute()
            for turn in t.turns.select().where(was_running & too_often):
                if interrupted is not None:
                    self._outbox.prepare(interrupted.to(self._sessions_of_turn(turn.id),
                                                              turn.conversation_id), now)
            t.turns.update(state=TurnState.STALLED.value, last_error="interrupted by restarts") \
                .where(was_running & too_often).execute()
            t.turns.update(state=TurnState.RETRY.value, next_attempt_at=now, attempt=t.turns.attempt + 1) \
                .where(was_running).execute()
            return self.conversations_with_work(now)

    def conversations_with_work(self, now: int) -> list[str]:
        """Conversations with a turn to (re)run now, then those with pending deliveries, oldest first."""
        d, tt = self._t.deliveries, self._t.turns
        running = [r.conversation_id for r in
                   tt.select(tt.conversation_id).where(tt.state == TurnState.RUNNING.value)]
        head = fn.MIN(Case(None, [(d.state == DeliveryState.PENDING.value, d.id)]))
        held = fn.MIN(Case(None, [(d.state == DeliveryState.HELD.value, d.id)]))
        pending = (
            d.select(d.conversation_id, head.alias("head"))
            .where(d.state.in_(_WAITING) & d.conversation_id.not_in(tt.select(tt.conversation_id)))
            .group_by(d.conversation_id).having(head.is_null(False) & (held.is_null() | (head < held)))
            .order_by(head)
        )
        c = self._t.conversations
        waiting = c.select(c.id).where((c.terminal == True) | (c.ownership == Ownership.PENDING.value))  # noqa: E712
        ids = [r.conversation_id for r in pending.where(d.conversation_id.not_in(waiting))]
        inbox = [INBOX_CONVERSATION_ID] if self._inbox_waiting() else []
        return running + self.due_retries(now) + ids + inbox

    def _answer_open_sessions(self, conversation_id: str, reply: SessionReply | None, now: int,
                              received_before: int | None = None) -> None:
        """Close every agent session whose unfinished work is being dropped, so none stays
        'working' in Linear (inside the caller's transaction)."""
        if reply is None:
            return
        d = self._t.deliveries
        where = (d.conversation_id == conversation_id) & (d.state != DeliveryState.COMPLETED.value)
        if received_before is not None:
            where &= d.received_at <= received_before
        sessions: list[str] = []
        for row in d.select(d.envelope).where(where).order_by(d.id):
            env = parse_envelope(row.envelope)
            if isinstance(env, AgentSession) and env.session_id not in sessions:
                sessions.append(env.session_id)
        self._outbox.prepare(reply.to(sessions, conversation_id), now)

    def _sessions_of_turn(self, turn_id: str) -> list[str]:
        d = self._t.deliveries
        sessions: list[str] = []
        for row in d.select(d.envelope).where(d.turn_id == turn_id).order_by(d.id):
            env = parse_envelope(row.envelope)
            if isinstance(env, AgentSession) and env.session_id not in sessions:
                sessions.append(env.session_id)
        return sessions

    # --- agent sessions ----------------------------------------------------------------------

    def knows_session(self, conversation_id: str, session_id: str) -> bool:
        """True when an earlier delivery of this conversation came from the session."""
        d = self._t.deliveries
        return d.select().where(
            (d.conversation_id == conversation_id)
            & (self._dialect.json_text(d.envelope, "session_id") == session_id)
        ).exists()

    def stop_running_turn(self, conversation_id: str, now: int) -> bool:
        """The conversation's turn ends as stopped (its claimed work with it): a planning
        route's plan was withdrawn under it. Runs inside the admission transaction; True when
        a running child must be stopped by its actor."""
        d, tt = self._t.deliveries, self._t.turns
        turn = tt.get_or_none(tt.conversation_id == conversation_id)
        if turn is None:
            return False
        d.update(state=DeliveryState.COMPLETED.value, completed_at=now,
                 completion=TurnResultKind.STOPPED.value).where(
            (d.turn_id == turn.id) & (d.state == DeliveryState.CLAIMED.value)).execute()
        if turn.state != TurnState.RUNNING:
            self._end(turn.id, TurnResultKind.STOPPED, now, output="the plan was withdrawn")
            return False
        tt.update(stop_requested=True).where(tt.id == turn.id).execute()
        return True

    def stop_session(self, conversation_id: str, session_id: str, now: int) -> bool:
        """A stop from Linear: the session's open work ends as stopped; its turn is flagged.

        The turn may carry other work too (another session's request, a comment):
        that goes back to pending, in its place in the FIFO, and runs in the next
        turn. Runs inside the admission transaction. Returns True when a running
        turn carries the session and must be stopped by its actor.
        """
        d, tt = self._t.deliveries, self._t.turns
        session = self._dialect.json_text(d.envelope, "session_id")
        turn = tt.get_or_none(tt.conversation_id == conversation_id)
        carried = turn is not None and d.select().where(
            (d.turn_id == turn.id) & (d.state == DeliveryState.CLAIMED.value) & (session == session_id)
        ).exists()
        d.update(state=DeliveryState.COMPLETED.value, completed_at=now,
                 completion=TurnResultKind.STOPPED.value).where(
            (d.conversation_id == conversation_id) & (session == session_id)
            & d.state.in_([DeliveryState.PENDING.value, DeliveryState.CLAIMED.value])
        ).execute()
        if turn is None or not carried:
            return False
        d.update(state=DeliveryState.PENDING.value, turn_id=None).where(
            (d.turn_id == turn.id) & (d.state == DeliveryState.CLAIMED.value)
        ).execute()
        if turn.state != TurnState.RUNNING:
            # Waiting for a retry or an operator: nothing runs, so it ends here.
            self._end(turn.id, TurnResultKind.STOPPED, now, output="stopped from Linear")
            return False
        tt.update(stop_requested=True).where(tt.id == turn.id).execute()
        return True

    def turn_status(self, turn_id: str) -> tuple[bool, str | None]:
        """(whether the turn still exists, who asked to stop it: None, "linear" or
        "operator"), in one read: what a running turn's actor checks on every tick, so a
        reset or stop made on another host reaches the host running the turn."""
        tt = self._t.turns
        row = tt.select(tt.stop_requested, tt.stop_by).where(tt.id == turn_id).tuples().first()
        if row is None:
            return False, None
        return True, (row[1] or "linear") if row[0] else None

    def request_stop(self, conversation_id: str) -> bool:
        """The operator's stop of a turn running on another host: flagged here, ended by the
        host that runs it (on its next tick). False when no turn of it is running."""
        tt = self._t.turns
        with self._db.atomic():
            return tt.update(stop_requested=True, stop_by="operator").where(
                (tt.conversation_id == conversation_id) & (tt.state == TurnState.RUNNING.value)
                & (tt.stop_requested == False)).execute() == 1  # noqa: E712

    def note_heartbeat(self, turn_id: str, now: int, effects: Iterable[EffectSpec]) -> None:
        """Prepare a heartbeat for a long turn and remember when."""
        tt = self._t.turns
        with self._db.atomic():
            tt.update(heartbeat_at=now).where(tt.id == turn_id).execute()
            self._outbox.prepare(effects, now)

    def runnable(self, conversation_id: str, now: int) -> bool:
        """True when `claim` would return a turn now (one read)."""
        return self.next_step(conversation_id, now)[0]

    def next_step(self, conversation_id: str, now: int) -> tuple[bool, bool]:
        """(whether `claim` would return a turn now, whether a worktree cleanup is owed): one read."""
        row = self._db.execute_sql(_RUNNABLE, (conversation_id,)).fetchone()
        if row is None:
            return False, False
        kind, terminal, ownership, turn_state, next_attempt_at, cleanup, head = row
        return self._runnable(kind, terminal, ownership, turn_state, next_attempt_at, head, now), \
            bool(cleanup)

    def _runnable(self, kind: str, terminal: int, ownership: str, turn_state: str | None,
                  next_attempt_at: int | None, head: str | None, now: int) -> bool:
        if turn_state is not None:
            if kind == ConversationKind.INBOX and not self._following():
                return False
            return turn_state == TurnState.RUNNING or (
                turn_state == TurnState.RETRY and (next_attempt_at or 0) <= now)
        if terminal or ownership == Ownership.PENDING:
            return False
        if kind == ConversationKind.INBOX:
            return self._inbox_waiting()
        return head == DeliveryState.PENDING

    def _inbox_waiting(self) -> bool:
        m = self._t.inbox
        return self._following() and m.select().where(
            (m.surfaced == False) & (m.wakes == True)  # noqa: E712
        ).exists()

