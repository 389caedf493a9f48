"""Reads Claude Code's `claude -p --output-format stream-json --verbose` lines.

One `system`/`init` line first (the session id), then one `assistant` line per content block
(`text` or `tool_use`), `user` lines carrying `tool_result` blocks, and a `result` line last
(the answer). The task tools (`TaskCreate`/`TaskUpdate`, or `TodoWrite` in older versions)
become the session's plan instead of actions.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from wakeline.agents.kind import AgentKind, without
from wakeline.agents.streams import (
    JsonLinesReader,
    PlanStep,
    PlanUpdate,
    ProgressEvent,
    StreamAnswer,
    ToolFinished,
    ToolStarted,
    classify,
    clip,
    exit_error,
)

# The input field that best names what a tool call is about; other tools show their first
# string input.
_MAIN_PARAMETER = MappingProxyType({
    "Bash": ("command",),
    "Read": ("file_path",),
    "Write": ("file_path",),
    "Edit": ("file_path",),
    "MultiEdit": ("file_path",),
    "NotebookEdit": ("notebook_path", "file_path"),
    "Grep": ("pattern",),
    "Glob": ("pattern",),
    "WebFetch": ("url",),
    "WebSearch": ("query",),
    "Task": ("description",),
    "Agent": ("description",),
})
_PLAN_TOOLS = frozenset({"TaskCreate", "TaskUpdate", "TodoWrite"})
_TASK_STATUSES = MappingProxyType({
    "pending": "pending", "in_progress": "inProgress", "completed": "completed",
})
# `system` subtypes that carry nothing for Linear; a subtype not listed is counted as skipped,
# so a newer CLI's additions show in the skipped-lines metric.
_QUIET_SYSTEM = frozenset({
    "api_retry", "compact_boundary", "status", "hook_started", "hook_progress",
    "hook_response", "local_command_output", "files_persisted", "elicitation_complete",
    "task_started", "task_progress", "task_notification", "informational",
})
# Top-level line types that carry nothing for Linear (partial messages, auth, rate limits).
_QUIET_TYPES = frozenset({"stream_event", "tool_progress", "auth_status", "rate_limit_event"})
_TASK_NUMBER = re.compile(r"Task #(\d+)")
# Claude's own words when `--resume` names a session it does not have (README: exit 1, this
# on stderr, and a `result` line with subtype `error_during_execution`).
_UNKNOWN_SESSION = "No conversation found with session ID"


class ClaudeReader(JsonLinesReader):
    """Reads one Claude Code run: tool calls, thoughts, the task plan, links and the answer."""

    def __init__(self) -> None:
        """Starts a reader for one run."""
        super().__init__()
        self._calls: dict[str, tuple[str, str, dict[str, Any]]] = {}
        self._plan: dict[str, PlanStep] = {}
        self._tasks_created = 0
        self._result: dict[str, Any] | None = None

    def _read(self, obj: dict[str, Any]) -> list[ProgressEvent] | None:
        kind = obj["type"]
        if kind == "system":
            subtype = obj.get("subtype")
            if subtype == "init":
                return self._session(obj.get("session_id"))
            return [] if isinstance(subtype, str) and subtype in _QUIET_SYSTEM else None
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "user":
            return self._user(obj)
        if kind == "result":
            self._result = obj
            return []
        return [] if kind in _QUIET_TYPES else None

    def _assistant(self, obj: dict[str, Any]) -> list[ProgressEvent] | None:
        blocks = _content(obj)
        if blocks is None:
            return None
        # A subagent's own text is not this run's answer; its result comes back as the
        # result of the Task call that started it.
        subagent = isinstance(obj.get("parent_tool_use_id"), str)
        events: list[ProgressEvent] = []
        for block in blocks:
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                if not subagent:
                    events += self._say(block["text"])
            elif block.get("type") == "tool_use":
                events += self._tool_use(block)
        return events

    def _tool_use(self, block: dict[str, Any]) -> list[ProgressEvent]:
        call_id, tool = block.get("id"), block.get("name")
        if not isinstance(call_id, str) or not isinstance(tool, str):
            return []
        raw_input = block.get("input")
        tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
        events = self._release()  # the model went on working, so its last text was a thought
        if tool == "TodoWrite":
            return events + self._todo_write(tool_input)
        parameter = clip(_main_parameter(tool, tool_input))
        self._calls[call_id] = (tool, parameter, tool_input)
        if tool in _PLAN_TOOLS:
            return events  # applied when its result confirms it
        return events + [ToolStarted(call_id, tool, parameter)]

    def _user(self, obj: dict[str, Any]) -> list[ProgressEvent] | None:
        blocks = _content(obj)
        if blocks is None:
            return None
        results = [block for block in blocks if block.get("type") == "tool_result"]
        # The structured result belongs to the line, so it is only unambiguous for one block.
        structured = obj.get("tool_use_result") if len(results) == 1 else None
        events: list[ProgressEvent] = []
        for block in results:
            events += self._tool_result(block, structured)
        return events

    def _tool_result(self, block: dict[str, Any], structured: object) -> list[ProgressEvent]:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or call_id not in self._calls:
            return []  # a result for a call never seen cannot be named
        tool, parameter, tool_input = self._calls.pop(call_id)
        text = _result_text(block.get("content"))
        is_error = block.get("is_error") is True
        if tool == "TaskCreate":
            return [] if is_error else self._task_created(tool_input, text, structured)
        if tool == "TaskUpdate":
            return [] if is_error else self._task_updated(tool_input)
        events: list[ProgressEvent] = [ToolFinished(call_id, tool, parameter, clip(text), is_error)]
        return events + self._links_in(text)

    def _task_created(self, tool_input: dict[str, Any], text: str,
                      structured: object) -> list[ProgressEvent]:
        self._tasks_created += 1
        subject = tool_input.get("subject")
        if not isinstance(subject, str) or not subject.strip():
            return []
        task_id = _created_task_id(structured)
        if task_id is None:
            number = _TASK_NUMBER.search(text)
            task_id = number.group(1) if number else str(self._tasks_created)
        return self._replace_plan({**self._plan, task_id: PlanStep(subject.strip(), "pending")})

    def _task_updated(self, tool_input: dict[str, Any]) -> list[ProgressEvent]:
        task_id = _task_id(tool_input.get("taskId"))
        if task_id is None:
            return []
        status, subject = tool_input.get("status"), _text(tool_input.get("subject"))
        if status == "deleted":
            return self._replace_plan({k: v for k, v in self._plan.items() if k != task_id})
        step = self._plan.get(task_id)
        if step is None:
            # A task from an earlier turn: it can only be shown if the update names it.
            if not subject:
                return []
            step = PlanStep(subject, "pending")
        new = PlanStep(subject or step.content, _plan_status(status, step.status))
        return self._replace_plan({**self._plan, task_id: new})

    def _todo_write(self, tool_input: dict[str, Any]) -> list[ProgressEvent]:
        todos = tool_input.get("todos")
        if not isinstance(todos, list):
            return []
        steps = [PlanStep(_text(todo["content"]), _plan_status(todo.get("status"), "pending"))
                 for todo in todos if isinstance(todo, dict) and _text(todo.get("content"))]
        return self._replace_plan({f"todo-{index}": step for index, step in enumerate(steps)})

    def _replace_plan(self, plan: dict[str, PlanStep]) -> list[ProgressEvent]:
        """Takes the new plan; the whole plan is an event only if it changed."""
        before = tuple(self._plan.values())
        self._plan = plan
        after = tuple(plan.values())
        return [] if after == before else [PlanUpdate(after)]

    def finish(self, exit_code: int | None, stderr_tail: str = "") -> StreamAnswer:
        """The `result` line's answer; without one, the exit code decides."""
        result = self._result or {}
        said = result.get("result")
        text = said if isinstance(said, str) else ""
        errors = _strings(result.get("errors"))
        self.resume_refused = exit_code != 0 and (
            any(_UNKNOWN_SESSION in words for words in (stderr_tail, text, *errors))
            # Refused before it started: no init line, so no session of its own.
            or (result.get("subtype") == "error_during_execution" and self.session_id is None)
        )
        if self._result is not None:
            subtype = result.get("subtype")
            failed = result.get("is_error") is True or (
                isinstance(subtype, str) and subtype.startswith("error"))
            if failed and not text.strip():
                text = "\n".join(errors) or exit_error(exit_code, stderr_tail)
            return classify(text, failed)
        if exit_code != 0 or self._last_text is None:
            return StreamAnswer("error", exit_error(exit_code, stderr_tail))
        return classify(self._last_text, False)


