"""Route checks, and which routes of a connection are on.

At start-up (and in `doctor`) each route is checked against what the homeserver says: the
connection's token belongs to the configured owner and device (`whoami`), the owner has
joined the route's room, and the route's bridge bot, when it names one, is a member. A route
that fails is switched off and named with the reason, while the other routes run; one that
passes may still be switched off later (the owner left the room, a recheck before a read or
a send failed). A restart checks every route again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable, Mapping

from wakeline.config import MatrixConnectionConfig, MatrixRouteConfig


@dataclass(frozen=True)
class Identity:
    """What `whoami` says the token belongs to."""

    user_id: str
    device_id: str | None


@dataclass(frozen=True)
class RouteState:
    """A route, whether it is on, and what its last check found (the reason when off)."""

    route: MatrixRouteConfig
    on: bool
    detail: str

    def to_json(self) -> dict[str, object]:
        """For status and doctor."""
        return {"name": self.route.name, "room": self.route.room_id, "on": self.on,
                "activation": self.route.activation, "detail": self.detail}


def identity_problem(conn: MatrixConnectionConfig, identity: Identity) -> str | None:
    """Why the token cannot act as the configured owner and device, or None."""
    if identity.user_id != conn.user_id:
        return (f"the access token belongs to {identity.user_id}, not the owner {conn.user_id} "
                "(user_id)")
    if identity.device_id is not None and identity.device_id != conn.device_id:
        return (f"the access token belongs to device {identity.device_id}, not {conn.device_id} "
                "(device_id): its end-to-end keys would not match")
    return None


def check_route(route: MatrixRouteConfig, joined: Iterable[str],
                members: Mapping[str, Iterable[str]]) -> RouteState:
    """One route against the owner's joined rooms and, for a bridge, the room's members."""
    if route.room_id not in set(joined):
        return RouteState(route, False, f"the owner has not joined {route.room_id}")
    if route.bridge and route.bridge not in set(members.get(route.room_id, ())):
        return RouteState(route, False, f"the bridge {route.bridge} is not in {route.room_id}")
    bridge = f", bridge {route.bridge} present" if route.bridge else ""
    return RouteState(route, True, f"joined {route.room_id}{bridge}")


UNCHECKED = "not checked yet"


class RouteBook:
    """The routes of one connection and their states; read and switched from any thread."""

    def __init__(self, routes: Iterable[MatrixRouteConfig], reason: str = UNCHECKED) -> None:
        self._lock = threading.Lock()
        self._states = {r.name: RouteState(r, False, reason) for r in routes}

    def names(self) -> list[str]:
        """Every route's name, in config order."""
        with self._lock:
            return list(self._states)

    def get(self, name: str) -> RouteState | None:
        """A route's state by name."""
        with self._lock:
            return self._states.get(name)

    def by_room(self, room_id: str) -> RouteState | None:
        """The route bound to this room, if any (on or off)."""
        with self._lock:
            return next((s for s in self._states.values() if s.route.room_id == room_id), None)

    def rooms_on(self) -> set[str]:
        """The rooms whose route is on."""
        with self._lock:
            return {s.route.room_id for s in self._states.values() if s.on}

    def set(self, state: RouteState) -> RouteState:
        """Record a route's state; returns the one it replaces."""
        with self._lock:
            before = self._states[state.route.name]
            self._states[state.route.name] = state
            return before

    def switch_off(self, name: str, reason: str) -> bool:
        """Switch a route off with the reason; True when it was on."""
        with self._lock:
            state = self._states.get(name)
            if state is None or not state.on:
                return False
            self._states[name] = RouteState(state.route, False, reason)
            return True

    def all(self) -> list[RouteState]:
        """Every route's state, in config order."""
        with self._lock:
            return list(self._states.values())
