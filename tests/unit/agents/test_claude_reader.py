"""Claude Code's stream-json lines read as progress events and an answer.

The lines are small hand-made copies of the shapes Claude Code 2.1 prints: `system`/`init`,
one `assistant` line per content block, `user` lines with tool results, `result` last.
"""

from __future__ import annotations

import json
import os
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from tests.unit.agents import line, read_all, strictly
from wakeline.agents.claude import ClaudeReader
from wakeline.agents.streams import (
    MAX_LINE_CHARS,
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
SID = "5e55-10n"


def init(session_id: str = SID) -> str:
    return line({"type": "system", "subtype": "init", "session_id": session_id, "tools": []})


def assistant(*blocks: dict[str, Any], parent: str | None = None) -> str:
    return line({"type": "assistant", "parent_tool_use_id": parent, "session_id": SID,
                 "message": {"role": "assistant", "content": list(blocks)}})


def text(value: str, parent: str | None = None) -> str:
    return assistant({"type": "text", "text": value}, parent=parent)


def tool_use(call_id: str, name: str, tool_input: dict[str, Any]) -> str:
    return assistant({"type": "tool_use", "id": call_id, "name": name, "input": tool_input})


def tool_result(call_id: str, content: Any, is_error: bool | None = None,
                structured: Any = None) -> str:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error is not None:
        block["is_error"] = is_error
    body: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": [block]}}
    if structured is not None:
        body["tool_use_result"] = structured
    return line(body)


def result(value: str | None = "Done.", is_error: bool = False, subtype: str = "success",
           **extra: Any) -> str:
    body = {"type": "result", "subtype": subtype, "is_error": is_error, "session_id": SID,
            "num_turns": 2, "permission_denials": [], **extra}
    if value is not None:
        body["result"] = value
    return line(body)


def plans(events: list[Any]) -> list[list[tuple[str, str]]]:
    return [[(step.content, step.status) for step in event.steps]
            for event in events if isinstance(event, PlanUpdate)]


# session, text and tools

def test_a_whole_run() -> None:
    reader = ClaudeReader()
    events, answer = read_all(reader, [
        init(),
        text("Let me look."),
        tool_use("t1", "Bash", {"command": "ls", "description": "List files"}),
        tool_result("t1", "a.py\nb.py", is_error=False),
        text("Two files."),
        result("Two files."),
    ])
    assert events == [
        SessionStarted(SID),
        Thought("Let me look."),
        ToolStarted("t1", "Bash", "ls"),
        ToolFinished("t1", "Bash", "ls", "a.py\nb.py", False),
    ]
    assert answer == StreamAnswer("response", "Two files.")
    assert (reader.session_id, reader.skipped, reader.resume_refused) == (SID, 0, False)


def test_the_session_is_started_once() -> None:
    events, _ = read_all(ClaudeReader(), [init(), init("other"), result()])
    assert events == [SessionStarted(SID)]


def test_text_after_text_makes_the_first_a_thought() -> None:
    events, answer = read_all(ClaudeReader(), [
        text("One."), text("Two."), text("Three."), result("Three.")])
    assert events == [Thought("One."), Thought("Two.")]
    assert answer.text == "Three."


def test_the_last_text_is_never_also_a_thought() -> None:
    events, _ = read_all(ClaudeReader(), [text("Only this."), result("Only this.")])
    assert [e for e in events if isinstance(e, Thought)] == []


def test_text_and_tool_use_in_one_message_keep_their_order() -> None:
    events, _ = read_all(ClaudeReader(), [assistant(
        {"type": "thinking", "thinking": "hmm"},
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/w/a.py"}},
    )])
    assert events == [Thought("Reading it."), ToolStarted("t1", "Read", "/w/a.py")]


@pytest.mark.parametrize(("tool", "tool_input", "parameter"), [
    ("Bash", {"description": "Say hi", "command": "echo hi"}, "echo hi"),
    ("Read", {"file_path": "/w/a.py", "limit": 10}, "/w/a.py"),
    ("Write", {"content": "x", "file_path": "/w/b.py"}, "/w/b.py"),
    ("Edit", {"old_string": "a", "file_path": "/w/c.py"}, "/w/c.py"),
    ("NotebookEdit", {"new_source": "x", "notebook_path": "/w/n.ipynb"}, "/w/n.ipynb"),
    ("Grep", {"path": "src", "pattern": "TODO"}, "TODO"),
    ("Glob", {"pattern": "**/*.py"}, "**/*.py"),
    ("WebFetch", {"prompt": "summarise", "url": "https://example.com"}, "https://example.com"),
    ("WebSearch", {"query": "pykka actors"}, "pykka actors"),
    ("Task", {"prompt": "go", "description": "Explore the repo"}, "Explore the repo"),
    ("Agent", {"prompt": "go", "description": "Review"}, "Review"),
    ("mcp__linear__get_issue", {"limit": 3, "id": "ENG-1"}, "ENG-1"),
    ("Bash", {"timeout": 5, "description": "no command"}, "no command"),
    ("Mystery", {"n": 1, "flag": True}, ""),
])
def test_the_main_parameter_of_a_tool(tool: str, tool_input: dict[str, Any],
                                      parameter: str) -> None:
    assert ClaudeReader().feed(tool_use("t1", tool, tool_input)) == [
        ToolStarted("t1", tool, parameter)]


@pytest.mark.parametrize(("content", "is_error", "expected"), [
    ("plain", None, ("plain", False)),
    ([{"type": "text", "text": "one"}, {"type": "image", "source": {}},
      {"type": "text", "text": "two"}], None, ("one\ntwo", False)),
    ("Exit code 1\nboom", True, ("Exit code 1\nboom", True)),
    (None, False, ("", False)),
])
def test_tool_results(content: Any, is_error: bool | None, expected: tuple[str, bool]) -> None:
    reader = ClaudeReader()
    reader.feed(tool_use("t1", "Bash", {"command": "make"}))
    assert reader.feed(tool_result("t1", content, is_error)) == [
        ToolFinished("t1", "Bash", "make", *expected)]


def test_long_results_and_parameters_are_cut() -> None:
    reader = ClaudeReader()
    [started] = reader.feed(tool_use("t1", "Bash", {"command": "c" * 5_000}))
    [finished] = reader.feed(tool_result("t1", "r" * 9_000))
    assert isinstance(started, ToolStarted) and isinstance(finished, ToolFinished)
    assert len(started.parameter) == len(finished.parameter) == 4_000
    assert finished.result == "r" * 4_000


def test_a_result_for_an_unknown_call_is_ignored() -> None:
    reader = ClaudeReader()
    assert reader.feed(tool_result("nobody", "x")) == []
    assert reader.skipped == 0


def test_a_subagents_text_is_neither_thought_nor_answer() -> None:
    events, answer = read_all(ClaudeReader(), [
        tool_use("t1", "Task", {"description": "Explore"}),
        text("Subagent musing.", parent="t1"),
        assistant({"type": "tool_use", "id": "s1", "name": "Glob", "input": {"pattern": "*"}},
                  parent="t1"),
        tool_result("s1", "a.py"),
        tool_result("t1", "Found a.py"),
    ], exit_code=0)
    assert [type(e).__name__ for e in events] == [
        "ToolStarted", "ToolStarted", "ToolFinished", "ToolFinished"]
    assert answer.kind == "error"  # no result line and no text of its own


# plans

def test_task_tools_become_the_plan() -> None:
    reader = ClaudeReader()
    events, _ = read_all(reader, [
        tool_use("c1", "TaskCreate", {"subject": "Say hi", "activeForm": "Saying hi"}),
        tool_use("c2", "TaskCreate", {"subject": "Report back", "activeForm": "Reporting"}),
        tool_result("c1", "Task #1 created successfully: Say hi",
                    structured={"task": {"id": "1", "subject": "Say hi"}}),
        tool_result("c2", "Task #2 created successfully: Report back",
                    structured={"task": {"id": "2", "subject": "Report back"}}),
        tool_use("u1", "TaskUpdate", {"taskId": "1", "status": "in_progress"}),
        tool_result("u1", "Updated task #1 status"),
        tool_use("u2", "TaskUpdate", {"taskId": "1", "status": "completed"}),
        tool_result("u2", "Updated task #1 status"),
        tool_use("u3", "TaskUpdate", {"taskId": "2", "status": "deleted"}),
        tool_result("u3", "Updated task #2 deleted"),
        result(),
    ])
    assert plans(events) == [
        [("Say hi", "pending")],
        [("Say hi", "pending"), ("Report back", "pending")],
        [("Say hi", "inProgress"), ("Report back", "pending")],
        [("Say hi", "completed"), ("Report back", "pending")],
        [("Say hi", "completed")],
    ]
    assert all(isinstance(e, PlanUpdate) for e in events)  # no actions for plan tools


def test_a_task_id_comes_from_the_result_text_else_the_creation_order() -> None:
    events, _ = read_all(ClaudeReader(), [
        tool_use("c1", "TaskCreate", {"subject": "First"}),
        tool_result("c1", "Task #7 created successfully: First"),
        tool_use("c2", "TaskCreate", {"subject": "Second"}),
        tool_result("c2", [{"type": "text", "text": "created"}]),
        tool_use("u1", "TaskUpdate", {"taskId": 7, "status": "in_progress"}),
        tool_result("u1", "ok"),
        tool_use("u2", "TaskUpdate", {"taskId": "2", "status": "completed", "subject": "2nd"}),
        tool_result("u2", "ok"),
    ])
    assert plans(events)[-2:] == [
        [("First", "inProgress"), ("Second", "pending")],
        [("First", "inProgress"), ("2nd", "completed")],
    ]


def test_plan_changes_that_change_nothing_are_not_sent() -> None:
    events, _ = read_all(ClaudeReader(), [
        tool_use("c1", "TaskCreate", {"subject": "Only"}),
        tool_result("c1", "Task #1 created successfully: Only"),
        tool_use("u1", "TaskUpdate", {"taskId": "1", "status": "pending"}),
        tool_result("u1", "ok"),
        tool_use("u2", "TaskUpdate", {"taskId": "9", "status": "completed"}),
        tool_result("u2", "ok"),
        tool_use("u3", "TaskUpdate", {"taskId": "1", "status": "blocked"}),
        tool_result("u3", "ok"),
        tool_use("c2", "TaskCreate", {"subject": "Refused"}),
        tool_result("c2", "<tool_use_error>nope</tool_use_error>", is_error=True),
    ])
    assert plans(events) == [[("Only", "pending")]]


def test_an_update_naming_a_task_from_an_earlier_turn_adds_it() -> None:
    events, _ = read_all(ClaudeReader(), [
        tool_use("u1", "TaskUpdate", {"taskId": "4", "status": "in_progress", "subject": "Old"}),
        tool_result("u1", "ok"),
    ])
    assert plans(events) == [[("Old", "inProgress")]]


def test_todowrite_replaces_the_whole_plan() -> None:
    todos = [{"content": "Read", "status": "completed", "activeForm": "Reading"},
             {"content": "Fix", "status": "in_progress", "activeForm": "Fixing"},
             {"content": "Test", "status": "pending", "activeForm": "Testing"}]
    events, _ = read_all(ClaudeReader(), [
        tool_use("w1", "TodoWrite", {"todos": todos}),
        tool_result("w1", "Todos have been modified successfully."),
        tool_use("w2", "TodoWrite", {"todos": todos}),
        tool_use("w3", "TodoWrite", {"todos": [{"content": "Ship", "status": "pending"}, 5]}),
    ])
    assert events == [
        PlanUpdate((PlanStep("Read", "completed"), PlanStep("Fix", "inProgress"),
                    PlanStep("Test", "pending"))),
        PlanUpdate((PlanStep("Ship", "pending"),)),
    ]


# links

def test_pull_request_links_from_text_and_tool_results_once_each() -> None:
    url = "https://github.com/acme/app/pull/12"
    mr = "https://gitlab.com/acme/app/-/merge_requests/3"
    events, _ = read_all(ClaudeReader(), [
        tool_use("t1", "Bash", {"command": "gh pr create"}),
        tool_result("t1", f"{url}\n"),
        text(f"Opened {url}. Also {mr}."),
        result(f"Opened {url}."),
    ])
    assert [e for e in events if isinstance(e, LinkFound)] == [
        LinkFound("Pull request", url), LinkFound("Pull request", mr)]


# answers

def test_a_result_with_is_error_is_an_error() -> None:
    reader = ClaudeReader()
    events, answer = read_all(reader, [
        init(), text("API Error: 500 internal"), result("API Error: 500 internal", is_error=True,
                                                        api_error_status=500),
    ], exit_code=1)
    assert answer == StreamAnswer("error", "API Error: 500 internal")
    assert events == [SessionStarted(SID)] and not reader.resume_refused


def test_an_error_subtype_without_text_says_its_errors() -> None:
    _, answer = read_all(ClaudeReader(), [
        init(), result(None, is_error=True, subtype="error_max_turns", errors=["Max turns"])])
    assert answer == StreamAnswer("error", "Max turns")


def test_a_result_ending_in_a_question_is_an_elicitation() -> None:
    _, answer = read_all(ClaudeReader(), [result("I need one thing.\nQUESTION: Which env?")])
    assert answer == StreamAnswer("elicitation", "I need one thing.\nWhich env?")


def test_permission_denials_do_not_make_an_error() -> None:
    denials = [{"tool_name": "Bash", "tool_use_id": "t1", "tool_input": {"command": "rm"}}]
    _, answer = read_all(ClaudeReader(), [result("Could not.", permission_denials=denials)])
    assert answer == StreamAnswer("response", "Could not.")


def test_no_result_line_and_exit_1_is_an_error_with_stderr() -> None:
    _, answer = read_all(ClaudeReader(), [init(), text("Working.")], 1, "Error: crashed\n")
    assert answer == StreamAnswer("error", "Error: crashed")
    _, answer = read_all(ClaudeReader(), [init()], 1)
    assert answer == StreamAnswer("error", "The agent exited with code 1 without an answer.")


def test_no_result_line_and_exit_0_answers_with_the_last_text() -> None:
    events, answer = read_all(ClaudeReader(), [text("Step one."), text("All done.")], 0)
    assert events == [Thought("Step one.")]
    assert answer == StreamAnswer("response", "All done.")
    assert read_all(ClaudeReader(), [init()], 0)[1].kind == "error"


def test_a_signal_without_a_result_is_an_error() -> None:
    _, answer = read_all(ClaudeReader(), [text("Half way.")], None)
    assert answer == StreamAnswer("error", "The agent was stopped before it answered.")


@pytest.mark.parametrize(("lines", "stderr"), [
    ([], "No conversation found with session ID: 5e55-10n\n"),
    ([result(None, is_error=True, subtype="error_during_execution")], ""),
    ([result(None, is_error=True, subtype="error_during_execution",
             errors=["No conversation found with session ID: 5e55-10n"])], ""),
])
def test_an_unknown_session_on_resume_is_refused(lines: list[str], stderr: str) -> None:
    reader = ClaudeReader()
    _, answer = read_all(reader, lines, 1, stderr)
    assert reader.resume_refused and answer.kind == "error"


def test_other_failures_are_not_refused_resumes() -> None:
    failed_mid_run = ClaudeReader()
    read_all(failed_mid_run, [init(), result(None, True, "error_during_execution")], 1)
    api_error = ClaudeReader()
    read_all(api_error, [init(), result("API Error", is_error=True)], 1, "")
    assert not failed_mid_run.resume_refused and not api_error.resume_refused


# lines that do not parse

@pytest.mark.parametrize("bad", [
    "not json at all",
    "{truncated",
    "[1, 2, 3]",
    '"a string"',
    "null",
    "17",
    '{"type": 5}',
    '{"no_type": "assistant"}',
    '{"type": "assistant", "message": "hello"}',
    '{"type": "assistant", "message": {"content": {"type": "text"}}}',
    '{"type": "user", "message": {"content": 7}}',
    '{"type": "system", "subtype": "init", "session_id": 42}',
    '{"type": "system", "subtype": "brand_new"}',
    '{"type": "system", "subtype": ["init"]}',
    '{"type": "mystery"}',
    "[" * 100_000,
    "1" * 10_000,
    '{"type": "assistant", "message": {"content": []}, "pad": "' + "x" * MAX_LINE_CHARS + '"}',
])
def test_garbage_is_skipped_and_counted(bad: str) -> None:
    reader = ClaudeReader()
    assert reader.feed(bad) == []
    assert reader.skipped == 1


def test_garbage_inside_a_run_changes_nothing_else() -> None:
    reader = ClaudeReader()
    events, answer = read_all(reader, [
        init(), "oops", "", text("Hi."), '{"type": 5}', result("Hi."), "trailing junk"])
    assert events == [SessionStarted(SID)]
    assert answer == StreamAnswer("response", "Hi.")
    assert reader.skipped == 3  # a blank line is not counted


def test_ill_typed_blocks_are_passed_over() -> None:
    reader = ClaudeReader()
    events = reader.feed(assistant(
        "a string", {"type": "text", "text": 5}, {"type": "tool_use", "id": 1, "name": "Bash"},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": "ls"}))
    events += reader.feed(line({"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": ["t1"], "content": "x"}]}}))
    assert events == [ToolStarted("t1", "Bash", "")]
    assert reader.skipped == 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=25,
)
KEYS = st.sampled_from(["message", "content", "subtype", "session_id", "result", "is_error",
                        "tool_use_result", "parent_tool_use_id", "errors", "type"])
