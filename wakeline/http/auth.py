"""Bearer-token authentication and lane checks for the operator API."""

from __future__ import annotations

from typing import Any, Callable

import falcon

from wakeline.errors import LaneRefused, Unauthorized
from wakeline.turns.tokens import Grant, Lane, TokenRegistry

ALL_LANES = frozenset(Lane)
OPERATOR_ONLY = frozenset({Lane.OPERATOR})


class BearerAuth:
    """falcon middleware: every `/v1/*` request carries a known bearer token."""

    def __init__(self, tokens: TokenRegistry) -> None:
        self._tokens = tokens

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Attach the caller's grant to `req.context.grant`, or refuse."""
        req.context.grant = None
        if not req.path.startswith("/v1/"):
            return
        header = req.get_header("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized()
        grant = self._tokens.lookup(token.strip())
        if grant is None:
            raise Unauthorized()
        req.context.grant = grant


def lanes(*allowed: Lane) -> Callable[..., Any]:
    """A falcon `before` hook: refuse callers whose lane is not `allowed`."""
    permitted = frozenset(allowed)

    def hook(req: falcon.Request, resp: falcon.Response, resource: Any, params: Any) -> None:
        grant: Grant | None = req.context.grant
        if grant is None:
            raise Unauthorized()
        if grant.lane not in permitted:
            raise LaneRefused()

    return hook
