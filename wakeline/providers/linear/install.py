"""Installing the Linear app as itself: the authorize URL, its `state`, and the code exchange.

`begin` makes a random `state`, keeps its digest (durably, in the settings) for ten
minutes, and returns the URL a workspace admin opens. Linear sends the browser back to
`GET /oauth/callback?code&state`; `complete` accepts a state only while it is pending
(it is spent before the exchange, so a second callback with it is refused), exchanges
the code, asks Linear once for the app's viewer and organization with the new token,
and only then stores the tokens: a refused exchange, a used code or a failed check
leaves nothing half-written. `--code` completes without the callback. With
`grant = "client_credentials"` there is no browser: `fetch_app_token` gets the app's
token and checks it the same way.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from wakeline.clock import Clock, iso, to_ms
from wakeline.errors import InstallRefused, WakelineError
from wakeline.models.store import Store
from wakeline.providers.linear.account import record_account
from wakeline.providers.linear.client import LinearClient
from wakeline.providers.linear.credentials import AppCredential
from wakeline.providers.linear.oauth import (
    Grant,
    TokenEndpoint,
    TokenEndpointUnavailable,
    TokenRefused,
    authorize_url,
)
from wakeline.secrets import new_token

log = logging.getLogger(__name__)

PENDING_SETTING = "linear.install.pending"
INSTALL_WINDOW_MS = 10 * 60 * 1000
# What an install checks with its new token: who the app is, and where it was installed.
INSTALL_QUERY = "query WakelineInstall { viewer { id name } organization { id name } }"


@dataclass(frozen=True)
class Installed:
    """What an install connected to."""

    viewer_id: str
    viewer_name: str | None
    organization_id: str | None
    organization_name: str | None
    expires_ms: int

    def to_json(self) -> dict[str, Any]:
        """The API's shape."""
        return {"viewer": {"id": self.viewer_id, "name": self.viewer_name},
                "organization": {"id": self.organization_id, "name": self.organization_name},
                "expiresAt": iso(self.expires_ms)}


