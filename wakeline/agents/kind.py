"""What wakeline needs to know of one kind of agent CLI, and the helpers its argv rules share.

A kind is named by the config's `output` (`text`, `claude`, `codex`). It says how a turn's
stdout is read (a `StreamReader`, or the plain exit-code protocol), what the configured
command needs to print that output, how the CLI resumes its own session, how it runs
read-only (a planning turn), and what it needs to run confined inside wakeline's sandbox.
Each kind is one module of this package; `agents.registry` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wakeline.agents.streams import StreamReader


@dataclass(frozen=True)
class AgentKind:
    """One kind of agent CLI.

    Attributes:
        output: its name, the config's `output` value.
        reader: a fresh reader of one turn's stdout lines; None for the plain protocol, whose
            answer is stdout and whose kind is the exit code.
        output_args: the configured command with what this output needs added.
        resume_args: the argv with the CLI's own resume arguments for a session id.
        read_only_args: the argv in the CLI's own read-only mode, whatever it allowed.
        confined_args: the argv as it must run inside wakeline's sandbox (its own inner
            sandbox told to nest).
    """

    output: str
    reader: Callable[[], StreamReader] | None = None
    output_args: Callable[[list[str]], list[str]] = list
    resume_args: Callable[[list[str], str], list[str]] = lambda argv, session: argv
    read_only_args: Callable[[list[str]], list[str]] = list
    confined_args: Callable[[list[str]], list[str]] = list


def without(argv: Sequence[str], flags: set[str], valued: set[str]) -> list[str]:
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
