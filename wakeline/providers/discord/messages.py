"""A message in a control thread, typed, and how it is admitted like a webhook.

The Gateway and the REST catch-up both hand `ThreadMessage`s to the control; raw
Discord shapes stop here. A person's message in a bound thread becomes an
`InboundDelivery` whose receipt is keyed by the message id (`discord:<id>`), so a
Gateway resend or a catch-up of a message already admitted is a duplicate. Its
plan's `decide` joins the bound conversation's FIFO like a Linear comment, records
it without a turn when the conversation is terminal, and admits a command
(`!stop`, `!reset`, `!status` alone in a message, or `!approve ID`, `!deny ID`)
without a FIFO entry: the control acts on it once it is durable, and only the
first time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any

from wakeline.models.bindings import ControlTarget
from wakeline.models.envelopes import (
    Attachment,
    ControlMessage,
    InboundDelivery,
    IssueInfo,
    Subject,
)
from wakeline.models.plans import AdmissionPlan, ConversationFacts, Decision
from wakeline.models.states import Outcome
from wakeline.providers.discord import PROVIDER

DISCORD_EPOCH_MS = 1_420_070_400_000
EVENT_TYPE = "DiscordMessage"
COMMANDS = {"!stop": "stop", "!reset": "reset", "!status": "status"}
# A Matrix route's proposed send, decided in its thread: the word and at most the approval id.
DECISIONS = {"!approve": "approve", "!deny": "deny"}
# Message types a person writes: a plain message and a reply. The rest (a thread's
# creation notice, pins, joins...) are Discord's own.
PERSON_TYPES = frozenset({0, 19})
WEB_URL = "https://discord.com/channels/{guild}/{thread}/{message}"


@dataclass(frozen=True)
class ThreadMessage:
    """One message as the Gateway or a catch-up saw it; nothing of discord.py's objects."""

    thread_id: str
    message_id: str
    guild_id: str | None
    author_id: str
    author_name: str | None
    is_bot: bool
    is_system: bool
    content: str
    attachments: tuple[Attachment, ...] = ()

    @property
    def id_number(self) -> int:
        """The message id as a number (ids grow with time)."""
        return int(self.message_id)

    @property
    def created_ms(self) -> int:
        """When it was sent, from its snowflake id."""
        return (self.id_number >> 22) + DISCORD_EPOCH_MS

    @property
    def command(self) -> str | None:
        """`stop`, `reset` or `status` when the message is that command alone; `approve` or
        `deny` when it is `!approve` or `!deny` with at most one word after it."""
        words = self.content.split()
        if len(words) == 1 and words[0].lower() in COMMANDS:
            return COMMANDS[words[0].lower()]
        if 1 <= len(words) <= 2 and words[0].lower() in DECISIONS:
            return DECISIONS[words[0].lower()]
        return None

    @property
    def argument(self) -> str | None:
        """The word after `!approve` or `!deny` (the approval id), or None."""
        words = self.content.split()
        return words[1] if len(words) == 2 and self.command in ("approve", "deny") else None

    @classmethod
    def from_rest(cls, data: dict[str, Any], guild_id: str | None = None) -> ThreadMessage:
        """From Discord's REST message object (a catch-up page)."""
        author = data.get("author") or {}
        return cls(
            thread_id=str(data["channel_id"]), message_id=str(data["id"]),
            guild_id=str(data.get("guild_id") or guild_id or "") or None,
            author_id=str(author.get("id", "")),
            author_name=author.get("global_name") or author.get("username"),
            is_bot=bool(author.get("bot")), is_system=int(data.get("type", 0)) not in PERSON_TYPES,
            content=str(data.get("content") or ""),
            attachments=tuple(attachment_of(a) for a in data.get("attachments") or ()))


def attachment_of(data: dict[str, Any]) -> Attachment:
    """An attachment's name, link, size and type."""
    return Attachment(filename=str(data.get("filename") or "file"), url=data.get("url"),
                      size=data.get("size"), content_type=data.get("content_type"))


def to_delivery(message: ThreadMessage, target: ControlTarget) -> InboundDelivery:
    """The admission form of a bound thread's message (the binding named `target`)."""
    delivery_id = f"{PROVIDER}:{message.message_id}"
    issue = IssueInfo(id=target.issue_id, identifier=target.issue_identifier) \
        if target.issue_id else None
    created = datetime.fromtimestamp(message.created_ms / 1000, timezone.utc)
    envelope = ControlMessage(
        provider=PROVIDER, conversation_id=target.conversation_id, thread_id=message.thread_id,
        message_id=message.message_id, author_id=message.author_id,
        author_name=message.author_name, content=message.content,
        attachments=message.attachments, command=message.command,
        created_at=created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        url=WEB_URL.format(guild=message.guild_id or "@me", thread=message.thread_id,
                           message=message.message_id),
        issue=issue)
    who = message.author_name or message.author_id
    return InboundDelivery(
        delivery_id=delivery_id,
        # The receipts' second dedupe key: the message's own id, never another message's.
        body_sha256=hashlib.sha256(delivery_id.encode()).hexdigest(),
        event_type=EVENT_TYPE,
        action="command" if message.command else "create",
        webhook_ms=message.created_ms,
        envelope=envelope,
        subject=Subject(namespace=target.namespace, key=target.key),
        headline=f"Discord message · {target.issue_identifier or '-'} · {who}",
        inbox_event=None,  # not a Linear event: the Linear inbox does not keep it
    )


def decide(delivery: InboundDelivery, conv: ConversationFacts | None) -> Decision:
    """What a thread message becomes, given the conversation its binding named."""
    env = delivery.envelope
    assert isinstance(env, ControlMessage)
    if conv is None or conv.id != env.conversation_id:
        return Decision(Outcome.IGNORED, "no_conversation")
    if conv.terminal:
        # A closed issue takes no turn and no command until Linear reopens it, and its thread
        # gets no reply (it is closed again instead); the message is recorded.
        return Decision(Outcome.IGNORED, "terminal")
    if env.command:
        return Decision(Outcome.ACCEPTED)  # acted on by the control once durable, never a turn
    return Decision(Outcome.ACCEPTED, to_fifo=True)


def plan(delivery: InboundDelivery, received_ms: int) -> AdmissionPlan:
    """The admission plan of a thread message."""
    return AdmissionPlan(delivery, received_ms, partial(decide, delivery), needs_conversation=True)
