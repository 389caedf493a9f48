"""The stream readers on what the real CLIs printed (tests/fixtures/agent-streams/).

Each recording comes with its exit code and stderr tail, recorded by
tests/system/test_agent_clis.py from Claude Code 2.1.197 and Codex 0.171.0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.agents import read_all, strictly
from wakeline.agents.registry import reader_for
from wakeline.agents.streams import (
    LinkFound,
    PlanStep,
    PlanUpdate,
    ProgressEvent,
    SessionStarted,
    StreamAnswer,
    Thought,
    ToolFinished,
    ToolStarted,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent-streams"


def replay(name: str) -> tuple[list[ProgressEvent], StreamAnswer, object]:
    meta = json.loads((FIXTURES / f"{name}.json").read_text())
    reader = reader_for(meta["cli"])
    with strictly():
        events, answer = read_all(reader, (FIXTURES / f"{name}.jsonl").read_text().splitlines(),
                                  meta["exit_code"], "\n".join(meta["stderr_tail"]))
    assert reader.skipped == 0, name
    return events, answer, reader


def kinds(events: list[ProgressEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


@pytest.mark.parametrize("name", ["claude-stream", "codex-stream"])
def test_a_tool_call_a_plan_and_an_answer(name: str) -> None:
    events, answer, _ = replay(name)
    assert isinstance(events[0], SessionStarted)
    started = [e for e in events if isinstance(e, ToolStarted)]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert len(started) == len(finished) == 1 and "echo hi" in started[0].parameter
    assert "hi" in finished[0].result and not finished[0].is_error
    plans = [e.steps for e in events if isinstance(e, PlanUpdate)]
    if name.startswith("codex"):  # the whole list at once, its first open item in progress
        assert plans[0] == (PlanStep("Say hi", "inProgress"), PlanStep("Report back", "pending"))
    else:  # one TaskCreate after the other
        assert plans[:2] == [(PlanStep("Say hi", "pending"),),
                             (PlanStep("Say hi", "pending"), PlanStep("Report back", "pending"))]
    assert plans[-1] == (PlanStep("Say hi", "completed"), PlanStep("Report back", "completed"))
    assert answer.kind == "response" and answer.text.startswith("DONE")
    assert not [e for e in events if isinstance(e, Thought) and e.text == answer.text]


@pytest.mark.parametrize("name", ["claude-write", "codex-write"])
def test_a_file_write_is_an_action_with_its_path(name: str) -> None:
    events, answer, _ = replay(name)
    [write] = [e for e in events if isinstance(e, ToolFinished)]
    assert write.parameter.endswith("hello.txt") and not write.is_error
    assert answer.kind == "response"


@pytest.mark.parametrize("name", ["claude-http500", "codex-http500"])
def test_a_model_error_is_an_error(name: str) -> None:
    _, answer, reader = replay(name)
    assert answer.kind == "error" and answer.text
    assert not reader.resume_refused  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["claude-resume", "codex-resume"])
def test_a_resumed_run_keeps_its_session(name: str) -> None:
    meta = json.loads((FIXTURES / f"{name}.json").read_text())
    events, answer, _ = replay(name)
    [session] = [e for e in events if isinstance(e, SessionStarted)]
    assert session.id in meta["argv"]  # the id it was asked to resume
    assert answer.kind == "response"


@pytest.mark.parametrize("name", ["claude-resume-unknown", "codex-resume-unknown"])
def test_an_unknown_session_is_a_refused_resume(name: str) -> None:
    _, answer, reader = replay(name)
    assert reader.resume_refused and answer.kind == "error"  # type: ignore[attr-defined]


def test_no_recording_finds_a_link_that_is_not_there() -> None:
    for path in FIXTURES.glob("*.jsonl"):
        events, _, _ = replay(path.stem)
        assert not [e for e in events if isinstance(e, LinkFound)], path.stem
