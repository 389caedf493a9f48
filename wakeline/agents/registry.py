"""Every kind of agent CLI wakeline knows, by the config's `output` name.

Adding a CLI is one module: its `KIND` (`agents.kind.AgentKind`), listed here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from wakeline.agents import claude, codex, text
from wakeline.agents.kind import AgentKind
from wakeline.agents.streams import StreamReader, TextReader

KINDS: dict[str, AgentKind] = {m.KIND.output: m.KIND for m in (text, claude, codex)}


def names() -> tuple[str, ...]:
    """The `output` values a config may name."""
    return tuple(KINDS)


def kind_of(output: str) -> AgentKind:
    """The kind named `output`.

    Raises:
        ValueError: no kind has that name.
    """
    try:
        return KINDS[output]
    except KeyError:
        raise ValueError(f"unknown agent output {output!r}: expected one of "
                         f"{', '.join(KINDS)}") from None


def reader_for(output: str) -> StreamReader:
    """A fresh reader of one turn's stdout for this output (the plain one for `text`)."""
    make = kind_of(output).reader
    return make() if make is not None else TextReader()


def agent_argv(command: Sequence[str], output: str, resume_id: str | None = None, *,
               read_only: bool = False) -> list[str]:
    """The argv of one turn: the configured command with what its output needs, in the CLI's
    read-only mode for a planning turn, resuming the CLI's own session when there is one. A
    leading `python` is wakeline's own interpreter."""
    argv = list(command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    kind = kind_of(output)
    argv = kind.output_args(kind.read_only_args(argv) if read_only else argv)
    return kind.resume_args(argv, resume_id) if resume_id else argv
