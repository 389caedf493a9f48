"""Reads Codex's `codex exec --json` lines.

`thread.started` first (the thread id), `turn.started`, then `item.started` / `item.updated`
/ `item.completed` for each item (commands, file changes, MCP and web calls, the to-do list,
agent messages, reasoning), and `turn.completed` or `turn.failed` last. `error` lines may
come in between: Codex prints them while it reconnects, so one only counts when no
`turn.completed` follows.
"""

from __future__ import annotations

import json
from typing import Any, Callable

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

_ITEM_EVENTS = frozenset({"item.started", "item.updated", "item.completed"})
# Top-level events and item types that carry nothing for Linear: plan-mode text deltas, an
# input request (refused by exec itself), reasoning summaries, proposed plans, sub-agent
# calls, and error items (non-fatal notices such as an unknown model name).
_QUIET_EVENTS = frozenset({"turn.started", "item.plan.delta", "request_user_input"})
_QUIET_ITEMS = frozenset({"reasoning", "plan", "collab_tool_call", "error"})
# Assumption (the recordings hold no refused resume): a Codex that cannot find the thread
# named by `exec resume ID` exits non-zero before `thread.started`, saying so on stderr
# ("no rollout found for thread id ..." from the app-server based exec, "No saved session
# found with ID ..." from the interactive resume). Older builds instead started a fresh
# thread; that run did answer, and its new thread id arrives as SessionStarted, so it is
# not a refusal.
_UNKNOWN_THREAD = ("no rollout found for thread id", "no saved session found with id",
                   "thread not found")


class CodexReader(JsonLinesReader):
    """Reads one Codex run: commands, edits, MCP and web calls, the to-do list and the answer."""

    def __init__(self) -> None:
        """Starts a reader for one run."""
        super().__init__()
        self._started: dict[str, tuple[str, str]] = {}
        self._finished: set[str] = set()
        self._plan: tuple[PlanStep, ...] = ()
        self._turn_completed = False
        self._failure: str | None = None
        self._pending_error: str | None = None

    def _read(self, obj: dict[str, Any]) -> list[ProgressEvent] | None:
        kind = obj["type"]
        if kind == "thread.started":
            return self._session(obj.get("thread_id"))
        if kind in _ITEM_EVENTS:
            item = obj.get("item")
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                return None
            return self._item(kind.removeprefix("item."), item)
        if kind == "turn.completed":
            # The turn got through: any error before it was a retry that succeeded.
            self._turn_completed, self._pending_error = True, None
            return []
        if kind == "turn.failed":
            error = obj.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            self._failure = message if isinstance(message, str) and message.strip() else (
                self._pending_error or "The turn failed.")
            return []
        if kind == "error":
            message = obj.get("message")
            self._pending_error = message if isinstance(message, str) and message.strip() else (
                "The agent reported an error.")
            return []
        return [] if kind in _QUIET_EVENTS else None

    def _item(self, phase: str, item: dict[str, Any]) -> list[ProgressEvent] | None:
        kind, item_id = item["type"], item.get("id")
        if kind == "agent_message":
            text = item.get("text")
            # Only the completed message is whole; earlier phases would repeat it.
            return self._say(text) if phase == "completed" and isinstance(text, str) else []
        if kind == "todo_list":
            return self._todo_list(item.get("items"))
        if kind in _QUIET_ITEMS:
            return []
        if not isinstance(item_id, str):
            return None
        if kind == "command_execution":
            return self._call(phase, item_id, "shell", _string(item.get("command")),
                              lambda: _command_result(item))
        if kind == "file_change":
            changes = _changes(item.get("changes"))
            paths = ", ".join(path for _, path in changes)
            result = "\n".join(f"{change} {path}" for change, path in changes)
            return self._call(phase, item_id, "edit", paths,
                              lambda: (result, item.get("status") == "failed"))
        if kind == "mcp_tool_call":
            tool = f"{_string(item.get('server'))}.{_string(item.get('tool'))}"
            return self._call(phase, item_id, tool, _arguments(item.get("arguments")),
                              lambda: _mcp_result(item))
        if kind == "web_search":
            return self._call(phase, item_id, "web_search", _string(item.get("query")),
                              lambda: ("", False))
        return None

    def _call(self, phase: str, item_id: str, tool: str, parameter: str,
              outcome: Callable[[], tuple[str, bool]]) -> list[ProgressEvent]:
        """One tool-like item: an action when it starts, its result when it completes.

        An item Codex only reports once completed (a file change, an older web search) gets
        both. `outcome` gives `(result, is_error)` and is only called on completion.
        """
        if item_id in self._finished or (phase == "updated" and item_id not in self._started):
            return []
        events: list[ProgressEvent] = []
        if item_id not in self._started:
            # The model went on working, so its last text was a thought.
            events += self._release()
            events.append(ToolStarted(item_id, tool, clip(parameter)))
            self._started[item_id] = (tool, clip(parameter))
        if phase != "completed":
            return events
        tool, started_parameter = self._started.pop(item_id)
        self._finished.add(item_id)  # a repeated completion must not act again
        result, is_error = outcome()
        events.append(ToolFinished(item_id, tool, clip(parameter) or started_parameter,
                                   clip(result), is_error))
        return events + self._links_in(result)

    def _todo_list(self, items: object) -> list[ProgressEvent] | None:
        if not isinstance(items, list):
            return None
        entries = [(item["text"].strip(), item.get("completed") is True) for item in items
                   if isinstance(item, dict) and isinstance(item.get("text"), str)
                   and item["text"].strip()]
        steps: list[PlanStep] = []
        open_seen = False
        for text, completed in entries:
            # The first open item is the one being worked on; later ones wait.
            status = "completed" if completed else "pending" if open_seen else "inProgress"
            open_seen = open_seen or not completed
            steps.append(PlanStep(text, status))
        if tuple(steps) == self._plan:
            return []
        self._plan = tuple(steps)
        return [PlanUpdate(self._plan)]

    def finish(self, exit_code: int | None, stderr_tail: str = "") -> StreamAnswer:
        """The last agent message, unless the turn failed or ended on an error."""
        lowered = stderr_tail.lower()
        self.resume_refused = (exit_code != 0 and self.session_id is None
                               and any(phrase in lowered for phrase in _UNKNOWN_THREAD))
        if self._failure is not None:
            return StreamAnswer("error", self._failure)
        if self._pending_error is not None:
            return StreamAnswer("error", self._pending_error)
        if self._turn_completed:
            return classify(self._last_text or "", False)
        if exit_code != 0 or self._last_text is None:
            return StreamAnswer("error", exit_error(exit_code, stderr_tail))
        return classify(self._last_text, False)


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


