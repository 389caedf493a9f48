"""Plan, approve, execute through the real service: no code changes before a person approves.

The fake Linear serves the team's workflow states (the managed ones are created on the
first start), answers every write, and the test plays Linear's webhooks: a person's
moves, comments, and the echoes of wakeline's own writes.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import comment_event, issue_event, session_event
from tests.fakes.linear import FakeLinear
from tests.helpers import git, wait_until

ME = "app-user-1"  # the fake's viewer: wakeline's own account
BOSS, JANE = "user-boss", "user-1"
READY, AWAITING, APPROVED = "state-ready-for-planning", "state-awaiting-plan-approval", "state-approved"
TODO, DOING, DONE, CANCELED = "state-todo", "state-doing", "state-done", "state-canceled"
NAMES = {READY: ("Ready for Planning", "unstarted"), AWAITING: ("Awaiting Plan Approval", "unstarted"),
         APPROVED: ("Approved", "unstarted"), TODO: ("Todo", "unstarted"),
         DOING: ("In Progress", "started"), DONE: ("Done", "completed"),
         CANCELED: ("Canceled", "canceled")}


def team() -> dict[str, Any]:
    return {"id": "team-ops", "states": [{"id": s, "name": NAMES[s][0], "type": NAMES[s][1]}
                                        for s in (TODO, DOING, DONE, CANCELED)]}


def start(harness: Callable[..., Any], mode: str = "planner", arg: str = "",
          fake: FakeLinear | None = None, **route: Any) -> Any:
    fake = fake or FakeLinear(teams={"OPS": team()})
    h = harness(mode, arg, linear=fake, routes=[
        {"name": "ops", "teams": ["OPS"], "mode": "issue", "planning": True,
         "done_state_id": DONE, **route}])
    wait_until(lambda: planning_check(h), message="planning set up")
    return h


def planning_check(h: Any) -> dict[str, Any] | None:
    checks = {c["name"]: c for c in h.api("GET", "/v1/doctor").json()["checks"]}
    check = checks.get("planning ops")
    return check if check and "not known yet" not in check["detail"] else None


def move(to: str, frm: str | None = TODO, actor: str = JANE, actor_type: str = "user",
         issue: str = "issue-7") -> dict[str, Any]:
    """Linear's webhook of a person (or `actor`) moving the issue from `frm` to `to`."""
    body = issue_event(issue, "OPS-7", "update")
    body["actor"] = {"id": actor, "name": actor, "type": actor_type}
    name, kind = NAMES[to]
    body["data"].update(stateId=to, state={"id": to, "name": name, "type": kind})
    body["updatedFrom"] = {"stateId": frm, "updatedAt": "2026-11-29T11:59:00.000Z"} \
        if frm else {"title": "Old title"}
    return body


def comment(text: str, actor: str = JANE) -> dict[str, Any]:
    body = comment_event("issue-7", "OPS-7")
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["data"]["body"] = text
    body["actor"] = {"id": actor, "name": actor, "type": "user"}
    return body


def gate(h: Any) -> dict[str, Any]:
    return h.only_conversation()["plan"]


def state_moves(fake: FakeLinear) -> list[str]:
    return [r.body["variables"]["input"]["stateId"] for r in fake.updates("issueUpdate")]


def plan_comments(fake: FakeLinear) -> list[tuple[str, str]]:
    """(comment id, body) of every plan comment write: creates, then edits."""
    out = []
    for r in fake.requests:
        v = r.body.get("variables") or {}
        if "commentCreate" in r.query and "wakeline:plan" in v["input"]["body"]:
            out.append((v["input"]["id"], v["input"]["body"]))
        elif "commentUpdate" in r.query:
            out.append((v["id"], v["input"]["body"]))
    return out


def journal_stages(h: Any) -> list[tuple[str, str]]:
    return [(e["stage"], e["text"]) for e in h.api("GET", "/v1/journal").json()["entries"]
            if e["kind"] == "lifecycle"]


def sent(h: Any) -> None:
    """Wait until every write wakeline prepared has left."""
    wait_until(lambda: h.service.store.outbox.unsettled() == 0, message="every write sent")


def echo(h: Any, to: str, frm: str) -> dict[str, Any]:
    """Linear sends wakeline's own move back."""
    return h.deliver(move(to, frm, actor=ME))


