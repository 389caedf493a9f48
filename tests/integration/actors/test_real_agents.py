"""The real Claude Code and Codex CLIs as wakeline's agents, against the fake model.

A whole service runs each CLI for a real turn of an agent session (`output = "claude"` /
`"codex"`, the commands of examples/), the fake model scripting a tool call and a final
answer; the test reads what Linear received, then sends a follow-up and checks that the
second turn resumed the first one's session. The CLIs are installed once (pinned, cached:
tests/support/agent_clis.py); where they cannot be, the tests skip with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import session_event
from tests.fakes.model import FakeModel, Shell, Text
from tests.helpers import wait_until
from tests.integration.actors.test_progress import answered, writes
from tests.support.agent_clis import (
    CLAUDE_COMMAND, CODEX_COMMAND, claude_env, codex_env, require_cli,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def model() -> Iterator[FakeModel]:
    fake = FakeModel().start()
    yield fake
    fake.stop()


@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_a_real_cli_works_in_its_session_and_resumes_it(
        harness: Callable[..., Any], model: FakeModel, tmp_path: Path, cli: str) -> None:
    executable = require_cli(cli)
    home = tmp_path / "agent-home"
    env = claude_env(model.url, home) if cli == "claude" else codex_env(model.url, home)
    command = [str(executable), *(CLAUDE_COMMAND if cli == "claude" else CODEX_COMMAND)]
    model.script([Shell("echo hi"), Text("DONE: the tool said {tool_output}")], key="AgentSession created")
    model.script([Text("DONE: again, with {history} items of history")], key="AgentSession prompted")
    h = harness("", command=command, env=env, output=cli, progress_interval_seconds=0)

    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear, timeout=60)  # a real CLI starts Node: slow on a busy machine
    assert sent[0]["kind"] == "thought" and sent[-1]["kind"] == "response", sent[-1]["body"]
    assert sent[-1]["body"].startswith("DONE: the tool said") and "hi" in sent[-1]["body"]
    actions = [w for w in sent if w["kind"] == "action"]
    assert actions and all("echo hi" in a["parameter"] for a in actions)
    runner_session = h.only_conversation()["runnerSession"]
    assert runner_session

    h.deliver(session_event("prompted", session_id="s-1"))
    wait_until(lambda: [w["kind"] for w in writes(h.linear)].count("response") == 2,
               timeout=60, message="the follow-up answered")
    second = [w for w in writes(h.linear) if w["kind"] == "response"][-1]
    assert second["body"].startswith("DONE: again")
    resumed = model.turns()[-1]
    assert resumed.history > 2  # the first turn's conversation came along
    assert h.only_conversation()["runnerSession"] == runner_session


def test_claude_plans_read_only_and_the_worktree_stays_untouched(
        harness: Callable[..., Any], model: FakeModel, tmp_path: Path, repo: Path) -> None:
    from tests.fakes.linear import FakeLinear
    from tests.fakes.model import WriteFile
    from tests.helpers import git
    from tests.integration.actors.test_planning import READY, gate, move, planning_check, sent, team

    executable = require_cli("claude")
    model.script([WriteFile("planned-change.txt", "must not exist\n"),
                  Text("1. Read the failing test\n2. Fix the clock\n3. Run the suite")])
    h = harness("", command=[str(executable), *CLAUDE_COMMAND], env=claude_env(model.url,
                tmp_path / "agent-home"), output="claude", linear=FakeLinear(teams={"OPS": team()}),
                routes=[{"name": "ops", "teams": ["OPS"], "mode": "issue", "planning": True,
                         "repo": str(repo)}])
    wait_until(lambda: planning_check(h), message="planning set up")
    h.deliver(move(READY))
    wait_until(lambda: gate(h)["phase"] == "awaiting", timeout=60, message="the plan was recorded")
    sent(h)  # the plan comment leaves through the outbox after the gate moves
    body = next(r.body["variables"]["input"]["body"] for r in h.linear.comments())
    assert "2. Fix the clock" in body
    workspace = h.service.config.workspaces_path / h.only_conversation()["id"]
    assert not (workspace / "planned-change.txt").exists()
    assert git(workspace, "status", "--porcelain").strip() == ""
    # Claude ran in its own plan mode: it refused the write itself.
    refused = str(model.turns()[1].body["messages"][-1])
    assert "while in plan mode" in refused and "'is_error': True" in refused