TYPES = st.sampled_from(["system", "assistant", "user", "result", "stream_event", "other"])
BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "thinking"])},
    optional={"id": JSON, "name": st.sampled_from(["Bash", "TaskCreate", "TaskUpdate",
                                                   "TodoWrite"]) | JSON,
              "input": JSON, "text": JSON, "content": JSON, "tool_use_id": JSON,
              "is_error": JSON},
)
LINE = st.builds(
    lambda kind, extra, blocks: {"type": kind, **extra, "message": {"content": blocks}},
    TYPES, st.dictionaries(KEYS, JSON, max_size=4), st.lists(BLOCK, max_size=3))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.text() | st.binary().map(lambda b: b.decode("utf-8", "replace"))
                | LINE.map(json.dumps), max_size=8),
       st.one_of(st.none(), st.integers(-5, 300)), st.text(max_size=50))
def test_any_input_is_read_without_raising(lines: list[str], exit_code: int | None,
                                           stderr: str) -> None:
    reader = ClaudeReader()
    with strictly():
        events, answer = read_all(reader, lines, exit_code, stderr)
    assert answer.kind in ("response", "error", "elicitation")
    assert 0 <= reader.skipped <= len(lines)
    assert all(type(e).__module__ == "wakeline.agents.streams" for e in events)


def test_bytes_instead_of_text_are_skipped() -> None:
    reader = ClaudeReader()
    assert reader.feed(b'{"type": "result"}') == []  # type: ignore[arg-type]
    assert reader.skipped == 1


def test_ill_typed_plan_inputs_change_nothing() -> None:
    reader = ClaudeReader()
    events, _ = read_all(reader, [
        tool_use("c1", "TaskCreate", {"subject": "  ", "activeForm": "x"}),
        tool_result("c1", "Task #1 created successfully"),
        tool_use("u1", "TaskUpdate", {"taskId": True, "status": "completed"}),
        tool_result("u1", "ok"),
        tool_use("u2", "TaskUpdate", {"taskId": ["1"], "status": "deleted"}),
        tool_result("u2", "ok"),
        tool_use("w1", "TodoWrite", {"todos": "Read, Fix"}),
        line({"type": "user", "message": {"role": "user", "content": "a plain prompt"}}),
    ])
    assert events == [] and reader.skipped == 0