# --- the workflow ---------------------------------------------------------------------------------


def test_managed_states_are_created_once_and_doctor_lists_them(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(teams={"OPS": team()})
    h = start(harness, fake=fake)
    creates = [r for r in fake.requests if "workflowStateCreate" in r.query]
    assert sorted(r.body["variables"]["input"]["name"] for r in creates) == \
        ["Approved", "Awaiting Plan Approval", "Ready for Planning"]
    assert all(r.body["variables"]["input"]["type"] == "unstarted" for r in creates)
    check = planning_check(h)
    assert check and check["ok"] and READY in check["detail"] and DOING in check["detail"]
    h.restart()
    wait_until(lambda: planning_check(h), message="set up again")
    assert len([r for r in fake.requests if "workflowStateCreate" in r.query]) == 3  # found now


def test_a_refused_create_switches_planning_off_for_the_route(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(teams={"OPS": team()}, refuse_state_create=True)
    h = start(harness, fake=fake)
    check = planning_check(h)
    assert check and not check["ok"] and "Forbidden" in check["detail"] and "ops" in check["name"]
    assert h.deliver(move(READY)) == {"outcome": "accepted"}
    assert h.runs() == []
    wait_until(lambda: any(s == "approval_refused" and "planning is off" in t
                           for s, t in journal_stages(h)), message="refusal journaled")


def test_plan_revise_approve_execute(harness: Callable[..., Any]) -> None:
    h = start(harness)
    fake = h.linear
    # Outside the workflow, a comment runs nothing.
    assert h.deliver(issue_event("issue-7", "OPS-7", "create")) == {"outcome": "accepted"}
    assert h.deliver(comment("please fix")) == {"outcome": "accepted"}
    assert h.runs() == []
    # A person asks for a plan: a read-only planning turn, its plan posted, the issue moved.
    assert h.deliver(move(READY)) == {"outcome": "accepted"}
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="the plan was posted")
    sent(h)
    [run] = h.runs()
    assert run["phase"] == "plan"
    [(comment_id, body)] = plan_comments(fake)
    assert body.startswith("<!-- wakeline:plan rev=1 -->") and "2. Fix the clock" in body
    assert state_moves(fake) == [AWAITING]
    assert gate(h) == {"rev": 1, "phase": "awaiting", "approvedBy": None, "approvedRev": None,
                       "lease": None}
    # wakeline's own move and comment come back: nothing wakes.
    assert echo(h, AWAITING, READY)["outcome"] == "self_echo"
    # A person's comment on the waiting plan: revision 2, the same comment edited.
    assert h.deliver(comment("use the monotonic clock")) == {"outcome": "accepted"}
    wait_until(lambda: gate(h)["rev"] == 2 and gate(h)["phase"] == "awaiting", message="rev 2")
    sent(h)
    assert [c[0] for c in plan_comments(fake)] == [comment_id, comment_id]
    assert plan_comments(fake)[1][1].startswith("<!-- wakeline:plan rev=2 -->")
    assert [r["phase"] for r in h.runs()] == ["plan", "plan"]
    # A person approves: the lease, the move to In Progress, the execution turn.
    assert h.deliver(move(APPROVED, AWAITING)) == {"outcome": "accepted"}
    wait_until(lambda: len(h.runs()) == 3, message="the execution turn ran")
    assert h.runs()[2]["phase"] == "execute" and h.runs()[2]["approvedPlan"]
    sent(h)
    assert state_moves(fake)[-1] == DOING
    plan = gate(h)
    assert (plan["approvedBy"], plan["approvedRev"]) == (JANE, 2) and plan["lease"]
    assert plan["phase"] in ("approved", "executing")
    assert echo(h, DOING, APPROVED)["outcome"] == "self_echo"
    # A follow-up comment joins the lease: another execution turn.
    h.deliver(comment("also update the docs"))
    wait_until(lambda: len(h.runs()) == 4, message="the follow-up ran")
    assert h.runs()[3]["phase"] == "execute"
    stages = [s for s, _ in journal_stages(h)]
    assert {"plan_requested", "plan_posted", "plan_revision_requested", "approved"} <= set(stages)


def test_state_alone_grants_nothing(harness: Callable[..., Any]) -> None:
    h = start(harness)
    created = issue_event("issue-7", "OPS-7", "create")
    created["data"].update(stateId=APPROVED, state={"id": APPROVED, "name": "Approved",
                                                    "type": "unstarted"})
    assert h.deliver(created) == {"outcome": "accepted"}  # created in Approved
    assert h.deliver(move(APPROVED, AWAITING)) == {"outcome": "accepted"}  # no plan waits
    assert h.deliver(move(DOING, TODO, actor=ME)) == {"outcome": "accepted"}  # wakeline's account
    assert h.deliver(move(DOING, TODO, actor="bot-9", actor_type="app")) == {"outcome": "accepted"}
    no_move = move(DOING, None)  # In Progress without updatedFrom.stateId: not a move
    assert h.deliver(no_move) == {"outcome": "accepted"}
    assert h.runs() == []
    reasons = wait_until(lambda: (r := [t for s, t in journal_stages(h) if s == "approval_refused"])
                         and len(r) >= 3 and r, message="refusals journaled")
    text = " ".join(reasons)
    assert "no plan waits" in text and "wakeline's own account" in text and "app user" in text


def test_only_the_routes_approvers_approve(harness: Callable[..., Any]) -> None:
    h = start(harness, approvers=[BOSS])
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="plan posted")
    assert h.deliver(move(APPROVED, AWAITING, actor=JANE)) == {"outcome": "accepted"}
    wait_until(lambda: any("approvers" in t for s, t in journal_stages(h)), message="refused")
    assert gate(h)["lease"] is None and len(h.runs()) == 1
    h.deliver(move(APPROVED, AWAITING, actor=BOSS))
    wait_until(lambda: len(h.runs()) == 2, message="the approver's approval ran")
    assert gate(h)["approvedBy"] == BOSS


