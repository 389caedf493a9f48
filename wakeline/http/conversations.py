"""Operator API: `/v1/conversations` and the stop/reset/retry/abandon commands."""

from __future__ import annotations

from typing import Any

import falcon

from wakeline.errors import BadRequest, NotFound
from wakeline.http.auth import lanes
from wakeline.http.params import int_param
from wakeline.models.states import ConversationState
from wakeline.models.store import Store
from wakeline.models.views import list_conversations, show_conversation
from wakeline.turns.tokens import Lane

COMMANDS = ("stop", "reset", "retry", "abandon")
ASK_TIMEOUT_SECONDS = 15


class Conversations:
    """`GET /v1/conversations`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """A page of conversations; `?state=` filters, `?limit=` bounds (default 100)."""
        state = req.get_param("state")
        if state is not None and state not in {s.value for s in ConversationState}:
            raise BadRequest("state must be one of "
                             + ", ".join(s.value for s in ConversationState))
        limit = int_param(req, "limit", 100, low=1, high=1000)
        resp.media = {"conversations": list_conversations(self._store, limit=limit or 100, state=state)}


class Conversation:
    """`GET /v1/conversations/{id}`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response, conversation_id: str) -> None:
        """One conversation with its FIFO and last turns."""
        view = show_conversation(self._store, conversation_id)
        if view is None:
            raise NotFound(f"no conversation {conversation_id}")
        resp.media = view


class ConversationCommand:
    """`POST /v1/conversations/{id}/{stop|reset|retry|abandon}`."""

    def __init__(self, supervisor: Any) -> None:
        self._supervisor = supervisor

    @falcon.before(lanes(Lane.OPERATOR))
    def on_post(self, req: falcon.Request, resp: falcon.Response, conversation_id: str,
                command: str) -> None:
        """Run the command through the supervisor, which serialises it with the turns."""
        if command not in COMMANDS:
            raise NotFound(f"no command {command}")
        answer = self._supervisor.operate(conversation_id, command).get(timeout=ASK_TIMEOUT_SECONDS)
        resp.media = {"id": conversation_id, "command": command, **answer}


def add_routes(app: falcon.App, store: Store, supervisor: Any) -> None:
    """Mount the conversation resources."""
    app.add_route("/v1/conversations", Conversations(store))
    app.add_route("/v1/conversations/{conversation_id}", Conversation(store))
    app.add_route("/v1/conversations/{conversation_id}/{command}", ConversationCommand(supervisor))
