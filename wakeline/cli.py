"""The `wakeline` command line: the group and its commands, by audience.

Every command but `init`, `serve`, `replay` and `demo` talks to the running process
through the operator API. The commands live in `wakeline.commands`: `setup` (init,
serve, doctor, replay, demo), `operate` (status, follow, conversations, inbox, journal,
effects), `linear`, `turn` (`agent ...`, inside a turn) and `matrix` (`matrix ...`,
`approvals ...`); each registers itself on the group in `commands.base`.
"""

from __future__ import annotations

from wakeline.commands import linear, matrix, operate, setup, turn  # noqa: F401 (they register)
from wakeline.commands.base import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="wakeline")
