"""A Matrix route's two tools, and the operator's read of a route by name.

`GET /v1/matrix/read` and `POST /v1/matrix/send` take no room: a turn's token names its
conversation, whose subject (`matrix:<connection>`, the room id) names the route bound to
it now. A read rechecks the route first (still joined, the bridge still there) and shows
the room's recent text, bounded; a send only records an approval.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from wakeline.clock import iso
from wakeline.errors import BadRequest, LaneRefused, MatrixUnavailable, RouteOff, WakelineError
from wakeline.models.approvals import Approval
from wakeline.models.rooms import MATRIX_NAMESPACE, room_subject
from wakeline.providers.matrix.events import MAX_EVENT_BYTES, event_size
from wakeline.providers.matrix.routes import RouteState, check_route
from wakeline.providers.matrix.sync import SyncLoop
from wakeline.turns.tokens import Grant, Lane

if TYPE_CHECKING:
    from wakeline.providers.matrix.part import Connection, MatrixRoutes

log = logging.getLogger(__name__)

READ_DEFAULT, READ_MAX = 20, 100
READ_TIMEOUT_SECONDS = 30.0
TEXT_MAX_CHARS = 30_000
QUOTE_MAX_CHARS = 8_000
TEXT_TYPES = ("m.text", "m.notice", "m.emote")


@dataclass(frozen=True)
class TurnRoute:
    """The route a turn's token reaches: its connection, route and conversation."""

    connection: Connection
    state: RouteState
    conversation_id: str
    turn_id: str | None


class RouteTools:
    """What a route's turn (and the operator) may ask of the Matrix connections."""

    def __init__(self, matrix: MatrixRoutes) -> None:
        self._matrix = matrix

    def turn_route(self, grant: Grant) -> TurnRoute:
        """The route a turn's token reaches.

        Raises:
            LaneRefused: the token is no Matrix route's turn.
        """
        if grant.conversation_id is None or grant.lane is Lane.OPERATOR:
            raise LaneRefused("only a Matrix route's turn may do this")
        subject = self._matrix.store.rooms.subject_of(grant.conversation_id)
        prefix = MATRIX_NAMESPACE.format(connection="")
        if subject is None or not subject.namespace.startswith(prefix):
            raise LaneRefused("this turn is not a Matrix route's")
        c = self._matrix.connections.get(subject.namespace[len(prefix):])
        state = c.routes.by_room(subject.key) if c is not None else None
        if c is None or state is None:
            raise LaneRefused("no configured Matrix route binds this room now")
        return TurnRoute(c, state, grant.conversation_id, grant.turn_id)

    def route_named(self, name: str) -> TurnRoute:
        """The operator's read of a route by name (it has no turn).

        Raises:
            BadRequest: no such route.
        """
        for c in self._matrix.connections.values():
            state = c.routes.get(name)
            if state is not None:
                conversation = self._matrix.store.rooms.conversation_of(
                    room_subject(c.name, state.route.room_id))
                return TurnRoute(c, state, conversation or "", None)
        raise BadRequest(f"no Matrix route {name}")

    def read(self, turn: TurnRoute, limit: int) -> dict[str, Any]:
        """The bound room's recent text, after rechecking the route."""
        if not turn.state.on or turn.connection.loop is None:
            raise RouteOff(f"route {turn.state.route.name} is off: {turn.state.detail}")
        self._recheck(turn)
        room = turn.state.route.room_id
        events = _ask(turn.connection.loop, lambda client: client.recent(room, limit))
        owner = turn.connection.config.user_id
        return {"route": turn.state.route.name, "room": room,
                "messages": [m for m in (_message(e, owner) for e in events) if m is not None]}

    def propose(self, turn: TurnRoute, text: str) -> Approval:
        """An approval for the turn's route; nothing is sent."""
        if not text.strip():
            raise BadRequest("text must not be empty")
        if len(text) > TEXT_MAX_CHARS:
            raise BadRequest(f"text must be at most {TEXT_MAX_CHARS} characters")
        current = turn.connection.routes.get(turn.state.route.name)
        if current is None or not current.on:
            raise RouteOff(f"route {turn.state.route.name} is off: "
                           f"{current.detail if current else 'not configured'}")
        route = current.route
        return self._matrix.approvals.propose(connection=turn.connection.name, route=route.name,
                                      conversation_id=turn.conversation_id, room_id=route.room_id,
                                      body=text, turn_id=turn.turn_id)

    def _recheck(self, turn: TurnRoute) -> None:
        """Before a read: the room is still joined and the bridge still there, or the route
        goes off (and says why)."""
        c, route = turn.connection, turn.state.route
        assert c.loop is not None

        async def work(client: Any) -> RouteState:
            joined = await client.joined_rooms()
            members = {route.room_id: await client.members(route.room_id)} \
                if route.bridge and route.room_id in joined else {}
            return check_route(route, joined, members)

        state = _ask(c.loop, work)
        if not state.on:
            if c.routes.switch_off(route.name, state.detail):
                log.error("matrix route switched off", extra={"route": route.name,
                                                              "reason": state.detail})
                self._matrix.recorder.matrix_connection(c.name, "route_off",
                                                 f"Route {route.name} is off: {state.detail}.",
                                                 route.name)
            raise RouteOff(f"route {route.name} is off: {state.detail}")


def _ask(loop: SyncLoop, work: Callable[[Any], Any]) -> Any:
    """Run `work` on the connection's loop for a request; what goes wrong is a 503."""
    try:
        return loop.submit(work, READ_TIMEOUT_SECONDS)
    except WakelineError:
        raise
    except TimeoutError:
        raise MatrixUnavailable("the homeserver did not answer in time") from None
    except Exception as exc:
        raise MatrixUnavailable(f"the homeserver could not answer: {exc.__class__.__name__}: "
                                f"{str(exc)[:200]}") from None


def _message(event: dict[str, Any], owner: str) -> dict[str, Any] | None:
    """One event of a read, as the agent sees it: text only, bounded, the owner marked."""
    source = event.get("source") or {}
    if not isinstance(source, dict) or event_size(source) > MAX_EVENT_BYTES:
        return None
    sender, event_id = source.get("sender"), source.get("event_id")
    if not isinstance(sender, str) or not isinstance(event_id, str):
        return None
    base = {"eventId": event_id, "sender": sender, "owner": sender == owner,
            "sentAt": iso(source["origin_server_ts"]) if isinstance(
                source.get("origin_server_ts"), int) and source["origin_server_ts"] > 0 else None}
    if event.get("undecryptable"):
        return {**base, "undecryptable": True}
    content = source.get("content")
    if source.get("type") != "m.room.message" or not isinstance(content, dict):
        return None
    relates = content.get("m.relates_to")
    if "m.new_content" in content or (isinstance(relates, dict)
                                      and relates.get("rel_type") == "m.replace"):
        return None  # an edit: the original is shown
    body = content.get("body")
    if content.get("msgtype") not in TEXT_TYPES or not isinstance(body, str):
        return None
    cut = len(body) > QUOTE_MAX_CHARS
    return {**base, "msgtype": content["msgtype"],
            "body": body[:QUOTE_MAX_CHARS - 1] + "…" if cut else body, "truncated": cut}

