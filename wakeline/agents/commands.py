"""The agent's argv for one turn: the configured command, plus what its output mode needs.

For `output = "claude"` Claude Code must print its stream (`-p --output-format
stream-json --verbose`); for `output = "codex"` Codex must run `exec --json`. A command
that lacks those gets them, so a config can name just the CLI. Continuity adds the CLI's
own resume arguments: `--resume ID` for Claude; `resume ID` for Codex, placed before the
final `-` (the prompt on stdin) so every option before it (the sandbox mode: `codex exec
resume` takes no `-s` of its own and would run read-only) still applies.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

CLAUDE_STREAM = ("--output-format", "stream-json")


def agent_argv(command: Sequence[str], output: str, resume_id: str | None = None) -> list[str]:
    """The argv of one turn; a leading `python` is wakeline's own interpreter."""
    argv = list(command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    if output == "claude":
        argv = _claude(argv, resume_id)
    elif output == "codex":
        argv = _codex(argv, resume_id)
    return argv


def _claude(argv: list[str], resume_id: str | None) -> list[str]:
    if "-p" not in argv and "--print" not in argv:
        argv.append("-p")
    if "--output-format" not in argv:
        argv += CLAUDE_STREAM
    if "--verbose" not in argv:
        argv.append("--verbose")  # stream-json in print mode needs it
    if resume_id:
        argv += ["--resume", resume_id]
    return argv


def _codex(argv: list[str], resume_id: str | None) -> list[str]:
    if "exec" not in argv:
        argv.insert(1 if argv else 0, "exec")
    if "--json" not in argv:
        argv.insert(argv.index("exec") + 1, "--json")
    if resume_id:
        at = len(argv) - 1 if argv[-1] == "-" else len(argv)
        argv[at:at] = ["resume", resume_id]
    return argv
