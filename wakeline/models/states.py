"""The named states of deliveries and the outcomes of admission.

The state machine is drawn once, in docs/architecture.md:

    admitted --> pending --claim--> claimed --finalise--> completed
                    ^                  |
                    +--crash/recover---+   (sequence unchanged)
"""

from __future__ import annotations

from enum import StrEnum


class DeliveryState(StrEnum):
    """Where a delivery stands in its conversation's FIFO."""

    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"


class Outcome(StrEnum):
    """What the ingress answers for a delivery (CONTRACT section 2)."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    IGNORED = "ignored"
    SELF_ECHO = "self_echo"
    HELD = "held"


class ConversationKind(StrEnum):
    """Issue conversations run agent turns; the inbox is the reading room."""

    ISSUE = "issue"
    INBOX = "inbox"
