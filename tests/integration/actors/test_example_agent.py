"""The plain shell agent of examples/ runs a real turn through the real service."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tests.conftest import comment_event, session_event
from tests.helpers import wait_until

AGENT = Path(__file__).resolve().parents[3] / "examples" / "shell" / "agent.sh"


def test_the_shell_agent_answers_and_asks(harness: Callable[..., Any]) -> None:
    h = harness(command=[str(AGENT)],
                routes=[{"name": "eng", "teams": ["ENG"]},
                        {"name": "ops", "teams": ["OPS"], "mode": "issue"}])
    h.deliver(session_event())
    conv = wait_until(lambda: (c := h.only_conversation())["turns"] and c, message="it answered")
    [turn] = conv["turns"]
    assert turn["result"] == "response"
    assert turn["output"].startswith("Shell agent: read 1 new event(s) on ENG-1.")
    workspace = h.service.config.workspaces_path / conv["id"]
    assert "AgentSession created" in (workspace / "agent-log.txt").read_text()
    asked = comment_event("issue-5", "OPS-5")
    asked["data"]["issue"]["team"] = {"key": "OPS"}
    asked["actor"]["name"] = "Question Asker"  # the headline names the actor
    h.deliver(asked)
    wait_until(lambda: any(t["result"] == "elicitation" for c in
                           h.api("GET", "/v1/conversations").json()["conversations"]
                           if (t := c["lastTurn"])), message="it asked")
