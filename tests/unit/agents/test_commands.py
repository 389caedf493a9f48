"""The argv of a turn for each output mode, with and without a session to resume."""

from __future__ import annotations

import sys

from wakeline.agents.commands import agent_argv


def test_text_agents_run_as_configured() -> None:
    assert agent_argv(["python", "-m", "x"], "text", "s-1") == [sys.executable, "-m", "x"]


def test_claude_gets_its_stream_flags_and_resume() -> None:
    assert agent_argv(["claude"], "claude") == [
        "claude", "-p", "--output-format", "stream-json", "--verbose"]
    configured = ["claude", "-p", "--output-format", "stream-json", "--verbose",
                  "--permission-mode", "acceptEdits"]
    assert agent_argv(configured, "claude", "abc") == configured + ["--resume", "abc"]


def test_codex_resumes_after_its_options_and_before_stdin() -> None:
    configured = ["codex", "exec", "--json", "--skip-git-repo-check", "-s", "workspace-write", "-"]
    assert agent_argv(configured, "codex") == configured
    assert agent_argv(configured, "codex", "t-1") == configured[:-1] + ["resume", "t-1", "-"]
    assert agent_argv(["codex"], "codex", "t-1") == ["codex", "exec", "--json", "resume", "t-1"]
