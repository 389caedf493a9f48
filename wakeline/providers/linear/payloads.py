"""Pydantic shapes of the Linear webhook payloads wakeline reads.

Only the fields wakeline uses are typed; everything else is allowed and kept,
because the inbox quotes the event as Linear sent it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class TeamRef(_Loose):
    """A team as payloads embed it."""

    id: str | None = None
    key: str | None = None
    name: str | None = None


class StateRef(_Loose):
    """A workflow state: `type` is Linear's typed classification."""

    id: str | None = None
    name: str | None = None
    type: str | None = None


class ProjectRef(_Loose):
    """A project as payloads embed it."""

    id: str | None = None
    name: str | None = None


class LabelRef(_Loose):
    """A label as payloads embed it."""

    id: str | None = None
    name: str | None = None


class IssueRefPayload(_Loose):
    """An issue embedded in another object (a comment, an agent session)."""

    id: str | None = None
    identifier: str | None = None
    title: str | None = None
    url: str | None = None
    team_id: str | None = Field(None, alias="teamId")
    team: TeamRef | None = None
    project_id: str | None = Field(None, alias="projectId")
    state: StateRef | None = None
    labels: list[LabelRef] | None = None


class IssueData(_Loose):
    """`data` of an Issue event."""

    id: str
    identifier: str | None = None
    title: str | None = None
    team_id: str | None = Field(None, alias="teamId")
    team: TeamRef | None = None
    project_id: str | None = Field(None, alias="projectId")
    project: ProjectRef | None = None
    state_id: str | None = Field(None, alias="stateId")
    state: StateRef | None = None
    description: str | None = None
    labels: list[LabelRef] | None = None


class CommentData(_Loose):
    """`data` of a Comment event."""

    id: str
    body: str | None = None
    issue_id: str | None = Field(None, alias="issueId")
    issue: IssueRefPayload | None = None
    user_id: str | None = Field(None, alias="userId")


class ActorPayload(_Loose):
    """Who caused the event: a user, an app, an integration."""

    id: str | None = None
    name: str | None = None
    email: str | None = None
    type: str | None = None


class ObjectData(_Loose):
    """`data` of any other data-change event: only an id is required."""

    id: str


class DataChangePayload(_Loose):
    """Every data-change event: `Issue`, `Comment`, `IssueLabel`, `Project`, ..."""

    action: str = Field(min_length=1)
    type: str = Field(min_length=1)
    data: ObjectData
    updated_from: dict[str, Any] | None = Field(None, alias="updatedFrom")
    url: str | None = None
    actor: ActorPayload | None = None
    created_at: str | None = Field(None, alias="createdAt")
    organization_id: str | None = Field(None, alias="organizationId")


class ActivityContent(_Loose):
    """`agentActivity.content`."""

    type: str | None = None
    body: str | None = None


class AgentActivityPayload(_Loose):
    """The activity that prompted a session (`prompted` events)."""

    id: str | None = None
    body: str | None = None
    content: ActivityContent | None = None
    signal: str | None = None
    user_id: str | None = Field(None, alias="userId")  # who wrote the prompt


class AgentSessionPayload(_Loose):
    """`agentSession`: the session Linear opened for the app."""

    id: str = Field(min_length=1)
    issue_id: str | None = Field(None, alias="issueId")
    issue: IssueRefPayload | None = None
    creator: ActorPayload | None = None
    url: str | None = None


class AgentSessionEventPayload(_Loose):
    """An `AgentSessionEvent` webhook (`created` or `prompted`)."""

    action: str = Field(min_length=1)
    type: str = Field(min_length=1)
    agent_session: AgentSessionPayload = Field(alias="agentSession")
    agent_activity: AgentActivityPayload | None = Field(None, alias="agentActivity")
    prompt_context: str | None = Field(None, alias="promptContext")
    guidance: Any = None
    organization_id: str | None = Field(None, alias="organizationId")
    created_at: str | None = Field(None, alias="createdAt")