def _content(obj: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The content blocks of an `assistant` or `user` line, or None if it is not shaped so."""
    message = obj.get("message")
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return []  # a plain user message: nothing to show
    if not isinstance(content, list):
        return None
    return [block for block in content if isinstance(block, dict)]


def _main_parameter(tool: str, tool_input: dict[str, Any]) -> str:
    for key in _MAIN_PARAMETER.get(tool, ()):
        value = tool_input.get(key)
        if isinstance(value, str):
            return value
    return next((value for value in tool_input.values() if isinstance(value, str)), "")


def _result_text(content: object) -> str:
    """A tool result's text: a string, or the text blocks of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block["text"] for block in content
                         if isinstance(block, dict) and isinstance(block.get("text"), str))
    return ""


def _created_task_id(structured: object) -> str | None:
    """The id in `TaskCreate`'s structured result (`{"task": {"id": ...}}`), if any."""
    task = structured.get("task") if isinstance(structured, dict) else None
    return _task_id(task.get("id")) if isinstance(task, dict) else None


def _task_id(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return str(value)


def _plan_status(status: object, default: str) -> str:
    """A Claude task status as a plan status (`in_progress` is `inProgress`)."""
    return _TASK_STATUSES.get(status, default) if isinstance(status, str) else default


def _text(value: object) -> str:
    """A string field, stripped; anything else is empty."""
    return value.strip() if isinstance(value, str) else ""


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


# --- how Claude Code runs ------------------------------------------------------------------
# `-p --output-format stream-json --verbose` prints the stream; `--resume ID` continues its
# session; `--permission-mode plan` is its read-only mode; inside wakeline's sandbox its own
# (bubblewrap) sandbox must nest, which its `enableWeakerNestedSandbox` setting allows.

CLAUDE_STREAM = ("--output-format", "stream-json")
NESTED_SETTINGS = '{"sandbox": {"enableWeakerNestedSandbox": true}}'


def _output_args(argv: list[str]) -> list[str]:
    if "-p" not in argv and "--print" not in argv:
        argv.append("-p")
    if "--output-format" not in argv:
        argv += CLAUDE_STREAM
    if "--verbose" not in argv:
        argv.append("--verbose")  # stream-json in print mode needs it
    return argv


def _resume_args(argv: list[str], session: str) -> list[str]:
    return [*argv, "--resume", session]


def _read_only_args(argv: list[str]) -> list[str]:
    argv = without(argv, {"--dangerously-skip-permissions",
                          "--allow-dangerously-skip-permissions"}, {"--permission-mode"})
    return [*argv, "--permission-mode", "plan"]


def _confined_args(argv: list[str]) -> list[str]:
    return argv if "--settings" in argv else [*argv, "--settings", NESTED_SETTINGS]


KIND = AgentKind("claude", ClaudeReader, _output_args, _resume_args, _read_only_args,
                 _confined_args)
