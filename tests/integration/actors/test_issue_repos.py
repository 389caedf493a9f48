"""The repository per issue (CONTRACT section 14), through the real service: a route's `repos`
chosen by the issue's labels, else its project, else asked of the person with a `select`
question; with two real git repositories, across a restart and a reset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import issue_event, session_event
from tests.fakes.linear import FakeLinear
from tests.helpers import git, kept_journal, make_repo, wait_until
from wakeline.commands.operate import conversation_text

WEB_PROJECT = "project-web"


@pytest.fixture
def repos(tmp_path: Path) -> dict[str, Path]:
    """Two real repositories, `api` and `web`."""
    return {name: make_repo(tmp_path / name) for name in ("api", "web")}


def route(repos: dict[str, Path], **extra: Any) -> dict[str, Any]:
    return {"name": "eng", "teams": ["ENG"], **extra,
            "repos": [{"name": "api", "path": str(repos["api"]), "labels": ["backend"]},
                      {"name": "web", "path": str(repos["web"]), "labels": ["frontend"],
                       "projects": [WEB_PROJECT]}]}


def repo_of(workspace: str) -> Path:
    """The repository a worktree belongs to."""
    return Path(git(Path(workspace), "rev-parse", "--path-format=absolute",
                    "--git-common-dir")).parent


def runs_of(h: Any, conversation_id: str, count: int) -> list[dict[str, Any]]:
    return wait_until(lambda: (r := [x for x in h.runs() if x["conversation"] == conversation_id])
                      and len(r) >= count and r, message=f"{count} turns ran")


def the_conversation(h: Any, issue: str) -> dict[str, Any]:
    found = wait_until(lambda: [c for c in h.api("GET", "/v1/conversations").json()["conversations"]
                                if (c.get("issue") or {}).get("id") == issue],
                       message=f"the conversation of {issue}")
    return h.conversation(found[0]["id"])


def activities(fake: FakeLinear) -> list[dict[str, Any]]:
    """The agent activities sent, each its input."""
    return [r.body["variables"]["input"] for r in list(fake.requests)
            if "agentActivityCreate" in r.query]


def prompted(text: str, session_id: str, issue: str) -> dict[str, Any]:
    body = session_event("prompted", session_id=session_id, issue_id=issue)
    body["agentActivity"]["content"]["body"] = text
    return body


def test_the_issues_labels_choose_once_looked_up_and_kept_across_a_restart(
        harness: Callable[..., Any], repos: dict[str, Path]) -> None:
    fake = FakeLinear(issues={"issue-1": {"team": "ENG", "labels": ["Backend", "bug"]}})
    h = harness("ok", linear=fake, routes=[route(repos)])
    h.deliver(session_event(session_id="s-1"))
    cid = the_conversation(h, "issue-1")["id"]
    [run] = runs_of(h, cid, 1)
    assert repo_of(run["cwd"]) == repos["api"].resolve()
    assert h.conversation(cid)["repo"] == "api"
    assert len(fake.label_lookups()) == 1
    h.restart()
    h.deliver(prompted("go on", "s-1", "issue-1"))
    second = runs_of(h, cid, 2)[1]
    assert second["cwd"] == run["cwd"] and h.conversation(cid)["repo"] == "api"
    assert len(fake.label_lookups()) == 1  # the choice is durable: nothing more to ask
    assert "The issue's labels chose api" in kept_journal(h.service)


def test_the_issues_project_chooses_when_no_label_does(harness: Callable[..., Any],
                                                        repos: dict[str, Path]) -> None:
    fake = FakeLinear(issues={"issue-1": {"team": "ENG", "project": WEB_PROJECT,
                                          "labels": ["bug"]}})
    h = harness("ok", linear=fake, routes=[route(repos)])
    h.deliver(session_event(session_id="s-1"))
    cid = the_conversation(h, "issue-1")["id"]
    [run] = runs_of(h, cid, 1)
    assert repo_of(run["cwd"]) == repos["web"].resolve()
    assert h.conversation(cid)["repo"] == "web"
    assert "\nrepo: web " in conversation_text(h.conversation(cid))  # `conversations show`


def test_undecided_asks_the_person_with_a_select_and_the_pick_runs_there(
        harness: Callable[..., Any], repos: dict[str, Path]) -> None:
    fake = FakeLinear(issues={"issue-1": {"team": "ENG", "labels": ["backend", "frontend"]}})
    h = harness("ok", linear=fake, routes=[route(repos)])
    h.deliver(session_event(session_id="s-1"))
    question = wait_until(lambda: [a for a in activities(fake)
                                   if a["content"]["type"] == "elicitation"],
                          message="the question reached Linear")[-1]
    assert question["signal"] == "select"
    assert question["signalMetadata"]["options"] == [{"label": "api", "value": "api"},
                                                     {"label": "web", "value": "web"}]
    assert "api, web" in question["content"]["body"]
    cid = the_conversation(h, "issue-1")["id"]
    conv = h.conversation(cid)
    assert conv["repo"] is None and conv["turns"][0]["result"] == "elicitation"
    assert h.runs() == []  # no agent ran
    # A reply that names no repository: asked again, nothing runs.
    h.deliver(prompted("the blue one", "s-1", "issue-1"))
    wait_until(lambda: len([a for a in activities(fake)
                            if a["content"]["type"] == "elicitation"]) == 2,
               message="the question was asked again")
    assert "“the blue one” names none of them" in activities(fake)[-1]["content"]["body"]
    assert h.runs() == [] and h.conversation(cid)["repo"] is None
    # The pick, after a restart: the turn runs in that repository, with the first request.
    h.restart()
    h.deliver(prompted("web", "s-1", "issue-1"))
    [run] = runs_of(h, cid, 1)
    assert repo_of(run["cwd"]) == repos["web"].resolve()
    assert h.conversation(cid)["repo"] == "web"
    assert "Fix the thing" in run["prompt"] and "web" in run["prompts"]
    wait_until(lambda: activities(fake)[-1]["content"]["type"] == "response",
               message="the answer reached Linear")


def test_a_reset_clears_the_choice_and_the_next_turn_chooses_again(
        harness: Callable[..., Any], repos: dict[str, Path]) -> None:
    fake = FakeLinear(issues={"issue-1": {"team": "ENG"}})  # no label, no project
    h = harness("ok", linear=fake, routes=[route(repos)])
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: [a for a in activities(fake) if a["content"]["type"] == "elicitation"],
               message="the question reached Linear")
    h.deliver(prompted("api", "s-1", "issue-1"))
    cid = the_conversation(h, "issue-1")["id"]
    [run] = runs_of(h, cid, 1)
    assert repo_of(run["cwd"]) == repos["api"].resolve()
    wait_until(lambda: h.conversation(cid)["state"] == "idle", message="the turn ended")
    assert h.api("POST", f"/v1/conversations/{cid}/reset").status_code == 200
    assert h.conversation(cid)["repo"] is None
    asked = len([a for a in activities(fake) if a["content"]["type"] == "elicitation"])
    h.deliver(prompted("please look again", "s-1", "issue-1"))
    wait_until(lambda: len([a for a in activities(fake)
                            if a["content"]["type"] == "elicitation"]) == asked + 1,
               message="the question was asked again after the reset")
    h.deliver(prompted("web", "s-1", "issue-1"))
    second = runs_of(h, cid, 2)[1]
    assert repo_of(second["cwd"]) == repos["web"].resolve()
    assert h.conversation(cid)["repo"] == "web"


def test_an_issue_route_uses_the_payloads_labels_else_its_first_repository(
        harness: Callable[..., Any], repos: dict[str, Path]) -> None:
    fake = FakeLinear()
    h = harness("ok", linear=fake, routes=[route(repos, teams=["OPS"], mode="issue")])
    labelled = issue_event("issue-7", "OPS-7", "create")
    labelled["data"]["labels"] = [{"id": "l-1", "name": "Frontend"}]
    h.deliver(labelled)
    h.deliver(issue_event("issue-8", "OPS-8", "create"))  # no label, no project
    web = the_conversation(h, "issue-7")
    [run] = runs_of(h, web["id"], 1)
    assert repo_of(run["cwd"]) == repos["web"].resolve()
    first = the_conversation(h, "issue-8")
    [run] = runs_of(h, first["id"], 1)
    assert repo_of(run["cwd"]) == repos["api"].resolve()
    assert h.conversation(first["id"])["repo"] == "api"
    # The payload named OPS-7's labels: Linear was asked only of OPS-8's.
    assert [r.variables["id"] for r in fake.label_lookups()] == ["issue-8"]
    assert "the route's first repository" in kept_journal(h.service)


def test_work_left_in_the_repository_chosen_before_a_reset_is_kept_and_named(
        harness: Callable[..., Any], repos: dict[str, Path]) -> None:
    fake = FakeLinear(issues={"issue-1": {"team": "ENG", "labels": ["backend"]}})
    h = harness("touch", linear=fake, routes=[route(repos)])  # leaves an untracked file
    h.deliver(session_event(session_id="s-1"))
    cid = the_conversation(h, "issue-1")["id"]
    [run] = runs_of(h, cid, 1)
    assert repo_of(run["cwd"]) == repos["api"].resolve()
    wait_until(lambda: h.conversation(cid)["state"] == "idle", message="the turn ended")
    # Relabelled: after a reset, web (the answer cached before went with wakeline's writes).
    fake.issues["issue-1"]["labels"] = ["frontend"]
    assert h.api("POST", f"/v1/conversations/{cid}/reset").status_code == 200
    h.deliver(prompted("go on", "s-1", "issue-1"))
    conv = wait_until(lambda: (c := h.conversation(cid))["turn"] and c["turn"]["lastError"] and c,
                      message="the turn failed, saying why")
    assert conv["turn"]["lastError"].startswith(
        "workspace_failed: the worktree of api, chosen before the reset, is in the way of web: "
        "1 changed or untracked file; kept at ")
    assert (Path(run["cwd"]) / "agent-notes.txt").exists() and len(h.runs()) == 1
