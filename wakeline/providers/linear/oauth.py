"""Linear's OAuth token endpoint: the install's code exchange, refreshes, client credentials.

Linear's app tokens last 24 hours and come with a refresh token that rotates on every
use (the old one stops working); a `client_credentials` token lasts 30 days and comes
with none. Every answer is read into a `Grant` stamped with our own clock at receipt,
so the expiry never depends on Linear's clock. A definite refusal (a 4xx, such as
`invalid_grant` for a used code or a revoked refresh token) raises `TokenRefused`; no
answer, a 5xx, a timeout or an unreadable answer raise `TokenEndpointUnavailable`,
after which the caller may try again later. Nothing here logs or returns a secret:
the client secret goes in the request body, never in a URL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import requests

from wakeline.clock import Clock, to_ms
from wakeline.service.net import http_session
from wakeline.secrets import redact

log = logging.getLogger(__name__)

AUTHORIZE_URL = "https://linear.app/oauth/authorize"
SCOPES = ("read", "write", "app:assignable", "app:mentionable")
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 20.0
DETAIL_MAX_CHARS = 300
DEFAULT_EXPIRES_IN_SECONDS = 24 * 3600


class TokenRefused(Exception):
    """The token endpoint refused definitely (`error`: the OAuth error code, if it gave one)."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.detail = detail


class TokenEndpointUnavailable(Exception):
    """No usable answer from the token endpoint (network, timeout, 5xx, not JSON)."""


@dataclass(frozen=True)
class Grant:
    """Tokens as the endpoint issued them, and when we received them (our clock)."""

    access_token: str
    refresh_token: str | None
    expires_in_seconds: int
    scope: str
    received_ms: int

    @property
    def expires_ms(self) -> int:
        """When the access token stops working, on our clock."""
        return self.received_ms + self.expires_in_seconds * 1000


def authorize_url(client_id: str, redirect_uri: str, state: str) -> str:
    """Where a workspace admin approves the app: installed as the app itself (`actor=app`)."""
    query = urlencode({"response_type": "code", "actor": "app", "scope": ",".join(SCOPES),
                       "client_id": client_id, "redirect_uri": redirect_uri, "state": state})
    return f"{AUTHORIZE_URL}?{query}"


class TokenEndpoint:
    """Calls the token endpoint for one OAuth app; each call is one request."""

    def __init__(self, url: str, client_id: str, client_secret: str, clock: Clock, *,
                 timeouts: tuple[float, float] = (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS)
                 ) -> None:
        self._url = url
        self._client_id = client_id
        self._client_secret = client_secret
        self._clock = clock
        self._timeouts = timeouts
        self._session = http_session(url)

    def exchange(self, code: str, redirect_uri: str) -> Grant:
        """An install: the authorization code for the app's first tokens."""
        return self._grant({"grant_type": "authorization_code", "code": code,
                            "redirect_uri": redirect_uri})

    def refresh(self, refresh_token: str) -> Grant:
        """A new token pair for the refresh token (which stops working once this answers)."""
        return self._grant({"grant_type": "refresh_token", "refresh_token": refresh_token})

    def client_credentials(self) -> Grant:
        """The app's own token, from the client id and secret alone."""
        return self._grant({"grant_type": "client_credentials", "scope": ",".join(SCOPES)})

    def _grant(self, form: dict[str, str]) -> Grant:
        form = {**form, "client_id": self._client_id, "client_secret": self._client_secret}
        secrets = [self._client_secret, *(v for k, v in form.items()
                                          if k in ("code", "refresh_token"))]
        try:
            resp = self._session.post(self._url, data=form, headers={"Accept": "application/json"},
                                 timeout=self._timeouts)
        except requests.RequestException as exc:
            raise TokenEndpointUnavailable(
                f"no answer from the token endpoint ({exc.__class__.__name__})") from None
        try:
            body: Any = resp.json()
        except ValueError:
            body = None
        if resp.status_code >= 500:
            raise TokenEndpointUnavailable(f"the token endpoint answered {resp.status_code}")
        if resp.status_code >= 400:
            error = body.get("error") if isinstance(body, dict) else None
            text = body.get("error_description") if isinstance(body, dict) else None
            raise TokenRefused(str(error or f"http_{resp.status_code}"),
                               redact(str(text or ""), secrets)[:DETAIL_MAX_CHARS])
        if not isinstance(body, dict) or not isinstance(body.get("access_token"), str) \
                or not body["access_token"]:
            raise TokenEndpointUnavailable("the token endpoint's answer holds no access token")
        refresh = body.get("refresh_token")
        try:
            expires_in = int(body.get("expires_in") or 0)
        except (TypeError, ValueError):
            expires_in = 0
        if expires_in <= 0:
            # Linear always states it; without it, assume its shortest lifetime.
            expires_in = DEFAULT_EXPIRES_IN_SECONDS
        scope = body.get("scope")
        return Grant(access_token=body["access_token"],
                     refresh_token=refresh if isinstance(refresh, str) and refresh else None,
                     expires_in_seconds=expires_in,
                     scope=",".join(scope) if isinstance(scope, list) else str(scope or ""),
                     received_ms=to_ms(self._clock.now()))
