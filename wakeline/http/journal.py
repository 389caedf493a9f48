"""Operator API: `GET /v1/journal` (owner only) and `GET /journal`, the owner's live page.

Pages read oldest first: the newest `limit` entries, or those just before `older`,
or just after `newer`. With `newer`, `wait=S` (at most 20 s) holds the request until
the first new entry lands, which is how the page and `wakeline journal --follow`
follow it live. Turn tokens are refused (`lane_refused`): the journal gathers every
conversation's text in one place and is the owner's alone.

The page is one self-contained HTML file, served without a token: it asks for the
operator token and keeps it in the tab's session storage. Its inline script and
style are allowed by their hashes in a strict Content-Security-Policy, so no other
script can run in it.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources

import falcon

from wakeline.errors import BadRequest
from wakeline.http.auth import lanes
from wakeline.http.params import int_param
from wakeline.journal.entries import PAGE_MAX, JournalStore
from wakeline.turns.tokens import Lane

DEFAULT_LIMIT = 100
MAX_WAIT_SECONDS = 20.0


class JournalPage:
    """`GET /v1/journal?limit=N`, `?older=C`, `?newer=C&wait=S`."""

    def __init__(self, journal: JournalStore) -> None:
        self._journal = journal

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`{"entries", "recordingSince", "oldest", "newest"}`."""
        limit = int_param(req, "limit", DEFAULT_LIMIT, low=1, high=PAGE_MAX)
        older = int_param(req, "older", low=0)
        newer = int_param(req, "newer", low=0)
        wait = _wait(req)
        if older is not None and newer is not None:
            raise BadRequest("older and newer cannot be combined")
        if wait and newer is None:
            raise BadRequest("wait needs newer: it waits for entries after that cursor")
        assert limit is not None
        if wait and newer is not None:
            self._journal.wait_newer(newer, wait)
        resp.media = self._journal.page(limit=limit, older=older, newer=newer).to_json()


def _wait(req: falcon.Request) -> float:
    raw = req.get_param("wait")
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        raise BadRequest("wait must be a number of seconds") from None
    if not 0 <= wait <= MAX_WAIT_SECONDS:
        raise BadRequest(f"wait must be between 0 and {MAX_WAIT_SECONDS:g} seconds")
    return wait


def _csp_hash(html: str, tag: str) -> str:
    body = re.search(rf"<{tag}>(.*?)</{tag}>", html, re.S)
    assert body is not None, tag
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.group(1).encode()).digest()).decode() + "'"


class OwnerPage:
    """`GET /journal`: the page; the token is asked for by the page, never sent to load it."""

    def __init__(self) -> None:
        self._html = resources.files("wakeline.http").joinpath("journal.html").read_text("utf-8")
        self._csp = (f"default-src 'none'; script-src {_csp_hash(self._html, 'script')}; "
                     f"style-src {_csp_hash(self._html, 'style')}; connect-src 'self'; "
                     "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The HTML, with headers that keep it to itself."""
        resp.content_type = "text/html; charset=utf-8"
        resp.text = self._html
        resp.set_header("Content-Security-Policy", self._csp)
        resp.set_header("Referrer-Policy", "no-referrer")
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.set_header("Cache-Control", "no-store")


def add_routes(app: falcon.App, journal: JournalStore | None) -> None:
    """Mount the journal resources (the API only when a journal runs)."""
    app.add_route("/journal", OwnerPage())
    if journal is not None:
        app.add_route("/v1/journal", JournalPage(journal))
