"""`POST /v1/turn/progress`: a running turn tells what it is doing (`wakeline agent ...`).

Any agent can report progress the way the stream readers do: a thought, an action
(with its result), the whole plan, a link, the options of its question, its own
session id. Only a turn's own token, while the turn runs (after it, the token is
refused as everywhere); the operator has no turn. The shapes are checked here, at
the edge; what passes becomes the same progress events a stream reader makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import falcon
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from wakeline.agents.streams import (
    LinkFound,
    PlanStep,
    PlanUpdate,
    ProgressEvent,
    SessionStarted,
    Thought,
    ToolFinished,
    ToolStarted,
)
from wakeline.errors import BadRequest, InvalidProgress, NoTurn
from wakeline.http.auth import lanes
from wakeline.http.params import json_body
from wakeline.turns.progress import Option, TurnProgress
from wakeline.turns.tokens import Grant, Lane

TEXT_MAX = 20_000
PLAN_STEPS_MAX = 500  # accepted; the native plan shows the first steps and sums up the rest
URL_MAX = 2_000


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ThoughtIn(_Event):
    type: Literal["thought"]
    body: str = Field(min_length=1, max_length=TEXT_MAX)


class ActionIn(_Event):
    type: Literal["action"]
    action: str = Field(min_length=1, max_length=200)
    parameter: str = Field("", max_length=TEXT_MAX)
    result: str | None = Field(None, max_length=TEXT_MAX)


class StepIn(_Event):
    content: str = Field(min_length=1, max_length=2_000)
    status: Literal["pending", "inProgress", "completed", "canceled"]


class PlanIn(_Event):
    type: Literal["plan"]
    steps: list[StepIn] = Field(max_length=PLAN_STEPS_MAX)


class LinkIn(_Event):
    type: Literal["link"]
    label: str = Field(min_length=1, max_length=200)
    url: str = Field(min_length=1, max_length=URL_MAX)

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http(s) URL")
        return url


class OptionIn(_Event):
    label: str = Field(min_length=1, max_length=200)
    value: str = Field(min_length=1, max_length=200)


class OptionsIn(_Event):
    type: Literal["options"]
    options: list[OptionIn] = Field(min_length=1, max_length=20)


class SessionIn(_Event):
    type: Literal["session"]
    id: str = Field(min_length=1, max_length=200)


ProgressIn = Annotated[ThoughtIn | ActionIn | PlanIn | LinkIn | OptionsIn | SessionIn,
                       Field(discriminator="type")]
_READ: TypeAdapter[Any] = TypeAdapter(ProgressIn)


def _event(posted: Any) -> ProgressEvent | None:
    """The progress event a posted shape stands for (options are the turn's, not an event)."""
    if isinstance(posted, ThoughtIn):
        return Thought(posted.body)
    if isinstance(posted, ActionIn):
        if posted.result is None:
            return ToolStarted("", posted.action, posted.parameter)
        return ToolFinished("", posted.action, posted.parameter, posted.result, False)
    if isinstance(posted, PlanIn):
        return PlanUpdate(tuple(PlanStep(s.content, s.status) for s in posted.steps))
    if isinstance(posted, LinkIn):
        return LinkFound(posted.label, posted.url)
    if isinstance(posted, SessionIn):
        return SessionStarted(posted.id)
    return None


class TurnProgressResource:
    """`POST /v1/turn/progress` (worker and room lanes: the token's own running turn)."""

    def __init__(self, live: Mapping[str, TurnProgress]) -> None:
        self._live = live

    @falcon.before(lanes(Lane.OPERATOR, Lane.WORKER, Lane.ROOM))
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Route one event; `{"ok": true}`."""
        grant: Grant = req.context.grant
        if grant.turn_id is None:
            raise NoTurn("progress belongs to a running turn: use its $WAKELINE_TOKEN")
        progress = self._live.get(grant.turn_id)
        if progress is None:
            raise NoTurn("the turn is not running any more")
        try:
            posted = _READ.validate_python(json_body(req))
        except BadRequest as exc:
            raise InvalidProgress(exc.detail) from None
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"][1:] or err["loc"])
            raise InvalidProgress(f"{where}: {err['msg']}" if where else str(err["msg"])) from None
        if isinstance(posted, OptionsIn):
            progress.offer_options([Option(o.label, o.value) for o in posted.options])
        else:
            event = _event(posted)
            if event is not None:
                progress.offer([event])
        resp.media = {"ok": True}


def add_routes(app: falcon.App, live: Mapping[str, TurnProgress] | None) -> None:
    """Mount the progress resource."""
    app.add_route("/v1/turn/progress", TurnProgressResource(live if live is not None else {}))
