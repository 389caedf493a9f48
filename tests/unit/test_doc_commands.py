"""Every `wakeline` command the README, the docs and the examples show is a real command.

Each one is parsed by the CLI itself (so a renamed option or a missing argument fails
here), and every one that only reads is run against a running service.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from tests.conftest import OPERATOR_TOKEN
from wakeline.cli import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?$(.*?)^```", re.M | re.S)
# `wakeline ...` at the start of a line (after a `$ ` prompt), or `.../bin/wakeline ...`.
CALL = re.compile(r"(?:^(?:\$\s+)?|\S*/bin/)wakeline\s+(?P<args>[^#\n]*)")
PLACEHOLDERS = {"ID": "cv_0000000000000000", "CURSOR": "1", "SEQ": "1", "7c0b...": "effect-1",
                "ISSUE_ID": "issue-1", "BODY": "hello"}
# Commands that change something, start something, or never end: parsed, not run.
NOT_RUN = ("serve", "init", "replay", "demo", "linear", "inbox ack", "effects reconcile-absent",
           "follow on", "follow off", "conversations stop", "conversations reset",
           "conversations retry", "conversations abandon", "journal --follow")


def documented() -> Iterator[tuple[str, list[str]]]:
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text(encoding="utf-8")):
            for line in block.splitlines():
                for match in CALL.finditer(line):
                    args = _args(match["args"])
                    if args and (args[0].startswith("-") or args[0] in cli.commands):
                        yield f"{doc.relative_to(ROOT)}: wakeline {' '.join(args)}", args


def _args(text: str) -> list[str]:
    try:
        words = shlex.split(text.split(" &")[0].strip().rstrip("\\"))
    except ValueError:
        return []
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word == "--config":  # the service under test is found by its URL instead
            skip = True
            continue
        if word.startswith("[") and word.endswith("]"):  # `[--json]`, `[on|off]`: an example
            word = word[1:-1].split("|")[0]
        out.append(PLACEHOLDERS.get(word, word))
    return out


CASES = dict(documented())


def parse(args: list[str]) -> None:
    """Let click parse the whole line, down to the last subcommand."""
    ctx = cli.make_context("wakeline", list(args), resilient_parsing=False)
    command: click.Command = cli
    rest = _unparsed(ctx)
    while isinstance(command, click.Group) and rest:
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None, name
        ctx = sub.make_context(name or "", list(rest), parent=ctx)
        command, rest = sub, _unparsed(ctx)


def _unparsed(ctx: click.Context) -> list[str]:
    # A group keeps its subcommand's words apart from `args` (click 8.2 names it privately).
    return [*getattr(ctx, "_protected_args", []), *ctx.args]


def test_the_docs_show_commands() -> None:
    assert len(CASES) >= 30
    assert {args[0] for args in CASES.values()} >= {"status", "doctor", "journal", "inbox", "demo"}


@pytest.mark.parametrize("args", list(CASES.values()), ids=list(CASES))
def test_each_documented_command_parses(args: list[str], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    if args[0] == "--version":
        return
    monkeypatch.chdir(tmp_path)
    for arg in args:
        if arg.endswith(".jsonl"):  # `replay` checks that its file exists
            (tmp_path / arg).write_text("")
    parse(args)


@pytest.mark.parametrize("args", [a for a in CASES.values()
                                  if not " ".join(a).startswith(NOT_RUN) and a[0] != "--version"],
                         ids=[k for k, a in CASES.items()
                              if not " ".join(a).startswith(NOT_RUN) and a[0] != "--version"])
def test_each_reading_command_runs_against_a_service(service: Any, args: list[str]) -> None:
    env = {"WAKELINE_API_URL": service.operator.url, "WAKELINE_TOKEN": OPERATOR_TOKEN,
           "WAKELINE_CONFIG": None}
    result = CliRunner().invoke(cli, args, env=env)
    # 0, or 1 for what the example invites (no such conversation here, a doctor check that
    # fails in a test sandbox): never a usage error (2) or an unreachable service (3).
    assert result.exit_code in (0, 1), (args, result.output)
