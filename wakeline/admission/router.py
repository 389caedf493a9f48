"""Decide what a verified delivery becomes: inbox message, FIFO entry, both, or neither.

Pure. `Router.plan` turns a delivery into an `AdmissionPlan` whose `decide`
the admission transaction calls with what it knows of the issue's conversation:

- An event about an issue whose conversation exists goes to that conversation,
  under the conversation's route. Otherwise the route comes from the issue's team
  (and, for `mode = "issue"` routes with `projects`, its project).
- Issue and Comment events wake an issue route's conversation only while the route
  owns the issue: its project is one of the route's. A signed Issue payload states
  the project; a Comment does not, so a comment about an issue not seen yet in a
  project-scoped route creates a conversation whose ownership is pending, and the
  tracker looks it up before its first turn. Agent sessions are never gated by it.
- Only Linear's typed workflow state classifies an issue; the terminal outcome is
  `completed` only when the state is exactly the route's `done_state_id`.
- On a planning route, a delivery whose rule needs a person from an actor Linear has not
  named yet waits, held in its FIFO; `recheck_plan` decides it again once Linear has.
"""

from __future__ import annotations

from functools import partial

from wakeline.admission import planning
from wakeline.config import Config, RouteConfig
from wakeline.models.envelopes import (
    AgentSession,
    DataChange,
    InboundDelivery,
    IssueInfo,
    Subject,
    parse_envelope,
)
from wakeline.models.people import HeldForPerson
from wakeline.models.plans import (
    OPEN,
    AdmissionPlan,
    ConversationFacts,
    Decision,
    Move,
    NewConversation,
    Terminal,
)
from wakeline.models.states import Outcome, Ownership, TerminalOutcome
from wakeline.providers.linear import replies
from wakeline.providers.linear.people import People
from wakeline.providers.linear.workflow import WorkflowRegistry

# An update touching only these fields moved the issue between projects: no turn.
PROJECT_BOOKKEEPING = frozenset({"projectId", "addedToProjectAt", "updatedAt"})
ISSUE_EVENTS = ("Issue", "Comment")


