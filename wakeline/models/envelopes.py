"""Typed envelopes: what the provider adapter hands the rest of wakeline.

An envelope is stored as JSON in the FIFO and read back with `parse_envelope`,
so a delivery is processed from what was admitted, whatever Linear says later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

TERMINAL_STATE_TYPES = frozenset({"completed", "canceled"})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Subject(_Frozen):
    """What a conversation is about: a namespace plus an immutable key."""

    namespace: str
    key: str


class WorkflowState(_Frozen):
    """A Linear workflow state; `type` is the only classification trusted."""

    id: str | None = None
    name: str | None = None
    type: str | None = None

    @property
    def terminal(self) -> bool:
        """True for Linear's typed terminal states (completed, canceled)."""
        return self.type in TERMINAL_STATE_TYPES


class IssueInfo(_Frozen):
    """What wakeline knows of the issue a delivery is about."""

    id: str
    identifier: str | None = None
    title: str | None = None
    team_key: str | None = None
    project_id: str | None = None
    # True when the payload states the project (Issue events do, with null for none);
    # a Comment's embedded issue carries no project, so it is unknown there.
    project_known: bool = False
    url: str | None = None
    state: WorkflowState | None = None
    # Label names when the payload states them (Issue events do); None: not known here.
    labels: tuple[str, ...] | None = None


class ActorInfo(_Frozen):
    """Who caused an event."""

    id: str | None = None
    name: str | None = None
    email: str | None = None
    type: str | None = None


class DataChange(_Frozen):
    """A data-change event (Issue, Comment, or any other type)."""

    kind: Literal["data_change"] = "data_change"
    event_type: str
    action: str
    object_id: str
    organization_id: str | None = None
    issue: IssueInfo | None = None
    actor: ActorInfo | None = None
    url: str | None = None
    created_at: str | None = None
    comment_body: str | None = None
    description: str | None = None  # an Issue event's: the issue's description now
    updated_fields: tuple[str, ...] = ()
    # An Issue update that moved the issue: the state it came from (`updatedFrom.stateId`).
    previous_state_id: str | None = None


class AgentSession(_Frozen):
    """An `AgentSessionEvent`: Linear opened or prompted an agent session."""

    kind: Literal["agent_session"] = "agent_session"
    action: str
    session_id: str
    organization_id: str | None = None
    issue: IssueInfo | None = None
    creator: ActorInfo | None = None
    activity_id: str | None = None
    prompt: str | None = None
    prompt_context: str | None = None
    guidance: str | None = None
    signal: str | None = None
    prompter_id: str | None = None  # the user who wrote a `prompted` activity

    @property
    def is_stop(self) -> bool:
        """A `prompted` event that asks the running turn to stop."""
        return self.action == "prompted" and self.signal == "stop"


class MatrixMessage(_Frozen):
    """Live text from someone other than the owner in a Matrix room a route binds.

    `sender_name` is the sender's display name as the room showed it: anyone can choose
    any name, so it is shown, never trusted; `sender` (the user id) is who wrote it.
    """

    kind: Literal["matrix_message"] = "matrix_message"
    connection: str
    route: str
    room_id: str
    event_id: str
    sender: str
    sender_name: str | None = None
    body: str
    sent_at: str | None = None
    encrypted: bool = False



class Attachment(_Frozen):
    """A file attached to a control message: what it is and where it lives, never its bytes."""

    filename: str
    url: str | None = None
    size: int | None = None
    content_type: str | None = None


class ControlMessage(_Frozen):
    """A person's message in a conversation's control thread (Discord).

    The thread's binding named the conversation before admission, so the message
    carries it; `command` is `stop`, `reset` or `status` when the message is only
    that command, or `approve` or `deny` for `!approve ID` or `!deny ID` (a Matrix send
    decided in the thread), acted on instead of starting a turn.
    """

    kind: Literal["control_message"] = "control_message"
    provider: str
    conversation_id: str
    thread_id: str
    message_id: str
    author_id: str
    author_name: str | None = None
    content: str = ""
    attachments: tuple[Attachment, ...] = ()
    command: str | None = None
    created_at: str | None = None
    url: str | None = None
    issue: IssueInfo | None = None



Envelope = Annotated[DataChange | AgentSession | MatrixMessage | ControlMessage,
                     Field(discriminator="kind")]
_ENVELOPE = TypeAdapter(Envelope)


def parse_envelope(text: str | bytes) -> DataChange | AgentSession | MatrixMessage | ControlMessage:
    """Read back an envelope stored as JSON."""
    return _ENVELOPE.validate_json(text)


def dump_envelope(envelope: DataChange | AgentSession | MatrixMessage | ControlMessage) -> str:
    """The JSON form stored in the FIFO."""
    return envelope.model_dump_json(exclude_defaults=False)


JsonObject = dict[str, Any]


@dataclass(frozen=True)
class EventEvidence:
    """What an update's webhook shows, for telling our own write from anyone's.

    `changed` are the substantive fields the event says changed, `digests` a digest of
    each one's new value (never the value: a comment body stays out of the store), and
    `terminal` an Issue event into a completed or canceled state.
    """

    kind: str
    action: str
    subject: str
    actor_id: str | None
    changed: tuple[str, ...]
    digests: dict[str, str]
    terminal: bool = False


@dataclass(frozen=True)
class InboundDelivery:
    """A verified delivery, typed by the provider adapter; raw payloads stop before this.

    `envelope` is None for events wakeline does not act on (`ignore_reason` says why).
    `inbox_event` is the event as the inbox keeps it, for data-change events.
    """

    delivery_id: str
    body_sha256: str
    event_type: str
    action: str
    webhook_ms: int
    envelope: DataChange | AgentSession | ControlMessage | None
    subject: Subject | None
    headline: str
    inbox_event: JsonObject | None
    ignore_reason: str | None = None
    organization_id: str | None = None
    evidence: EventEvidence | None = None
