"""Installing the Linear app: `POST /v1/linear/install`, its outcome, and `GET /oauth/callback`.

The callback is the one page on the operator listener without a token: Linear's
redirect brings the browser there, and only a pending install's `state` (random,
single-use, ten minutes) opens it. Its page says what happened and never shows the
code or a token.
"""

from __future__ import annotations

import html

import falcon

from wakeline.errors import BadRequest, Conflict, InstallRefused
from wakeline.http.auth import lanes
from wakeline.http.params import json_body
from wakeline.providers.linear.install import Installer
from wakeline.turns.tokens import Lane

WAIT_MAX_SECONDS = 20.0
NOT_CONFIGURED = ("no Linear app is configured: set linear.client_id and put the client secret in "
                  "linear.client_secret_file (docs/operations.md, Connecting Linear), then restart")


def _installer(installer: Installer | None) -> Installer:
    if installer is None:
        raise Conflict(NOT_CONFIGURED)
    return installer


class Install:
    """`POST /v1/linear/install` `{"code"?, "redirectUri"?}`."""

    def __init__(self, installer: Installer | None) -> None:
        self._installer = installer

    @falcon.before(lanes(Lane.OPERATOR))
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Start an install (the authorize URL), or complete one with a code; with client
        credentials, fetch the app's token now."""
        installer = _installer(self._installer)
        body = json_body(req)
        code, redirect = body.get("code"), body.get("redirectUri")
        for key, value in (("code", code), ("redirectUri", redirect)):
            if value is not None and not isinstance(value, str):
                raise BadRequest(f"{key} must be a string")
        if installer.grant == "client_credentials":
            resp.media = {"status": "connected", "installed": installer.fetch_app_token().to_json()}
        elif code is not None:
            resp.media = {"status": "connected",
                          "installed": installer.complete_code(code, redirect).to_json()}
        else:
            resp.media = {"status": "pending", **installer.begin(redirect)}


class InstallOutcome:
    """`GET /v1/linear/install/{state}?wait=S`: the outcome, waiting up to S s while pending."""

    def __init__(self, installer: Installer | None) -> None:
        self._installer = installer

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response, state: str) -> None:
        """`{"status", "error"?, "installed"?}`."""
        wait = req.get_param_as_float("wait", min_value=0.0) or 0.0
        resp.media = _installer(self._installer).outcome(state, min(wait, WAIT_MAX_SECONDS))


class Callback:
    """`GET /oauth/callback?code&state` (no token: the pending state is the key)."""

    def __init__(self, installer: Installer | None) -> None:
        self._installer = installer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Complete the install; a page says how it went."""
        resp.content_type = falcon.MEDIA_HTML
        if self._installer is None:
            resp.status = falcon.HTTP_409
            resp.text = _page("Not configured", NOT_CONFIGURED)
            return
        try:
            installed = self._installer.callback(req.get_param("code"), req.get_param("state"),
                                                 req.get_param("error"))
        except InstallRefused as exc:
            resp.status = falcon.HTTP_400
            resp.text = _page("Not installed", exc.detail or exc.code)
            return
        org = installed.organization_name or installed.organization_id or "your workspace"
        resp.text = _page("wakeline is connected to Linear",
                          f"Installed as {installed.viewer_name or installed.viewer_id} in {org}. "
                          "The token renews itself; you can close this page.")


def _page(title: str, text: str) -> str:
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>wakeline: "
            f"{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(text)}</p></body></html>")


def add_routes(app: falcon.App, installer: Installer | None) -> None:
    """Mount the install resources and the callback."""
    app.add_route("/v1/linear/install", Install(installer))
    app.add_route("/v1/linear/install/{state}", InstallOutcome(installer))
    app.add_route("/oauth/callback", Callback(installer))
