"""Where the Linear client's `Authorization` comes from: one credential, refreshed in place.

`StaticCredential` is a personal API key (or a pasted token) read at start-up.
`AppCredential` is the OAuth app's own token (decision 0020): for
`grant = "authorization_code"` the pair `wakeline linear install` stored, renewed with
its rotating refresh token; for `"client_credentials"` a 30-day token fetched with the
client id and secret. Either is renewed before a tenth of its life is left, in the
background whether or not anything is being sent (`tick`, decision 0031), by the first
call that finds it due, and once when Linear refuses it (`refused`): one renewal at a
time in this process (a lock) and across processes and hosts (the token file's lock),
the new pair durable before it is used. A renewal that got no answer is tried again
after 1 s, doubling, at most a minute (`renewal.py`); the token held is used meanwhile
while it lasts.

When no token works (not installed, the refresh token revoked, the app uninstalled,
the token endpoint down past the token's expiry) `header` raises
`LinearAuthUnavailable`: Linear ran nothing, so writes wait and go out once a token
works again, which a new install (or a token file written by another process) makes
happen. `usable` tells that without blocking; listeners hear every change of state.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Literal, Protocol

from wakeline.clock import Clock, iso, to_ms
from wakeline.errors import LinearAuthUnavailable
from wakeline.providers.linear.oauth import (
    Grant,
    TokenEndpoint,
    TokenEndpointUnavailable,
    TokenRefused,
)
from wakeline.providers.linear.renewal import BackgroundRenewal, RetryBackoff
from wakeline.providers.linear.token_file import StoredTokens, TokenFile, TokenFileInvalid

if TYPE_CHECKING:
    from wakeline.providers.linear.shared_tokens import SharedTokens

log = logging.getLogger(__name__)

# Renew once only this fraction of a token's life is left.
REFRESH_WHEN_LEFT = 0.1
INSTALL_FIX = "run `wakeline linear install`"

AuthCondition = Literal["ok", "none", "not_installed", "refused", "unreachable", "invalid_file"]


@dataclass(frozen=True)
class AuthState:
    """Whether a Linear token works, and if not, why and what fixes it."""

    condition: AuthCondition
    kind: str
    detail: str
    fix: str | None = None
    expires_ms: int | None = None

    @property
    def ok(self) -> bool:
        """True when a token is expected to work."""
        return self.condition == "ok"

    def to_json(self) -> dict[str, object]:
        """The API's shape: `{"ok", "state", "kind", "detail", "fix"?, "expiresAt"?}`."""
        out: dict[str, object] = {"ok": self.ok, "state": self.condition, "kind": self.kind,
                                  "detail": self.detail}
        if self.fix:
            out["fix"] = self.fix
        if self.expires_ms is not None:
            out["expiresAt"] = iso(self.expires_ms)
        return out


class Credential(Protocol):
    """What the Linear client needs of its credential."""

    kind: str

    def header(self) -> str:
        """The `Authorization` value to send now (renewed first when due).

        Raises:
            LinearAuthUnavailable: no token works now; nothing may be sent.
        """
        ...

    def refused(self, header: str) -> str | None:
        """Linear refused `header` (401): the header to send once more, or None if none works."""
        ...

    def failed(self, header: str, detail: str) -> None:
        """Linear refused a header even after a renewal: no token works until things change."""
        ...

    def usable(self) -> bool:
        """Without blocking: is a token expected to work (or worth a try) now?"""
        ...

    def state(self) -> AuthState:
        """The current state, for status, doctor and metrics."""
        ...

    def identity(self) -> str | None:
        """A stable name of who the credential acts as (the account's fingerprint source)."""
        ...


def auth_header(credential: str) -> str:
    """Personal API keys go bare; OAuth and app tokens as Bearer."""
    return credential if credential.startswith("lin_api_") else f"Bearer {credential}"


def credential_kind(credential: str | None) -> str:
    """`personal_api_key`, `oauth_token`, or `none`."""
    if not credential:
        return "none"
    return "personal_api_key" if credential.startswith("lin_api_") else "oauth_token"