class Router:
    """Routing decisions for one configuration."""

    def __init__(self, config: Config, workflow: WorkflowRegistry | None = None,
                 people: People | None = None) -> None:
        self._config = config
        # Who is a person: without Linear's answers everyone is unknown (and waits for one).
        self._people = people or People()
        self._routes = {r.name: r for r in config.routes}
        self._echo_window_ms = config.linear.echo_window_seconds * 1000
        # Without issue routes, a data-change event can only ever change a conversation's
        # lifecycle: the hot path skips the conversation read for the rest.
        self._issue_routes = any(_routes_issues(r) for r in config.routes)
        self._workflow = workflow or WorkflowRegistry(
            {r.name: r.teams for r in config.routes if r.planning})

    # --- routes ----------------------------------------------------------------------------

    def route(self, name: str | None) -> RouteConfig | None:
        """The route of this name, if the config still has it."""
        return self._routes.get(name) if name else None

    def owner(self, team_key: str | None, project_id: str | None) -> RouteConfig | None:
        """The first issue route that serves the team and the project (or every project)."""
        return next((r for r in self._issue_routes_of(team_key)
                     if not r.projects or project_id in r.projects), None)

    def owner_of(self, team_key: str | None, project_id: str | None
                 ) -> tuple[str, bool] | None:
        """The name of the route that owns an issue of this team and project, and whether
        its turns are public (tainted); None when no route does."""
        route = self.owner(team_key, project_id)
        return (route.name, route.trust == "public") if route is not None else None

    def _issue_routes_of(self, team_key: str | None) -> list[RouteConfig]:
        return [r for r in self._config.routes if _routes_issues(r) and team_key in r.teams]

    # --- plans -----------------------------------------------------------------------------

    def plan(self, delivery: InboundDelivery, received_ms: int) -> AdmissionPlan:
        """The plan of one verified delivery."""
        env = delivery.envelope
        needs = delivery.subject is not None and env is not None and not delivery.ignore_reason and (
            isinstance(env, AgentSession) or self._issue_routes or _lifecycle_state(env) is not None)
        return AdmissionPlan(delivery, received_ms, partial(self.decide, delivery),
                             needs_conversation=needs, echo_window_ms=self._echo_window_ms)

    def recheck_plan(self, held: HeldForPerson, now_ms: int) -> AdmissionPlan:
        """The plan that decides a held entry again once its actor is known (its gate only:
        lifecycle, moves and the inbox were recorded when it arrived)."""
        delivery = InboundDelivery(
            held.delivery_id, held.body_sha256, held.event_type, held.action, held.webhook_at,
            parse_envelope(held.envelope), Subject(namespace=held.namespace, key=held.key),  # type: ignore[arg-type]
            held.headline, None)
        return AdmissionPlan(delivery, now_ms, partial(self._recheck, delivery),
                             echo_window_ms=self._echo_window_ms, recheck_of=held.fifo_id)

    def _recheck(self, delivery: InboundDelivery, conv: ConversationFacts | None) -> Decision:
        env, route = delivery.envelope, self.route(conv.route) if conv else None
        if route is None or not route.planning:
            return Decision(Outcome.ACCEPTED, note="its route no longer plans: no turn")
        verdict = planning.session_event(env, conv, route, self._workflow, self._people) \
            if isinstance(env, AgentSession) else \
            planning.issue_change(env, conv, route, self._workflow, self._people)  # type: ignore[arg-type]
        return _gated(verdict)

    def decide(self, delivery: InboundDelivery, conv: ConversationFacts | None) -> Decision:
        """What the delivery becomes, given its issue's conversation (or None)."""
        env = delivery.envelope
        if env is None or delivery.ignore_reason:
            return Decision(Outcome.IGNORED, delivery.ignore_reason)
        if isinstance(env, AgentSession):
            return self._session(delivery, env, conv)
        return self._change(delivery, env, conv)

    def _session(self, d: InboundDelivery, env: AgentSession, conv: ConversationFacts | None
                 ) -> Decision:
        team = env.issue.team_key if env.issue else None
        route = (self.route(conv.route) if conv else None) or self._config.route_for_team(team)
        if d.subject is None or route is None:
            reason = "no_issue" if d.subject is None else "team_not_routed"
            refusal = () if env.action != "created" else (
                replies.activity(env.session_id, "error", replies.NOT_CONNECTED),)
            return Decision(Outcome.IGNORED, reason, effects=refusal)
        create = NewConversation(route.name, _title(env.issue), route.trust == "public",
                                 Ownership.OWNED)
        if env.is_stop:
            # A stop is lifecycle only: it never becomes a turn of its own.
            return Decision(Outcome.ACCEPTED, create=create, stop_session=env.session_id,
                            effects=(replies.activity(env.session_id, "response", replies.STOPPED),))
        if conv is not None and conv.terminal:
            # A terminal conversation takes no new turns until Linear reopens the issue.
            return Decision(Outcome.IGNORED, "terminal",
                            effects=(replies.activity(env.session_id, "error", replies.CLOSED),))
        ack = (replies.activity(env.session_id, "thought", replies.ACK),) \
            if env.action == "created" else ()
        if route.planning:
            verdict = planning.session_event(env, conv, route, self._workflow, self._people)
            return Decision(Outcome.ACCEPTED, create=create, to_fifo=verdict.to_fifo,
                            effects=(ack if verdict.to_fifo else ()) + verdict.effects,
                            session_id=env.session_id, gate=verdict.gate,
                            reset_reply=replies.RESET_REPLY, verify_actor=verdict.verify,
                            note=verdict.note)
        return Decision(
            Outcome.ACCEPTED, create=create, to_fifo=True, effects=ack, session_id=env.session_id,
            unknown_session_reply=replies.ACK_REPLY if env.action == "prompted" else None,
            reset_reply=replies.RESET_REPLY,
        )

    def _change(self, d: InboundDelivery, env: DataChange, conv: ConversationFacts | None
                ) -> Decision:
        issue = env.issue
        if env.event_type not in ISSUE_EVENTS or issue is None or d.subject is None:
            return Decision(Outcome.ACCEPTED)
        lifecycle_state = _lifecycle_state(env)
        if conv is None:
            return self._first_change(env, issue, lifecycle_state)
        route, ownership, move = self.route(conv.route), conv.ownership, None
        if issue.project_known and (route is None or route.mode == "issue"):
            # The signed payload states the project: the owning route follows it.
            owner = self.owner(issue.team_key, issue.project_id)
            if owner is not None:
                route, ownership = owner, Ownership.OWNED
            else:
                ownership = Ownership.NOT_OWNED
            if (route.name if route else None, ownership, issue.project_id) != \
                    (conv.route, conv.ownership, conv.project_id):
                move = Move(route.name if route else None, ownership, issue.project_id,
                            tainted=bool(route and route.trust == "public"))
        lifecycle = self._lifecycle(env, lifecycle_state, route)
        terminal = isinstance(lifecycle, Terminal) or (conv.terminal and lifecycle is None)
        reason = _ignore_reason(env, route)
        if route is not None and route.planning and ownership != Ownership.NOT_OWNED \
                and reason is None and env.action != "remove" and not terminal:
            verdict = planning.issue_change(env, conv, route, self._workflow, self._people)
            return Decision(Outcome.ACCEPTED, move=move, to_fifo=verdict.to_fifo,
                            lifecycle=lifecycle, retire_reply=replies.RETIRED_REPLY,
                            gate=verdict.gate, effects=verdict.effects,
                            verify_actor=verdict.verify, note=verdict.note)
        wakes = (route is not None and route.mode == "issue" and ownership != Ownership.NOT_OWNED
                 and reason is None and env.action != "remove" and not route.planning)
        if wakes and terminal and not isinstance(lifecycle, Terminal):
            # A comment about a closed issue: recorded, no turn until Linear reopens it.
            return Decision(Outcome.IGNORED, "terminal", move=move)
        return Decision(Outcome.IGNORED if reason else Outcome.ACCEPTED, reason, move=move,
                        to_fifo=wakes and not terminal, lifecycle=lifecycle,
                        retire_reply=replies.RETIRED_REPLY)

    def _first_change(self, env: DataChange, issue: IssueInfo, lifecycle_state: str | None
                      ) -> Decision:
        """An Issue or Comment event about an issue with no conversation yet."""
        candidates = self._issue_routes_of(issue.team_key)
        if not candidates or env.action == "remove":
            return Decision(Outcome.ACCEPTED)
        if issue.project_known:
            owner = self.owner(issue.team_key, issue.project_id)
            if owner is None:
                return Decision(Outcome.ACCEPTED)  # another project's issue: the inbox only
            route, ownership = owner, Ownership.OWNED
        else:
            # A Comment states no project: the first candidate holds it until the lookup.
            route = candidates[0]
            ownership = Ownership.PENDING if route.projects else Ownership.OWNED
        create = NewConversation(route.name, _title(issue), route.trust == "public", ownership,
                                 issue.project_id)
        if route.planning and lifecycle_state != "terminal":
            if ownership is not Ownership.OWNED:
                return Decision(Outcome.ACCEPTED)  # no plan for an issue it may not own
            verdict = planning.issue_change(env, None, route, self._workflow, self._people)
            return Decision(Outcome.ACCEPTED, create=create if verdict.needs_conversation else None,
                            to_fifo=verdict.to_fifo, gate=verdict.gate, effects=verdict.effects,
                            lifecycle=OPEN if lifecycle_state == "open" and verdict.needs_conversation
                            else None, verify_actor=verdict.verify, note=verdict.note)
        if lifecycle_state == "terminal":
            # Terminal-first: the conversation starts closed (no turn, no workspace), so a
            # later comment on the closed issue starts no work until Linear reopens it.
            return Decision(Outcome.ACCEPTED, create=create,
                            lifecycle=self._lifecycle(env, lifecycle_state, route))
        reason = _ignore_reason(env, route)
        if reason == "proposed_state":
            return Decision(Outcome.IGNORED, reason)  # a proposal authorises no work
        return Decision(Outcome.IGNORED if reason else Outcome.ACCEPTED, reason, create=create,
                        to_fifo=reason is None)

    @staticmethod
    def _lifecycle(env: DataChange, state: str | None, route: RouteConfig | None
                   ) -> Terminal | str | None:
        """Terminal intent with its evidence, an explicit open state, or no change."""
        if state != "terminal":
            return OPEN if state == "open" else None
        # Completed only on the exact Done state of the route; any other terminal state
        # (canceled, duplicate, another completed-type state) cancels.
        state_id = env.issue.state.id if env.issue and env.issue.state else None
        done = route.done_state_id if route else ""
        completed = bool(done) and state_id == done
        return Terminal(TerminalOutcome.COMPLETED if completed else TerminalOutcome.CANCELED,
                        state_id, done or None)


