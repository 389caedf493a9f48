"""What an agent CLI prints, read as wakeline's progress events and final answer.

A stream reader is fed the agent's stdout one line at a time while it runs and turns each
line into progress events (tool calls, thoughts, plans, links, the CLI's own session id);
once the process has ended, `finish` gives the turn's answer. Readers are pure: no I/O, no
clock, no Linear. This module holds the shared vocabulary, the plain `text` protocol and the
machinery the JSON-lines readers (`claude.py`, `codex.py`) share.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

logger = logging.getLogger(__name__)

# A tool result kept by a reader is cut to this many characters; the caller trims further
# (500 for Linear) and scrubs secrets, but must not have to hold a megabyte of build log.
RESULT_LIMIT_CHARS = 4_000
# A line longer than this is skipped unparsed: decoding it would multiply its memory, and
# nothing a reader keeps (a cut result, a session id, an answer) comes from such a line.
MAX_LINE_CHARS = 4_000_000
PLAN_STATUSES = frozenset({"pending", "inProgress", "completed", "canceled"})
PULL_REQUEST_LABEL = "Pull request"
QUESTION_PREFIX = "QUESTION:"

_SEGMENT = r"[A-Za-z0-9_.~-]+"
_HOST = r"https?://[A-Za-z0-9.-]+(?::\d+)?"
# GitHub (and GitHub Enterprise) /OWNER/REPO/pull/N, GitLab /GROUP.../-/merge_requests/N,
# Bitbucket Cloud /OWNER/REPO/pull-requests/N and Server /projects/P/repos/R/pull-requests/N.
# The match ends at the number, so trailing punctuation, "/files" or "#discussion" stay out;
# the lookarounds refuse a URL glued to a word or a longer number.
_PULL_REQUEST = re.compile(
    rf"(?<![\w/]){_HOST}/(?:"
    rf"{_SEGMENT}/{_SEGMENT}/pull/\d+"
    rf"|(?:{_SEGMENT}/)+-/merge_requests/\d+"
    rf"|(?:{_SEGMENT}/)+pull-requests/\d+"
    rf")(?![\w-])"
)


@dataclass(frozen=True)
class ToolStarted:
    """A tool call begins (an ephemeral Linear `action`)."""

    call_id: str
    tool: str
    parameter: str


@dataclass(frozen=True)
class ToolFinished:
    """A tool call's result; `result` holds at most `RESULT_LIMIT_CHARS` characters."""

    call_id: str
    tool: str
    parameter: str
    result: str
    is_error: bool


@dataclass(frozen=True)
class Thought:
    """Intermediate assistant text: text that turned out not to be the last."""

    text: str


@dataclass(frozen=True)
class PlanStep:
    """One step of the agent's plan; `status` is one of `PLAN_STATUSES`."""

    content: str
    status: str


@dataclass(frozen=True)
class PlanUpdate:
    """The agent's whole plan, as it stands after a change."""

    steps: tuple[PlanStep, ...]


@dataclass(frozen=True)
class LinkFound:
    """A link worth showing on the session (a pull or merge request URL)."""

    label: str
    url: str


@dataclass(frozen=True)
class SessionStarted:
    """The CLI's own session id, which the next turn resumes."""

    id: str


ProgressEvent: TypeAlias = (
    ToolStarted | ToolFinished | Thought | PlanUpdate | LinkFound | SessionStarted
)


@dataclass(frozen=True)
class StreamAnswer:
    """A turn's final answer: `kind` is `response`, `error` or `elicitation`."""

    kind: str
    text: str


def classify(text: str, failed: bool) -> StreamAnswer:
    """Tells a stream agent's answer apart: an error, a question for the human, or a response.

    Args:
        text: The answer as the agent gave it.
        failed: True when the CLI reported the run as failed.

    Returns:
        An error when `failed`; an elicitation when the last non-empty line starts with
        `QUESTION:` (that prefix removed); else a response.
    """
    if failed:
        return StreamAnswer("error", text)
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        if not lines[index].strip():
            continue
        if lines[index].lstrip().startswith(QUESTION_PREFIX):
            lines[index] = lines[index].lstrip()[len(QUESTION_PREFIX):].strip()
            return StreamAnswer("elicitation", "\n".join(lines).strip())
        break
    return StreamAnswer("response", text)


def pull_request_urls(text: str) -> list[str]:
    """Finds the pull / merge request URLs in a text, in order, each once."""
    urls: list[str] = []
    for match in _PULL_REQUEST.finditer(text):
        if match.group(0) not in urls:
            urls.append(match.group(0))
    return urls


