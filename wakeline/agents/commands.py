"""The agent's argv for one turn: the configured command, plus what its output mode needs.

For `output = "claude"` Claude Code must print its stream (`-p --output-format
stream-json --verbose`); for `output = "codex"` Codex must run `exec --json`. A command
that lacks those gets them, so a config can name just the CLI. Continuity adds the CLI's
own resume arguments: `--resume ID` for Claude; `resume ID` for Codex, placed before the
final `-` (the prompt on stdin) so every option before it (the sandbox mode: `codex exec
resume` takes no `-s` of its own and would run read-only) still applies. A planning turn
runs the CLI's own read-only mode (`--permission-mode plan`, `-s read-only`) in place of
whatever the command allows.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

CLAUDE_STREAM = ("--output-format", "stream-json")


def agent_argv(command: Sequence[str], output: str, resume_id: str | None = None, *,
               read_only: bool = False) -> list[str]:
    """The argv of one turn; a leading `python` is wakeline's own interpreter. `read_only`
    (a planning turn): the CLI's own read-only mode, whatever the command allows."""
    argv = list(command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    if output == "claude":
        argv = _claude(_claude_read_only(argv) if read_only else argv, resume_id)
    elif output == "codex":
        argv = _codex(_codex_read_only(argv) if read_only else argv, resume_id)
    return argv


def _without(argv: list[str], flags: set[str], valued: set[str]) -> list[str]:
    """`argv` without `flags` and without `valued` options and their values."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in valued:
            skip = True
            continue
        if arg in flags or any(arg.startswith(v + "=") for v in valued):
            continue
        out.append(arg)
    return out


def _claude_read_only(argv: list[str]) -> list[str]:
    argv = _without(argv, {"--dangerously-skip-permissions", "--allow-dangerously-skip-permissions"},
                    {"--permission-mode"})
    return [*argv, "--permission-mode", "plan"]


def _codex_read_only(argv: list[str]) -> list[str]:
    argv = _without(_without_sandbox_overrides(argv),
                    {"--full-auto", "--dangerously-bypass-approvals-and-sandbox", "--yolo"},
                    {"-s", "--sandbox"})
    if "exec" not in argv:
        argv.insert(1 if argv else 0, "exec")
    at = argv.index("exec") + 1
    argv[at:at] = ["-s", "read-only"]
    return argv


def _without_sandbox_overrides(argv: list[str]) -> list[str]:
    """`argv` without Codex config overrides of its sandbox (`-c sandbox_mode=...`), which
    could otherwise widen a planning turn's read-only sandbox again."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = argv[i + 1] if arg in ("-c", "--config") and i + 1 < len(argv) else None
        inline = arg.split("=", 1)[1] if arg.startswith("--config=") else None
        setting = value if value is not None else inline
        if setting is not None and setting.lstrip().startswith("sandbox"):
            i += 2 if value is not None else 1
            continue
        out.append(arg)
        i += 1
    return out


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
