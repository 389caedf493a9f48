"""Read-only views of conversations for the operator API (JSON-ready dicts)."""

from __future__ import annotations

import json
from typing import Any

from peewee import fn

from wakeline.clock import iso
from wakeline.models.plan_gate import Gate, Phase
from wakeline.models.states import ConversationState, DeliveryState, Ownership, TurnState
from wakeline.models.store import Store

FIFO_SHOWN = 200
TURNS_SHOWN = 10


def _state(conv: Any, turn: Any) -> ConversationState:
    if conv.terminal:
        return ConversationState.TERMINAL
    if conv.ownership == Ownership.PENDING:
        return ConversationState.WAITING_OWNERSHIP
    if turn is None:
        return ConversationState.IDLE
    if turn.state == TurnState.STALLED:
        return ConversationState.STALLED
    return ConversationState.RUNNING


def _ms(value: int | None) -> str | None:
    return iso(value) if value is not None else None


def _turn(turn: Any) -> dict[str, Any] | None:
    if turn is None:
        return None
    return {"id": turn.id, "state": turn.state, "attempt": turn.attempt,
            "startedAt": _ms(turn.started_at), "nextAttemptAt": _ms(turn.next_attempt_at),
            "lastError": turn.last_error}


def _result(row: Any) -> dict[str, Any]:
    return {"turnId": row.turn_id, "result": row.result, "exitCode": row.exit_code,
            "attempts": row.attempts, "deliveries": row.deliveries,
            "startedAt": _ms(row.started_at), "finishedAt": _ms(row.finished_at)}


def list_conversations(store: Store, *, limit: int, state: str | None = None) -> list[dict[str, Any]]:
    """Conversations, most recently updated first, with counts and their last turn."""
    with store.snapshot():
        return _list_conversations(store, limit, state)


def _list_conversations(store: Store, limit: int, state: str | None) -> list[dict[str, Any]]:
    t = store.t
    convs = list(t.conversations.select().order_by(t.conversations.updated_at.desc(),
                                                  t.conversations.id))
    ids = [c.id for c in convs]
    counts: dict[tuple[str, str], int] = {}
    d = t.deliveries
    for cid, st, n in (d.select(d.conversation_id, d.state, fn.COUNT(d.id))
                       .where(d.state != DeliveryState.COMPLETED.value)
                       .group_by(d.conversation_id, d.state).tuples()):
        counts[(cid, st)] = n
    turns = {r.conversation_id: r for r in t.turns.select()}
    out = []
    for conv in convs:
        view = _summary(conv, turns.get(conv.id), counts)
        if state is None or view["state"] == state:
            out.append(view)
        if len(out) >= limit:
            break
    last = _last_results(store, [v["id"] for v in out]) if ids else {}
    for view in out:
        view["lastTurn"] = last.get(view["id"])
    return out


def _summary(conv: Any, turn: Any, counts: dict[tuple[str, str], int]) -> dict[str, Any]:
    return {
        "id": conv.id,
        "kind": conv.kind,
        "subject": {"namespace": conv.namespace, "key": conv.key},
        "title": conv.title,
        "route": conv.route,
        "state": _state(conv, turn).value,
        "outcome": conv.outcome if conv.terminal else None,
        # The exact evidence of the outcome: completed only when the two ids match.
        "terminalEvidence": {"stateId": conv.terminal_state_id, "doneStateId": conv.done_state_id}
        if conv.terminal else None,
        "pending": counts.get((conv.id, DeliveryState.PENDING.value), 0),
        "claimed": counts.get((conv.id, DeliveryState.CLAIMED.value), 0),
        "session": conv.session_id,
        "agentSession": conv.agent_session_id,
        "runnerSession": conv.runner_session,
        "issue": {"id": conv.issue_id, "identifier": conv.issue_identifier} if conv.issue_id else None,
        "turn": _turn(turn),
        "ownership": _ownership(conv),
        "workspace": _workspace(conv),
        "repo": conv.repo,  # the route's `repos` entry chosen for it (decision 0038)
        "updatedAt": _ms(conv.updated_at),
    }


