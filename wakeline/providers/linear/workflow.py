"""The workflow states a planning route's teams need, found or created once per team.

Plan, approve, execute is driven by three managed states, all of type `unstarted`:
`Ready for Planning` (a person asks for a plan), `Awaiting Plan Approval` (wakeline
posted one) and `Approved` (a person approved it), plus the team's `In Progress`
state (its first of type `started`, preferring that name). They are found by name
and type, and created once (`workflowStateCreate`) when missing. A refused create,
or no Linear credential, switches planning off for the route, with the reason: the
route then runs nothing (it never falls back to turns without approval). Routing
reads the result from a `WorkflowRegistry`, together with wakeline's own account,
which tells a person's approval from wakeline's own moves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wakeline.errors import ProviderRejected

log = logging.getLogger(__name__)

READY, AWAITING, APPROVED = "Ready for Planning", "Awaiting Plan Approval", "Approved"
MANAGED = ((READY, "#95a2b3"), (AWAITING, "#f2c94c"), (APPROVED, "#5e6ad2"))
IN_PROGRESS = "In Progress"
TEAM_QUERY = (
    "query WakelineTeamStates($key: String!) { teams(filter: {key: {eq: $key}}) "
    "{ nodes { id key states { nodes { id name type } } } } }"
)
CREATE_STATE = (
    "mutation WakelineStateCreate($input: WorkflowStateCreateInput!) "
    "{ workflowStateCreate(input: $input) { success workflowState { id name type } } }"
)
# Linear is asked again this long after it could not be reached.
RETRY_SECONDS = 60.0


@dataclass(frozen=True)
class ManagedStates:
    """One team's workflow state ids for plan, approve, execute."""

    team_key: str
    ready: str
    awaiting: str
    approved: str
    in_progress: str | None

    def to_json(self) -> dict[str, Any]:
        """For doctor and the settings."""
        return {"team": self.team_key, "readyForPlanning": self.ready,
                "awaitingPlanApproval": self.awaiting, "approved": self.approved,
                "inProgress": self.in_progress}


class WorkflowRegistry:
    """What planning knows so far: each team's states, each route's reason it is off, and
    wakeline's own account; read by routing on the admission thread, thread-safe."""

    def __init__(self, routes: dict[str, Sequence[str]]) -> None:
        self._lock = threading.Lock()
        self._routes = dict(routes)  # planning route name -> its team keys
        self._states: dict[str, ManagedStates] = {}
        self._off: dict[str, str] = {}
        self._account: str | None = None
        self._pending = "managed states not known yet" if routes else None

    def states(self, team_key: str | None) -> ManagedStates | None:
        """The team's managed states, once found."""
        with self._lock:
            return self._states.get(team_key or "")

    def off(self, route: str) -> str | None:
        """Why the route cannot plan now (None: it can)."""
        with self._lock:
            return self._off.get(route) or self._pending

    def account(self) -> str | None:
        """wakeline's own Linear account id, once known."""
        with self._lock:
            return self._account

    def routes(self) -> dict[str, Sequence[str]]:
        """Planning route name -> its team keys."""
        return dict(self._routes)

    def ready(self, states: Sequence[ManagedStates], account: str,
              off: dict[str, str]) -> None:
        """Set-up finished: the teams' states, the account, and routes that could not plan."""
        with self._lock:
            self._states.update({s.team_key: s for s in states})
            self._account = account
            self._off = dict(off)
            self._pending = None

    def failed(self, reason: str) -> None:
        """Set-up could not run (no credential, Linear unreachable): every route waits."""
        with self._lock:
            self._pending = reason

    def waiting(self) -> bool:
        """True while set-up has not finished (it is retried)."""
        with self._lock:
            return self._pending is not None and bool(self._routes)

    def summary(self) -> dict[str, Any]:
        """For doctor: per route, its teams' states or why planning is off."""
        with self._lock:
            return {route: {"off": self._off.get(route) or self._pending,
                            "states": [self._states[t].to_json() for t in teams
                                       if t in self._states]}
                    for route, teams in self._routes.items()}


def set_up(registry: WorkflowRegistry, call: Callable[..., dict[str, Any]],
           account: Callable[[], str]) -> None:
    """Find or create every planning team's states; learn the account. Raises when Linear
    cannot be asked at all (the caller retries); a refused create switches only its
    routes off."""
    found: list[ManagedStates] = []
    refused: dict[str, str] = {}  # team key -> why
    teams = sorted({t for keys in registry.routes().values() for t in keys})
    me = account()
    for team in teams:
        try:
            found.append(_ensure_team(call, team))
        except _Refused as exc:
            refused[team] = str(exc)
    off = {route: f"team {team}: {refused[team]}" for route, keys in registry.routes().items()
           for team in keys if team in refused}
    for route, reason in off.items():
        # Named per route, as doctor names it: the operator fixes a route, not a team.
        log.error("planning off for a route", extra={"route": route, "reason": reason})
    registry.ready(found, me, off)


class _Refused(Exception):
    """Linear refused what a team's set-up needs."""


def _ensure_team(call: Callable[..., dict[str, Any]], team_key: str) -> ManagedStates:
    nodes = ((call(TEAM_QUERY, {"key": team_key}, "WakelineTeamStates").get("data") or {})
             .get("teams") or {}).get("nodes") or []
    if not nodes:
        raise _Refused("no such team in Linear")
    team = nodes[0]
    states = (team.get("states") or {}).get("nodes") or []
    ids: dict[str, str] = {}
    for name, color in MANAGED:
        match = next((s for s in states if s.get("name") == name and s.get("type") == "unstarted"),
                     None)
        if match is None:
            try:
                answer = call(CREATE_STATE, {"input": {"teamId": team["id"], "name": name,
                                                      "type": "unstarted", "color": color}},
                              "WakelineStateCreate", mutation=True)
            except ProviderRejected as exc:  # anything else may be passing: set-up is retried
                raise _Refused(f"creating {name!r} was refused: {exc.detail or exc.code}") from None
            match = ((answer.get("data") or {}).get("workflowStateCreate") or {}) \
                .get("workflowState")
            if not isinstance(match, dict) or not match.get("id"):
                raise _Refused(f"creating {name!r} gave no state")
            log.info("workflow state created", extra={"team": team_key, "state": name})
        ids[name] = str(match["id"])
    started = [s for s in states if s.get("type") == "started"]
    progress = next((s for s in started if s.get("name") == IN_PROGRESS), started[0] if started else None)
    return ManagedStates(team_key, ids[READY], ids[AWAITING], ids[APPROVED],
                         str(progress["id"]) if progress else None)
