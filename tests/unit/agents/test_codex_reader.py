"""Codex's `exec --json` lines read as progress events and an answer.

The lines are small hand-made copies of the shapes Codex prints: `thread.started`,
`turn.started`, `item.*` events, then `turn.completed`, `turn.failed` or `error`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from tests.unit.agents import line, read_all, strictly
from wakeline.agents.codex import CodexReader
from wakeline.agents.streams import (
    LinkFound,
    PlanStep,
    PlanUpdate,
    SessionStarted,
    StreamAnswer,
    Thought,
    ToolFinished,
    ToolStarted,
)

EXAMPLES = int(os.environ.get("WAKELINE_FUZZ_EXAMPLES", "200"))
TID = "0199-7h4e4d"
STARTED = line({"type": "thread.started", "thread_id": TID})
TURN = line({"type": "turn.started"})
DONE = line({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 5}})


def item(phase: str, kind: str, item_id: str = "item_0", **fields: Any) -> str:
    return line({"type": f"item.{phase}", "item": {"id": item_id, "type": kind, **fields}})


def message(text: str, item_id: str = "msg") -> str:
    return item("completed", "agent_message", item_id, text=text)


def command(phase: str, item_id: str = "cmd", cmd: str = "bash -lc 'make'", output: str = "",
            exit_code: int | None = None, status: str = "in_progress") -> str:
    return item(phase, "command_execution", item_id, command=cmd, aggregated_output=output,
                exit_code=exit_code, status=status)


def todo(phase: str, *items: tuple[str, bool]) -> str:
    return item(phase, "todo_list", "plan",
                items=[{"text": text, "completed": done} for text, done in items])


def error(text: str) -> str:
    return line({"type": "error", "message": text})


def failed(text: str | None) -> str:
    return line({"type": "turn.failed", "error": {"message": text} if text else {}})


def test_a_whole_run() -> None:
    reader = CodexReader()
    events, answer = read_all(reader, [
        STARTED, TURN,
        todo("started", ("Say hi", False), ("Report back", False)),
        message("Running it.", "m1"),
        command("started"),
        command("completed", output="ok\n", exit_code=0, status="completed"),
        todo("updated", ("Say hi", True), ("Report back", False)),
        message("It printed ok.", "m2"),
        todo("completed", ("Say hi", True), ("Report back", True)),
        DONE,
    ])
    assert events == [
        SessionStarted(TID),
        PlanUpdate((PlanStep("Say hi", "inProgress"), PlanStep("Report back", "pending"))),
        Thought("Running it."),
        ToolStarted("cmd", "shell", "bash -lc 'make'"),
        ToolFinished("cmd", "shell", "bash -lc 'make'", "ok\n", False),
        PlanUpdate((PlanStep("Say hi", "completed"), PlanStep("Report back", "inProgress"))),
        PlanUpdate((PlanStep("Say hi", "completed"), PlanStep("Report back", "completed"))),
    ]
    assert answer == StreamAnswer("response", "It printed ok.")
    assert (reader.session_id, reader.skipped, reader.resume_refused) == (TID, 0, False)


def test_the_thread_is_started_once() -> None:
    events, _ = read_all(CodexReader(), [STARTED, line({"type": "thread.started",
                                                       "thread_id": "x"}), DONE])
    assert events == [SessionStarted(TID)]


def test_messages_are_held_until_something_follows() -> None:
    events, answer = read_all(CodexReader(), [
        item("started", "agent_message", "m1", text=""),
        item("updated", "agent_message", "m1", text="Fir"),
        message("First.", "m1"),
        item("completed", "reasoning", "r1", text="**Thinking**"),
        message("Second.", "m2"),
        message("Last.", "m3"),
        DONE,
    ])
    assert events == [Thought("First."), Thought("Second.")]
    assert answer == StreamAnswer("response", "Last.")


@pytest.mark.parametrize(("exit_code", "status", "is_error"), [
    (0, "completed", False), (2, "completed", True), (None, "failed", True),
    (None, "declined", True), (None, "completed", False),
])
def test_command_results(exit_code: int | None, status: str, is_error: bool) -> None:
    reader = CodexReader()
    reader.feed(command("started"))
    assert reader.feed(command("updated", output="partial")) == []
    assert reader.feed(command("completed", output="out", exit_code=exit_code,
                               status=status)) == [
        ToolFinished("cmd", "shell", "bash -lc 'make'", "out", is_error)]
    assert reader.feed(command("completed", output="out", exit_code=0)) == []


def test_a_command_seen_only_completed_gets_both_events() -> None:
    events = CodexReader().feed(command("completed", output="x" * 5_000, exit_code=0,
                                        status="completed"))
    assert events == [ToolStarted("cmd", "shell", "bash -lc 'make'"),
                      ToolFinished("cmd", "shell", "bash -lc 'make'", "x" * 4_000, False)]


def test_file_changes_are_an_edit_action_pair() -> None:
    changes = [{"path": "src/a.py", "kind": "update"}, {"path": "b.md", "kind": "add"}]
    assert CodexReader().feed(item("completed", "file_change", "fc", changes=changes,
                                   status="completed")) == [
        ToolStarted("fc", "edit", "src/a.py, b.md"),
        ToolFinished("fc", "edit", "src/a.py, b.md", "update src/a.py\nadd b.md", False),
    ]
    [_, finished] = CodexReader().feed(item("completed", "file_change", "fc",
                                            changes=changes[:1], status="failed"))
    assert finished == ToolFinished("fc", "edit", "src/a.py", "update src/a.py", True)


def test_mcp_tool_calls() -> None:
    reader = CodexReader()
    call = {"server": "linear", "tool": "get_issue", "arguments": {"id": "ENG-1"}}
    assert reader.feed(item("started", "mcp_tool_call", "mcp", status="in_progress", **call)) == [
        ToolStarted("mcp", "linear.get_issue", '{"id": "ENG-1"}')]
    result = {"content": [{"type": "text", "text": "ENG-1: Fix login"}, {"type": "image"}],
              "structured_content": None}
    assert reader.feed(item("completed", "mcp_tool_call", "mcp", status="completed",
                            result=result, **call)) == [
        ToolFinished("mcp", "linear.get_issue", '{"id": "ENG-1"}', "ENG-1: Fix login", False)]
    [_, broken] = CodexReader().feed(item("completed", "mcp_tool_call", "mcp", status="failed",
                                          error={"message": "server gone"}, **call))
    assert broken == ToolFinished("mcp", "linear.get_issue", '{"id": "ENG-1"}', "server gone",
                                  True)


@pytest.mark.parametrize(("arguments", "parameter"), [
    ('{"id":"ENG-1"}', '{"id":"ENG-1"}'), (None, ""), ({"q": "é"}, '{"q": "é"}'),
])
def test_mcp_arguments_as_the_parameter(arguments: Any, parameter: str) -> None:
    [started] = CodexReader().feed(item("started", "mcp_tool_call", "mcp", server="s", tool="t",
                                        arguments=arguments, status="in_progress"))
    assert started == ToolStarted("mcp", "s.t", parameter)


def test_web_searches() -> None:
    reader = CodexReader()
    assert reader.feed(item("started", "web_search", "ws", query="pykka")) == [
        ToolStarted("ws", "web_search", "pykka")]
    assert reader.feed(item("completed", "web_search", "ws", query="pykka")) == [
        ToolFinished("ws", "web_search", "pykka", "", False)]
    assert len(CodexReader().feed(item("completed", "web_search", "w2", query="q"))) == 2


@pytest.mark.parametrize(("items", "statuses"), [
    ([("a", True), ("b", False), ("c", False)], ["completed", "inProgress", "pending"]),
    ([("a", False), ("b", True), ("c", False)], ["inProgress", "completed", "pending"]),
    ([("a", True), ("b", True)], ["completed", "completed"]),
    ([("a", False), ("b", False), ("c", False)], ["inProgress", "pending", "pending"]),
])
def test_todo_list_statuses(items: list[tuple[str, bool]], statuses: list[str]) -> None:
    [update] = CodexReader().feed(todo("started", *items))
    assert isinstance(update, PlanUpdate)
    assert [step.status for step in update.steps] == statuses


def test_an_unchanged_todo_list_is_not_sent_again() -> None:
    reader = CodexReader()
    assert len(reader.feed(todo("started", ("a", False)))) == 1
    assert reader.feed(todo("updated", ("a", False))) == []
    assert reader.feed(todo("completed", ("a", False))) == []
    assert len(reader.feed(todo("completed", ("a", True)))) == 1


def test_links_in_messages_and_command_output() -> None:
    url = "https://github.com/acme/app/pull/31"
    events, _ = read_all(CodexReader(), [
        command("completed", output=f"Created {url}\n", exit_code=0, status="completed"),
        message(f"Opened {url}."), DONE])
    assert [e for e in events if isinstance(e, LinkFound)] == [LinkFound("Pull request", url)]


def test_a_question_is_an_elicitation() -> None:
    _, answer = read_all(CodexReader(), [message("Two options.\nQUESTION: A or B?"), DONE])
    assert answer == StreamAnswer("elicitation", "Two options.\nA or B?")


# errors

def test_transient_errors_followed_by_turn_completed_are_a_success() -> None:
    reader = CodexReader()
    _, answer = read_all(reader, [
        STARTED, TURN, error("Reconnecting... 1/2 (busy)"), error("Reconnecting... 2/2 (busy)"),
        message("Done after all."), DONE], exit_code=0)
    assert answer == StreamAnswer("response", "Done after all.")
    assert reader.skipped == 0


def test_an_error_not_followed_by_turn_completed_is_an_error() -> None:
    _, answer = read_all(CodexReader(), [
        STARTED, TURN, message("Halfway."), error("Reconnecting... 1/2 (busy)"),
        error("stream disconnected")], exit_code=1)
    assert answer == StreamAnswer("error", "stream disconnected")
    _, late = read_all(CodexReader(), [STARTED, message("Hi."), DONE, error("late")], 0)
    assert late == StreamAnswer("error", "late")


def test_turn_failed_is_an_error_with_its_message() -> None:
    _, answer = read_all(CodexReader(), [STARTED, TURN, error("high demand"),
                                         failed("high demand, really")], exit_code=1)
    assert answer == StreamAnswer("error", "high demand, really")
    _, bare = read_all(CodexReader(), [STARTED, error("quota"), failed(None)], exit_code=1)
    assert bare == StreamAnswer("error", "quota")
    _, silent = read_all(CodexReader(), [STARTED, failed(None)], exit_code=1)
    assert silent == StreamAnswer("error", "The turn failed.")


def test_a_non_zero_exit_without_an_answer_is_an_error() -> None:
    _, answer = read_all(CodexReader(), [STARTED, TURN], 1, "Error: config broken\n")
    assert answer == StreamAnswer("error", "Error: config broken")
    _, killed = read_all(CodexReader(), [STARTED, message("Half a thought.")], None)
    assert killed == StreamAnswer("error", "The agent was stopped before it answered.")


def test_a_completed_turn_answers_whatever_the_exit_code() -> None:
    _, answer = read_all(CodexReader(), [STARTED, message("Fine."), DONE], exit_code=1)
    assert answer == StreamAnswer("response", "Fine.")
    _, empty = read_all(CodexReader(), [STARTED, DONE], exit_code=0)
    assert empty == StreamAnswer("response", "")


def test_an_exit_0_without_turn_completed_answers_with_the_last_message() -> None:
    _, answer = read_all(CodexReader(), [STARTED, message("Odd but fine.")], exit_code=0)
    assert answer == StreamAnswer("response", "Odd but fine.")
    assert read_all(CodexReader(), [STARTED], 0)[1].kind == "error"


def test_non_fatal_items_and_events_are_ignored_not_skipped() -> None:
    reader = CodexReader()
    events, _ = read_all(reader, [
        STARTED, TURN, item("completed", "error", "e0", message="unknown model, using default"),
        item("completed", "reasoning", "r0", text="thinking"),
        line({"type": "item.plan.delta", "item_id": "p", "delta": "x"}), message("Hi."), DONE])
    assert events == [SessionStarted(TID)] and reader.skipped == 0


@pytest.mark.parametrize("stderr", [
    "Error: thread/resume: thread/resume failed: no rollout found for thread id 0199 "
    "(code -32600)\n",
    "ERROR: No saved session found with ID 0199. Run `codex resume` without an ID.\n",
])
def test_an_unknown_thread_on_resume_is_refused(stderr: str) -> None:
    reader = CodexReader()
    _, answer = read_all(reader, [], 1, stderr)
    assert reader.resume_refused and answer.kind == "error"


def test_other_failures_are_not_refused_resumes() -> None:
    started = CodexReader()
    read_all(started, [STARTED, failed("no rollout found for thread id x")], 1,
             "no rollout found for thread id x")
    config = CodexReader()
    read_all(config, [], 1, "Error loading config.toml")
    fine = CodexReader()
    read_all(fine, [], 0, "No saved session found with ID x")
    assert not (started.resume_refused or config.resume_refused or fine.resume_refused)


# lines that do not parse

@pytest.mark.parametrize("bad", [
    "Reading prompt from stdin...",
    "[]",
    '{"type": 5}',
    '{"type": "thread.started", "thread_id": 42}',
    '{"type": "item.completed", "item": "text"}',
    '{"type": "item.completed", "item": {"id": "x"}}',
    '{"type": "item.completed", "item": {"type": "command_execution", "command": "ls"}}',
    '{"type": "item.completed", "item": {"id": "x", "type": "hologram"}}',
    '{"type": "item.started", "item": {"id": "x", "type": "todo_list", "items": "a"}}',
    '{"type": "turn.paused"}',
    "{" * 50_000,
])
def test_garbage_is_skipped_and_counted(bad: str) -> None:
    reader = CodexReader()
    assert reader.feed(bad) == []
    assert reader.skipped == 1


def test_ill_typed_fields_inside_known_items_are_passed_over() -> None:
    reader = CodexReader()
    events = reader.feed(item("completed", "command_execution", "c", command=["ls"],
                              aggregated_output=7, exit_code="1", status={}))
    events += reader.feed(item("completed", "file_change", "f", changes=[{"path": 3}, "x"]))
    events += reader.feed(item("completed", "mcp_tool_call", "m", server=None, tool=1,
                               arguments=[1, {"a": None}], result={"content": "text"}))
    events += reader.feed(todo("started", ("a", False)) .replace('"a"', "null"))
    assert events == [
        ToolStarted("c", "shell", ""), ToolFinished("c", "shell", "", "", False),
        ToolStarted("f", "edit", ""), ToolFinished("f", "edit", "", "", False),
        ToolStarted("m", ".", '[1, {"a": null}]'),
        ToolFinished("m", ".", '[1, {"a": null}]', "", False),
    ]
    assert reader.skipped == 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=25,
)
ITEM = st.fixed_dictionaries(
    {"type": st.sampled_from(["agent_message", "command_execution", "file_change",
                              "mcp_tool_call", "web_search", "todo_list", "reasoning", "error",
                              "other"]) | JSON},
    optional={key: JSON for key in ["id", "text", "command", "aggregated_output", "exit_code",
                                    "status", "changes", "server", "tool", "arguments",
                                    "result", "error", "query", "items"]},
)
LINE = st.builds(
    lambda kind, extra, payload: {"type": kind, **extra, "item": payload},
    st.sampled_from(["thread.started", "turn.started", "item.started", "item.updated",
                     "item.completed", "turn.completed", "turn.failed", "error", "other"]),
    st.dictionaries(st.sampled_from(["thread_id", "message", "error", "usage"]), JSON,
                    max_size=3),
    ITEM | JSON,
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.text() | st.binary().map(lambda b: b.decode("utf-8", "replace"))
                | LINE.map(json.dumps), max_size=8),
       st.one_of(st.none(), st.integers(-5, 300)), st.text(max_size=50))
def test_any_input_is_read_without_raising(lines: list[str], exit_code: int | None,
                                           stderr: str) -> None:
    reader = CodexReader()
    with strictly():
        events, answer = read_all(reader, lines, exit_code, stderr)
    assert answer.kind in ("response", "error", "elicitation")
    assert 0 <= reader.skipped <= len(lines)
    assert all(type(e).__module__ == "wakeline.agents.streams" for e in events)