def _gated(verdict: planning.GateDecision) -> Decision:
    """A planning verdict on its own, for an entry decided again."""
    return Decision(Outcome.ACCEPTED, to_fifo=verdict.to_fifo, gate=verdict.gate,
                    effects=verdict.effects, verify_actor=verdict.verify, note=verdict.note)


def _routes_issues(route: RouteConfig) -> bool:
    """Issue and Comment events reach the route's conversations (a planning route's drive
    its workflow, whatever its mode)."""
    return route.mode == "issue" or route.planning


def _title(issue: IssueInfo | None) -> str | None:
    if issue is None:
        return None
    if issue.identifier and issue.title:
        return f"[{issue.identifier}] {issue.title}"
    return issue.identifier or issue.title


def _lifecycle_state(env: DataChange | AgentSession) -> str | None:
    """`terminal` or `open` for an Issue event with a typed state, else None.

    Only Linear's typed state classifies: a display name like "Done" never does, and an
    event without a state never changes the lifecycle.
    """
    if not isinstance(env, DataChange) or env.event_type != "Issue" or env.issue is None:
        return None
    state = env.issue.state
    if state is None or state.type is None:
        return None
    return "terminal" if state.terminal else "open"


def _ignore_reason(env: DataChange, route: RouteConfig | None) -> str | None:
    """Why an Issue event that would otherwise wake is recorded without a turn."""
    if env.event_type != "Issue" or route is None:
        return None
    state = env.issue.state if env.issue else None
    if env.action == "create" and route.proposed_state_id and state is not None \
            and state.id == route.proposed_state_id:
        return "proposed_state"
    if env.action == "update" and "projectId" in env.updated_fields \
            and set(env.updated_fields) <= PROJECT_BOOKKEEPING:
        return "project_bookkeeping"
    return None


def plan_admission(delivery: InboundDelivery, config: Config, received_ms: int) -> AdmissionPlan:
    """The plan of one delivery under `config` (a one-off `Router`)."""
    return Router(config).plan(delivery, received_ms)