def test_an_approval_from_the_wrong_state_is_refused(harness: Callable[..., Any]) -> None:
    h = start(harness)
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="plan posted")
    h.deliver(move(APPROVED, TODO))
    wait_until(lambda: any("another state" in t for s, t in journal_stages(h)), message="refused")
    assert gate(h)["lease"] is None and len(h.runs()) == 1


def test_two_concurrent_approvals_give_one_lease_and_one_turn(harness: Callable[..., Any]) -> None:
    h = start(harness)
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="plan posted")
    outcomes: list[Any] = []
    threads = [threading.Thread(target=lambda b=b: outcomes.append(h.deliver(b)))
               for b in (move(APPROVED, AWAITING), move(DOING, AWAITING, actor=BOSS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    wait_until(lambda: len(h.runs()) == 2, message="one execution turn")
    wait_until(lambda: h.api("GET", "/v1/status").json()["fifo"]["pending"] == 0, message="idle")
    assert len(h.runs()) == 2 and [r["phase"] for r in h.runs()] == ["plan", "execute"]
    wait_until(lambda: any("already held" in t for s, t in journal_stages(h)), message="journaled")


def test_picking_approve_in_the_session_approves(harness: Callable[..., Any]) -> None:
    h = start(harness)
    assert h.deliver(session_event(session_id="s-1", issue_id="issue-7", identifier="OPS-7"))[
        "outcome"] == "accepted"
    told = wait_until(lambda: [a for a in h.linear.activities()
                               if a.input["content"]["type"] == "response"], message="told")
    assert "Ready for Planning" in told[0].input["content"]["body"] and h.runs() == []
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="plan posted")
    question = wait_until(lambda: [a.input for a in h.linear.activities()
                                   if a.input["content"]["type"] == "elicitation"],
                          message="the plan's question")
    assert question[0]["signal"] == "select" and question[0]["signalMetadata"] == {
        "options": [{"label": "Approve", "value": "approve"}]}
    pick = session_event("prompted", session_id="s-1", issue_id="issue-7", identifier="OPS-7")
    pick["agentActivity"] = {"id": "act-9", "content": {"type": "prompt", "body": "approve"},
                             "userId": BOSS}
    h.deliver(pick)
    wait_until(lambda: len(h.runs()) == 2, message="executed")
    sent(h)
    assert gate(h)["approvedBy"] == BOSS and state_moves(h.linear)[-1] == DOING


def test_a_direct_move_to_in_progress_without_a_plan_runs_unplanned(
        harness: Callable[..., Any]) -> None:
    h = start(harness)
    h.deliver(move(DOING, TODO))
    wait_until(lambda: len(h.runs()) == 1, message="executed")
    assert h.runs()[0]["phase"] == "execute" and not h.runs()[0]["approvedPlan"]
    assert gate(h)["approvedRev"] is None and gate(h)["approvedBy"] == JANE
    assert state_moves(h.linear) == []  # already In Progress: nothing to move


def test_a_move_to_in_progress_while_the_agent_plans_stops_the_plan_and_executes(
        harness: Callable[..., Any]) -> None:
    h = start(harness, arg="sleep-plan")
    h.deliver(move(READY))
    wait_until(lambda: len(h.runs()) == 1, message="planning")
    h.deliver(move(DOING, READY))
    wait_until(lambda: len(h.runs()) == 2, message="executed")
    assert [r["phase"] for r in h.runs()] == ["plan", "execute"]
    assert not h.runs()[1]["approvedPlan"]  # nothing was posted: nothing was approved
    wait_until(lambda: h.only_conversation()["turns"][0]["result"] == "response",
               message="the execution answered")
    plan = gate(h)
    assert plan["phase"] == "approved" and plan["lease"] is not None
    assert plan["approvedBy"] == JANE and plan["approvedRev"] is None
    assert [t["result"] for t in h.only_conversation()["turns"]] == ["response", "stopped"]
    sent(h)
    assert AWAITING not in state_moves(h.linear) and plan_comments(h.linear) == []


def test_back_to_ready_for_planning_withdraws_every_approval(harness: Callable[..., Any]) -> None:
    h = start(harness, arg="sleep-execute")
    h.deliver(move(DOING, TODO))
    wait_until(lambda: len(h.runs()) == 1, message="executing")
    h.deliver(move(READY, DOING))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="planned again")
    plan = gate(h)
    assert plan["lease"] is None and plan["approvedRev"] is None and plan["approvedBy"] is None
    assert [r["phase"] for r in h.runs()] == ["execute", "plan"]
    assert h.only_conversation()["turns"][-1]["result"] == "stopped"


@pytest.mark.parametrize(("state", "outcome"), [(DONE, "completed"), (CANCELED, "canceled")])
def test_a_terminal_state_stops_the_turn_and_releases_the_lease(
        harness: Callable[..., Any], state: str, outcome: str) -> None:
    h = start(harness, arg="sleep-execute")
    h.deliver(move(DOING, TODO))
    wait_until(lambda: len(h.runs()) == 1, message="executing")
    moves = len(state_moves(h.linear))
    h.deliver(move(state, DOING))
    conv = wait_until(lambda: (c := h.only_conversation())["state"] == "terminal" and c,
                      message="terminal")
    assert conv["outcome"] == outcome and conv["plan"]["lease"] is None
    assert conv["plan"]["phase"] == "none"
    wait_until(lambda: conv["turns"][0]["result"] == "retired", message="stopped")
    assert len(state_moves(h.linear)) == moves  # no state written back


def test_a_planning_turn_that_edits_files_has_them_put_back(
        harness: Callable[..., Any], repo: Path) -> None:
    h = start(harness, arg="meddle", repo=str(repo))
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="the plan was still posted")
    sent(h)
    workspace = Path(h.runs()[0]["cwd"])
    assert not (workspace / "meddled.txt").exists()
    assert "changed by a planning turn" not in (workspace / "README.md").read_text()
    assert git(workspace, "status", "--porcelain").strip() == ""
    wait_until(lambda: any(s == "plan_changes_discarded" for s, _ in journal_stages(h)),
               message="journaled")


