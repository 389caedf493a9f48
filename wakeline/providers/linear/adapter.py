"""Turn a signed Linear webhook into a typed delivery, checking it on the way.

`LinearWebhooks.read` runs the contract's checks in order (signature, shape,
timestamp, organization) and returns an `InboundDelivery`. The size limit is the
HTTP edge's job, since it must refuse before reading the body.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ValidationError

from wakeline.errors import Malformed, OrganizationRefused, SignatureInvalid, TimestampStale
from wakeline.models.envelopes import (
    ActorInfo,
    AgentSession,
    DataChange,
    EventEvidence,
    InboundDelivery,
    IssueInfo,
    JsonObject,
    Subject,
    WorkflowState,
)
from wakeline.providers.linear.headlines import headline
from wakeline.providers.linear.intents import evidence_of
from wakeline.providers.linear.payloads import (
    ActorPayload,
    AgentSessionEventPayload,
    CommentData,
    DataChangePayload,
    IssueData,
    IssueRefPayload,
    LabelRef,
)
from wakeline.providers.linear.signature import signature_valid

AGENT_SESSION_EVENT = "AgentSessionEvent"
# Linear's data-change resource types: without `data` such an event is malformed.
DATA_CHANGE_TYPES = frozenset({
    "Issue", "Comment", "IssueLabel", "Reaction", "Project", "ProjectUpdate", "Cycle",
    "Attachment", "Document", "Initiative", "InitiativeUpdate", "User", "IssueSLA",
    "Customer", "CustomerNeed",
})
MAX_JSON_DEPTH = 64
ISSUE_NAMESPACE = "linear:{org}:issue"
# Keys of a data-change event that the inbox keeps, in the contract's order.
INBOX_KEYS = ("type", "action", "url", "createdAt", "actor", "data", "updatedFrom")


class LinearWebhooks:
    """Verifies and parses Linear webhook deliveries."""

    def __init__(self, secret: str, *, freshness_seconds: int, organization_id: str = "") -> None:
        self._secret = secret
        self._freshness_ms = freshness_seconds * 1000
        self._organization_id = organization_id

    def restrict_to(self, organization_id: str) -> None:
        """Refuse deliveries of any other organization from now on (the installed app's)."""
        self._organization_id = organization_id

    def read(
        self, body: bytes, *, signature: str | None, delivery_id: str | None, now_ms: int
    ) -> InboundDelivery:
        """Check and parse one delivery.

        Raises:
            SignatureInvalid, Malformed, TimestampStale, OrganizationRefused: in that order.
        """
        if not signature_valid(self._secret, body, signature):
            raise SignatureInvalid()
        if not delivery_id or not delivery_id.strip():
            raise Malformed("missing Linear-Delivery header")
        if len(delivery_id) > 200:
            raise Malformed("Linear-Delivery header too long")
        raw = _load_object(body)
        parsed = _parse(raw, delivery_id.strip(), hashlib.sha256(body).hexdigest())
        _check_fresh(parsed.webhook_ms, now_ms, self._freshness_ms)
        if self._organization_id and parsed.organization_id != self._organization_id:
            raise OrganizationRefused()
        return parsed


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load_object(body: bytes) -> JsonObject:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed("body is not UTF-8") from None
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise Malformed("JSON nested too deeply") from None
    except ValueError as exc:
        raise Malformed(f"body is not JSON: {str(exc)[:120]}") from None
    if not isinstance(raw, dict):
        raise Malformed("body is not a JSON object")
    # Nesting needs an opening bracket per level: a body with fewer (counted in C, strings
    # included) cannot be too deep, and a typical delivery has about twenty.
    if body.count(b"{") + body.count(b"[") > MAX_JSON_DEPTH:
        _check_depth(raw)
    return raw


def _check_depth(value: Any) -> None:
    """Refuse deep nesting before anything recursive (pydantic, json.dumps) sees it."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise Malformed(f"JSON nested deeper than {MAX_JSON_DEPTH}")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))


def _check_fresh(webhook_ms: int, now_ms: int, freshness_ms: int) -> None:
    if webhook_ms < 0 or abs(now_ms - webhook_ms) > freshness_ms:
        raise TimestampStale()


def _timestamp(raw: JsonObject) -> int:
    value = raw.get("webhookTimestamp")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TimestampStale()
    try:
        return int(value)
    except (OverflowError, ValueError):
        raise TimestampStale() from None


def _validation_detail(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "body"
    return f"{where}: {err['msg']}"


def _parse(raw: JsonObject, delivery_id: str, sha: str) -> InboundDelivery:
    event_type = raw.get("type")
    if not isinstance(event_type, str) or not event_type:
        raise Malformed("type: field required")
    try:
        if event_type == AGENT_SESSION_EVENT:
            payload = AgentSessionEventPayload.model_validate(raw)
            envelope, subject = _agent_session(payload)
            return _delivery(raw, delivery_id, sha, envelope, subject, inbox=False)
        if "data" in raw or event_type in DATA_CHANGE_TYPES:
            change = DataChangePayload.model_validate(raw)
            envelope, subject = _data_change(raw, change)
            terminal = bool(envelope.issue and envelope.issue.state and envelope.issue.state.terminal
                            and envelope.event_type == "Issue")
            evidence = evidence_of(change.type, change.action, raw["data"], change.updated_from,
                                   change.actor.id if change.actor else None, terminal)
            return _delivery(raw, delivery_id, sha, envelope, subject, inbox=True, evidence=evidence)
    except ValidationError as exc:
        raise Malformed(_validation_detail(exc)) from None
    action = raw.get("action")
    if not isinstance(action, str) or not action:
        raise Malformed("action: field required")
    return InboundDelivery(
        delivery_id=delivery_id,
        body_sha256=sha,
        event_type=event_type,
        action=action,
        webhook_ms=_timestamp(raw) if "webhookTimestamp" in raw else -1,
        envelope=None,
        subject=None,
        headline=f"{event_type} {action} · - · unknown",
        inbox_event=None,
        ignore_reason="unsupported_event",
        organization_id=_org(raw),
    )


def _delivery(
    raw: JsonObject,
    delivery_id: str,
    sha: str,
    envelope: DataChange | AgentSession,
    subject: Subject | None,
    *,
    inbox: bool,
    evidence: EventEvidence | None = None,
) -> InboundDelivery:
    ignore = None
    if isinstance(envelope, AgentSession) and envelope.action not in ("created", "prompted"):
        ignore = "unsupported_action"
    return InboundDelivery(
        delivery_id=delivery_id,
        body_sha256=sha,
        event_type=raw["type"],
        action=envelope.action,
        webhook_ms=_timestamp(raw) if "webhookTimestamp" in raw else -1,
        envelope=envelope,
        subject=subject,
        headline=headline(envelope),
        inbox_event={k: raw[k] for k in INBOX_KEYS if k in raw} if inbox else None,
        ignore_reason=ignore,
        organization_id=_org(raw),
        evidence=evidence,
    )


def _org(raw: JsonObject) -> str | None:
    value = raw.get("organizationId")
    return value if isinstance(value, str) else None


def _subject(org: str | None, issue_id: str | None) -> Subject | None:
    if not issue_id:
        return None
    return Subject(namespace=ISSUE_NAMESPACE.format(org=org or "-"), key=issue_id)


def _actor(actor: ActorPayload | None) -> ActorInfo | None:
    if actor is None:
        return None
    return ActorInfo(id=actor.id, name=actor.name, email=actor.email, type=actor.type)


def _state(state: Any) -> WorkflowState | None:
    if state is None:
        return None
    return WorkflowState(id=state.id, name=state.name, type=state.type)


def _team_key(team_key: str | None, identifier: str | None) -> str | None:
    # An identifier is TEAM-123: its prefix is the team key when the payload has no team.
    if team_key:
        return team_key
    if identifier and "-" in identifier:
        return identifier.rsplit("-", 1)[0]
    return None


def _issue_from_ref(ref: IssueRefPayload | None, issue_id: str | None) -> IssueInfo | None:
    issue_id = (ref.id if ref else None) or issue_id
    if not issue_id:
        return None
    ref = ref or IssueRefPayload()
    return IssueInfo(
        id=issue_id,
        identifier=ref.identifier,
        title=ref.title,
        team_key=_team_key(ref.team.key if ref.team else None, ref.identifier),
        project_id=ref.project_id,
        url=ref.url,
        state=_state(ref.state),
        labels=_labels(ref.labels),
    )


def _labels(labels: list[LabelRef] | None) -> tuple[str, ...] | None:
    """The label names a payload states; None when it states none (not known there)."""
    if labels is None:
        return None
    return tuple(label.name for label in labels if label.name)


def _data_change(raw: JsonObject, change: DataChangePayload) -> tuple[DataChange, Subject | None]:
    issue: IssueInfo | None = None
    comment_body = description = None
    if change.type == "Issue":
        data = IssueData.model_validate(raw["data"])
        state = _state(data.state)
        if state is None and data.state_id:
            state = WorkflowState(id=data.state_id)
        issue = IssueInfo(
            id=data.id,
            identifier=data.identifier,
            title=data.title,
            team_key=_team_key(data.team.key if data.team else None, data.identifier),
            project_id=data.project_id or (data.project.id if data.project else None),
            project_known=True,
            url=change.url,
            state=state,
            labels=_labels(data.labels),
        )
        description = data.description
    elif change.type == "Comment":
        comment = CommentData.model_validate(raw["data"])
        issue = _issue_from_ref(comment.issue, comment.issue_id)
        comment_body = comment.body
    envelope = DataChange(
        event_type=change.type,
        action=change.action,
        object_id=change.data.id,
        organization_id=change.organization_id,
        issue=issue,
        actor=_actor(change.actor),
        url=change.url,
        created_at=change.created_at,
        comment_body=comment_body,
        description=description,
        updated_fields=tuple(sorted(change.updated_from or ())),
        previous_state_id=_previous_state(change),
    )
    return envelope, _subject(change.organization_id, issue.id if issue else None)


def _previous_state(change: DataChangePayload) -> str | None:
    value = (change.updated_from or {}).get("stateId") if change.type == "Issue" else None
    return value if isinstance(value, str) and value else None


def _agent_session(payload: AgentSessionEventPayload) -> tuple[AgentSession, Subject | None]:
    session = payload.agent_session
    activity = payload.agent_activity
    prompt = None
    if activity is not None:
        prompt = (activity.content.body if activity.content else None) or activity.body
    guidance = payload.guidance
    if guidance is not None and not isinstance(guidance, str):
        guidance = json.dumps(guidance, ensure_ascii=False)
    issue = _issue_from_ref(session.issue, session.issue_id)
    envelope = AgentSession(
        action=payload.action,
        session_id=session.id,
        organization_id=payload.organization_id,
        issue=issue,
        creator=_actor(session.creator),
        activity_id=activity.id if activity else None,
        prompt=prompt,
        prompt_context=payload.prompt_context,
        guidance=guidance,
        signal=activity.signal if activity else None,
        prompter_id=activity.user_id if activity else None,
    )
    return envelope, _subject(payload.organization_id, issue.id if issue else None)
