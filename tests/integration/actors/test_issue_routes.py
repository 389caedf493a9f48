"""Issue routes through the real service: ownership, project moves, outcomes, worktrees, trust.

The fake Linear is a real HTTP server that answers the tracker's ownership lookups;
the agent is a real child process; worktrees are real git repositories in tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import comment_event, issue_event
from tests.fakes.linear import FakeLinear
from tests.helpers import StoreShell, git, wait_until

P, Q = "project-p", "project-q"


def ops_routes(**extra: Any) -> list[dict[str, Any]]:
    return [{"name": "eng", "teams": ["ENG"]},
            {"name": "ops", "teams": ["OPS"], "mode": "issue", "projects": [P],
             "done_state_id": "state-done", **extra}]


def ops_comment(issue: str = "issue-7", text: str = "please fix") -> dict[str, Any]:
    body = comment_event(issue, "OPS-7")
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["data"]["body"] = text
    return body


def ops_issue(issue: str = "issue-7", action: str = "update", *, project: str | None = P,
              state: str = "state-todo", state_type: str = "unstarted",
              changed: dict[str, Any] | None = None) -> dict[str, Any]:
    body = issue_event(issue, "OPS-7", action)
    body["data"].update(projectId=project, title="Rotate the logs",
                        state={"id": state, "name": state, "type": state_type})
    body["updatedFrom"] = changed if changed is not None else {"title": "old"}
    return body


def conversation(h: Any) -> dict[str, Any]:
    return h.only_conversation()


def runs_with(h: Any, text: str) -> list[dict[str, Any]]:
    return [r for r in h.runs() if text in r["comments"]]


# --- comments and ownership ----------------------------------------------------------------------


def test_a_comment_about_an_unseen_issue_runs_once_linear_says_the_route_owns_it(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear(issues={"issue-7": {"project": P, "team": "OPS"}})
    fake.delays["WakelineIssueOwner"] = 0.5  # the ingress must not wait for it
    h = harness("ok", linear=fake, routes=ops_routes())
    assert h.deliver(ops_comment()) == {"outcome": "accepted"}
    assert conversation(h)["state"] == "waiting_ownership"
    wait_until(lambda: runs_with(h, "please fix"), message="the comment reached the agent")
    conv = conversation(h)
    assert conv["ownership"]["state"] == "owned" and conv["ownership"]["projectId"] == P
    assert conv["ownership"]["lookup"]["projectId"] == P
    assert len(fake.lookups()) == 1
    h.deliver(ops_comment(text="and this"))  # known now: no second lookup
    wait_until(lambda: runs_with(h, "and this"), message="the second comment ran")
    assert len(fake.lookups()) == 1


def test_a_comment_about_another_projects_issue_completes_as_not_owned(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear(issues={"issue-7": {"project": Q, "team": "OPS"}})
    h = harness("ok", linear=fake, routes=ops_routes())
    h.deliver(ops_comment())
    conv = wait_until(lambda: (c := conversation(h))["ownership"]["state"] == "not_owned" and c)
    assert [f["completion"] for f in conv["fifo"]] == ["not_owned"]
    assert conv["turns"] == [] and h.runs() == []
    assert not (h.service.config.state_path / "workspaces" / conv["id"]).exists()


def test_a_deleted_issue_is_not_owned(harness: Callable[..., Any]) -> None:
    h = harness("ok", linear=FakeLinear(), routes=ops_routes())  # the fake knows no issue
    h.deliver(ops_comment())
    conv = wait_until(lambda: (c := conversation(h))["ownership"]["state"] == "not_owned" and c)
    assert conv["ownership"]["lookup"] == {"gone": True}
    assert h.runs() == []


def test_linear_down_means_waiting_with_backoff_never_a_guess(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(issues={"issue-7": {"project": P}}, script=["500", "drop"])
    h = harness("ok", linear=fake, routes=ops_routes())
    h.deliver(ops_comment())
    # Two failed attempts are recorded before the third finds the answer.
    wait_until(lambda: runs_with(h, "please fix"), message="the turn ran after Linear came back")
    assert len(fake.lookups()) == 3
    status = h.api("GET", "/v1/status").json()["conversations"]
    assert status["waitingOwnership"] == 0


def test_without_a_credential_the_conversation_waits_and_says_why(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ops_routes(), credential=False)
    h.deliver(ops_comment())
    conv = wait_until(lambda: (c := conversation(h))["ownership"].get("lastError") and c)
    assert conv["state"] == "waiting_ownership"
    assert conv["ownership"]["lastError"].startswith("requires_connected_linear")
    assert h.api("GET", "/v1/status").json()["conversations"]["waitingOwnership"] == 1
    assert h.runs() == []


def test_a_project_move_out_stops_waking_and_a_move_in_starts_again(
        harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ops_routes())
    assert h.deliver(ops_issue(action="create")) == {"outcome": "accepted"}
    wait_until(lambda: len(h.runs()) == 1, message="the created issue ran")
    moved_out = ops_issue(project=Q, changed={"projectId": P, "updatedAt": "x"})
    assert h.deliver(moved_out) == {"outcome": "ignored", "reason": "project_bookkeeping"}
    assert conversation(h)["ownership"]["state"] == "not_owned"
    assert h.deliver(ops_comment(text="ignored while out")) == {"outcome": "accepted"}
    moved_in = ops_issue(changed={"projectId": Q, "addedToProjectAt": "x", "updatedAt": "x"})
    assert h.deliver(moved_in) == {"outcome": "ignored", "reason": "project_bookkeeping"}
    h.deliver(ops_comment(text="back in"))
    wait_until(lambda: runs_with(h, "back in"), message="the comment after the move in ran")
    assert not runs_with(h, "ignored while out")
    inbox = h.api("GET", "/v1/inbox", params={"view": "headlines"}).json()["events"]
    assert len(inbox) == 5  # every data-change event is kept, ignored ones too


def test_an_issue_created_in_the_proposed_state_is_ignored_but_kept(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ops_routes(proposed_state_id="state-proposed"))
    body = ops_issue(action="create", state="state-proposed")
    assert h.deliver(body) == {"outcome": "ignored", "reason": "proposed_state"}
    convs = [c for c in h.api("GET", "/v1/conversations").json()["conversations"] if c["kind"] == "issue"]
    assert convs == []
    assert h.api("GET", "/v1/inbox").json()["unreadCount"] == 1


# --- terminal outcomes ----------------------------------------------------------------------------


def test_completed_only_on_the_done_state_else_canceled(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ops_routes())
    for issue, state, kind in (("i-done", "state-done", "completed"),
                               ("i-released", "state-released", "completed"),
                               ("i-dup", "state-duplicate", "canceled")):
        h.deliver(ops_issue(issue, action="create"))
        h.deliver(ops_issue(issue, state=state, state_type=kind))
    convs = wait_until(lambda: (cs := [c for c in h.api("GET", "/v1/conversations").json()
                                       ["conversations"] if c["state"] == "terminal"])
                       and len(cs) == 3 and cs)
    outcomes = {h.conversation(c["id"])["terminalEvidence"]["stateId"]: c["outcome"] for c in convs}
    assert outcomes == {"state-done": "completed", "state-released": "canceled",
                        "state-duplicate": "canceled"}
    counts = h.api("GET", "/v1/status").json()["conversations"]
    assert (counts["terminal"], counts["completed"], counts["canceled"]) == (3, 1, 2)
    assert [r for r in h.linear.requests if "issueUpdate" in r.query] == []  # no state written


@pytest.mark.parametrize("state_type", ["canceled", "completed"])
def test_a_terminal_first_issue_starts_closed_and_a_later_comment_runs_nothing(
        harness: Callable[..., Any], state_type: str) -> None:
    h = harness("ok", routes=ops_routes())
    closed = ops_issue(state=f"state-{state_type}", state_type=state_type,
                       changed={"stateId": "state-todo"})
    assert h.deliver(closed) == {"outcome": "accepted"}
    conv = conversation(h)
    assert (conv["state"], conv["outcome"]) == ("terminal", "canceled")  # not the Done state
    assert conv["fifo"] == [] and conv["turns"] == []
    assert h.deliver(ops_comment(text="on the closed issue")) == {"outcome": "ignored",
                                                                   "reason": "terminal"}
    assert not (h.service.config.workspaces_path / conv["id"]).exists()
    assert h.runs() == [] and h.api("GET", "/v1/status").json()["fifo"]["pending"] == 0
    # Only an explicit nonterminal state reopens it.
    assert h.deliver(ops_issue()) == {"outcome": "accepted"}
    wait_until(lambda: len(h.runs()) == 1, message="the reopened issue ran")


def test_a_terminal_first_issue_of_another_project_is_the_inbox_s_alone(
        harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ops_routes())
    assert h.deliver(ops_issue(project=Q, state="state-x", state_type="canceled")) == \
        {"outcome": "accepted"}
    assert [c for c in h.api("GET", "/v1/conversations").json()["conversations"]
            if c["kind"] == "issue"] == []


def test_terminal_during_a_running_turn_retires_it_and_a_later_comment_runs_nothing(
        harness: Callable[..., Any]) -> None:
    h = harness("sleep", "30", routes=ops_routes())
    h.deliver(ops_issue(action="create"))
    wait_until(lambda: h.runs(), message="the turn started")
    h.deliver(ops_issue(state="state-done", state_type="completed"))
    conv = wait_until(lambda: (c := conversation(h))["turns"] and c)
    assert conv["turns"][0]["result"] == "retired" and conv["outcome"] == "completed"
    assert h.deliver(ops_comment(text="after")) == {"outcome": "ignored", "reason": "terminal"}
    assert len(h.runs()) == 1
    # Reopened, it wakes again.
    assert h.deliver(ops_issue()) == {"outcome": "accepted"}
    wait_until(lambda: len(h.runs()) == 2, message="the reopened issue ran")
    assert conversation(h)["outcome"] is None


# --- worktrees ------------------------------------------------------------------------------------


def test_each_issue_works_in_its_own_worktree_removed_clean_at_the_end(
        harness: Callable[..., Any], repo: Path) -> None:
    h = harness("ok", routes=ops_routes(repo=str(repo), default_branch="main"))
    h.deliver(ops_issue(action="create"))
    run = wait_until(lambda: h.runs(), message="the turn ran")[0]
    conv = conversation(h)
    workspace = h.service.config.state_path / "workspaces" / conv["id"]
    assert Path(run["cwd"]) == workspace and (workspace / "README.md").exists()
    assert conv["workspace"]["branch"] == "ops-7-rotate-the-logs"
    assert git(workspace, "branch", "--show-current").strip() == "ops-7-rotate-the-logs"
    h.deliver(ops_issue(state="state-done", state_type="completed"))
    wait_until(lambda: not workspace.exists(), message="the clean worktree was removed")
    assert "ops-7-rotate-the-logs" in git(repo, "branch", "--list")
    wait_until(lambda: conversation(h)["workspace"] == {
        "branch": "ops-7-rotate-the-logs", "cleanupPending": False, "kept": None},
        message="the cleanup was recorded")


def test_a_dirty_worktree_is_kept_whole_and_listed(harness: Callable[..., Any], repo: Path) -> None:
    h = harness("touch", routes=ops_routes(repo=str(repo)))
    h.deliver(ops_issue(action="create"))
    wait_until(lambda: h.runs(), message="the turn ran")
    h.deliver(ops_issue(state="state-canceled", state_type="canceled"))
    conv = wait_until(lambda: (c := conversation(h))["workspace"]["kept"] and c)
    assert "1 changed or untracked file" in conv["workspace"]["kept"]
    workspace = h.service.config.state_path / "workspaces" / conv["id"]
    assert (workspace / "agent-notes.txt").exists()


def test_a_cleanup_owed_at_a_crash_is_done_at_start_up(harness: Callable[..., Any], repo: Path) -> None:
    h = harness("ok", routes=ops_routes(repo=str(repo)))
    h.deliver(ops_issue(action="create"))
    wait_until(lambda: h.runs() and conversation(h)["state"] == "idle")
    conv = conversation(h)
    workspace = h.service.config.state_path / "workspaces" / conv["id"]
    h.service.stop()
    # The terminal transaction committed; the process died before its cleanup ran.
    StoreShell(h.service.config).execute(
        "UPDATE conversations SET terminal = 1, outcome = 'canceled', workspace_cleanup = 1"
        " WHERE id = ?", (conv["id"],))
    assert workspace.exists()
    h.restart()
    wait_until(lambda: not workspace.exists(), message="start-up repeated the cleanup")
    wait_until(lambda: conversation(h)["workspace"]["cleanupPending"] is False,
               message="the cleanup was recorded")


def test_a_route_whose_repo_is_not_git_fails_the_turn_clearly(
        harness: Callable[..., Any], tmp_path: Path) -> None:
    not_git = tmp_path / "plain"
    not_git.mkdir()
    h = harness("ok", routes=ops_routes(repo=str(not_git)))
    h.deliver(ops_issue(action="create"))
    conv = wait_until(lambda: (c := conversation(h))["turn"] and c["turn"]["lastError"] and c)
    assert conv["turn"]["lastError"] == f"workspace_failed: {not_git} is not a git repository"
    assert h.runs() == []


# --- trust ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("trust", "inbox_status", "public"), [("public", 200, True),
                                                                ("private", 403, False)])
def test_trust_decides_the_turns_lane_and_fence(harness: Callable[..., Any], trust: str,
                                                inbox_status: int, public: bool) -> None:
    h = harness("api", routes=[{"name": "ops", "teams": ["OPS"], "mode": "issue", "trust": trust}])
    h.deliver(ops_comment())
    conv = wait_until(lambda: (c := conversation(h))["turns"] and c)
    codes = json.loads(conv["turns"][0]["output"])
    # room (public): Linear reads and the inbox; worker (private): Linear writes, no inbox.
    assert codes["GET /v1/inbox?view=headlines"] == inbox_status
    assert codes["GET /v1/status"] == 403
    assert h.runs()[0]["public"] is public
    assert h.runs()[0]["comments"] == ["please fix"]  # quoted inside its fence either way
