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
    HELD = "held"  # a candidate echo of a write in flight: it blocks its FIFO until the write answers


class Outcome(StrEnum):
    """What the ingress answers for a delivery (CONTRACT section 2)."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    IGNORED = "ignored"
    SELF_ECHO = "self_echo"
    HELD = "held"


class TurnState(StrEnum):
    """A turn record's state: it runs, waits for a retry, or waits for an operator."""

    RUNNING = "running"
    RETRY = "retry"
    STALLED = "stalled"


class TurnResultKind(StrEnum):
    """How a turn ended; also the `completion` of the deliveries it carried."""

    RESPONSE = "response"  # exit 0
    ERROR = "error"  # exit 1
    ELICITATION = "elicitation"  # exit 2
    STOPPED = "stopped"  # the operator or the requester stopped it
    RESET = "reset"  # a context reset cleared it
    ABANDONED = "abandoned"  # an operator gave up on a stalled turn
    RETIRED = "retired"  # the issue reached a terminal state
    NOT_OWNED = "not_owned"  # the issue is not in the route's projects (a completion, never a turn)
    SELF_ECHO = "self_echo"  # a held delivery proved to be our own write coming back (no turn)
    REFUSED = "refused"  # it needed a person and came from an app (or was moot once known): no turn


class ConversationState(StrEnum):
    """What `GET /v1/conversations` shows (the lifecycle is drawn in docs/architecture.md)."""

    IDLE = "idle"
    RUNNING = "running"
    STALLED = "stalled"
    WAITING_OWNERSHIP = "waiting_ownership"
    TERMINAL = "terminal"


class Ownership(StrEnum):
    """Whether an issue conversation's route owns the issue (its project is one of the route's).

    Only Issue and Comment events are gated by it; agent sessions are explicit delegation.
    """

    OWNED = "owned"
    PENDING = "pending"  # not known from a signed payload yet: the tracker looks it up
    NOT_OWNED = "not_owned"


class TerminalOutcome(StrEnum):
    """How a terminal conversation ended, by exact evidence: the route's Done state or not."""

    COMPLETED = "completed"
    CANCELED = "canceled"


class ConversationKind(StrEnum):
    """Issue conversations run agent turns; the inbox is the reading room."""

    ISSUE = "issue"
    INBOX = "inbox"
