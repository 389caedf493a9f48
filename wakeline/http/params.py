"""Reading query parameters and JSON bodies, with errors that name the field."""

from __future__ import annotations

from typing import Any

import falcon

from wakeline.errors import BadRequest


def int_param(req: falcon.Request, name: str, default: int | None = None, *, low: int = 0,
              high: int | None = None) -> int | None:
    """An integer query parameter within bounds, or a 400 naming it."""
    raw = req.get_param(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None
    if value < low or (high is not None and value > high):
        raise BadRequest(f"{name} must be between {low} and {high}")
    return value


def json_body(req: falcon.Request) -> dict[str, Any]:
    """The request's JSON object body, or a 400."""
    try:
        body = req.get_media()
    except falcon.HTTPError:
        raise BadRequest("body is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body
