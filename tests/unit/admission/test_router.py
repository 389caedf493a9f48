"""Routing decisions, pure: given a delivery and its issue's conversation (or none)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from tests.conftest import WEBHOOK_SECRET, comment_event, issue_event, now_ms, session_event, signed
from wakeline.config import Config
from wakeline.models.envelopes import InboundDelivery
from wakeline.models.plans import OPEN, ConversationFacts, Decision, Terminal
from wakeline.models.states import Ownership, Outcome, TerminalOutcome
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.admission.router import Router

P, Q = "project-p", "project-q"


@pytest.fixture
def router(make_config: Callable[..., Config]) -> Router:
    return Router(make_config(routes=[
        {"name": "agents", "teams": ["ENG"]},
        {"name": "ops-p", "teams": ["OPS"], "mode": "issue", "projects": [P],
         "done_state_id": "state-done", "proposed_state_id": "state-proposed"},
        {"name": "web", "teams": ["WEB"], "mode": "issue", "trust": "public"},
    ]))


def parsed(body: dict[str, Any]) -> InboundDelivery:
    raw, headers = signed(body)
    return LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=60).read(
        raw, signature=headers["Linear-Signature"], delivery_id=headers["Linear-Delivery"],
        now_ms=now_ms())


def ops_issue(action: str = "update", *, project: str | None = P, state: str = "state-todo",
              state_type: str = "unstarted", changed: dict[str, Any] | None = None,
              issue_id: str = "issue-7") -> dict[str, Any]:
    body = issue_event(issue_id, "OPS-7", action)
    body["data"].update(projectId=project, state={"id": state, "name": state, "type": state_type})
    body["updatedFrom"] = changed if changed is not None else {"title": "old"}
    return body


def ops_comment(issue_id: str = "issue-7") -> dict[str, Any]:
    body = comment_event(issue_id, "OPS-7")
    body["data"]["issue"]["team"] = {"key": "OPS"}
    return body


def conv(*, route: str | None = "ops-p", ownership: Ownership = Ownership.OWNED,
         terminal: bool = False, project: str | None = P) -> ConversationFacts:
    return ConversationFacts("cv_1", route, terminal, None, ownership, project)


def decide(router: Router, body: dict[str, Any], facts: ConversationFacts | None) -> Decision:
    return router.decide(parsed(body), facts)


# --- comments and ownership ----------------------------------------------------------------------


def test_a_comment_about_an_unseen_issue_in_a_project_route_waits_for_its_owner(router: Router) -> None:
    d = decide(router, ops_comment(), None)
    assert d.outcome is Outcome.ACCEPTED and d.to_fifo
    assert d.create is not None and d.create.route == "ops-p"
    assert d.create.ownership is Ownership.PENDING


def test_a_comment_goes_to_its_issues_conversation_whatever_the_payload_lacks(router: Router) -> None:
    d = decide(router, ops_comment(), conv())
    assert d.outcome is Outcome.ACCEPTED and d.to_fifo and d.move is None


def test_a_comment_joins_a_conversation_still_waiting_for_its_owner(router: Router) -> None:
    assert decide(router, ops_comment(), conv(ownership=Ownership.PENDING)).to_fifo


def test_a_comment_about_an_issue_the_route_does_not_own_wakes_nothing(router: Router) -> None:
    d = decide(router, ops_comment(), conv(ownership=Ownership.NOT_OWNED, project=Q))
    assert d.outcome is Outcome.ACCEPTED and not d.to_fifo


def test_a_comment_in_a_team_wide_route_is_owned_at_once(router: Router) -> None:
    body = comment_event("issue-9", "WEB-9")
    d = decide(router, body, None)
    assert d.create is not None and d.create.ownership is Ownership.OWNED and d.to_fifo
    assert d.create.tainted  # trust = "public"


def test_a_comment_in_an_agent_route_only_reaches_the_inbox(router: Router) -> None:
    d = decide(router, comment_event(), None)
    assert d == Decision(Outcome.ACCEPTED)
    assert not decide(router, comment_event(), conv(route="agents")).to_fifo


def test_an_issue_created_in_the_routes_project_is_owned(router: Router) -> None:
    d = decide(router, ops_issue("create"), None)
    assert d.create is not None and d.create.ownership is Ownership.OWNED and d.to_fifo
    assert d.create.project_id == P


def test_an_issue_of_another_project_creates_no_conversation(router: Router) -> None:
    assert decide(router, ops_issue("create", project=Q), None) == Decision(Outcome.ACCEPTED)
    assert decide(router, ops_issue("create", project=None), None) == Decision(Outcome.ACCEPTED)


def test_an_issue_payload_settles_a_pending_owner(router: Router) -> None:
    d = decide(router, ops_issue(), conv(ownership=Ownership.PENDING, project=None))
    assert d.move is not None and d.move.ownership is Ownership.OWNED and d.move.route == "ops-p"
    assert d.to_fifo


# --- project moves and ignored outcomes ---------------------------------------------------------


def test_a_move_out_of_the_routes_projects_stops_waking(router: Router) -> None:
    d = decide(router, ops_issue(project=Q, changed={"projectId": P, "updatedAt": "x"}), conv())
    assert (d.outcome, d.reason) == (Outcome.IGNORED, "project_bookkeeping")
    assert d.move is not None and d.move.ownership is Ownership.NOT_OWNED and not d.to_fifo


def test_a_move_into_the_routes_projects_starts_waking(router: Router) -> None:
    body = ops_issue(changed={"projectId": Q, "addedToProjectAt": "x", "updatedAt": "x"})
    d = decide(router, body, conv(ownership=Ownership.NOT_OWNED, project=Q))
    assert (d.outcome, d.reason) == (Outcome.IGNORED, "project_bookkeeping")
    assert d.move is not None and d.move.ownership is Ownership.OWNED and not d.to_fifo


def test_a_move_into_the_project_of_an_unseen_issue_records_its_conversation(router: Router) -> None:
    d = decide(router, ops_issue(changed={"projectId": None}), None)
    assert (d.outcome, d.reason) == (Outcome.IGNORED, "project_bookkeeping")
    assert d.create is not None and d.create.ownership is Ownership.OWNED and not d.to_fifo


def test_any_other_changed_field_keeps_the_normal_rules(router: Router) -> None:
    d = decide(router, ops_issue(changed={"projectId": Q, "title": "old"}), conv(project=Q))
    assert d.outcome is Outcome.ACCEPTED and d.reason is None and d.to_fifo


def test_an_issue_created_in_the_proposed_state_is_ignored(router: Router) -> None:
    d = decide(router, ops_issue("create", state="state-proposed"), None)
    assert (d.outcome, d.reason) == (Outcome.IGNORED, "proposed_state")
    assert d.create is None and not d.to_fifo


# --- terminal outcome ---------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "state_type", "outcome"), [
    ("state-done", "completed", TerminalOutcome.COMPLETED),
    ("state-released", "completed", TerminalOutcome.CANCELED),  # another completed-type state
    ("state-canceled", "canceled", TerminalOutcome.CANCELED),
    ("state-duplicate", "canceled", TerminalOutcome.CANCELED),
])
def test_the_terminal_outcome_is_completed_only_on_the_exact_done_state(
        router: Router, state: str, state_type: str, outcome: TerminalOutcome) -> None:
    d = decide(router, ops_issue(state=state, state_type=state_type), conv())
    assert d.lifecycle == Terminal(outcome, state, "state-done")
    assert d.outcome is Outcome.ACCEPTED and not d.to_fifo


def test_a_terminal_first_issue_records_its_terminal_intent_and_no_work(router: Router) -> None:
    d = decide(router, ops_issue(state="state-done", state_type="completed"), None)
    assert d.create is not None and d.create.route == "ops-p"
    assert d.lifecycle == Terminal(TerminalOutcome.COMPLETED, "state-done", "state-done")
    assert d.outcome is Outcome.ACCEPTED and not d.to_fifo
    other = decide(router, ops_issue(project=Q, state="s-x", state_type="canceled"), None)
    assert other.create is None and other.lifecycle is None  # not the route's issue


def test_a_display_name_never_classifies(router: Router) -> None:
    body = ops_issue()
    body["data"]["state"] = {"id": "state-x", "name": "Done"}  # no type
    assert decide(router, body, conv()).lifecycle is None


def test_without_a_done_state_every_closure_cancels(make_config: Callable[..., Config]) -> None:
    plain = Router(make_config(routes=[{"name": "ops", "teams": ["OPS"], "mode": "issue"}]))
    d = decide(plain, ops_issue(state="state-done", state_type="completed"), conv(route="ops"))
    assert d.lifecycle == Terminal(TerminalOutcome.CANCELED, "state-done", None)


def test_a_comment_after_terminal_is_ignored(router: Router) -> None:
    d = decide(router, ops_comment(), conv(terminal=True))
    assert (d.outcome, d.reason) == (Outcome.IGNORED, "terminal") and not d.to_fifo


def test_reopening_opens_and_wakes(router: Router) -> None:
    d = decide(router, ops_issue(), conv(terminal=True))
    assert d.lifecycle == OPEN and d.to_fifo


def test_a_session_on_a_closed_issue_is_refused_with_an_error(router: Router) -> None:
    d = decide(router, session_event(), conv(route="agents", terminal=True))
    assert (d.outcome, d.reason) == (Outcome.IGNORED, "terminal")
    assert [e.activity_type for e in d.effects] == ["error"]


def test_sessions_are_never_gated_by_ownership(router: Router) -> None:
    body = session_event(issue_id="issue-7", identifier="OPS-7")
    d = decide(router, body, conv(ownership=Ownership.NOT_OWNED, project=Q))
    assert d.outcome is Outcome.ACCEPTED and d.to_fifo


def test_the_owner_is_the_first_route_serving_team_and_project(make_config: Callable[..., Config]) -> None:
    router = Router(make_config(routes=[
        {"name": "p", "teams": ["OPS"], "mode": "issue", "projects": [P]},
        {"name": "rest", "teams": ["OPS"], "mode": "issue"},
    ]))
    assert router.owner("OPS", P).name == "p"  # type: ignore[union-attr]
    assert router.owner("OPS", Q).name == "rest"  # type: ignore[union-attr]
    assert router.owner("ENG", P) is None
    d = decide(router, ops_issue(project=Q, changed={"projectId": P}), conv(route="p"))
    assert d.move is not None and (d.move.route, d.move.ownership) == ("rest", Ownership.OWNED)


def test_plans_skip_the_conversation_read_when_no_issue_route_exists(
        make_config: Callable[..., Config]) -> None:
    agents_only = Router(make_config(routes=[{"name": "eng", "teams": ["ENG"]}]))
    assert not agents_only.plan(parsed(comment_event()), now_ms()).needs_conversation
    assert agents_only.plan(parsed(ops_issue()), now_ms()).needs_conversation  # a lifecycle
    assert agents_only.plan(parsed(session_event()), now_ms()).needs_conversation
