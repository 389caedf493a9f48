"""Plan, approve, execute: what a planning route's deliveries do to an issue's gate. Pure.

Authority comes from deliveries, never from state: a person moving the issue into
`Ready for Planning` asks for a plan; a person moving it from `Awaiting Plan Approval`
to `Approved`, or picking `approve` in the plan's question, approves the revision shown;
a person moving it straight to a started state (`In Progress`) approves the latest plan
(or lets the agent go unplanned). Only an approval takes the execution lease, and only
the lease lets a turn change code (the conversation actor runs every other turn of the
route read-only). wakeline's own account and app users never count as a person; with
`approvers`, only those do. Linear sends an app's actor as a user, so a user id Linear
has not yet named a person or an app (`People`) makes the delivery wait: it is held in
its FIFO (`verify_actor`) and decided again once the tracker has asked. A comment starts
a revision while a plan waits and is a follow-up while the lease is held; anything else
is recorded and runs nothing. Every refusal names its reason (the journal records it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wakeline.agents.streams import PlanStep
from wakeline.config import RouteConfig
from wakeline.models.envelopes import ActorInfo, AgentSession, DataChange
from wakeline.models.outbox import EffectKind, EffectSpec, Expectation
from wakeline.models.plans import ConversationFacts, GateChange
from wakeline.providers.linear import replies
from wakeline.providers.linear.intents import digest
from wakeline.providers.linear.people import Kind, People
from wakeline.providers.linear.workflow import ManagedStates, WorkflowRegistry

APPROVE = "approve"  # the value of the plan question's option
OUTSIDE = ("This team plans before its agent works: move the issue to Ready for Planning to get "
           "a plan, then approve it (move the issue to Approved) to let the agent start.")


@dataclass(frozen=True)
class GateDecision:
    """A planning route's verdict on one delivery.

    `verify`: the user id whose kind (a person or an app?) Linear must name first; the
    delivery waits in its FIFO meanwhile and is decided again. `note`: why it was only
    recorded, for the journal.
    """

    to_fifo: bool = False
    gate: GateChange | None = None
    effects: tuple[EffectSpec, ...] = ()
    needs_conversation: bool = False
    verify: str | None = None
    note: str | None = None


RECORD = GateDecision(note="outside the plan workflow: recorded, no turn")


def refuse(reason: str, event: str = "approval_refused") -> GateDecision:
    """A would-be approval (or, `event="refused"`, a request or comment) that counts for
    nothing: the journal names it, with `reason`, on the issue's thread."""
    return GateDecision(gate=GateChange("refuse", reason=reason, event=event),
                        needs_conversation=True)


def verify(actor: ActorInfo) -> GateDecision:
    """Wait in the FIFO until Linear says whether `actor` is a person or an app."""
    assert actor.id is not None
    return GateDecision(to_fifo=True, verify=actor.id, needs_conversation=True)


def not_a_person(actor: ActorInfo | None, account: str | None, route: RouteConfig,
                 approving: bool, people: People) -> str | None:
    """Why this actor cannot act as a person here (None: it can, or Linear must say)."""
    if actor is None or not actor.id:
        return "no actor"
    if account is not None and actor.id == account:
        return "wakeline's own account"
    kind = people.kind(actor)
    if kind is Kind.APP:
        named = actor.type if actor.type and actor.type.lower() not in ("user", "person") \
            else actor.email or actor.id
        return f"an app user ({named})"
    if kind is Kind.GONE:
        return "a user Linear does not know"
    if approving and route.approvers and actor.id not in route.approvers:
        return "not one of the route's approvers"
    return None


def unverified(actor: ActorInfo | None, people: People) -> ActorInfo | None:
    """The actor, while Linear has not named it a person or an app."""
    return actor if actor is not None and people.kind(actor) is Kind.UNKNOWN else None


def issue_change(env: DataChange, conv: ConversationFacts | None, route: RouteConfig,
                 registry: WorkflowRegistry, people: People) -> GateDecision:
    """An Issue or Comment event of a planning route (not terminal, not a removal)."""
    if env.event_type == "Comment":
        follow = _follow_up(conv)
        if env.action != "create" or not follow.to_fifo:
            return RECORD  # edits (wakeline's own plan comment's too) and idle comments
        why = not_a_person(env.actor, registry.account(), route, False, people)
        if why:
            return refuse(f"a comment by {why} starts no turn", "refused")
        unknown = unverified(env.actor, people)
        return verify(unknown) if unknown else follow
    issue = env.issue
    moved = env.previous_state_id is not None and "stateId" in env.updated_fields
    if issue is None or issue.state is None or not moved:
        return RECORD
    off = registry.off(route.name)
    states = registry.states(issue.team_key)
    state = issue.state
    if states is None or off:
        trigger = state.type == "started" or (state.name in _MANAGED_NAMES)
        return refuse(f"planning is off for route {route.name}: {off or 'no managed states'}") \
            if trigger else RECORD
    if state.id == states.ready:
        why = not_a_person(env.actor, registry.account(), route, False, people)
        if why:
            return refuse(f"a plan was asked for by {why}", "refused")
        unknown = unverified(env.actor, people)
        if unknown:
            return verify(unknown)
        return GateDecision(to_fifo=True, gate=GateChange("request"), needs_conversation=True)
    if state.id == states.approved:
        return _approve(env.actor, conv, route, registry, people, states, issue.id,
                        from_state=env.previous_state_id, direct=False)
    if state.type == "started":
        return _approve(env.actor, conv, route, registry, people, states, issue.id,
                        from_state=env.previous_state_id, direct=True)
    return RECORD


