"""Bearer tokens and the lanes they grant.

The operator token is read from `<state_dir>/operator.token`. Turn tokens are
issued for one turn and revoked when it ends. Tokens are looked up by their
SHA-256, so the raw value is kept nowhere but in the caller's hands.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from enum import StrEnum

from wakeline.secrets import new_token


class Lane(StrEnum):
    """What a caller may do (CONTRACT section 3)."""

    OPERATOR = "operator"
    WORKER = "worker"
    ROOM = "room"


@dataclass(frozen=True)
class Grant:
    """Who a token belongs to."""

    lane: Lane
    conversation_id: str | None = None
    turn_id: str | None = None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenRegistry:
    """Maps presented bearer tokens to grants; thread-safe."""

    def __init__(self, operator_token: str) -> None:
        self._lock = threading.Lock()
        self._grants: dict[str, Grant] = {_digest(operator_token): Grant(Lane.OPERATOR)}

    def lookup(self, token: str) -> Grant | None:
        """The grant for a presented token, or None."""
        with self._lock:
            return self._grants.get(_digest(token))

    def issue_turn_token(self, lane: Lane, conversation_id: str, turn_id: str) -> str:
        """A new token for one turn; revoke it when the turn ends."""
        token = "wlt_" + new_token()
        with self._lock:
            self._grants[_digest(token)] = Grant(lane, conversation_id, turn_id)
        return token

    def revoke(self, token: str) -> None:
        """Forget a turn token."""
        with self._lock:
            grant = self._grants.get(_digest(token))
            if grant is not None and grant.lane is not Lane.OPERATOR:
                del self._grants[_digest(token)]
