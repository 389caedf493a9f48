"""What wakeline says to Linear, and when: the effects each decision prepares.

Texts live here so they read as one voice. Each function returns `EffectSpec`s;
the caller prepares them in the transaction that made the decision.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Iterable

from wakeline.models.envelopes import AgentSession
from wakeline.models.outbox import EffectKind, EffectSpec, Expectation, SessionReply
from wakeline.models.states import TurnResultKind
from wakeline.providers.linear.intents import digest

if TYPE_CHECKING:
    from wakeline.models.fifo import ClaimedTurn

__all__ = ["EffectSpec", "activity", "comment", "for_sessions", "sessions_of", "stalled", "turn_result"]

BODY_MAX_CHARS = 30_000
ACK = "Picked up by wakeline; working on it."
NOT_CONNECTED = ("This team isn't connected to wakeline, so no agent will run here. "
                 "Add its key to a route's `teams` in wakeline.toml.")
CLOSED = "This issue is completed or canceled, so wakeline runs no agent on it until it is reopened."
STOPPED = "Stopped as requested."
HEARTBEAT = "Still working on it."
RERUN = "wakeline restarted while this turn was running; running it again."
EMPTY_RESPONSE = "(the agent finished without output)"
RESET = "The operator reset this conversation; this request was dropped with the old context."
RETIRED = "This issue was completed or canceled, so wakeline stopped working on it."
INTERRUPTED = ("wakeline restarted during this turn too many times and stopped retrying it. "
               "An operator can retry or abandon it with `wakeline conversations retry|abandon`.")

# What every affected session is told, for the store to prepare per session.
ACK_REPLY = SessionReply("thought", ACK)
RESET_REPLY = SessionReply("response", RESET)
RETIRED_REPLY = SessionReply("response", RETIRED)
RERUN_REPLY = SessionReply("thought", RERUN)
INTERRUPTED_REPLY = SessionReply("error", INTERRUPTED)

ACTIVITY_BY_RESULT = {
    TurnResultKind.RESPONSE: "response",
    TurnResultKind.ERROR: "error",
    TurnResultKind.ELICITATION: "elicitation",
}


def bounded(text: str, limit: int = BODY_MAX_CHARS) -> str:
    """Trim to what one activity or comment should carry."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 40].rstrip() + "\n\n…(output truncated)"


def activity(session_id: str, kind: str, body: str, conversation_id: str | None = None,
             options: tuple[tuple[str, str], ...] = ()) -> EffectSpec:
    """An agent activity (`thought`, `response`, `error`, `elicitation`) on a session; an
    elicitation with `options` offers them as a `select`."""
    return EffectSpec(EffectKind.AGENT_ACTIVITY, session_id, bounded(body), kind, conversation_id,
                      options)


def comment(issue_id: str, body: str, conversation_id: str | None = None) -> EffectSpec:
    """A comment on an issue."""
    return EffectSpec(EffectKind.COMMENT, issue_id, bounded(body), None, conversation_id)


def sessions_of(turn: ClaimedTurn) -> list[str]:
    """Distinct agent sessions whose deliveries ride this turn, in order."""
    seen: list[str] = []
    for entry in turn.entries:
        env = entry.envelope
        if isinstance(env, AgentSession) and env.session_id not in seen:
            seen.append(env.session_id)
    return seen


def for_sessions(sessions: Iterable[str], kind: str, body: str, conversation_id: str) -> list[EffectSpec]:
    """The same activity on each session."""
    return [activity(s, kind, body, conversation_id) for s in sessions]


def turn_result(turn: ClaimedTurn, result: TurnResultKind, output: str, reply: str,
                options: tuple[tuple[str, str], ...] = (),
                sessions: Iterable[str] | None = None) -> list[EffectSpec]:
    """What a finished turn posts: an activity per session (the turn's own, or `sessions`); a
    comment for issue routes that reply. A question with `options` offers them (a `select` in
    a session, a list in a comment)."""
    kind = ACTIVITY_BY_RESULT.get(result)
    if kind is None:
        return []
    body = output.strip() or (EMPTY_RESPONSE if kind == "response" else f"The agent ended with {kind}.")
    options = options if kind == "elicitation" else ()
    sessions = list(sessions) if sessions is not None else sessions_of(turn)
    effects = [activity(s, kind, body, turn.conversation_id, options) for s in sessions]
    if not sessions and reply == "comment" and turn.issue_id and kind in ("response", "elicitation"):
        listed = "".join(f"\n- {label} (`{value}`)" for label, value in options)
        effects.append(comment(turn.issue_id, body + ("\n\nReply with one of:" + listed
                                                      if listed else ""), turn.conversation_id))
    return effects


def stalled(turn: ClaimedTurn, attempts: int, error: str) -> list[EffectSpec]:
    """A turn that will not run again without an operator: no session stays 'Working'."""
    body = (f"wakeline could not finish this after {attempts} attempts ({error[:300]}). "
            "An operator can retry or abandon it with `wakeline conversations retry|abandon`.")
    return for_sessions(sessions_of(turn), "error", body, turn.conversation_id)


# --- plan, approve, execute --------------------------------------------------------------------

PLAN_MARK = "<!-- wakeline:plan rev={rev} -->"
PLAN_COMMENT_MAX_CHARS = 20_000
PLAN_OPTIONS = (("Approve", "approve"),)
PLAN_CUT = ("\n\n…(the plan is longer than a comment holds; the whole plan is in wakeline's "
            "journal: `wakeline journal`)")


def plan_comment_body(rev: int, plan: str) -> str:
    """The plan comment: marked with its revision, the plan, how to approve or revise."""
    head = f"{PLAN_MARK.format(rev=rev)}\n**Plan, revision {rev}**\n\n"
    tail = ("\n\n---\nTo approve it, move this issue to **Approved** (or straight to "
            "**In Progress**). To change it, reply here.")
    room = PLAN_COMMENT_MAX_CHARS - len(head) - len(tail)
    body = plan.strip() if len(plan.strip()) <= room else plan.strip()[: room - len(PLAN_CUT)] + PLAN_CUT
    return head + body + tail


def plan_question(rev: int, plan: str) -> str:
    """What the agent session asks: approve revision `rev` (a `select` with `approve`)."""
    return bounded(f"Plan revision {rev} is ready (also posted as a comment on the issue). "
                   "Approve it to let the agent start, or reply to change it.\n\n" + plan.strip())


def plan_comment(issue_id: str, rev: int, plan: str, comment_id: str | None,
                 account: str | None, conversation_id: str) -> tuple[EffectSpec, str]:
    """The plan comment's write (created once, then edited in place) and its comment id."""
    body = plan_comment_body(rev, plan)
    if comment_id is None:
        new_id = str(uuid.uuid4())  # the effect's id is the comment's: its echo is known
        return EffectSpec(EffectKind.COMMENT, issue_id, body, None, conversation_id,
                          effect_id=new_id), new_id
    return EffectSpec(EffectKind.UPDATE, comment_id, "", None, conversation_id,
                      update_field="commentUpdate", update_input={"body": body},
                      expects=Expectation(account, "Comment", comment_id,
                                          {"body": digest(body)})), comment_id