class _Listeners:
    def __init__(self) -> None:
        self._listeners: list[Callable[[AuthState], None]] = []

    def subscribe(self, listener: Callable[[AuthState], None]) -> None:
        """Be told of every change of state (on the thread that changed it)."""
        self._listeners.append(listener)

    def tell(self, state: AuthState) -> None:
        for listener in self._listeners:
            try:
                listener(state)
            except Exception:
                log.exception("auth listener failed")


class StaticCredential(_Listeners):
    """A key read at start-up; Linear refusing it is final until it is replaced."""

    def __init__(self, value: str) -> None:
        super().__init__()
        self._value = value
        self.kind = credential_kind(value)
        self._problem: str | None = None

    def header(self) -> str:
        """The key as Linear wants it."""
        if self._problem is not None:
            raise LinearAuthUnavailable(self._problem)
        return auth_header(self._value)

    def refused(self, header: str) -> str | None:
        """A key cannot be renewed."""
        self.failed(header, "Linear refused the API key")
        return None

    def failed(self, header: str, detail: str) -> None:
        """No write goes out until the key is replaced and the service restarted."""
        if self._problem is None:
            self._problem = f"{detail}: replace linear.api_key_file (or $WAKELINE_LINEAR_API_KEY) " \
                            "and restart"
            log.error("linear credential refused", extra={"kind": self.kind})
            self.tell(self.state())

    def usable(self) -> bool:
        """True until Linear refused the key."""
        return self._problem is None

    def state(self) -> AuthState:
        """ok, or refused."""
        if self._problem is not None:
            return AuthState("refused", self.kind, self._problem,
                             "replace the key in linear.api_key_file and restart")
        return AuthState("ok", self.kind, f"a static {self.kind.replace('_', ' ')}")

    def identity(self) -> str | None:
        """The key itself (only its digest is ever stored)."""
        return self._value


