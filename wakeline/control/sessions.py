"""The control page's sign-in: the operator token exchanged once for a signed session cookie.

The cookie holds a random session id signed with a key made when the service starts
(itsdangerous), so a cookie cannot be forged or altered; the service also keeps each live
id with its expiry, so signing out ends a session everywhere (a copied cookie dies with
it), and a session ends after `control.session_hours` whatever the browser keeps. Nothing
is written to disk: a restart signs every page out. Only the operator token signs in (a
turn's token never does), and the token is compared by its digest, never kept.
"""

from __future__ import annotations

import secrets
import threading

from itsdangerous import BadData, URLSafeSerializer

from wakeline.clock import Clock, to_ms
from wakeline.turns.tokens import Lane, TokenRegistry

SALT = "wakeline.control.session"
# Sessions kept at once; signing in past it ends the oldest (each browser signs in once).
SESSIONS_MAX = 64


class Sessions:
    """The live sessions of one service; thread-safe.

    Args:
        tokens: the bearer tokens; only the operator's signs in.
        clock: what expiries are measured by.
        lifetime_seconds: how long a session lasts from its sign-in.
    """

    def __init__(self, tokens: TokenRegistry, clock: Clock, lifetime_seconds: float) -> None:
        self._tokens = tokens
        self._clock = clock
        self.lifetime_seconds = lifetime_seconds
        self._signer = URLSafeSerializer(secrets.token_bytes(32), salt=SALT)
        self._lock = threading.Lock()
        self._live: dict[str, int] = {}  # session id -> when it ends (ms)

    def sign_in(self, token: str) -> str | None:
        """A new session's cookie value for the operator token; None for any other."""
        grant = self._tokens.lookup(token)
        if grant is None or grant.lane is not Lane.OPERATOR:
            return None
        session_id = secrets.token_urlsafe(24)
        now = to_ms(self._clock.now())
        with self._lock:
            self._prune(now)
            while len(self._live) >= SESSIONS_MAX:
                del self._live[min(self._live, key=self._live.__getitem__)]
            self._live[session_id] = now + int(self.lifetime_seconds * 1000)
        return str(self._signer.dumps(session_id))

    def valid(self, cookie: str) -> bool:
        """Whether the cookie is a live session's: signed by this service, not signed out,
        not expired."""
        session_id = self._session_id(cookie)
        with self._lock:
            ends = self._live.get(session_id) if session_id else None
            if ends is not None and ends <= to_ms(self._clock.now()):
                del self._live[session_id]  # type: ignore[arg-type]
                ends = None
        return ends is not None

    def end(self, cookie: str) -> None:
        """Sign out: the session is gone, whoever holds a copy of its cookie."""
        session_id = self._session_id(cookie)
        with self._lock:
            self._live.pop(session_id or "", None)

    def prune(self) -> None:
        """Forget expired sessions."""
        with self._lock:
            self._prune(to_ms(self._clock.now()))

    def _prune(self, now: int) -> None:
        for session_id in [s for s, ends in self._live.items() if ends <= now]:
            del self._live[session_id]

    def _session_id(self, cookie: str) -> str | None:
        try:
            value = self._signer.loads(cookie)
        except BadData:
            return None
        return value if isinstance(value, str) else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)
