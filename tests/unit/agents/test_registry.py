"""The argv of a turn for each output mode, with and without a session to resume."""

from __future__ import annotations

import sys

from wakeline.agents.registry import agent_argv


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


def test_a_planning_turn_runs_claude_in_plan_mode_whatever_the_command_allows() -> None:
    configured = ["claude", "-p", "--permission-mode", "acceptEdits",
                  "--dangerously-skip-permissions"]
    argv = agent_argv(configured, "claude", "abc", read_only=True)
    assert argv.count("--permission-mode") == 1 and "acceptEdits" not in argv
    assert "--dangerously-skip-permissions" not in argv
    assert argv[argv.index("--permission-mode") + 1] == "plan"
    assert argv[-2:] == ["--resume", "abc"]


def test_a_planning_turn_runs_codex_read_only_whatever_the_command_allows() -> None:
    configured = ["codex", "exec", "--json", "--full-auto", "-s", "workspace-write",
                  "-c", "sandbox_mode=danger-full-access", "--config=sandbox_workspace_write.network_access=true",
                  "-c", "model=gpt-5", "-"]
    argv = agent_argv(configured, "codex", "t-1", read_only=True)
    assert argv[:4] == ["codex", "exec", "-s", "read-only"]
    assert "--full-auto" not in argv and "workspace-write" not in argv
    assert not [a for a in argv if "sandbox_" in a]
    assert argv[argv.index("-c") + 1] == "model=gpt-5"  # other overrides stay
    assert argv[-3:] == ["resume", "t-1", "-"]
    bare = agent_argv(["codex"], "codex", read_only=True)
    assert bare[:2] == ["codex", "exec"] and bare[bare.index("-s") + 1] == "read-only"
