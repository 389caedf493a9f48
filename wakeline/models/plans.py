"""What an admission writes: the plan a layer above makes, in the store's own terms.

The store knows no provider and no routing. The ingress hands it an
`AdmissionPlan`: the delivery as typed data, plus `decide`, a pure function
that the admission transaction calls with what it knows of the delivery's
conversation (or None) and that returns the `Decision` to record. Routing
needs that knowledge ("a comment about an issue whose conversation exists goes
to that conversation"), and the transaction is the only place it is current.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from wakeline.models.envelopes import InboundDelivery
from wakeline.models.outbox import EffectSpec, SessionReply
from wakeline.models.states import Outcome, Ownership, TerminalOutcome


@dataclass(frozen=True)
class ConversationFacts:
    """An existing conversation, as admission sees it when it decides."""

    id: str
    route: str | None
    terminal: bool
    reset_at: int | None
    ownership: Ownership
    project_id: str | None
    # Its plan-approve-execute gate (planning routes): the phase, the latest plan revision,
    # and whether the execution lease is held.
    plan_phase: str = "none"
    plan_rev: int = 0
    leased: bool = False


@dataclass(frozen=True)
class GateChange:
    """What a delivery does to its issue's plan-approve-execute gate.

    `action`: `request` (plan again; every approval withdrawn, a running turn stopped),
    `revise` (a comment on the waiting plan), `approve` (take the execution lease; the
    decision's FIFO entry is the execution request, and `effects` go out only if the lease
    was free), or `refuse` (a would-be approval, or a request or comment that needed a
    person, that counts for nothing: `reason` says why, `event` names it in the journal).
    """

    action: str
    approver: str | None = None
    reason: str | None = None
    effects: tuple[EffectSpec, ...] = ()
    event: str = "approval_refused"  # the journal's event for a refusal


@dataclass(frozen=True)
class NewConversation:
    """The issue conversation to create when none exists for the subject yet."""

    route: str
    title: str | None
    tainted: bool
    ownership: Ownership
    project_id: str | None = None


@dataclass(frozen=True)
class Move:
    """A signed Issue payload named the issue's project: the route and ownership that follow."""

    route: str | None
    ownership: Ownership
    project_id: str | None
    tainted: bool = False


@dataclass(frozen=True)
class Terminal:
    """Terminal intent, with the evidence that decided its outcome."""

    outcome: TerminalOutcome
    state_id: str | None
    done_state_id: str | None


OPEN = "open"


@dataclass(frozen=True)
class Decision:
    """What to record for one delivery.

    Attributes:
        create: the conversation to create when none exists (ignored when one does).
        move: a change of route or ownership of the existing (or created) conversation.
        to_fifo: the delivery becomes a FIFO entry of the conversation.
        lifecycle: `Terminal(...)`, `OPEN` (an explicit open state), or None.
        retire_reply: what each agent session whose work terminal intent drops is told.
        unknown_session_reply: what a `prompted` session never seen before is told.
        reset_reply: what a session whose delivery predates a committed reset is told.
        gate: what the delivery does to a planning route's gate.
        verify_actor: a user id whose answer to "a person or an app?" decides this delivery:
            its FIFO entry is held until the tracker has asked Linear, then decided again.
        note: why a delivery of a planning route was recorded without a turn (the journal).
    """

    outcome: Outcome
    reason: str | None = None
    create: NewConversation | None = None
    move: Move | None = None
    to_fifo: bool = False
    lifecycle: Terminal | str | None = None
    effects: tuple[EffectSpec, ...] = ()
    stop_session: str | None = None
    session_id: str | None = None
    retire_reply: SessionReply | None = None
    unknown_session_reply: SessionReply | None = None
    reset_reply: SessionReply | None = None
    gate: GateChange | None = None
    verify_actor: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class AdmissionPlan:
    """One verified delivery and how to decide what it becomes.

    `needs_conversation` tells the transaction whether to read the subject's
    conversation before deciding; events that can never reach one skip the read.
    `recheck_of`: the held FIFO entry this plan decides again (a delivery admitted
    before, whose actor Linear has now named a person or an app): no receipt, no
    inbox message, only the decision applied to that entry.
    """

    delivery: InboundDelivery
    received_ms: int
    decide: Callable[[ConversationFacts | None], Decision]
    needs_conversation: bool = True
    echo_window_ms: int = 90_000
    recheck_of: int | None = None

    @classmethod
    def fixed(cls, delivery: InboundDelivery, received_ms: int, decision: Decision,
              **fields: object) -> AdmissionPlan:
        """A plan whose decision does not depend on the conversation (tests, benchmarks)."""
        return cls(delivery, received_ms, lambda _facts: decision, **fields)  # type: ignore[arg-type]
