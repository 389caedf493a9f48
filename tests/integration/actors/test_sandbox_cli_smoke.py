from __future__ import annotations
import json, time, sys
from pathlib import Path
from typing import Any, Callable, Iterator
import pytest
from tests.conftest import session_event
from tests.helpers import wait_until
from tests.fakes.model import FakeModel, Shell, Text, WriteFile
from tests.integration.actors.test_progress import answered, writes
from tests.support.sandbox import require_bwrap
from tests.support.agent_clis import CLAUDE_COMMAND, CODEX_COMMAND, claude_env, codex_env, require_cli

@pytest.fixture
def model() -> Iterator[FakeModel]:
    fake = FakeModel().start()
    yield fake
    fake.stop()

@pytest.mark.parametrize("cli", ["claude", "codex"])
@pytest.mark.parametrize("network", ["allow", "open"])
def test_cli(harness: Callable[..., Any], model: FakeModel, tmp_path: Path, cli: str, network: str) -> None:
    require_bwrap()
    executable = require_cli(cli)
    import uuid; home = Path.home() / ".cache" / "wakeline-tests" / "homes" / uuid.uuid4().hex
    env = claude_env(model.url, home) if cli == "claude" else codex_env(model.url, home)
    command = [str(executable), *(CLAUDE_COMMAND if cli == "claude" else CODEX_COMMAND)]
    if cli == "claude":
        model.script([Shell("echo hi > shell.txt && cat shell.txt"), Text("DONE: the tool said {tool_output}")])
    else:
        model.script([Shell("echo hi > shell.txt && cat shell.txt"), Text("DONE: the tool said {tool_output}")])
    port = int(model.url.rsplit(":", 1)[1])
    route = {"name": "eng", "teams": ["ENG"], "network": network, "home": str(home)}
    if network == "allow":
        route["allow_hosts"] = [f"127.0.0.1:{port}"]
    h = harness("", command=command, env=env, output=cli, progress_interval_seconds=0,
                sandbox={"mode": "required"}, routes=[route])
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear, timeout=90)
    print(sent[-1])
    print([ (r.method, r.path) for r in model.recorded()])
    ws = h.service.config.workspaces_path / h.only_conversation()["id"]
    print(list(ws.iterdir()))
    assert (ws / "shell.txt").exists()
