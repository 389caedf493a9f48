"""A thread message, typed, and what admission makes of it."""

from __future__ import annotations

from typing import Any

from wakeline.models.bindings import ControlTarget
from wakeline.models.envelopes import ControlMessage, dump_envelope, parse_envelope
from wakeline.models.plans import ConversationFacts
from wakeline.models.states import Outcome, Ownership
from wakeline.providers.discord.messages import ThreadMessage, decide, plan, to_delivery

TARGET = ControlTarget("cv_1", "linear:org:issue", "issue-1", "ops", False, "issue-1", "OPS-1",
                       "[OPS-1] Rotate the logs")
# 2026-01-01T00:00:00Z as a snowflake: (ms - Discord's epoch) << 22.
MESSAGE_ID = str((1_767_225_600_000 - 1_420_070_400_000) << 22)


def rest(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": MESSAGE_ID, "channel_id": "900", "guild_id": "1", "type": 0,
                            "content": "please look", "attachments": [],
                            "author": {"id": "555", "username": "ada", "global_name": "Ada"}}
    body.update(over)
    return body


def facts(cid: str = "cv_1", terminal: bool = False) -> ConversationFacts:
    return ConversationFacts(cid, "ops", terminal, None, Ownership.OWNED, None)


def test_a_rest_message_is_typed() -> None:
    m = ThreadMessage.from_rest(rest(attachments=[{"filename": "a.log", "url": "https://x/a.log",
                                                   "size": 3, "content_type": "text/plain"}]))
    assert (m.thread_id, m.author_id, m.author_name, m.is_bot, m.is_system) == \
        ("900", "555", "Ada", False, False)
    assert m.created_ms == 1_767_225_600_000 and m.attachments[0].filename == "a.log"
    assert ThreadMessage.from_rest(rest(type=18)).is_system
    assert not ThreadMessage.from_rest(rest(type=19)).is_system  # a reply is a person's
    assert ThreadMessage.from_rest(rest(author={"id": "1", "username": "b", "bot": True})).is_bot


def test_a_command_is_the_command_alone() -> None:
    def command(text: str) -> str | None:
        return ThreadMessage.from_rest(rest(content=text)).command

    assert [command(t) for t in ("!stop", " !RESET\n", "!status", "!stop now", "stop", "")] == \
        ["stop", "reset", "status", None, None, None]


def test_the_delivery_is_keyed_by_the_message_id() -> None:
    d = to_delivery(ThreadMessage.from_rest(rest()), TARGET)
    assert d.delivery_id == f"discord:{MESSAGE_ID}" and d.event_type == "DiscordMessage"
    assert d.subject is not None and (d.subject.namespace, d.subject.key) == \
        ("linear:org:issue", "issue-1")
    assert d.headline == "Discord message · OPS-1 · Ada" and d.inbox_event is None
    assert d.webhook_ms == 1_767_225_600_000
    env = d.envelope
    assert isinstance(env, ControlMessage) and env.conversation_id == "cv_1"
    assert env.created_at == "2026-01-01T00:00:00.000Z"
    assert env.url == f"https://discord.com/channels/1/900/{MESSAGE_ID}"
    assert parse_envelope(dump_envelope(env)) == env  # as the FIFO stores it
    other = to_delivery(ThreadMessage.from_rest(rest(id=str(int(MESSAGE_ID) + 1))), TARGET)
    assert other.body_sha256 != d.body_sha256


def test_a_message_joins_the_bound_conversations_fifo() -> None:
    d = to_delivery(ThreadMessage.from_rest(rest()), TARGET)
    decision = plan(d, 0).decide(facts())
    assert (decision.outcome, decision.to_fifo, decision.create) == (Outcome.ACCEPTED, True, None)


def test_a_closed_issue_records_the_message_without_a_turn() -> None:
    d = to_delivery(ThreadMessage.from_rest(rest()), TARGET)
    assert decide(d, facts(terminal=True)).reason == "terminal"
    assert not decide(d, facts(terminal=True)).to_fifo


def test_a_command_in_a_closed_issues_thread_is_only_recorded() -> None:
    """No reply goes to a closed thread (a moderator may still post in a locked one)."""
    d = to_delivery(ThreadMessage.from_rest(rest(content="!status")), TARGET)
    decision = decide(d, facts(terminal=True))
    assert (decision.outcome, decision.reason, decision.to_fifo) == (
        Outcome.IGNORED, "terminal", False)


def test_a_command_is_admitted_without_a_fifo_entry() -> None:
    d = to_delivery(ThreadMessage.from_rest(rest(content="!stop")), TARGET)
    decision = decide(d, facts())
    assert decision.outcome is Outcome.ACCEPTED and not decision.to_fifo
    assert d.action == "command"


def test_a_conversation_that_is_not_the_bound_one_takes_nothing() -> None:
    d = to_delivery(ThreadMessage.from_rest(rest()), TARGET)
    assert decide(d, None).reason == "no_conversation"
    assert decide(d, facts(cid="cv_other")).reason == "no_conversation"
