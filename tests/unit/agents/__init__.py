"""Tests of the agent stream readers, with helpers to feed them whole runs.

`read_all` runs a reader over a list of stdout lines, so a recorded fixture file under
`tests/fixtures/agent-streams/` is checked with
`read_all(reader_for("claude"), path.read_text().splitlines())`.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

from wakeline.agents.streams import ProgressEvent, StreamAnswer, StreamReader


def read_all(reader: StreamReader, lines: Iterable[str], exit_code: int | None = 0,
             stderr_tail: str = "") -> tuple[list[ProgressEvent], StreamAnswer]:
    """Feeds every line, then finishes: all the events in order, and the answer."""
    events: list[ProgressEvent] = []
    for line in lines:
        events += reader.feed(line)
    return events, reader.finish(exit_code, stderr_tail)


def line(obj: Any) -> str:
    """One JSON line, as a CLI prints it."""
    return json.dumps(obj)


@contextmanager
def strictly() -> Iterator[None]:
    """Fails if a line reached a reader's last-resort handler: the fuzz tests would pass
    anyway, since that handler counts the line as skipped, but it means a reader bug."""
    caught: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = caught.append  # type: ignore[method-assign]
    logger = logging.getLogger("wakeline.agents.streams")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert not caught, caught[0].exc_info