def _digest(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


class Installer:
    """Pending installs and their completion, for one OAuth app."""

    def __init__(self, credential: AppCredential, endpoint: TokenEndpoint | None,
                 client: LinearClient, store: Store, clock: Clock, client_id: str,
                 default_redirect_uri: str,
                 on_installed: Callable[[Installed], None] = lambda installed: None) -> None:
        self._credential = credential
        self._endpoint = endpoint
        self._client = client
        self._store = store
        self._clock = clock
        self._client_id = client_id
        self._default_redirect = default_redirect_uri
        self._on_installed = on_installed
        self._lock = threading.Condition()

    @property
    def grant(self) -> str:
        """The app's grant: `authorization_code` or `client_credentials`."""
        return self._credential.grant

    # --- the browser flow --------------------------------------------------------------------

    def begin(self, redirect_uri: str | None = None) -> dict[str, Any]:
        """A new pending install: `{"authorizeUrl", "state", "redirectUri", "expiresAt"}`."""
        self._need_secret()
        state = new_token(24)
        now = to_ms(self._clock.now())
        redirect = redirect_uri or self._default_redirect
        with self._lock:
            pending = self._pending(now)
            pending[_digest(state)] = {"redirectUri": redirect, "expiresAt": now + INSTALL_WINDOW_MS,
                                       "status": "pending"}
            self._store.set_setting(PENDING_SETTING, pending)
        return {"authorizeUrl": authorize_url(self._client_id, redirect, state), "state": state,
                "redirectUri": redirect, "expiresAt": iso(now + INSTALL_WINDOW_MS)}

    def callback(self, code: str | None, state: str | None, error: str | None) -> Installed:
        """Linear's redirect: the state must be pending; then as `complete`.

        Raises:
            InstallRefused: unknown, used or expired state; Linear's own error; a refused
                exchange or check. Nothing is stored then.
        """
        if not state:
            raise InstallRefused("the redirect carries no state: start with `wakeline linear install`")
        redirect = self._spend(state)
        if error:
            self._finish(state, error=f"Linear says: {error}")
            raise InstallRefused(f"Linear did not grant the install ({error})")
        if not code:
            self._finish(state, error="the redirect carries no code")
            raise InstallRefused("the redirect carries no code")
        return self._complete(code, redirect, state)

    def complete_code(self, code: str, redirect_uri: str | None = None) -> Installed:
        """`linear install --code CODE`: complete without the callback. With no redirect URI
        given, the one pending install's is used (and that install spent)."""
        if not code.strip():
            raise InstallRefused("the code is empty")
        state = None
        redirect = redirect_uri
        if redirect is None:
            with self._lock:
                pending = {k: v for k, v in self._pending(to_ms(self._clock.now())).items()
                           if v["status"] == "pending"}
                if len(pending) == 1:
                    [(state, entry)] = pending.items()
                    redirect = entry["redirectUri"]
                    self._set(state, status="used")
        return self._complete(code.strip(), redirect or self._default_redirect, state,
                              hashed=True)

    def outcome(self, state: str, wait_seconds: float = 0.0) -> dict[str, Any]:
        """`{"status": "pending"|"connected"|"failed"|"expired"|"unknown", ...}`, waiting up to
        `wait_seconds` while it is pending."""
        key = _digest(state)
        with self._lock:
            entry = self._pending(to_ms(self._clock.now())).get(key)
            if entry is not None and entry["status"] in ("pending", "used") and wait_seconds > 0:
                self._lock.wait(wait_seconds)
                entry = self._pending(to_ms(self._clock.now())).get(key)
        if entry is None:
            return {"status": "unknown"}
        if entry["status"] in ("pending", "used") and entry["expiresAt"] <= to_ms(self._clock.now()):
            return {"status": "expired"}
        out = {"status": "pending" if entry["status"] == "used" else entry["status"]}
        out.update({k: entry[k] for k in ("error", "installed") if k in entry})
        return out

    # --- client credentials ------------------------------------------------------------------

    def fetch_app_token(self) -> Installed:
        """`grant = "client_credentials"`: the app's token now, checked and stored."""
        endpoint = self._need_secret()
        try:
            grant = endpoint.client_credentials()
        except TokenRefused as exc:
            raise InstallRefused(f"Linear refused the client credentials ({exc})") from None
        except TokenEndpointUnavailable as exc:
            raise InstallRefused(str(exc)) from None
        return self._store_grant(grant)

    # --- inside ------------------------------------------------------------------------------

    def _need_secret(self) -> TokenEndpoint:
        if self._endpoint is None:
            raise InstallRefused("no client secret: put it in linear.client_secret_file (or "
                                 "$WAKELINE_LINEAR_CLIENT_SECRET) and restart")
        return self._endpoint

    def _pending(self, now: int) -> dict[str, dict[str, Any]]:
        """Pending installs and recent outcomes, the expired ones (and old outcomes) dropped."""
        raw = self._store.get_setting(PENDING_SETTING) or {}
        return {k: v for k, v in raw.items()
                if isinstance(v, dict) and v.get("expiresAt", 0) + INSTALL_WINDOW_MS > now}

    def _set(self, key: str, **changes: Any) -> None:
        pending = self._pending(to_ms(self._clock.now()))
        if key in pending:
            pending[key].update(changes)
            self._store.set_setting(PENDING_SETTING, pending)
        self._lock.notify_all()

    def _spend(self, state: str) -> str:
        """Mark a pending state used (once); its redirect URI."""
        key = _digest(state)
        now = to_ms(self._clock.now())
        with self._lock:
            entry = self._pending(now).get(key)
            if entry is None:
                raise InstallRefused("this install link is unknown or too old: run "
                                     "`wakeline linear install` again")
            if entry["status"] != "pending":
                raise InstallRefused("this install link was already used: run "
                                     "`wakeline linear install` again")
            if entry["expiresAt"] <= now:
                raise InstallRefused("this install link expired: run `wakeline linear install` again")
            self._set(key, status="used")
            return str(entry["redirectUri"])

    def _finish(self, state: str | None, *, hashed: bool = False, error: str | None = None,
                installed: Installed | None = None) -> None:
        if state is None:
            return
        key = state if hashed else _digest(state)
        with self._lock:
            if error is not None:
                self._set(key, status="failed", error=error)
            else:
                assert installed is not None
                self._set(key, status="connected", installed=installed.to_json())

    def _complete(self, code: str, redirect: str, state: str | None, *,
                  hashed: bool = False) -> Installed:
        endpoint = self._need_secret()
        try:
            try:
                grant = endpoint.exchange(code, redirect)
            except TokenRefused as exc:
                why = "the code was refused (used, expired, or for another redirect URI)" \
                    if exc.error == "invalid_grant" else f"Linear refused the code ({exc.error})"
                raise InstallRefused(why + ": run `wakeline linear install` again") from None
            except TokenEndpointUnavailable as exc:
                raise InstallRefused(f"{exc}: try again") from None
            installed = self._store_grant(grant)
        except WakelineError as exc:
            self._finish(state, hashed=hashed, error=exc.detail or exc.code)
            raise
        self._finish(state, hashed=hashed, installed=installed)
        return installed

    def _store_grant(self, grant: Grant) -> Installed:
        """Check the new token with Linear (viewer, organization), then store and use it."""
        try:
            answer = self._client.execute(INSTALL_QUERY, None, "WakelineInstall",
                                          authorization=f"Bearer {grant.access_token}")
        except WakelineError as exc:
            raise InstallRefused(f"Linear refused the new token's first query: "
                                 f"{exc.detail or exc.code}") from None
        data = answer.get("data") or {}
        viewer, org = data.get("viewer") or {}, data.get("organization") or {}
        if not isinstance(viewer.get("id"), str):
            raise InstallRefused("Linear's answer names no viewer for the new token")
        installed = Installed(viewer["id"], _text(viewer.get("name")), _text(org.get("id")),
                              _text(org.get("name")), grant.expires_ms)
        self._credential.install(grant, viewer_id=installed.viewer_id,
                                 viewer_name=installed.viewer_name,
                                 organization_id=installed.organization_id,
                                 organization_name=installed.organization_name)
        record_account(self._store, account_id=installed.viewer_id, name=installed.viewer_name,
                       kind=self._credential.kind, identity=self._credential.identity(),
                       now_ms=to_ms(self._clock.now()))
        log.info("linear app installed", extra={"viewer_id": installed.viewer_id,
                                                "organization_id": installed.organization_id})
        try:
            self._on_installed(installed)
        except Exception:
            log.exception("install listener failed")
        return installed


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
