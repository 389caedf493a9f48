"""The issue's files reach the agent (CONTRACT section 14), through the real service.

The fake Linear serves its file storage on loopback only with the credential; the agent
(tests/fakes/agent.py `prompt`) answers with the prompt it was given; the issue route works in
worktrees of a real git repository in tmp_path.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import LINEAR_KEY, comment_event, issue_event, session_event
from tests.fakes.linear import FakeLinear
from tests.helpers import git, kept_journal, wait_until

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64
LOG = b"2026-12-01 12:00:00 ERROR the clock went backwards\n" * 20


def files_fake() -> FakeLinear:
    """The fake Linear, its storage answering only to the test key."""
    return FakeLinear(files_authorization=LINEAR_KEY)


def start(harness: Callable[..., Any], fake: FakeLinear, repo: Path, **agent: Any) -> Any:
    fake.start()  # for its uploads_url; the harness stops it
    routes = [{"name": "eng", "teams": ["ENG"]},
              {"name": "ops", "teams": ["OPS"], "mode": "issue", "repo": str(repo)}]
    return harness("prompt", linear=fake, routes=routes,
                   linear_config={"uploads_url": fake.uploads_url}, **agent)


def described(text: str, issue: str = "issue-7", identifier: str = "OPS-7") -> dict[str, Any]:
    body = issue_event(issue, identifier, "create")
    body["data"]["description"] = text
    return body


def commented(text: str, issue: str = "issue-7", identifier: str = "OPS-7") -> dict[str, Any]:
    body = comment_event(issue, identifier)
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["data"]["body"] = text
    return body


def prompts(h: Any, conversation_id: str, count: int) -> list[str]:
    """The prompts of the conversation's first `count` turns, as its agent read them."""
    runs = wait_until(lambda: (r := [x for x in h.runs() if x["conversation"] == conversation_id])
                      and len(r) >= count and r, message=f"{count} turns ran")
    return [r["prompt"] for r in runs[:count]]


def conversation_of(h: Any, identifier: str) -> dict[str, Any]:
    found = wait_until(lambda: [c for c in h.api("GET", "/v1/conversations").json()["conversations"]
                                if (c.get("issue") or {}).get("identifier") == identifier],
                       message=f"the conversation of {identifier}")
    return h.conversation(found[0]["id"])


