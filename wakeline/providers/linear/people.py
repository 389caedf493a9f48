"""Who is a person: Linear sends an app user's actor as `"type": "user"`, like anyone's.

Another OAuth app acting in the workspace (a bot moving issues, commenting) reaches
wakeline as a user; only `user(id) { app }` tells it from a person. Every "a person
did this" rule (asking for a plan, approving one, revising it, the owner's label in
the journal) asks `People.kind` first:

- an actor whose `type` is not a user's, or whose email is an app's
  (`...@oauthapp.linear.app`), is an app at once, before any lookup answers;
- a user id Linear has answered for is what Linear said, kept for good (an app
  stays an app: a later answer never turns it into a person);
- anyone else is `UNKNOWN`: the deciding delivery waits in its FIFO while the
  tracker asks Linear once, then is decided again (`routing.Router.recheck`).

The answers are durable (`models/people.py`); this registry is their in-memory
copy, read by routing on the request threads.
"""

from __future__ import annotations

import threading
from enum import StrEnum
from typing import Any, Iterable

from wakeline.models.envelopes import ActorInfo

APP_EMAIL_SUFFIX = "@oauthapp.linear.app"
USER_QUERY = "query WakelineUser($id: String!) { user(id: $id) { id app } }"


class Kind(StrEnum):
    """What an actor is, as far as wakeline knows now."""

    PERSON = "person"
    APP = "app"
    GONE = "gone"  # Linear knows no such user (deleted): never a person
    UNKNOWN = "unknown"


def parse_user(body: dict[str, Any]) -> Kind:
    """Read the `USER_QUERY` answer: a person, an app, or (a null user) gone."""
    user = (body.get("data") or {}).get("user")
    if not isinstance(user, dict):
        return Kind.GONE
    return Kind.APP if user.get("app") is True else Kind.PERSON


class People:
    """Thread-safe: what Linear said of each user id, plus the rules that need no lookup."""

    def __init__(self, known: Iterable[tuple[str, Kind]] = ()) -> None:
        self._lock = threading.Lock()
        self._kinds: dict[str, Kind] = dict(known)

    def kind(self, actor: ActorInfo | None) -> Kind:
        """The actor's kind; `UNKNOWN` only for a user id Linear has not answered for yet."""
        if actor is None or not actor.id:
            return Kind.GONE
        if actor.type is not None and actor.type.lower() not in ("user", "person"):
            return Kind.APP
        with self._lock:
            known = self._kinds.get(actor.id)
        if known is not None:
            return known
        if (actor.email or "").lower().endswith(APP_EMAIL_SUFFIX):
            return Kind.APP
        return Kind.UNKNOWN

    def learn(self, user_id: str, kind: Kind) -> Kind:
        """Keep Linear's answer; returns what is kept (an app stays an app)."""
        with self._lock:
            if self._kinds.get(user_id) is Kind.APP:
                return Kind.APP
            self._kinds[user_id] = kind
            return kind
