"""A proposed Matrix send as a control thread shows it: the post, its buttons, a click.

The post shows the whole body (split at 2,000 characters, Markdown escaped so the exact
characters show) and, on its last message, two buttons (an action row, type 1, of buttons,
type 2). Their `custom_id`s say what they decide and, for an approval, the SHA-256 of the
body shown, so a click approves exactly that body:

    wl:approve:<approval id>:<sha256 of the body shown>
    wl:deny:<approval id>

Once decided, the row holds one disabled button, `wl:done:<approval id>`, labelled with the
outcome. Raw Discord shapes of a click stop at `Click`; the gateway builds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from wakeline.models.approvals import Approval, ApprovalStatus
from wakeline.providers.discord import texts

ACTION_ROW, BUTTON = 1, 2
SUCCESS, DANGER, SECONDARY = 3, 4, 2
LABEL_MAX_CHARS = 80
_CUSTOM_ID = re.compile(r"wl:(?P<action>approve|deny|done):(?P<id>apr_[0-9a-f]{16})"
                        r"(?::(?P<sha>[0-9a-f]{64}))?")
_APPROVAL_ID = re.compile(r"apr_[0-9a-f]{16}")


@dataclass(frozen=True)
class Button:
    """What a button's `custom_id` says: approve (with the hash shown), deny, or done."""

    action: str
    approval_id: str
    body_sha256: str | None = None


def custom_id(action: str, approval: Approval) -> str:
    """A button's id (at most 100 characters, as Discord wants)."""
    if action == "approve":
        return f"wl:approve:{approval.id}:{approval.body_sha256}"
    return f"wl:{action}:{approval.id}"


def parse_custom_id(value: str) -> Button | None:
    """The button a `custom_id` names, or None for anything wakeline did not make: an
    approve without the hash, a deny or done with one, another shape."""
    match = _CUSTOM_ID.fullmatch(value)
    if match is None:
        return None
    action, sha = match.group("action"), match.group("sha")
    if (action == "approve") != (sha is not None):
        return None
    return Button(action, match.group("id"), sha)


def is_approval_id(value: str) -> bool:
    """True for the shape of an approval id (`apr_` and 16 hex digits)."""
    return bool(_APPROVAL_ID.fullmatch(value))


def components(approval: Approval) -> list[dict[str, Any]]:
    """The post's buttons: Approve and Deny while pending, else one disabled button that
    says what became of it."""
    if approval.status is ApprovalStatus.PENDING:
        buttons = [
            {"type": BUTTON, "style": SUCCESS, "label": "Approve",
             "custom_id": custom_id("approve", approval)},
            {"type": BUTTON, "style": DANGER, "label": "Deny",
             "custom_id": custom_id("deny", approval)},
        ]
    else:
        buttons = [{"type": BUTTON, "style": SECONDARY, "label": status_label(approval),
                    "custom_id": custom_id("done", approval), "disabled": True}]
    return [{"type": ACTION_ROW, "components": buttons}]


def status_label(approval: Approval) -> str:
    """A disabled button's label: the outcome and who decided (at most 80 characters)."""
    label = texts.STATUS_LABELS.get(approval.status.value, approval.status.value)
    by = approval.decided_by
    if by and approval.status in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED,
                                  ApprovalStatus.SENT):
        label += " · " + ("by the operator" if by == "operator" else
                          f"by Discord user {by.split(':', 1)[1]}" if by.startswith("discord:")
                          else f"by {by}")
    return label[:LABEL_MAX_CHARS]


def post_parts(approval: Approval) -> list[str]:
    """The post's messages, in order, each at most 2,000 characters; the buttons go on the
    last. The body is shown whole, escaped, after a header naming room, route and id."""
    # The room id goes in a code span, where Discord shows every character as it is.
    header = texts.PROPOSAL_HEADER.format(room=approval.room_id,
                                          route=texts.escape_markdown(approval.route),
                                          id=approval.id)
    footer = texts.PROPOSAL_FOOTER.format(sha=approval.body_sha256[:12], id=approval.id,
                                          expires=approval.expires_at // 1000)
    parts = texts.split_message(header + "\n" + texts.escape_markdown(approval.body))
    if len(parts[-1]) + 1 + len(footer) <= texts.MESSAGE_MAX_CHARS:
        parts[-1] += "\n" + footer
    else:
        parts.append(footer)
    return parts


def outcome_line(approval: Approval) -> str | None:
    """The line a thread gets when an approval changes (None while pending)."""
    values = {"id": f"`{approval.id}`", "room": approval.room_id,
              "who": texts.who(approval.decided_by)}
    if approval.status is ApprovalStatus.APPROVED:
        return texts.APPROVED_LINE.format(**values)
    if approval.status is ApprovalStatus.DENIED:
        return texts.DENIED_LINE.format(**values)
    if approval.status is ApprovalStatus.EXPIRED:
        return texts.EXPIRED_LINE.format(**values)
    if approval.status is ApprovalStatus.SENT:
        return texts.SENT_LINE.format(**values, event=approval.event_id)
    if approval.status is ApprovalStatus.FAILED:
        return texts.FAILED_LINE.format(**values, error=approval.error or "refused")
    return None


def post_of(message: dict[str, Any], approval_id: str) -> str | None:
    """The body hash a message (REST shape) shows for this approval: its approve button's,
    or "" when its buttons are decided ones; None when it is not this approval's post."""
    if not (message.get("author") or {}).get("bot"):
        return None  # buttons only come from bots; a person's message is never the post
    for row in message.get("components") or ():
        for button in row.get("components") or ():
            found = parse_custom_id(str(button.get("custom_id", "")))
            if found is not None and found.approval_id == approval_id:
                return found.body_sha256 or ""
    return None


@dataclass(frozen=True)
class Click:
    """A person's (or a bot's) click on a message component, as the Gateway saw it.

    `token` is the interaction's own credential for its callback: never shown (`repr`) and
    never logged. `can_post` says whether Discord's resolved permissions let the clicker
    send messages in the thread (what "anyone who can post there" means for a click).
    """

    interaction_id: str
    token: str = field(repr=False)
    custom_id: str = ""
    channel_id: str = ""
    message_id: str | None = None
    guild_id: str | None = None
    user_id: str = ""
    is_bot: bool = False
    can_post: bool = False
