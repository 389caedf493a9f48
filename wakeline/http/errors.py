"""The only place error codes become HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

import falcon

from wakeline import errors as e

log = logging.getLogger(__name__)

STATUS: dict[type[e.WakelineError], int] = {
    e.TooLarge: 413,
    e.SignatureInvalid: 401,
    e.Malformed: 400,
    e.TimestampStale: 401,
    e.OrganizationRefused: 403,
    e.Unavailable: 503,
    e.Unauthorized: 401,
    e.LaneRefused: 403,
    e.ActionRefused: 403,
    e.NotFound: 404,
    e.BadRequest: 400,
    e.NotShown: 409,
    e.Conflict: 409,
    e.InvalidQuery: 400,
    e.ConfirmMismatch: 409,
    e.TargetUnnameable: 422,
    e.BudgetExhausted: 429,
    e.ProviderRejected: 502,
    e.PossiblyDispatched: 504,
    e.RequiresConnectedLinear: 503,
    e.InstallRefused: 400,
    e.InvalidProgress: 400,
    e.NoTurn: 409,
    e.MatrixUnavailable: 503,
    e.RouteOff: 409,
}

# Codes for falcon's own errors (routing, methods), so every error body is {"error": CODE}.
FALCON_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    400: "bad_request",
    411: "length_required",
    413: "too_large",
    415: "unsupported_media_type",
}


def status_of(error: e.WakelineError) -> int:
    """The HTTP status of a wakeline error."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]  # type: ignore[index]
    return 500


def _wakeline_error(req: falcon.Request, resp: falcon.Response, ex: e.WakelineError, params: Any) -> None:
    resp.status = falcon.code_to_http_status(status_of(ex))
    resp.media = ex.body()


def _falcon_error(req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError, params: Any) -> None:
    code = FALCON_CODES.get(ex.status_code, "http_error")
    resp.status = ex.status
    resp.media = {"error": code}
    for name, value in (ex.headers or {}).items():
        resp.set_header(name, value)


def _unexpected(req: falcon.Request, resp: falcon.Response, ex: Exception, params: Any) -> None:
    # The message may quote caller input; the log gets the traceback, the caller a code.
    log.exception("unhandled error", extra={"path": req.path})
    resp.status = falcon.HTTP_500
    resp.media = {"error": "internal"}


def install(app: falcon.App) -> None:
    """Register the handlers; falcon tries the most specific class first."""
    app.add_error_handler(Exception, _unexpected)
    app.add_error_handler(falcon.HTTPError, _falcon_error)
    app.add_error_handler(e.WakelineError, _wakeline_error)
