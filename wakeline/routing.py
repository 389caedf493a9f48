"""Decide what an admitted delivery becomes: an inbox message, a FIFO entry, both or neither.

Pure: takes a parsed delivery and the config, returns an `AdmissionPlan` that
the store commits in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from wakeline.config import Config, RouteConfig
from wakeline.models.envelopes import AgentSession, DataChange, Subject
from wakeline.models.outbox import EffectSpec
from wakeline.models.states import Outcome
from wakeline.providers.linear import replies
from wakeline.providers.linear.adapter import ParsedDelivery

# An update touching only these fields moved the issue between projects: no turn.
PROJECT_BOOKKEEPING = frozenset({"projectId", "addedToProjectAt", "updatedAt"})


@dataclass(frozen=True)
class AdmissionPlan:
    """What one delivery's admission transaction writes."""

    delivery: ParsedDelivery
    received_ms: int
    outcome: Outcome
    reason: str | None = None
    subject: Subject | None = None
    route: str | None = None
    title: str | None = None
    to_fifo: bool = False
    lifecycle: Literal["terminal", "open"] | None = None
    tainted: bool = False
    effects: tuple[EffectSpec, ...] = ()
    stop_session: str | None = None
    echo_window_ms: int = 90_000


def plan_admission(delivery: ParsedDelivery, config: Config, received_ms: int) -> AdmissionPlan:
    """Route one verified delivery."""
    envelope = delivery.envelope
    if envelope is None or delivery.ignore_reason:
        plan = AdmissionPlan(delivery, received_ms, Outcome.IGNORED, delivery.ignore_reason)
    elif isinstance(envelope, AgentSession):
        plan = _plan_session(delivery, envelope, config, received_ms)
    else:
        plan = _plan_change(delivery, envelope, config, received_ms)
    return replace(plan, echo_window_ms=config.linear.echo_window_seconds * 1000)


def _title(envelope: DataChange | AgentSession) -> str | None:
    issue = envelope.issue
    if issue is None:
        return None
    if issue.identifier and issue.title:
        return f"[{issue.identifier}] {issue.title}"
    return issue.identifier or issue.title


def _plan_session(
    delivery: ParsedDelivery, envelope: AgentSession, config: Config, received_ms: int
) -> AdmissionPlan:
    route = config.route_for_team(envelope.issue.team_key if envelope.issue else None)
    if delivery.subject is None or route is None:
        reason = "no_issue" if delivery.subject is None else "team_not_routed"
        refusal = () if envelope.action != "created" else (
            replies.activity(envelope.session_id, "error", replies.NOT_CONNECTED),)
        return AdmissionPlan(delivery, received_ms, Outcome.IGNORED, reason, effects=refusal)
    if envelope.is_stop:
        # A stop is lifecycle only: it never becomes a turn of its own.
        return AdmissionPlan(
            delivery, received_ms, Outcome.ACCEPTED, subject=delivery.subject, route=route.name,
            stop_session=envelope.session_id,
            effects=(replies.activity(envelope.session_id, "response", replies.STOPPED),),
        )
    ack = (replies.activity(envelope.session_id, "thought", replies.ACK),) \
        if envelope.action == "created" else ()
    return _routed(delivery, envelope, route, received_ms, to_fifo=True, effects=ack)


def _routed(delivery: ParsedDelivery, envelope: DataChange | AgentSession, route: RouteConfig,
            received_ms: int, **fields: object) -> AdmissionPlan:
    """An accepted plan for a routed issue conversation."""
    return AdmissionPlan(
        delivery, received_ms, Outcome.ACCEPTED, subject=delivery.subject, route=route.name,
        title=_title(envelope), tainted=route.trust == "public", **fields,  # type: ignore[arg-type]
    )


def _lifecycle(envelope: DataChange) -> Literal["terminal", "open"] | None:
    # Only Linear's typed state classifies: a display name like "Done" never does.
    state = envelope.issue.state if envelope.issue else None
    if envelope.event_type != "Issue" or state is None or state.type is None:
        return None
    return "terminal" if state.terminal else "open"


def _issue_route(envelope: DataChange, config: Config) -> RouteConfig | None:
    if envelope.event_type not in ("Issue", "Comment") or envelope.issue is None:
        return None
    route = config.route_for_team(envelope.issue.team_key)
    if route is None or route.mode != "issue":
        return None
    if route.projects and envelope.issue.project_id not in route.projects:
        return None
    return route


def _wakes(envelope: DataChange, route: RouteConfig) -> bool:
    if envelope.action == "remove":
        return False
    if envelope.event_type == "Issue" and envelope.action == "create":
        state = envelope.issue.state if envelope.issue else None
        # Creating a proposal does not authorise work on it.
        if route.proposed_state_id and state is not None and state.id == route.proposed_state_id:
            return False
    if envelope.event_type == "Issue" and envelope.action == "update":
        if envelope.updated_fields and set(envelope.updated_fields) <= PROJECT_BOOKKEEPING:
            return False
    return True


def _plan_change(
    delivery: ParsedDelivery, envelope: DataChange, config: Config, received_ms: int
) -> AdmissionPlan:
    lifecycle = _lifecycle(envelope)
    route = _issue_route(envelope, config)
    if route is None or delivery.subject is None:
        # Not a turn, but a lifecycle change still reaches an existing conversation.
        return AdmissionPlan(delivery, received_ms, Outcome.ACCEPTED, subject=delivery.subject,
                             lifecycle=lifecycle)
    return _routed(delivery, envelope, route, received_ms, lifecycle=lifecycle,
                   to_fifo=lifecycle != "terminal" and _wakes(envelope, route))
