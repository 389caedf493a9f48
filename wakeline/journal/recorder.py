"""What each thing that happens looks like in the owner's journal.

The producers (the admission writer, the conversation actors, the supervisor, the
tracker) call a `Recorder` at the moment something happens; it turns the event into
a `Note` and tells the Journal actor, and returns. Nothing here may fail or slow the
thing it records: every error is logged and swallowed.

Who is who: `owner` (an actor among `linear.owner_user_ids` / `owner_emails`) or
`external` sends inbound work; `wakeline` briefs the `agent`, which reports back or
asks the `owner`; wakeline writes to `linear`. `to` names the conversation for an
arrival, `thread` is the conversation for everything else (an arrival's is the https
link to its source).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable
from urllib.parse import quote

from wakeline.journal.entries import Note, excerpt
from wakeline.models.envelopes import (
    ActorInfo,
    AgentSession,
    ControlMessage,
    DataChange,
    InboundDelivery,
    MatrixMessage,
)
from wakeline.models.schema import INBOX_CONVERSATION_ID
from wakeline.models.states import Outcome
from wakeline.providers.linear.people import Kind, People

log = logging.getLogger(__name__)

_ARRIVED = (Outcome.ACCEPTED, Outcome.IGNORED)

# What an admission's lifecycle and ownership events read as, their detail filled in.
LIFECYCLE_TEXT = {
    "terminal": "The issue was closed: the conversation ends {}.",
    "reopened": "The issue was reopened{}.",
    "owned": "The issue moved into the route's projects ({}): its events wake the agent again.",
    "not_owned": "The issue moved out of the route's projects ({}): its events no longer wake "
                 "the agent.",
    "plan_requested": "A person asked for a plan: a planning turn (read-only) runs{}.",
    "plan_revision_requested": "A comment on the waiting plan: the agent plans again{}.",
    "plan_withdrawn": "The issue went back to Ready for Planning: every approval is withdrawn{}.",
    "approved": "The plan was approved ({}): the execution lease is taken and the agent starts.",
    "approval_refused": "An approval was refused: {}.",
    "refused": "Not acted on: {}.",
}
# How an outbound write's outcome reads: an unanswered write is uncertain, never done.
OUTBOUND_STAGES = {"confirmed": "confirmed", "rejected": "rejected",
                   "outcome_unknown": "uncertain", "released": "not sent"}


class Recorder:
    """Tells the journal what happened; a no-op without one."""

    def __init__(self, journal: Any, now_ms: Callable[[], int], *,
                 owner_user_ids: Iterable[str] = (), owner_emails: Iterable[str] = (),
                 people: People | None = None) -> None:
        self._journal = journal
        self._now = now_ms
        self._people = people or People()
        self._owner_ids = frozenset(owner_user_ids)
        self._owner_emails = frozenset(e.lower() for e in owner_emails)
        self._questions: dict[str, str] = {}  # conversation id -> the turn that asked

    def _tell(self, note: Note) -> None:
        if self._journal is None:
            return
        try:
            self._journal.record.defer(note)
        except Exception:  # a stopped journal must not stop what it records
            log.warning("journal note not recorded", extra={"kind": note.kind}, exc_info=True)

    def _who(self, actor: ActorInfo | None) -> str:
        # An app user is never the owner, whatever id or address the config lists.
        if actor is not None and (actor.id in self._owner_ids
                                  or (actor.email or "").lower() in self._owner_emails) \
                and self._people.kind(actor) is not Kind.APP:
            return "owner"
        return "external"

    # --- arrivals ----------------------------------------------------------------------------

    def inbound(self, delivery: InboundDelivery, conversation_id: str, received_ms: int, *,
                stage: str = "accepted", note: str | None = None) -> None:
        """A delivery newly admitted that wakes or joins a conversation (or, `stage`
        "recorded", is only kept: `note` says why)."""
        env = delivery.envelope
        if isinstance(env, AgentSession):
            actor, text, url = env.creator, env.prompt or env.prompt_context, env.issue and env.issue.url
        elif isinstance(env, DataChange):
            actor, text, url = env.actor, env.comment_body, env.url
        elif isinstance(env, ControlMessage):
            # A thread message: the person is not a Linear actor; its id is the message's own.
            actor, text, url = None, control_text(env), env.url
        else:
            return
        key = env.issue.identifier if env.issue else None
        said = excerpt(text or delivery.headline)
        self._tell(Note(
            id=f"inbound:{_source(delivery)}", kind="inbound", at_ms=received_ms,
            sender=self._who(actor), to=conversation_id,
            text=f"{said} ({note})" if note else said, issue_keys=(key,) if key else (),
            thread=url if url and url.startswith("https://") else None, stage=stage))

    def admitted(self, admitted: list[tuple[Any, Any]]) -> None:
        """A group of deliveries is durable: each arrival that joined (or, on a planning
        route, was only recorded), and each lifecycle change it made."""
        for plan, result in admitted:
            delivery = plan.delivery
            env = delivery.envelope
            if result.joined:
                self.inbound(delivery, result.joined, plan.received_ms)
            elif isinstance(env, ControlMessage) and result.outcome in _ARRIVED:
                # A thread's command, or a message of a closed issue: still an arrival.
                self.inbound(delivery, env.conversation_id, plan.received_ms)
            elif result.note:  # a planning route's delivery outside its workflow
                self.inbound(delivery, result.conversation_id or INBOX_CONVERSATION_ID,
                             plan.received_ms, stage="recorded", note=result.note)
            key = env.issue.identifier if env is not None and env.issue else None
            for event, detail in result.events:
                self.lifecycle(result.conversation_id, event, LIFECYCLE_TEXT[event].format(detail),
                               source=delivery.delivery_id, issue_key=key)

    def matrix_inbound(self, message: MatrixMessage, conversation_id: str, received_ms: int,
                       *, woke: bool) -> None:
        """A Matrix message newly admitted: it joined the room's FIFO, or (`on_demand`) was
        recorded without waking anything."""
        self._tell(Note(
            id=f"inbound:matrix:{message.connection}:{message.event_id}", kind="inbound",
            at_ms=received_ms, sender="external", to=conversation_id,
            text=excerpt(f"{message.sender}: {message.body}"),
            thread=f"https://matrix.to/#/{quote(message.room_id, safe='')}/"
                   f"{quote(message.event_id, safe='')}",
            stage="accepted" if woke else "recorded"))

    def approval(self, approval: Any, event: str, who: str, text: str) -> None:
        """A Matrix send proposed, approved, denied or expired (every decision is recorded)."""
        self._tell(Note(id=f"lifecycle:{approval.id}:{event}", kind="lifecycle", at_ms=self._now(),
                        sender=who, to=approval.conversation_id, text=text,
                        thread=approval.conversation_id, stage=f"approval_{event}"))

    def matrix_outbound(self, approval: Any) -> None:
        """An approved Matrix send settled: sent (its event id) or failed (why)."""
        if approval.status == "sent":
            text = (f"m.text to {approval.room_id} (route {approval.route}, approval "
                    f"{approval.id}): sent as {approval.event_id}")
        else:
            text = (f"m.text to {approval.room_id} (route {approval.route}, approval "
                    f"{approval.id}): not sent: {approval.error}")
        self._tell(Note(id=f"outbound:{approval.id}", kind="outbound", at_ms=self._now(),
                        sender="wakeline", to="matrix", text=text, thread=approval.conversation_id,
                        stage=str(approval.status)))

    def matrix_connection(self, connection: str, event: str, text: str, about: str = "") -> None:
        """Something about a Matrix connection: stalled, resumed, a route switched off (`about`
        names it), a gap in a room's timeline."""
        at = self._now()
        self._tell(Note(id=f"lifecycle:matrix:{connection}:{at}:{event}:{about}", kind="lifecycle",
                        at_ms=at, sender="matrix", to="wakeline", text=text,
                        stage=f"matrix_{event}"))

    # --- turns -------------------------------------------------------------------------------

    def turn_started(self, turn: Any, confinement: str = "unconfined") -> None:
        """What the agent was given, and how it is confined ("bwrap, network=off", or
        "unconfined"); a turn after a question means the owner answered it."""
        asked = self._questions.pop(turn.conversation_id, None)
        if asked is not None and asked != turn.turn_id:
            self._answer(turn.conversation_id, asked, "answered")
        lines = [f"- {h}" for h in turn.inbox_headlines]
        for entry in turn.entries:
            env = entry.envelope
            said = env.prompt if isinstance(env, AgentSession) else (
                env.body if isinstance(env, MatrixMessage) else
                control_text(env) if isinstance(env, ControlMessage) else env.comment_body)
            lines.append(f"- {entry.headline}" + (f": {excerpt(said, 300)}" if said else ""))
        self._tell(Note(
            id=f"turn_brief:{turn.turn_id}:{turn.attempt}", kind="turn_brief", at_ms=self._now(),
            sender="wakeline", to="agent",
            text="\n".join([*(lines or ["(nothing new)"]), f"(confinement: {confinement})"]),
            issue_keys=(turn.issue_identifier,) if turn.issue_identifier else (),
            thread=turn.conversation_id, stage=f"attempt {turn.attempt}"))

    def turn_finished(self, finished: Any) -> None:
        """What the agent answered; an elicitation is a question for the owner."""
        turn, result = finished.turn, finished.result.value
        keys = (turn.issue_identifier,) if turn.issue_identifier else ()
        if result == "elicitation":
            self._questions[turn.conversation_id] = turn.turn_id
            self._tell(Note(id=f"owner_question:{turn.turn_id}", kind="owner_question",
                            at_ms=self._now(), sender="agent", to="owner",
                            text=finished.output.strip() or "(no question text)", issue_keys=keys,
                            thread=turn.conversation_id, stage="asked"))
            return
        self._tell(Note(id=f"turn_report:{turn.turn_id}", kind="turn_report", at_ms=self._now(),
                        sender="agent", to="wakeline", text=finished.output.strip() or f"({result})",
                        issue_keys=keys, thread=turn.conversation_id, stage=result))

    def progress(self, turn: Any, seq: int, stage: str, text: str) -> None:
        """Something the agent showed while it worked: a thought, its plan, a link, options."""
        self._tell(Note(id=f"turn_report:{turn.turn_id}:{turn.attempt}:progress:{seq}",
                        kind="turn_report", at_ms=self._now(), sender="agent", to="wakeline",
                        text=text or f"({stage})",
                        issue_keys=(turn.issue_identifier,) if turn.issue_identifier else (),
                        thread=turn.conversation_id, stage=stage))

    def turn_failed(self, turn: Any, error: str, stalled: bool) -> None:
        """A failed attempt; a stall is a lifecycle event too."""
        keys = (turn.issue_identifier,) if turn.issue_identifier else ()
        self._tell(Note(id=f"turn_report:{turn.turn_id}:{turn.attempt}", kind="turn_report",
                        at_ms=self._now(), sender="agent", to="wakeline", text=error,
                        issue_keys=keys, thread=turn.conversation_id, stage="failed"))
        if stalled:
            self.lifecycle(turn.conversation_id, "stalled", f"stalled after attempt {turn.attempt}: "
                           f"{error}", source=turn.turn_id, issue_key=turn.issue_identifier)

    def _answer(self, conversation_id: str, asked: str, stage: str) -> None:
        # The answer's text is the owner's: never copied, only that it came (or will not).
        self._tell(Note(id=f"owner_answer:{asked}", kind="owner_answer", at_ms=self._now(),
                        sender="owner", to="agent", text=f"The question was {stage}.",
                        thread=conversation_id, stage=stage))

    # --- lifecycle and writes ----------------------------------------------------------------

    def lifecycle(self, conversation_id: str, event: str, text: str, *, source: str,
                  issue_key: str | None = None) -> None:
        """terminal, reopened, reset, stalled, abandoned, owned, not_owned."""
        if event in ("terminal", "reset", "abandoned"):
            asked = self._questions.pop(conversation_id, None)
            if asked is not None:
                self._answer(conversation_id, asked, "withdrawn")
        self._tell(Note(id=f"lifecycle:{source}:{event}", kind="lifecycle", at_ms=self._now(),
                        sender="wakeline", to=conversation_id, text=text,
                        issue_keys=(issue_key,) if issue_key else (), thread=conversation_id,
                        stage=event))

    def turn_lifecycle(self, conversation_id: str, event: str, text: str) -> None:
        """A lifecycle event of the turns' side (a reset, an abandon, a plan posted)."""
        self.lifecycle(conversation_id, event, text, source=f"{conversation_id}:{self._now()}")

    def proxy_refused(self, conversation_id: str, issue_key: str | None, text: str,
                      source: str) -> None:
        """A confined turn's request the allow-list proxy refused (once per turn and host)."""
        self.lifecycle(conversation_id, "proxy_refused", text, source=source, issue_key=issue_key)

    def linear_auth(self, condition: str, text: str) -> None:
        """Whether a Linear token works changed (refused, not installed, working again)."""
        at = self._now()
        self._tell(Note(id=f"lifecycle:linear-auth:{at}:{condition}", kind="lifecycle", at_ms=at,
                        sender="linear", to="wakeline", text=text, stage=f"linear_auth_{condition}"))

    def outbound(self, effect_id: str, kind: str, target: str, state: str,
                 conversation_id: str | None = None) -> None:
        """A write to Linear whose outcome is known (or known to be unknown)."""
        stage = OUTBOUND_STAGES.get(state, state)
        self._tell(Note(id=f"outbound:{effect_id}", kind="outbound", at_ms=self._now(),
                        sender="wakeline", to="linear", text=f"{kind} on {target}: {stage}",
                        thread=conversation_id, stage=stage))


def control_text(env: ControlMessage) -> str:
    """What a thread message says: its text, else the files it attached."""
    if env.content.strip():
        return env.content
    names = ", ".join(a.filename for a in env.attachments)
    return f"(attachments only: {names})" if names else "(empty message)"


def _source(delivery: InboundDelivery) -> str:
    """The arrival's source id: `linear:<delivery id>`, or the thread message's own
    `discord:<message id>` (its delivery id)."""
    if isinstance(delivery.envelope, ControlMessage):
        return delivery.delivery_id
    return f"linear:{delivery.delivery_id}"