def session_event(env: AgentSession, conv: ConversationFacts | None, route: RouteConfig,
                  registry: WorkflowRegistry, people: People) -> GateDecision:
    """A `created` or `prompted` agent session of a planning route (not a stop)."""
    text = (env.prompt or "").strip().lower()
    actor = ActorInfo(id=env.prompter_id or (env.creator.id if env.creator else None),
                      email=env.creator.email if env.creator and not env.prompter_id else None,
                      type="user")
    if env.action == "prompted" and text == APPROVE and conv is not None \
            and conv.plan_phase == "awaiting":
        states = registry.states(env.issue.team_key if env.issue else None)
        if states is None:
            return refuse(f"planning is off for route {route.name}: no managed states")
        return _approve(actor, conv, route, registry, people, states,
                        env.issue.id if env.issue else None,
                        from_state=states.awaiting, direct=False, move=True)
    decision = _follow_up(conv)
    if not decision.to_fifo:
        # Outside the workflow: recorded, and the person is told how this team works.
        return GateDecision(effects=(replies.activity(env.session_id, "response", OUTSIDE),),
                            needs_conversation=True, note=RECORD.note)
    why = not_a_person(actor, registry.account(), route, False, people)
    if why:
        return refuse(f"a prompt by {why} starts no turn", "refused")
    unknown = unverified(actor, people)
    return verify(unknown) if unknown else decision


def _follow_up(conv: ConversationFacts | None) -> GateDecision:
    """A person's comment (or prompt): a revision, a follow-up of the lease, or nothing."""
    if conv is None:
        return RECORD
    if conv.leased:
        return GateDecision(to_fifo=True)
    if conv.plan_phase == "awaiting":
        return GateDecision(to_fifo=True, gate=GateChange("revise"))
    if conv.plan_phase == "planning":
        return GateDecision(to_fifo=True)
    return RECORD


def _approve(actor: ActorInfo | None, conv: ConversationFacts | None, route: RouteConfig,
             registry: WorkflowRegistry, people: People, states: ManagedStates,
             issue_id: str | None, *, from_state: str | None, direct: bool,
             move: bool | None = None) -> GateDecision:
    why = not_a_person(actor, registry.account(), route, True, people)
    if why:
        return refuse(f"an approval by {why}")
    if conv is not None and conv.leased:
        return refuse("the execution lease is already held")
    if not direct:
        if from_state != states.awaiting:
            return refuse("an approval from another state than Awaiting Plan Approval")
        if conv is None or conv.plan_phase != "awaiting":
            return refuse("no plan waits for approval")
    assert actor is not None and actor.id is not None
    unknown = unverified(actor, people)
    if unknown:
        return verify(unknown)  # only what the state allows waits for the answer
    effects: tuple[EffectSpec, ...] = ()
    if (move if move is not None else not direct) and issue_id and states.in_progress:
        effects = (move_issue(issue_id, states.in_progress, registry.account(),
                              conv.id if conv else None),)
    return GateDecision(to_fifo=True, gate=GateChange("approve", approver=actor.id,
                                                      effects=effects),
                        needs_conversation=True)


def move_issue(issue_id: str, state_id: str, account: str | None,
               conversation_id: str | None) -> EffectSpec:
    """wakeline moves the issue to a state: sent once by the outbox; its echo is ours."""
    return EffectSpec(EffectKind.UPDATE, issue_id, "", None, conversation_id,
                      update_field="issueUpdate", update_input={"stateId": state_id},
                      expects=Expectation(account, "Issue", issue_id,
                                          {"stateId": digest(state_id)}))


_MANAGED_NAMES = frozenset({"Ready for Planning", "Awaiting Plan Approval", "Approved"})
_STEP = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[([ xX])\]\s+)?(.+?)\s*$")


def plan_steps(plan: str) -> tuple[PlanStep, ...]:
    """The steps of a Markdown plan (its list items; `[x]` ones completed), for the native plan."""
    steps = []
    for line in plan.splitlines():
        match = _STEP.match(line)
        if match:
            done = (match.group(1) or " ").lower() == "x"
            steps.append(PlanStep(match.group(2), "completed" if done else "pending"))
    return tuple(steps)
