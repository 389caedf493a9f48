"""Plan, approve, execute decisions, pure: who may ask, approve, revise, and from where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WEBHOOK_SECRET, comment_event, now_ms, session_event, signed
from tests.integration.actors.test_planning import APPROVED, AWAITING, DOING, READY, TODO, move
from wakeline.agents.streams import PlanStep
from wakeline.config import parse_config
from wakeline.models.plans import ConversationFacts
from wakeline.models.states import Ownership
from wakeline.admission.planning import plan_steps
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.providers.linear.people import Kind, People
from wakeline.providers.linear.workflow import ManagedStates, WorkflowRegistry
from wakeline.admission.router import Router

ME = "app-user-1"
PERSONS = ("user-1", "user-2", "user-9")


def router(people: People | None = None, **route: Any) -> Router:
    config = parse_config({"routes": [{"name": "ops", "teams": ["OPS"], "planning": True,
                                       **route}]}, Path("/tmp"))
    registry = WorkflowRegistry({"ops": ["OPS"]})
    registry.ready([ManagedStates("OPS", READY, AWAITING, APPROVED, DOING)], ME, {})
    known = People((p, Kind.PERSON) for p in PERSONS) if people is None else people
    return Router(config, registry, known)


def facts(phase: str = "none", rev: int = 0, leased: bool = False) -> ConversationFacts:
    return ConversationFacts("cv_1", "ops", False, None, Ownership.OWNED, None, phase, rev, leased)


def decide(r: Router, body: dict[str, Any], conv: ConversationFacts | None) -> Any:
    raw, headers = signed(body)
    d = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=60).read(
        raw, signature=headers["Linear-Signature"], delivery_id=headers["Linear-Delivery"],
        now_ms=now_ms())
    return r.decide(d, conv)


def test_a_person_moving_into_ready_for_planning_asks_for_a_plan_even_on_an_agent_route() -> None:
    d = decide(router(), move(READY), None)  # mode "agent": planning routes see Issue events
    assert d.gate.action == "request" and d.to_fifo and d.create is not None


@pytest.mark.parametrize(("actor", "actor_type", "why"), [
    (ME, "user", "wakeline's own account"), ("bot", "app", "an app user"),
    ("user-9", "user", "not one of the route's approvers")])
def test_approvals_by_anyone_but_a_listed_person_are_refused(actor: str, actor_type: str,
                                                             why: str) -> None:
    d = decide(router(approvers=["user-1"]), move(APPROVED, AWAITING, actor=actor,
                                                  actor_type=actor_type), facts("awaiting", 1))
    assert d.gate.action == "refuse" and why in d.gate.reason and not d.to_fifo


def test_an_approval_needs_the_move_from_awaiting_with_a_plan_waiting() -> None:
    r = router()
    assert "another state" in decide(r, move(APPROVED, TODO), facts("awaiting", 1)).gate.reason
    assert "no plan waits" in decide(r, move(APPROVED, AWAITING), facts("none")).gate.reason
    approve = decide(r, move(APPROVED, AWAITING), facts("awaiting", 2))
    assert approve.gate.action == "approve" and approve.gate.approver == "user-1"
    [moving] = approve.gate.effects
    assert moving.update_input == {"stateId": DOING} and moving.expects.account == ME
    assert decide(r, move(APPROVED, None), facts("awaiting", 1)).gate is None  # not a move


def test_a_direct_move_to_a_started_state_approves_without_moving_the_issue() -> None:
    d = decide(router(), move(DOING, TODO), facts("none"))
    assert d.gate.action == "approve" and d.gate.effects == () and d.to_fifo
    held = decide(router(), move(DOING, TODO), facts("approved", 1, leased=True))
    assert held.gate.action == "refuse" and "already held" in held.gate.reason


def comment(actor: str = "user-1", action: str = "create") -> dict[str, Any]:
    body = comment_event("issue-7", "OPS-7", action=action)
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["actor"] = {"id": actor, "name": actor, "type": "user"}
    return body


def test_comments_revise_a_waiting_plan_follow_a_lease_and_otherwise_run_nothing() -> None:
    r = router()
    assert decide(r, comment(), facts("awaiting", 1)).gate.action == "revise"
    lease = decide(r, comment(), facts("approved", 1, leased=True))
    assert lease.to_fifo and lease.gate is None
    assert not decide(r, comment(), facts("none")).to_fifo
    assert not decide(r, comment(action="update"), facts("awaiting", 1)).to_fifo  # an edit


def test_the_sessions_approve_option_approves_and_anything_else_outside_is_explained() -> None:
    r = router()
    pick = session_event("prompted", issue_id="issue-7", identifier="OPS-7")
    pick["agentActivity"] = {"id": "a", "content": {"type": "prompt", "body": "Approve"},
                             "userId": "user-2"}
    d = decide(r, pick, facts("awaiting", 1))
    assert d.gate.action == "approve" and d.gate.approver == "user-2" and d.gate.effects
    outside = decide(r, session_event(issue_id="issue-7", identifier="OPS-7"), None)
    assert not outside.to_fifo and outside.effects[0].activity_type == "response"
    assert "Ready for Planning" in outside.effects[0].body


def test_while_the_states_are_unknown_a_trigger_is_refused_with_the_reason() -> None:
    config = parse_config({"routes": [{"name": "ops", "teams": ["OPS"], "planning": True}]},
                          Path("/tmp"))
    d = decide(Router(config), move(READY), None)
    assert d.gate.action == "refuse" and "not known yet" in d.gate.reason


def test_plan_steps_come_from_the_plans_list_items() -> None:
    plan = "Intro\n1. Read it\n2) Fix it\n- [x] Checked\n* Ship\nclosing words"
    assert plan_steps(plan) == (PlanStep("Read it", "pending"), PlanStep("Fix it", "pending"),
                                PlanStep("Checked", "completed"), PlanStep("Ship", "pending"))


# --- a person or an app? -------------------------------------------------------------------------


def app_move(to: str, frm: str, email: str = "bot-9f2@oauthapp.linear.app",
             actor: str = "bot-9") -> dict[str, Any]:
    """Linear sends another OAuth app's actor as a user; only its address hints at it."""
    body = move(to, frm, actor=actor)
    body["actor"]["email"] = email
    return body


