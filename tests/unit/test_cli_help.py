"""Every CLI command explains itself (`--help`) and can print JSON (`--json`)."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from wakeline.cli import cli

# `serve` runs until stopped; `linear graphql` always prints Linear's JSON.
NO_JSON = {"serve", "linear graphql"}


def commands(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        path = (*prefix, name)
        if isinstance(command, click.Group):
            yield path  # a group that also acts on its own (`inbox`, `effects`, ...)
            yield from commands(command, path)
        else:
            yield path


ALL = sorted(commands())


@pytest.mark.parametrize("path", ALL, ids=[" ".join(p) for p in ALL])
def test_each_command_has_help_and_json(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    summary = result.output.split("\n\n")[1].strip()
    assert len(summary) > 15, f"{' '.join(path)} has no description"
    command = cli
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    if isinstance(command, click.Group) and not command.invoke_without_command:
        return
    if " ".join(path) not in NO_JSON:
        assert "--json" in result.output, f"{' '.join(path)} cannot print JSON"


def test_a_usage_error_says_what_to_do() -> None:
    result = CliRunner().invoke(cli, ["journal", "--older", "1", "--newer", "2"])
    assert result.exit_code == 2 and "--older and --newer cannot be combined" in result.output