def clip(text: str, limit: int = RESULT_LIMIT_CHARS) -> str:
    """Keeps the first `limit` characters of a text."""
    return text if len(text) <= limit else text[:limit]


def exit_error(exit_code: int | None, stderr_tail: str) -> str:
    """Explains a run that ended without an answer, from its stderr or its exit code."""
    if stderr_tail.strip():
        return stderr_tail.strip()
    if exit_code is None:
        return "The agent was stopped before it answered."
    return f"The agent exited with code {exit_code} without an answer."


class StreamReader(Protocol):
    """Reads one run of an agent CLI: progress while it runs, the answer once it ended."""

    skipped: int
    session_id: str | None
    resume_refused: bool

    def feed(self, line: str) -> list[ProgressEvent]:
        """Reads one stdout line (without its newline); never raises."""
        ...

    def finish(self, exit_code: int | None, stderr_tail: str = "") -> StreamAnswer:
        """Gives the answer, once, after the process ended (`None`: killed by a signal)."""
        ...


class TextReader:
    """The plain protocol (`output = "text"`): stdout is the answer, the exit code its kind."""

    def __init__(self) -> None:
        """Starts with no lines."""
        self.skipped = 0
        self.session_id: str | None = None
        self.resume_refused = False
        self._lines: list[str] = []

    def feed(self, line: str) -> list[ProgressEvent]:
        """Keeps the line for the answer; plain output carries no progress."""
        if isinstance(line, str):
            self._lines.append(line)
        else:
            self.skipped += 1
        return []

    def finish(self, exit_code: int | None, stderr_tail: str = "") -> StreamAnswer:
        """Exit 0: a response; 2: a question; anything else (a signal too): an error."""
        text = "\n".join(self._lines)
        if exit_code == 0:
            return StreamAnswer("response", text)
        if exit_code == 2:
            return StreamAnswer("elicitation", text)
        # An error with nothing on stdout would say nothing to the human; stderr says why.
        return StreamAnswer("error", text if text.strip() else exit_error(exit_code, stderr_tail))


class JsonLinesReader:
    """What the JSON-lines readers share: parsing, counting, the held text and the links.

    Subclasses implement `_read(obj)` for one parsed JSON object whose `type` is a string;
    it returns the events, or None when the line has a shape the reader does not know.
    """

    def __init__(self) -> None:
        """Starts a reader for one run."""
        self.skipped = 0
        self.session_id: str | None = None
        self.resume_refused = False
        self._held: str | None = None
        self._last_text: str | None = None
        self._links: set[str] = set()

    def feed(self, line: str) -> list[ProgressEvent]:
        """Reads one stdout line; a line that is not a known JSON object is counted, never fatal."""
        if not isinstance(line, str) or len(line) > MAX_LINE_CHARS:
            self.skipped += 1
            return []
        if not line.strip():
            return []  # a blank line carries nothing and is not a malformed one
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            self.skipped += 1
            return []
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            self.skipped += 1
            return []
        try:
            events = self._read(obj)
        except Exception:  # noqa: BLE001 - a shape nobody foresaw must not end the turn
            logger.debug("stream line not understood", exc_info=True,
                         extra={"line_type": obj.get("type")})
            events = None
        if events is None:
            self.skipped += 1
            return []
        return events

    def _read(self, obj: dict[str, Any]) -> list[ProgressEvent] | None:
        raise NotImplementedError

    def _session(self, session_id: object) -> list[ProgressEvent] | None:
        """Records the CLI's session id the first time it is seen."""
        if not isinstance(session_id, str) or not session_id:
            return None
        if self.session_id is not None:
            return []
        self.session_id = session_id
        return [SessionStarted(session_id)]

    def _say(self, text: str) -> list[ProgressEvent]:
        """Holds new assistant text back: it may be the answer. The text it replaces was not."""
        stripped = text.strip()
        if not stripped:
            return []
        events = self._release()
        self._held = self._last_text = stripped
        return events + self._links_in(stripped)

    def _release(self) -> list[ProgressEvent]:
        """Something followed the held text, so it was a thought and not the answer."""
        held, self._held = self._held, None
        return [Thought(held)] if held else []

    def _links_in(self, text: str) -> list[ProgressEvent]:
        """The pull request URLs in a text that this run has not shown yet."""
        events: list[ProgressEvent] = []
        for url in pull_request_urls(text):
            if url not in self._links:
                self._links.add(url)
                events.append(LinkFound(PULL_REQUEST_LABEL, url))
        return events