def test_a_plan_longer_than_a_comment_is_cut_with_a_pointer_to_the_journal(
        harness: Callable[..., Any]) -> None:
    h = start(harness, arg="long")
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="posted")
    sent(h)
    [(_, body)] = plan_comments(h.linear)
    assert len(body) <= 20_000 and "wakeline journal" in body
    wait_until(lambda: any(e["kind"] == "turn_report" and e["text"].startswith("1. A step")
                           for e in h.api("GET", "/v1/journal").json()["entries"]),
               message="the whole plan journaled")
    assert json.dumps(gate(h))  # still a plan of revision 1


# --- a person or an app? (invariant 14) -----------------------------------------------------------


def inbound(h: Any) -> list[dict[str, Any]]:
    return [e for e in h.api("GET", "/v1/journal").json()["entries"] if e["kind"] == "inbound"]


@pytest.mark.parametrize("direct", [False, True])
def test_another_app_moving_the_issue_never_approves_and_linear_is_asked_once(
        harness: Callable[..., Any], direct: bool) -> None:
    fake = FakeLinear(teams={"OPS": team()}, apps={"bot-9"})
    h = start(harness, fake=fake)
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="plan posted")
    sent(h)
    # Linear sends the app's actor as a user, with nothing in the payload that says "app".
    approval = move(DOING, AWAITING, actor="bot-9") if direct else move(APPROVED, AWAITING,
                                                                        actor="bot-9")
    assert h.deliver(approval) == {"outcome": "accepted"}
    refusal = wait_until(lambda: [t for s, t in journal_stages(h)
                                  if s == "approval_refused" and "an app user" in t],
                         message="the app's approval refused and journaled")
    assert "bot-9" in refusal[0]
    moves = state_moves(fake)
    assert gate(h)["lease"] is None and gate(h)["phase"] == "awaiting"
    assert [r["phase"] for r in h.runs()] == ["plan"]
    # Asked once: the answer is kept, so the app's next move needs no lookup.
    h.deliver(move(DOING, AWAITING, actor="bot-9"))
    wait_until(lambda: len([t for s, t in journal_stages(h) if "an app user" in t]) == 2,
               message="refused again")
    assert fake.user_lookups().count("bot-9") == 1 and state_moves(fake) == moves
    conv = h.only_conversation()
    assert [f["completion"] for f in conv["fifo"] if f.get("completion") == "refused"]
    assert len(h.runs()) == 1
    # A person approves after all: the lease and the execution turn.
    h.deliver(move(APPROVED, AWAITING, actor=BOSS))
    wait_until(lambda: len(h.runs()) == 2, message="the person's approval ran")
    assert gate(h)["approvedBy"] == BOSS


