"""Authentication and lane checks for the operator API: bearer tokens, and the control
page's session cookie.

A bearer token (the operator's, or a turn's) is good for what its lane allows. The control
page's cookie (CONTRACT section 13) is a second credential of the `operator` lane, narrower:
it is good for the API's reads and for the page's actions (`PAGE_ACTIONS`), nothing else, so
not for `linear graphql`, a comment or a turn's progress. A state-changing request it
authorises must come from the page itself (`from_the_page`): a browser sends the cookie
along with a form another site posts, but never that site's `Sec-Fetch-Site: same-origin`
nor a header of the page's own.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Protocol

import falcon

from wakeline.errors import ActionRefused, LaneRefused, Unauthorized
from wakeline.turns.tokens import Grant, Lane, TokenRegistry

ALL_LANES = frozenset(Lane)
OPERATOR_ONLY = frozenset({Lane.OPERATOR})
SESSION_COOKIE = "wakeline_session"
ACTION_HEADER = "X-Wakeline-Action"
READS = frozenset({"GET", "HEAD"})
# The operator API's routes the page's buttons call.
PAGE_ACTIONS = re.compile(r"/v1/(conversations/[^/]+/(stop|reset|retry|abandon)"
                          r"|approvals/[^/]+/(approve|deny))")


class SessionCheck(Protocol):
    """What tells a live session's cookie (`control.sessions.Sessions`)."""

    def valid(self, cookie: str) -> bool:
        """Whether the cookie belongs to a live session."""


class BearerAuth:
    """falcon middleware: every `/v1/*` request carries a known bearer token, or (without an
    `Authorization` header) the control page's cookie."""

    def __init__(self, tokens: TokenRegistry, sessions: SessionCheck | None = None) -> None:
        self._tokens = tokens
        self._sessions = sessions

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Attach the caller's grant to `req.context.grant`, or refuse."""
        req.context.grant = None
        if not req.path.startswith("/v1/"):
            return
        header = req.get_header("Authorization")
        if header is None and self._sessions is not None and session_cookie(req) is not None:
            req.context.grant = page_grant(req, self._sessions)
            return
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized()
        grant = self._tokens.lookup(token.strip())
        if grant is None:
            raise Unauthorized()
        req.context.grant = grant


def session_cookie(req: falcon.Request) -> str | None:
    """The control page's cookie, if the request carries one."""
    values = req.get_cookie_values(SESSION_COOKIE)
    return values[0] if values else None


def signed_in(req: falcon.Request, sessions: SessionCheck) -> str:
    """The request's live session cookie.

    Raises:
        Unauthorized: none, or one that is wrong, signed out or expired.
    """
    cookie = session_cookie(req)
    if cookie is None or not sessions.valid(cookie):
        raise Unauthorized("sign in again: the session is unknown, ended or expired")
    return cookie


def page_grant(req: falcon.Request, sessions: SessionCheck) -> Grant:
    """The operator grant a session cookie gives this request: a read, or one of the page's
    actions sent by the page.

    Raises:
        Unauthorized: the session is not live.
        LaneRefused: anything but a read or a page action.
        ActionRefused: a page action that did not come from the page.
    """
    signed_in(req, sessions)
    if req.method not in READS:
        if not PAGE_ACTIONS.fullmatch(req.path):
            raise LaneRefused("the control page's session is good for the API's reads and the "
                              "page's actions only: use the operator token")
        from_the_page(req)
    return Grant(Lane.OPERATOR)


def from_the_page(req: falcon.Request) -> None:
    """A state-changing request with the page's cookie came from the page itself.

    Raises:
        ActionRefused: no `X-Wakeline-Action: 1`, or a `Sec-Fetch-Site` other than
            `same-origin`, or (a browser that sends no `Sec-Fetch-Site`) an `Origin` other
            than the page's.
    """
    if req.get_header(ACTION_HEADER) != "1":
        raise ActionRefused(f"the page's actions carry {ACTION_HEADER}: 1")
    site = req.get_header("Sec-Fetch-Site")
    if site is not None:
        if site != "same-origin":
            raise ActionRefused(f"sent from {site}, not from the page")
        return
    origin = (req.get_header("Origin") or "").lower()
    if origin != f"{req.scheme}://{req.get_header('Host') or ''}".lower():
        raise ActionRefused("sent from another origin than the page's")


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