def test_files_land_in_the_worktree_named_in_the_prompt_and_out_of_git(
        harness: Callable[..., Any], repo: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake = files_fake()
    foreign = FakeLinear().start()  # another host's "storage": never to be asked
    try:
        h = start(harness, fake, repo)
        shot = fake.upload(PNG, "screen%20shot.png", "image/png")
        log = fake.upload(LOG, "app.log", "text/plain")
        elsewhere = foreign.upload(PNG, "shot.png", "image/png")
        h.deliver(described(f"It breaks, see ![screen shot]({shot}) and [the log]({log}).\n"
                            f"Also {elsewhere} and {fake.url}"))
        cid = conversation_of(h, "OPS-7")["id"]
        [prompt] = prompts(h, cid, 1)
        workspace = h.service.config.state_path / "workspaces" / cid
        local = {line.split(" -> ")[0][2:]: line.split(" -> ")[1]
                 for line in prompt.splitlines() if " -> .wakeline/files/" in line}
        assert set(local) == {shot, log}
        assert (workspace / local[shot]).read_bytes() == PNG
        assert (workspace / local[log]).read_bytes() == LOG
        assert local[shot].endswith("-screen-shot.png")
        assert git(workspace, "status", "--porcelain", "--untracked-files=all") == ""
        assert foreign.downloads == [] and elsewhere not in local
        assert [r.headers["Authorization"] for r in fake.downloads] == [LINEAR_KEY, LINEAR_KEY]
        # The credential: in no file written (workspace, state, journal), prompt or log line.
        assert LINEAR_KEY not in prompt
        for root in (workspace, h.service.config.state_path, tmp_path):
            for path in root.rglob("*"):
                if path.is_file() and ".git" not in path.parts:
                    assert LINEAR_KEY.encode() not in path.read_bytes(), path
        assert LINEAR_KEY not in kept_journal(h.service)
        for record in caplog.records:
            assert LINEAR_KEY not in record.getMessage()
            assert LINEAR_KEY not in repr(record.__dict__)
    finally:
        foreign.stop()


def test_a_file_that_cannot_be_fetched_is_named_and_the_turn_runs(
        harness: Callable[..., Any], repo: Path) -> None:
    fake = files_fake()
    h = start(harness, fake, repo, max_file_bytes=1000, file_timeout_seconds=0.5)
    broken = fake.upload(b"x", "broken.png")
    fake.file_behaviours["broken.png"] = "500"
    big = fake.upload(b"y" * 5000, "big.log")
    slow = fake.upload(b"z", "slow.png")
    fake.file_behaviours["slow.png"] = "hold"  # never answered while the turn waits
    gone = fake.uploads_url + "/org-test/none/gone.png"
    h.deliver(described(f"{broken} {big} {slow} {gone}"))
    cid = conversation_of(h, "OPS-7")["id"]
    [prompt] = prompts(h, cid, 1)
    assert f"- {broken}: not fetched (HTTP 500)" in prompt
    assert f"- {big}: not fetched (larger than 1000 bytes (agent.max_file_bytes))" in prompt
    assert f"- {slow}: not fetched (timed out after 0.5 s)" in prompt
    assert f"- {gone}: not fetched (HTTP 404)" in prompt
    wait_until(lambda: [t["result"] for t in h.conversation(cid)["turns"]] == ["response"],
               message="the turn ran anyway, and answered")


def test_a_link_is_fetched_once_per_conversation_across_a_restart(
        harness: Callable[..., Any], repo: Path) -> None:
    fake = files_fake()
    h = start(harness, fake, repo)
    shot = fake.upload(PNG, "shot.png", "image/png")
    h.deliver(described(f"see {shot}"))
    cid = conversation_of(h, "OPS-7")["id"]
    prompts(h, cid, 1)
    h.deliver(commented(f"still broken, same picture: {shot}"))
    second = prompts(h, cid, 2)[1]
    h.restart()
    h.deliver(commented(f"and after the restart: {shot}"))
    third = prompts(h, cid, 3)[2]
    assert len(fake.downloads) == 1  # no refetch in the same conversation
    named = [line for line in second.splitlines() if line.startswith(f"- {shot} -> ")]
    assert named and named == [line for line in third.splitlines()
                               if line.startswith(f"- {shot} -> ")]
    # Another conversation (another issue, another worktree) fetches its own.
    h.deliver(described(f"the same picture here: {shot}", "issue-8", "OPS-8"))
    other = conversation_of(h, "OPS-8")
    [prompt] = prompts(h, other["id"], 1)
    assert len(fake.downloads) == 2
    workspace = h.service.config.state_path / "workspaces" / other["id"]
    path = prompt.split(f"- {shot} -> ")[1].splitlines()[0]
    assert (workspace / path).read_bytes() == PNG


def test_an_agent_sessions_prompt_context_links_are_fetched(harness: Callable[..., Any],
                                                            repo: Path) -> None:
    fake = files_fake()
    fake.start()
    h = harness("prompt", linear=fake, routes=[{"name": "eng", "teams": ["ENG"], "repo": str(repo)}],
                linear_config={"uploads_url": fake.uploads_url})
    shot = fake.upload(PNG, "shot.png", "image/png")
    h.deliver(session_event(promptContext=f'<issue identifier="ENG-1"><description>'
                                          f'![shot]({shot})</description></issue>'))
    cid = conversation_of(h, "ENG-1")["id"]
    [prompt] = prompts(h, cid, 1)
    path = prompt.split(f"- {shot} -> ")[1].splitlines()[0]
    workspace = h.service.config.state_path / "workspaces" / cid
    assert (workspace / path).read_bytes() == PNG
    assert git(workspace, "status", "--porcelain", "--untracked-files=all") == ""