def _ownership(conv: Any) -> dict[str, Any]:
    """Whether the route owns the issue, and what the last lookup said or why it waits."""
    view: dict[str, Any] = {"state": conv.ownership, "projectId": conv.project_id}
    if conv.ownership == Ownership.PENDING:
        view.update(attempts=conv.ownership_attempts, nextAttemptAt=_ms(conv.ownership_next_at),
                    lastError=conv.ownership_error)
    if conv.ownership_answer:
        view["lookup"] = json.loads(conv.ownership_answer)
    return view


def _workspace(conv: Any) -> dict[str, Any] | None:
    """The worktree's branch, a cleanup still owed, and a dirty one kept (with why)."""
    if not conv.workspace_branch:
        return None
    return {"branch": conv.workspace_branch, "cleanupPending": bool(conv.workspace_cleanup),
            "kept": conv.workspace_kept}


def _plan(gate: Gate, running: bool) -> dict[str, Any]:
    """A planning route's gate: the revision, the phase, the approval, the lease."""
    phase = Phase.EXECUTING if gate.phase is Phase.APPROVED and running else gate.phase
    return {"rev": gate.rev, "phase": phase.value, "approvedBy": gate.approved_by,
            "approvedRev": gate.approved_rev,
            "lease": {"since": _ms(gate.lease_since), "deliveryId": gate.lease_delivery}
            if gate.leased else None}


def _last_results(store: Store, ids: list[str]) -> dict[str, dict[str, Any]]:
    r = store.t.turn_results
    latest = r.select(fn.MAX(r.id)).where(r.conversation_id.in_(ids)).group_by(r.conversation_id)
    return {row.conversation_id: _result(row) for row in r.select().where(r.id.in_(latest))}


def show_conversation(store: Store, conversation_id: str) -> dict[str, Any] | None:
    """One conversation with its FIFO (unfinished, then the latest completed) and last turns."""
    with store.snapshot():
        return _show_conversation(store, conversation_id)


def _show_conversation(store: Store, conversation_id: str) -> dict[str, Any] | None:
    t = store.t
    conv = t.conversations.get_or_none(t.conversations.id == conversation_id)
    if conv is None:
        return None
    d = t.deliveries
    counts = {(conversation_id, st): n for st, n in
              d.select(d.state, fn.COUNT(d.id)).where(d.conversation_id == conversation_id)
              .group_by(d.state).tuples()}
    view = _summary(conv, t.turns.get_or_none(t.turns.conversation_id == conversation_id), counts)
    open_rows = list(d.select().where((d.conversation_id == conversation_id)
                                      & (d.state != DeliveryState.COMPLETED.value))
                     .order_by(d.id).limit(FIFO_SHOWN))
    done_rows = list(d.select().where((d.conversation_id == conversation_id)
                                      & (d.state == DeliveryState.COMPLETED.value))
                     .order_by(d.id.desc()).limit(20))
    view["fifo"] = [
        {"seq": r.id, "state": r.state, "headline": r.headline, "receivedAt": _ms(r.received_at),
         "turnId": r.turn_id, "completion": r.completion, "completedAt": _ms(r.completed_at)}
        for r in sorted(done_rows, key=lambda r: r.id) + open_rows
    ]
    r = t.turn_results
    view["turns"] = [
        {**_result(row), "output": row.output[:2000]}
        for row in r.select().where(r.conversation_id == conversation_id).order_by(r.id.desc())
        .limit(TURNS_SHOWN)
    ]
    view["lastTurn"] = view["turns"][0] if view["turns"] else None
    view["plan"] = _plan(store.gates.get(conversation_id), running=view["state"] == "running")
    binding = store.bindings.of(conversation_id)
    # The human-facing thread (CONTRACT section 8): null while the conversation has none.
    view["control"] = binding.to_json() if binding is not None else None
    return view