class AppCredential(_Listeners):
    """The OAuth app's token, kept in the token file and renewed before it runs out.

    Two locks: `_lock` guards what is known (held briefly, never across a request), and
    `_renewing` lets one renewal at a time reach the token endpoint. A caller whose token
    still works never waits for a renewal in flight; one with no working token does.
    """

    kind = "app"

    def __init__(self, grant: Literal["authorization_code", "client_credentials"], client_id: str,
                 file: TokenFile | SharedTokens, endpoint: TokenEndpoint | None, clock: Clock,
                 remember: Callable[[str], None] = lambda value: None) -> None:
        super().__init__()
        self.grant = grant
        self._client_id = client_id
        self._file = file
        self._endpoint = endpoint
        self._clock = clock
        self._remember = remember
        self._lock = threading.Lock()
        self._renewing = threading.Lock()  # one renewal at a time in this process
        self._background = BackgroundRenewal()
        self._backoff = RetryBackoff()
        self._tokens: StoredTokens | None = None
        self._stamp: object = None
        self._problem: AuthState | None = None
        self._state = AuthState("not_installed", self.kind, "not installed yet", INSTALL_FIX)
        with self._lock:
            self._load()

    # --- what the client asks ----------------------------------------------------------------

    def header(self) -> str:
        """The current access token as Bearer, renewed first when a tenth of its life is left
        (unless a renewal is already under way or waits after a failure: a token that still
        works is used meanwhile)."""
        with self._lock:
            self._load()
            stale = self._to_renew(self._now())
            if stale is None:
                assert self._tokens is not None
                return f"Bearer {self._tokens.access_token}"
        self._renew(stale or None, forced=False)
        with self._lock:
            return self._working()

    def refused(self, header: str) -> str | None:
        """Renew once, unless someone already did since `header` was handed out."""
        with self._lock:
            self._load()
            if self._problem is not None and not self._may_retry(self._now()):
                return None  # already known: renewing again would be refused again
            current = f"Bearer {self._tokens.access_token}" if self._tokens else None
            if current is not None and current != header and self._problem is None:
                return current
        self._renew(header.removeprefix("Bearer "), forced=True)
        with self._lock:
            try:
                fresh = self._working()
            except LinearAuthUnavailable:
                return None
            return fresh if fresh != header else None

    def failed(self, header: str, detail: str) -> None:
        """A fresh token was refused too: the app is likely uninstalled."""
        with self._lock:
            self._set_problem(AuthState("refused", self.kind, detail, INSTALL_FIX))

    def usable(self) -> bool:
        """Non-blocking: while another thread looks, assume yes (the caller then waits in
        `header`)."""
        if not self._lock.acquire(blocking=False):
            return True
        try:
            self._load()
            now = self._now()
            self._note_expiry(now)
            if self._problem is not None:
                return self._may_retry(now)
            return self._tokens is not None or self.grant == "client_credentials"
        finally:
            self._lock.release()

    def tick(self) -> threading.Thread | None:
        """Start a background renewal when one is due, whether or not anything is being
        sent: a tenth of the token's life left, a failed renewal's wait over, or no
        client-credentials token yet. Cheap and never waits for the token endpoint (the
        composition root's ticker calls it); returns the renewal's thread, if one started."""
        if not self._lock.acquire(blocking=False):
            return None  # busy: the next tick looks again
        try:
            if self._renewing.locked() or self._background.running():
                return None
            try:
                stale = self._to_renew(self._now())
            except LinearAuthUnavailable:
                return None  # refused or not installed: nothing to ask; or a failure's wait
            if stale is None:
                return None
            return self._background.start(lambda: self._renew_in_background(stale or None))
        finally:
            self._lock.release()

    def state(self) -> AuthState:
        """The last known state (no I/O); while renewals fail, when the next one is due."""
        state, backoff = self._state, self._backoff
        if not backoff.reason or state.condition not in ("ok", "unreachable"):
            return state
        left = (backoff.retry_at_ms - self._now() + 999) // 1000
        when = f"retrying in {left} s" if left > 0 else "retrying now"
        if state.condition == "unreachable":
            return replace(state, detail=f"{state.detail}; {when}")
        return replace(state, detail=f"{state.detail}; renewing it failed ({backoff.reason}), "
                                     f"{when}")

    def identity(self) -> str | None:
        """The app, whatever token it holds today."""
        return f"app:{self._client_id}"

    @property
    def tokens(self) -> StoredTokens | None:
        """What is stored now (the install's viewer and organization)."""
        return self._tokens

    # --- install -----------------------------------------------------------------------------

    def install(self, grant: Grant, *, viewer_id: str, viewer_name: str | None,
                organization_id: str | None, organization_name: str | None) -> StoredTokens:
        """Store a new install's tokens (durably, before they are used) and use them."""
        now = self._now()
        tokens = StoredTokens(
            grant=self.grant, client_id=self._client_id, access_token=grant.access_token,
            refresh_token=grant.refresh_token, scope=grant.scope, received_ms=grant.received_ms,
            expires_ms=grant.expires_ms, viewer_id=viewer_id, viewer_name=viewer_name,
            organization_id=organization_id, organization_name=organization_name,
            installed_ms=now)
        # After any renewal in flight: its older pair must not replace the install's.
        with self._renewing, self._lock:
            with self._file.locked():
                self._file.write(tokens)
            self._adopt(tokens)
        return tokens

    # --- inside the lock ---------------------------------------------------------------------

    @property
    def tokens_where(self) -> str | None:
        """Where the tokens are kept when it is not this host's file (hosts sharing them)."""
        return getattr(self._file, "where", None)

    def _now(self) -> int:
        return to_ms(self._clock.now())

    def _may_retry(self, now: int) -> bool:
        return self._problem is not None and self._problem.condition == "unreachable" \
            and not self._backoff.waiting(now)

    def _to_renew(self, now: int) -> str | None:
        """None: use the token held. Else renew first (the stale token, "" when none).

        Raises:
            LinearAuthUnavailable: no token works, and none may be fetched now.
        """
        self._note_expiry(now)
        if self._problem is not None:
            if not self._may_retry(now):
                raise LinearAuthUnavailable(self._problem.detail + f" ({self._problem.fix})")
            return self._tokens.access_token if self._tokens else ""
        tokens = self._tokens
        if tokens is None:
            if self.grant == "authorization_code":
                raise LinearAuthUnavailable(f"the Linear app is not installed ({INSTALL_FIX})")
            return ""
        if now < tokens.refresh_due_ms(REFRESH_WHEN_LEFT) or now < tokens.expires_ms and (
                self._backoff.waiting(now) or self._renewing.locked()):
            return None  # not due, or due and being (or soon) renewed: this one still works
        return tokens.access_token

    def _working(self) -> str:
        """The header of a token that works now.

        Raises:
            LinearAuthUnavailable: none does.
        """
        tokens, now = self._tokens, self._now()
        self._note_expiry(now)
        if self._problem is not None:
            raise LinearAuthUnavailable(self._problem.detail + f" ({self._problem.fix})")
        if tokens is None or now >= tokens.expires_ms:
            raise LinearAuthUnavailable(f"no working token for the Linear app ({INSTALL_FIX})")
        return f"Bearer {tokens.access_token}"

    def _note_expiry(self, now: int) -> None:
        """The token ran out while the renewal waits after a failure: no token works now."""
        tokens = self._tokens
        if self._problem is None and self._backoff.reason and tokens is not None \
                and now >= tokens.expires_ms:
            self._set_problem(self._unreachable(self._backoff.reason))

    def _unreachable(self, reason: str, refused: bool = False) -> AuthState:
        what = "Linear refused the app's token" if refused else "the app's token expired"
        return AuthState("unreachable", self.kind, f"{what} and renewing it failed: {reason}",
                         "wakeline asks again soon (after 1 s, doubling, at most a minute); "
                         "check that the host reaches Linear")

    def _load(self) -> None:
        """Pick up the file when it changed on disk (an install, another process's renewal)."""
        stamp = self._file.stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            tokens = self._file.read()
        except TokenFileInvalid as exc:
            if self._tokens is not None:
                self._repair(exc)  # the pair in use is the install: the file gets it back
                return
            self._tokens = None
            if self.grant == "client_credentials":
                log.warning("token file unusable; a new token will be fetched",
                            extra={"error": str(exc)})
                return
            self._set_problem(AuthState("invalid_file", self.kind, str(exc), INSTALL_FIX))
            return
        if tokens is None:
            self._tokens = None
            if self.grant == "authorization_code":
                self._set_problem(AuthState("not_installed", self.kind, "not installed yet",
                                            INSTALL_FIX))
            return
        self._adopt(tokens)

    def _repair(self, problem: TokenFileInvalid) -> None:
        """The file turned to garbage under a working pair: write that pair back. Were the
        pair dropped, its rotating refresh token would go with it, and only a new install
        could bring the app back."""
        try:
            with self._file.locked():
                try:
                    self._file.read()
                except TokenFileInvalid:
                    assert self._tokens is not None
                    self._file.write(self._tokens)
                    log.warning("the token file was not valid; rewrote it with the tokens in use",
                                extra={"error": str(problem)})
                self._stamp = None  # rewritten, or replaced meanwhile: the next look reads it
        except OSError as exc:
            # Not written: the pair still works from memory, as a renewal that cannot be saved.
            log.warning("the token file is not valid and could not be rewritten",
                        extra={"error": str(problem), "reason": exc.__class__.__name__})

    def _adopt(self, tokens: StoredTokens) -> None:
        held, self._tokens = self._tokens, tokens
        self._stamp = self._file.stamp()
        self._remember(tokens.access_token)
        if tokens.refresh_token:
            self._remember(tokens.refresh_token)
        if held is None or held.access_token != tokens.access_token:
            self._backoff.reset()  # a new token; the same one read again changes nothing
        self._problem = None
        self._change(AuthState("ok", self.kind, self._describe(tokens), None, tokens.expires_ms))

    # --- the renewal (under `_renewing`; `_lock` only around what it reads and records) ------

    def _renew_in_background(self, stale: str | None) -> None:
        try:
            self._renew(stale, forced=False)
        except Exception:
            log.exception("renewing the Linear app's token failed")

    def _renew(self, stale: str | None, *, forced: bool) -> None:
        """Renew, unless another thread did (or failed, and waits) meanwhile, or the file
        (under its lock) already holds a newer token than `stale`. The outcome is recorded,
        never raised. `forced`: Linear refused `stale`, so it cannot stand in while the
        endpoint is down."""
        with self._renewing:
            with self._lock:
                self._load()
                now = self._now()
                if self._problem is not None and not self._may_retry(now):
                    return  # refused, or a failure's wait not over: renewing again changes nothing
                held = self._tokens
                if held is not None and held.access_token != stale and self._problem is None \
                        and now < held.refresh_due_ms(REFRESH_WHEN_LEFT):
                    return  # renewed meanwhile
                if not forced and self._backoff.waiting(now):
                    return  # failed meanwhile: the token held is used until the next attempt
                if self._endpoint is None:
                    self._set_problem(AuthState(
                        "refused", self.kind, "no client secret to renew the app's token with",
                        "put the client secret in linear.client_secret_file, restart"))
                    return
            try:
                fresh, fetched = self._exchange(stale, held, now)
            except TokenRefused as exc:
                with self._lock:
                    self._set_problem(AuthState(
                        "refused", self.kind,
                        f"Linear refused to renew the app's token ({exc.error})", INSTALL_FIX))
                return
            except (TokenEndpointUnavailable, OSError) as exc:  # OSError: the lock file
                reason = str(exc)
            except Exception as exc:  # the shared row's database, or a bug: a wait too
                log.exception("renewing the Linear app's token failed")
                reason = exc.__class__.__name__
            else:
                with self._lock:
                    self._adopt(fresh)
                if fetched:
                    log.info("linear app token renewed",
                             extra={"grant": self.grant, "expires_at": iso(fresh.expires_ms)})
                return
            with self._lock:
                self._renewal_failed(reason, forced)  # asked again after a wait, never in a loop

    def _exchange(self, stale: str | None, held: StoredTokens | None,
                  now: int) -> tuple[StoredTokens, bool]:
        """Under the file's lock: the newer pair someone else stored, or a new one from the
        endpoint, durable before it is returned (True: fetched here)."""
        with self._file.locked():
            try:
                latest = self._file.read()
            except TokenFileInvalid:
                latest = None  # renewing replaces it (client credentials); else refused below
            if latest is not None and latest.access_token != stale \
                    and now < latest.refresh_due_ms(REFRESH_WHEN_LEFT):
                return latest, False  # another process (or an install) renewed it
            grant = self._fetch(latest)
            base = latest or held
            tokens = StoredTokens(
                grant=self.grant, client_id=self._client_id, access_token=grant.access_token,
                refresh_token=grant.refresh_token, scope=grant.scope or (base.scope if base else ""),
                received_ms=grant.received_ms, expires_ms=grant.expires_ms,
                viewer_id=base.viewer_id if base else None,
                viewer_name=base.viewer_name if base else None,
                organization_id=base.organization_id if base else None,
                organization_name=base.organization_name if base else None,
                installed_ms=base.installed_ms if base else grant.received_ms)
            try:
                self._file.write(tokens)  # the rotated refresh token is durable before use
            except OSError:
                # Linear already rotated the pair: keep it in memory, it works until this
                # process stops; the old one on disk is spent either way.
                log.exception("the renewed token could not be saved")
            return tokens, True

    def _renewal_failed(self, reason: str, forced: bool) -> None:
        now = self._now()
        delay = self._backoff.failed(now, reason)
        tokens = self._tokens
        live = tokens is not None and now < tokens.expires_ms
        if live and not forced:
            log.warning("linear token endpoint unavailable; the current token still works",
                        extra={"error": reason, "retry_in_seconds": delay / 1000})
            return
        log.warning("linear token endpoint unavailable and no token works",
                    extra={"error": reason, "retry_in_seconds": delay / 1000})
        self._set_problem(self._unreachable(reason, refused=live))

    def _fetch(self, latest: StoredTokens | None) -> Grant:
        assert self._endpoint is not None
        if self.grant == "client_credentials":
            return self._endpoint.client_credentials()
        if latest is None or not latest.refresh_token:
            raise TokenRefused("no_refresh_token", "the stored install has no refresh token")
        return self._endpoint.refresh(latest.refresh_token)

    def _set_problem(self, state: AuthState) -> None:
        self._problem = state
        if state.condition != "unreachable":
            self._backoff.reset()  # nothing to ask again: only a new install changes it
        self._change(state)

    def _change(self, state: AuthState) -> None:
        before, self._state = self._state, state
        if before.condition != state.condition:
            self.tell(state)

    @staticmethod
    def _describe(tokens: StoredTokens) -> str:
        who = tokens.viewer_name or tokens.viewer_id or "the app"
        where = f" in {tokens.organization_name or tokens.organization_id}" \
            if tokens.organization_id else ""
        return f"{who}{where}; token valid until {iso(tokens.expires_ms)}"