def test_an_apps_address_refuses_it_before_any_lookup(harness: Callable[..., Any]) -> None:
    h = start(harness)
    body = move(READY, actor="bot-3")
    body["actor"]["email"] = "bot-3-8a1f@oauthapp.linear.app"
    assert h.deliver(body) == {"outcome": "accepted"}
    wait_until(lambda: any(s == "refused" and "a plan was asked for by an app user" in t
                           for s, t in journal_stages(h)), message="refused at once")
    assert h.linear.user_lookups() == [] and h.runs() == []


def test_an_apps_comment_never_revises_the_plan(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(teams={"OPS": team()}, apps={"bot-9"})
    h = start(harness, fake=fake)
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="plan posted")
    h.deliver(comment("rewrite it all", actor="bot-9"))
    wait_until(lambda: any(s == "refused" and "a comment by an app user" in t
                           for s, t in journal_stages(h)), message="refused")
    assert gate(h)["rev"] == 1 and len(h.runs()) == 1


def test_a_delivery_waiting_for_linears_answer_survives_a_restart(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear(teams={"OPS": team()}, users_failing=True)
    h = start(harness, fake=fake)
    h.deliver(move(DOING, TODO))  # Jane, whom Linear cannot name yet
    wait_until(lambda: len(fake.user_lookups()) >= 2, message="Linear asked, and again")
    conv = h.only_conversation()
    assert [f["state"] for f in conv["fifo"]] == ["held"] and h.runs() == []
    h.restart()
    fake.users_failing = False
    wait_until(lambda: len(h.runs()) == 1, message="decided again after the restart")
    assert h.runs()[0]["phase"] == "execute" and gate(h)["approvedBy"] == JANE
    # Jane's answer is kept: her next move needs no lookup, before or after a restart.
    asked = len(fake.user_lookups())
    h.restart()
    h.deliver(move(READY, DOING))
    wait_until(lambda: gate(h)["phase"] == "awaiting", message="planned again")
    assert len(fake.user_lookups()) == asked


def test_a_comment_outside_the_workflow_is_journaled_as_recorded(
        harness: Callable[..., Any]) -> None:
    h = start(harness)
    assert h.deliver(comment("any news?")) == {"outcome": "accepted"}
    entry = wait_until(lambda: [e for e in inbound(h) if e["stage"] == "recorded"],
                       message="recorded in the journal")
    assert "any news?" in entry[0]["text"] and "outside the plan workflow" in entry[0]["text"]
    assert h.runs() == []
