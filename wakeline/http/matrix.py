"""Operator API: a Matrix route's two tools and the approvals of its sends (CONTRACT section 9).

`GET /v1/matrix/read` and `POST /v1/matrix/send` take no room: a turn's token names its
conversation, whose route names the room. Any other turn gets 403 `lane_refused`. The
operator may read a route by naming it (`?route=NAME`), but never proposes a send: a human
who wants to write in a room writes there. `GET /v1/approvals` and the decisions are the
operator's only; a turn's token gets 403, so no agent approves its own text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import falcon

from wakeline.errors import BadRequest, LaneRefused, NotFound
from wakeline.http.auth import lanes
from wakeline.http.params import int_param, json_body
from wakeline.models.approvals import ApprovalStatus
from wakeline.turns.tokens import Grant, Lane

if TYPE_CHECKING:
    from wakeline.providers.matrix.part import MatrixRoutes

TURN_LANES = (Lane.OPERATOR, Lane.WORKER, Lane.ROOM)
APPROVE_WAIT_SECONDS = 10.0


def _routes(matrix: MatrixRoutes | None) -> MatrixRoutes:
    if matrix is None:
        raise LaneRefused("no Matrix route is configured")
    return matrix


class MatrixRead:
    """`GET /v1/matrix/read?limit=N`: the turn's room's recent text (operator: `&route=NAME`)."""

    def __init__(self, matrix: MatrixRoutes | None) -> None:
        self._matrix = matrix

    @falcon.before(lanes(*TURN_LANES))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`{"route", "room", "messages": [{"eventId", "sender", "owner", "body", ...}]}`."""
        from wakeline.providers.matrix.tools import READ_DEFAULT, READ_MAX

        grant: Grant = req.context.grant
        limit = int_param(req, "limit", READ_DEFAULT, low=1, high=READ_MAX) or READ_DEFAULT
        route = req.get_param("route")
        if grant.lane is Lane.OPERATOR:
            if not route:
                raise BadRequest("the operator names the route to read: ?route=NAME")
            turn = _routes(self._matrix).tools.route_named(route)
        else:
            if route:
                raise BadRequest("a turn reads its own route: leave out route")
            turn = _routes(self._matrix).tools.turn_route(grant)
        resp.media = _routes(self._matrix).tools.read(turn, limit)


class MatrixSend:
    """`POST /v1/matrix/send {"text"}`: an approval for the turn's room; nothing is sent."""

    def __init__(self, matrix: MatrixRoutes | None) -> None:
        self._matrix = matrix

    @falcon.before(lanes(Lane.WORKER, Lane.ROOM))
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`{"approval": {...}}` with status `pending`."""
        text = json_body(req).get("text")
        if not isinstance(text, str):
            raise BadRequest("text must be a string")
        matrix = _routes(self._matrix)
        approval = matrix.tools.propose(matrix.tools.turn_route(req.context.grant), text)
        resp.status = falcon.HTTP_201
        resp.media = {"approval": approval.to_json()}


class Approvals:
    """`GET /v1/approvals?status=S&limit=N`."""

    def __init__(self, matrix: MatrixRoutes | None) -> None:
        self._matrix = matrix

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`{"approvals": [...]}`, pending first, then newest first."""
        status = req.get_param("status")
        if status is not None and status not in {s.value for s in ApprovalStatus}:
            raise BadRequest("status must be one of " + ", ".join(s.value for s in ApprovalStatus))
        limit = int_param(req, "limit", 100, low=1, high=1000) or 100
        if self._matrix is None:
            resp.media = {"approvals": []}
            return
        found = self._matrix.approvals.recent(ApprovalStatus(status) if status else None, limit)
        resp.media = {"approvals": [a.to_json() for a in found]}


class ApprovalDecision:
    """`POST /v1/approvals/{id}/approve|deny` (`{"bodySha256"}` optional for approve)."""

    def __init__(self, matrix: MatrixRoutes | None) -> None:
        self._matrix = matrix

    @falcon.before(lanes(Lane.OPERATOR))
    def on_post(self, req: falcon.Request, resp: falcon.Response, approval_id: str,
                decision: str) -> None:
        """The approval after the decision; an approve waits a little for the send's event id."""
        if decision not in ("approve", "deny"):
            raise NotFound(f"no decision {decision}")
        if self._matrix is None:
            raise NotFound(f"no approval {approval_id}")
        body: dict[str, Any] = json_body(req) if req.content_length else {}
        service = self._matrix.approvals
        if decision == "deny":
            approval = service.deny(approval_id, "operator")
        else:
            digest = body.get("bodySha256")
            if digest is not None and not isinstance(digest, str):
                raise BadRequest("bodySha256 must be a string")
            approval = service.approve(approval_id, "operator", body_sha256=digest)
            if self._matrix.can_send(approval.connection):
                approval = service.wait_settled(approval.id, APPROVE_WAIT_SECONDS)
        resp.media = {"approval": approval.to_json()}


def add_routes(app: falcon.App, matrix: MatrixRoutes | None) -> None:
    """Mount the Matrix tools and the approvals."""
    app.add_route("/v1/matrix/read", MatrixRead(matrix))
    app.add_route("/v1/matrix/send", MatrixSend(matrix))
    app.add_route("/v1/approvals", Approvals(matrix))
    app.add_route("/v1/approvals/{approval_id}/{decision}", ApprovalDecision(matrix))
