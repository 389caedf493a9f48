"""One-line headlines: type, action, issue identifier, actor."""

from __future__ import annotations

from wakeline.models.envelopes import AgentSession, DataChange

SEPARATOR = " · "


def headline(envelope: DataChange | AgentSession) -> str:
    """`Comment create · ENG-12 · Jane Doe`; `-` and `unknown` stand in for what is missing."""
    if isinstance(envelope, AgentSession):
        kind, action, actor = "AgentSession", envelope.action, envelope.creator
    else:
        kind, action, actor = envelope.event_type, envelope.action, envelope.actor
    issue = (envelope.issue.identifier if envelope.issue else None) or "-"
    name = (actor.name if actor else None) or "unknown"
    line = SEPARATOR.join((f"{kind} {action}", issue, name))
    # A headline is one line whatever the payload held.
    return " ".join(line.split())[:300]
