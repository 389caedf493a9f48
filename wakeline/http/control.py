"""The owner's control page (CONTRACT section 13): `GET /control`, its sign-in and its feed.

`GET /control` is the page: the sign-in form without a session (401 with a session that is
wrong or over, whose cookie is cleared), else the board, server-rendered. `POST
/control/session` exchanges the operator token (`{"token"}` as JSON, or the form's field)
for the session cookie; `POST /control/session/end` signs out. `GET /control/board` is the
board alone, for the page's script; `GET /control/static/NAME` its script and stylesheet.
`GET /v1/events` is the live feed, for the page or any operator client.

The pages send a Content-Security-Policy that lets them load only wakeline's own script and
stylesheet and talk only to wakeline; no response here, or anywhere on this listener, has a
CORS header, so no other origin reads an answer.
"""

from __future__ import annotations

import logging
from typing import Any

import falcon

from wakeline.clock import iso, to_ms
from wakeline.control import stream
from wakeline.control.page import Pages
from wakeline.control.part import ControlPart
from wakeline.errors import BadRequest, NotFound, Unauthorized
from wakeline.http.auth import SESSION_COOKIE, from_the_page, lanes, session_cookie, signed_in
from wakeline.http.params import int_param
from wakeline.turns.tokens import Lane

log = logging.getLogger(__name__)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
SIGNED_OUT = "You are signed out. Sign in with the operator token."
REFUSED = "That token was refused."


def _guarded(resp: falcon.Response) -> None:
    """Headers that keep a page to itself: no framing, no caching, no referrer."""
    resp.set_header("Content-Security-Policy", CSP)
    resp.set_header("Referrer-Policy", "no-referrer")
    resp.set_header("X-Content-Type-Options", "nosniff")
    resp.set_header("X-Frame-Options", "DENY")
    resp.set_header("Cache-Control", "no-store")


def _html(resp: falcon.Response, text: str, status: int = 200) -> None:
    _guarded(resp)
    resp.status = falcon.code_to_http_status(status)
    resp.content_type = "text/html; charset=utf-8"
    resp.text = text


def _forget(resp: falcon.Response) -> None:
    resp.unset_cookie(SESSION_COOKIE, path="/", same_site="Strict")


class ControlPage:
    """`GET /control?conversation=ID`."""

    def __init__(self, part: ControlPart, pages: Pages) -> None:
        self._part = part
        self._pages = pages

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The board (the conversation selected whole), or the sign-in form."""
        cookie = session_cookie(req)
        if cookie is None:
            _html(resp, self._pages.page(None))
            return
        if not self._part.sessions.valid(cookie):
            _forget(resp)
            _html(resp, self._pages.page(None, error=SIGNED_OUT), 401)
            return
        selected = req.get_param("conversation") or None
        try:
            _html(resp, self._pages.page(self._part.board(selected)))
        except NotFound as exc:
            _html(resp, self._pages.page(self._part.board(None), notice=exc.detail), 404)


class ControlBoard:
    """`GET /control/board?conversation=ID`: the board alone, for the page's script."""

    def __init__(self, part: ControlPart, pages: Pages) -> None:
        self._part = part
        self._pages = pages

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The board's HTML; 401 without a live session, 404 for an unknown conversation."""
        signed_in(req, self._part.sessions)
        _html(resp, self._pages.board(self._part.board(req.get_param("conversation") or None)))


class ControlAsset:
    """`GET /control/static/{name}`: the page's script and stylesheet (nothing secret)."""

    def __init__(self, pages: Pages) -> None:
        self._pages = pages

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        """The file, or 404."""
        found = self._pages.asset(name)
        if found is None:
            raise NotFound(f"no asset {name}")
        resp.data, resp.content_type = found
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.set_header("Cache-Control", "no-cache")


class SessionStart:
    """`POST /control/session`: the operator token in, the session cookie out."""

    def __init__(self, part: ControlPart, pages: Pages) -> None:
        self._part = part
        self._pages = pages

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """JSON `{"token"}`: 200 `{"signedIn": true, "expiresAt"}` or 401; the page's form:
        303 to the page, or 401 with the form again. No cookie without the operator token,
        and the token is never logged, echoed or put in a URL."""
        form = req.content_type is not None and req.content_type.startswith(
            falcon.MEDIA_URLENCODED)
        token = _token(req)
        cookie = self._part.sessions.sign_in(token) if token else None
        if cookie is None:
            log.warning("control page sign-in refused")
            if form:
                _html(resp, self._pages.page(None, error=REFUSED), 401)
                return
            raise Unauthorized()
        seconds = int(self._part.sessions.lifetime_seconds)
        resp.set_cookie(SESSION_COOKIE, cookie, max_age=seconds, path="/", secure=False,
                        http_only=True, same_site="Strict")
        log.info("control page signed in")
        if form:
            _guarded(resp)
            resp.status = falcon.HTTP_303
            resp.location = "/control"
            return
        resp.media = {"signedIn": True,
                      "expiresAt": iso(to_ms(self._part.clock.now()) + seconds * 1000)}


def _token(req: falcon.Request) -> str:
    try:
        body = req.get_media()
    except falcon.HTTPError:
        raise BadRequest("send {\"token\": ...} as JSON, or the sign-in form") from None
    token = body.get("token") if isinstance(body, dict) else None
    if token is not None and not isinstance(token, str):
        raise BadRequest("token must be a string")
    return (token or "").strip()


class SessionEnd:
    """`POST /control/session/end`: sign out, from the page."""

    def __init__(self, part: ControlPart) -> None:
        self._part = part

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The session ends server-side (a copy of the cookie dies too) and the cookie goes."""
        cookie = signed_in(req, self._part.sessions)
        from_the_page(req)
        self._part.sessions.end(cookie)
        _forget(resp)
        log.info("control page signed out")
        resp.media = {"signedIn": False}


class EventsFeed:
    """`GET /v1/events?after=SEQ`: the live feed as server-sent events (`Last-Event-ID` wins
    over `after`)."""

    def __init__(self, part: ControlPart, **timing: float) -> None:
        self._part = part
        self._timing = timing  # heartbeat_seconds, lifetime_seconds (tests shorten them)

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """A stream while fewer than the bound are open, else one batch."""
        after = int_param(req, "after", low=0)
        last = req.get_header("Last-Event-ID")
        if last is not None:
            # Only ids this feed gave out come back; anything else resumes from nowhere,
            # which the feed answers with a refresh.
            after = int(last) if last.strip().isdigit() else 0
        gone: Any = req.env.get("waitress.client_disconnected") or (lambda: False)
        resp.content_type = "text/event-stream; charset=utf-8"
        resp.set_header("Cache-Control", "no-store")
        resp.set_header("X-Accel-Buffering", "no")
        resp.stream = stream.events(self._part.feed, after, self._part.clock, gone=gone,
                                    **self._timing)


def add_routes(app: falcon.App, part: ControlPart | None, **timing: float) -> None:
    """Mount the page, its sign-in and the feed (nothing without the control part)."""
    if part is None:
        return
    pages = Pages()
    app.add_route("/control", ControlPage(part, pages))
    app.add_route("/control/board", ControlBoard(part, pages))
    app.add_route("/control/static/{name}", ControlAsset(pages))
    app.add_route("/control/session", SessionStart(part, pages))
    app.add_route("/control/session/end", SessionEnd(part))
    app.add_route("/v1/events", EventsFeed(part, **timing))