@pytest.mark.parametrize(("to", "frm", "conv"), [
    (APPROVED, AWAITING, facts("awaiting", 1)), (DOING, TODO, facts("none")),
    (DOING, AWAITING, facts("awaiting", 1))])
def test_an_app_user_by_its_address_never_approves_even_before_linear_answers(
        to: str, frm: str, conv: ConversationFacts) -> None:
    d = decide(router(), app_move(to, frm), conv)
    assert d.gate.action == "refuse" and "an app user" in d.gate.reason and not d.to_fifo
    assert d.verify_actor is None  # no lookup needed: the address says it


def test_an_app_user_never_asks_for_a_plan_nor_revises_one() -> None:
    asked = decide(router(), app_move(READY, TODO), None)
    assert asked.gate.action == "refuse" and asked.gate.event == "refused"
    assert "a plan was asked for by an app user" in asked.gate.reason and not asked.to_fifo
    people = People([("bot-9", Kind.APP)])
    revised = decide(router(people), comment(actor="bot-9"), facts("awaiting", 1))
    assert revised.gate.action == "refuse" and "a comment by an app user" in revised.gate.reason
    assert not revised.to_fifo


def test_a_user_linear_has_not_named_waits_in_the_fifo_for_the_answer() -> None:
    r = router(People())
    for body, conv in ((move(READY), None), (move(APPROVED, AWAITING), facts("awaiting", 1)),
                       (move(DOING, TODO), facts("none")), (comment(), facts("awaiting", 1))):
        d = decide(r, body, conv)
        assert d.verify_actor == "user-1" and d.to_fifo and d.gate is None and not d.effects
    # What the state refuses anyway is refused at once, with no lookup.
    d = decide(r, move(APPROVED, TODO), facts("awaiting", 1))
    assert d.gate.action == "refuse" and d.verify_actor is None
    assert decide(r, comment(), facts("none")).verify_actor is None  # recorded: no one to ask


def test_an_app_stays_an_app_and_a_known_person_needs_no_lookup() -> None:
    people = People()
    assert people.learn("u", Kind.APP) is Kind.APP
    assert people.learn("u", Kind.PERSON) is Kind.APP
    assert people.learn("p", Kind.PERSON) is Kind.PERSON
    d = decide(router(People([("user-1", Kind.APP)])), move(APPROVED, AWAITING),
               facts("awaiting", 1))
    assert d.gate.action == "refuse" and "an app user" in d.gate.reason


def test_the_sessions_approve_option_from_an_unknown_user_waits_for_the_answer() -> None:
    pick = session_event("prompted", issue_id="issue-7", identifier="OPS-7")
    pick["agentActivity"] = {"id": "a", "content": {"type": "prompt", "body": "approve"},
                             "userId": "user-77"}
    d = decide(router(), pick, facts("awaiting", 1))
    assert d.verify_actor == "user-77" and d.to_fifo and d.gate is None
    d = decide(router(People([("user-77", Kind.APP)])), pick, facts("awaiting", 1))
    assert d.gate.action == "refuse" and "an app user" in d.gate.reason


def test_planning_deliveries_outside_the_workflow_carry_a_note_for_the_journal() -> None:
    d = decide(router(), comment(), facts("none"))
    assert not d.to_fifo and "outside the plan workflow" in d.note