def _command_result(item: dict[str, Any]) -> tuple[str, bool]:
    exit_code = item.get("exit_code")
    failed = (isinstance(exit_code, int) and exit_code != 0) or item.get("status") in (
        "failed", "declined")
    return _string(item.get("aggregated_output")), failed


def _changes(changes: object) -> list[tuple[str, str]]:
    """A file change's `(kind, path)` pairs: `("update", "a.py")`."""
    if not isinstance(changes, list):
        return []
    return [(_string(change.get("kind")) or "change", change["path"]) for change in changes
            if isinstance(change, dict) and isinstance(change.get("path"), str)]


def _arguments(arguments: object) -> str:
    """An MCP call's arguments as one line of text."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))


def _mcp_result(item: dict[str, Any]) -> tuple[str, bool]:
    error = item.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"], True
    result = item.get("result")
    blocks = result.get("content") if isinstance(result, dict) else None
    text = "\n".join(block["text"] for block in (blocks if isinstance(blocks, list) else [])
                     if isinstance(block, dict) and isinstance(block.get("text"), str))
    return text, item.get("status") == "failed"


# --- how Codex runs --------------------------------------------------------------------------
# `exec --json` prints the stream; `resume ID` goes before the final `-` (the prompt on stdin)
# so every option before it (the sandbox mode: `codex exec resume` takes no `-s` of its own
# and would run read-only) still applies; `-s read-only` is its read-only mode, with any
# `-c sandbox...` override that could widen it again removed.


def _output_args(argv: list[str]) -> list[str]:
    if "exec" not in argv:
        argv.insert(1 if argv else 0, "exec")
    if "--json" not in argv:
        argv.insert(argv.index("exec") + 1, "--json")
    return argv


def _resume_args(argv: list[str], session: str) -> list[str]:
    at = len(argv) - 1 if argv and argv[-1] == "-" else len(argv)
    return [*argv[:at], "resume", session, *argv[at:]]


def _read_only_args(argv: list[str]) -> list[str]:
    argv = without(_without_sandbox_overrides(argv),
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




KIND = AgentKind("codex", CodexReader, _output_args, _resume_args, _read_only_args)
