"""The real Claude Code and Codex CLIs as confined agents (CONTRACT section 12).

A whole service runs each CLI in bubblewrap, as a route configures it, against the fake model
(tests/fakes/model.py) on the host's loopback, reached through wakeline's allow-list proxy
(`network = "allow"`, the model's address in `allow_hosts`). Each writes a file in its
workspace through its own tool; the second Claude turn resumes the first from the session
files its home kept; and each CLI's own sandbox still works inside wakeline's: Codex's
`-s workspace-write` and Claude Code's Bash sandbox refuse a write to $HOME, which wakeline's
sandbox would allow (the route's home is writable).

The agents' homes live outside /tmp: Codex never sets up its sandbox helper (and so refuses
every `workspace-write` command, quietly) when CODEX_HOME is in a temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import session_event
from tests.fakes.model import FakeModel, Shell, Text, WriteFile
from tests.helpers import wait_until
from tests.integration.actors.test_progress import answered, writes
from tests.support.agent_clis import (
    CLAUDE_COMMAND, CODEX_COMMAND, cache_root, claude_env, codex_env, require_cli,
)
from tests.support.sandbox import REQUIRE_ENV, require_bwrap

pytestmark = pytest.mark.slow


@pytest.fixture
def model() -> Iterator[FakeModel]:
    fake = FakeModel().start()
    yield fake
    fake.stop()


@pytest.fixture
def agent_home() -> Iterator[Path]:
    """A route's home outside any temporary directory (see the module's note)."""
    home = cache_root() / "homes" / uuid.uuid4().hex
    home.mkdir(parents=True)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def start(harness: Callable[..., Any], model: FakeModel, cli: str, home: Path,
          command: tuple[str, ...] = ()) -> Any:
    """A service whose `eng` route runs the CLI confined, its model allowed through the proxy."""
    executable = require_cli(cli)
    env = claude_env(model.url, home) if cli == "claude" else codex_env(model.url, home)
    port = int(model.url.rsplit(":", 1)[1])
    argv = [str(executable), *(CLAUDE_COMMAND if cli == "claude" else CODEX_COMMAND), *command]
    return harness("", command=argv, env=env, output=cli, progress_interval_seconds=0,
                   sandbox={"mode": "required"},
                   routes=[{"name": "eng", "teams": ["ENG"], "network": "allow",
                            "allow_hosts": [f"127.0.0.1:{port}"], "home": str(home)}])


def responses(h: Any, count: int) -> list[str]:
    wait_until(lambda: [w["kind"] for w in writes(h.linear)].count("response") >= count,
               timeout=90, message=f"{count} answers")
    return [w["body"] for w in writes(h.linear) if w["kind"] == "response"]


def test_claude_code_confined_writes_with_its_own_tool_and_resumes_from_its_home(
        harness: Callable[..., Any], model: FakeModel, agent_home: Path) -> None:
    require_bwrap()
    model.script([Text("DONE: first")], key="AgentSession created")
    h = start(harness, model, "claude", agent_home)
    h.deliver(session_event(session_id="s-1"))
    assert answered(h.linear, timeout=90)[-1]["body"] == "DONE: first"
    workspace = h.service.config.workspaces_path / h.only_conversation()["id"]
    model.script([WriteFile(str(workspace / "hello.txt"), "written by Claude Code\n"),
                  Text("DONE: wrote hello.txt after {history} items")], key="AgentSession prompted")

    h.deliver(session_event("prompted", session_id="s-1"))

    assert responses(h, 2)[-1].startswith("DONE: wrote hello.txt")
    assert (workspace / "hello.txt").read_text() == "written by Claude Code\n"
    assert model.turns()[-1].history > 3  # the first turn came along: its session was kept
    assert model.endpoints() <= {"POST /v1/messages"}, model.endpoints()
    brief = [e for e in h.api("GET", "/v1/journal?limit=50").json()["entries"]
             if e["kind"] == "turn_brief"]
    assert brief[-1]["text"].endswith("(confinement: bwrap, network=allow)")


def test_codex_workspace_write_works_confined_and_its_own_sandbox_still_holds(
        harness: Callable[..., Any], model: FakeModel, agent_home: Path) -> None:
    require_bwrap()
    model.script([WriteFile("hello.txt", "written by Codex\n"),
                  Shell("echo from the shell > shell.txt && cat shell.txt"),
                  Shell("touch $HOME/outside-codex.txt"),
                  Text("DONE: {tool_output}")])
    h = start(harness, model, "codex", agent_home)

    h.deliver(session_event(session_id="s-1"))

    said = answered(h.linear, timeout=90)[-1]["body"]
    workspace = h.service.config.workspaces_path / h.only_conversation()["id"]
    assert (workspace / "hello.txt").read_text() == "written by Codex\n"
    assert (workspace / "shell.txt").read_text() == "from the shell\n"
    assert "Read-only file system" in said, said  # Codex's sandbox, inside wakeline's
    assert not (agent_home / "outside-codex.txt").exists()
    assert model.endpoints() <= {"POST /v1/responses"}, model.endpoints()


def test_claude_codes_own_sandbox_works_inside_wakelines(
        harness: Callable[..., Any], model: FakeModel, agent_home: Path) -> None:
    """Claude Code sandboxes its Bash tool with bwrap and socat; inside wakeline's sandbox it
    needs `enableWeakerNestedSandbox`, which wakeline passes it (`--settings`)."""
    require_bwrap()
    if shutil.which("socat") is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail("socat is required here: Claude Code's sandbox needs it")
        pytest.skip("socat is not installed: Claude Code's own sandbox cannot run")
    (agent_home / ".claude").mkdir()
    (agent_home / ".claude" / "settings.json").write_text(json.dumps(
        {"sandbox": {"enabled": True, "autoAllowBashIfSandboxed": True}}))
    model.script([Shell("echo inside > ws.txt"), Shell("touch $HOME/inner.txt"),
                  Text("DONE: {tool_output}")])
    h = start(harness, model, "claude", agent_home)

    h.deliver(session_event(session_id="s-1"))

    said = answered(h.linear, timeout=90)[-1]["body"]
    workspace = h.service.config.workspaces_path / h.only_conversation()["id"]
    assert (workspace / "ws.txt").read_text() == "inside\n"
    assert "Read-only file system" in said, said
    assert not (agent_home / "inner.txt").exists()


def test_without_the_weaker_nested_setting_claude_codes_sandbox_cannot_start(
        harness: Callable[..., Any], model: FakeModel, agent_home: Path) -> None:
    """Why wakeline passes the setting: a route that sets its own `--settings` (wakeline then
    adds nothing) without it gets a Bash tool whose sandbox fails to mount /proc."""
    require_bwrap()
    if shutil.which("socat") is None:
        pytest.skip("socat is not installed: Claude Code's own sandbox cannot run")
    (agent_home / ".claude").mkdir()
    (agent_home / ".claude" / "settings.json").write_text(json.dumps(
        {"sandbox": {"enabled": True, "autoAllowBashIfSandboxed": True}}))
    model.script([Shell("echo inside > ws.txt"), Text("DONE: {tool_output}")])
    h = start(harness, model, "claude", agent_home,
              ("--settings", '{"sandbox": {"enableWeakerNestedSandbox": false}}'))

    h.deliver(session_event(session_id="s-1"))

    assert "Can't mount proc" in answered(h.linear, timeout=90)[-1]["body"]
