"""The example agents: each config loads; the stream CLIs need no wrapper; the wrapper (for
aider) maps its CLI's exits to 0/1/2.

For the wrapper, a stand-in of the CLI's name on PATH records its arguments and stdin and
answers as told: the wrapper is the part under test. The real Claude Code and Codex run
with these very commands in tests/integration/actors/test_real_agents.py.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from wakeline.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CLIS = {"aider": "aider"}  # the CLIs without a stream, run through wrap.sh
STAND_IN = """#!/bin/sh
printf '%s\\n' "$@" > "$RECORD.args"
cat > "$RECORD.stdin"
for arg in "$@"; do [ -f "$arg" ] && cp "$arg" "$RECORD.file"; done
case "$BEHAVE" in
  answer) echo "Fixed the flaky test in login_test.py." ;;
  question) echo "I looked around."; echo "QUESTION: Which login flow, web or mobile?" ;;
  fail) echo "model overloaded"; exit 3 ;;
esac
"""


def command(example: str) -> list[str]:
    raw = tomllib.loads((EXAMPLES / example / "wakeline.toml").read_text())
    parse_config(raw, EXAMPLES / example)  # a config a user can paste validates as it is
    return [a.replace("/opt/wakeline", str(ROOT)) for a in raw["agent"]["command"]]


@pytest.mark.parametrize("example", sorted(CLIS))
@pytest.mark.parametrize(("behave", "code", "stdout"), [
    ("answer", 0, "Fixed the flaky test in login_test.py."),
    ("question", 2, "Which login flow, web or mobile?"),
    ("fail", 1, "model overloaded"),
])
def test_the_wrapper_maps_the_clis_exit_to_wakelines(tmp_path: Path, example: str, behave: str,
                                                      code: int, stdout: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / CLIS[example]
    cli.write_text(STAND_IN)
    cli.chmod(0o755)
    record = tmp_path / "record"
    done = subprocess.run(command(example), input="- Comment create · ENG-1 · Ana\nFix it.\n",
                          capture_output=True, text=True, timeout=30, cwd=tmp_path, check=False,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(record),
                               "BEHAVE": behave})
    assert (done.returncode, done.stdout.strip()) == (code, stdout), done.stderr
    given = Path(f"{record}.file") if example == "aider" else Path(f"{record}.stdin")
    prompt = given.read_text()
    assert "QUESTION:" in prompt and prompt.rstrip().endswith("Fix it.")


def test_the_wrapper_needs_a_cli() -> None:
    done = subprocess.run([str(EXAMPLES / "wrap.sh")], capture_output=True, text=True, timeout=10,
                          check=False)
    assert done.returncode == 1 and "usage: wrap.sh CLI" in done.stderr


def test_the_shell_agent_config_loads_and_its_script_is_executable() -> None:
    [script] = command("shell")
    assert Path(script).stat().st_mode & 0o111


def test_claude_code_and_codex_are_read_as_streams_without_a_wrapper() -> None:
    from tests.support.agent_clis import CLAUDE_COMMAND, CODEX_COMMAND
    from wakeline.agents.registry import agent_argv

    for example, output, own in (("claude-code", "claude", CLAUDE_COMMAND),
                                 ("codex", "codex", CODEX_COMMAND)):
        raw = tomllib.loads((EXAMPLES / example / "wakeline.toml").read_text())
        config = parse_config(raw, EXAMPLES / example)
        assert config.agent.output == output and "wrap.sh" not in str(config.agent.command)
        # The very command the real-CLI test runs (tests/support/agent_clis.py).
        assert config.agent.command[1:] == list(own)
        assert agent_argv(config.agent.command, output, "s-1")[-1] in ("s-1", "-")


def test_the_wrappers_note_tells_the_agent_how_to_show_progress() -> None:
    text = (EXAMPLES / "wrap.sh").read_text()
    assert "nobody reads your progress" not in text and "wakeline agent thought" in text
