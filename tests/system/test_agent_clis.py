"""The real Claude Code and Codex CLIs (npm, pinned) against the fake model server.

Each run is exactly what wakeline will start (argv from tests/support/agent_clis.py, the prompt
on stdin, its own working directory and HOME) and takes about a second. These tests check only
the shape of what the CLIs print; the stream readers are tested on the recordings this module
makes: `WAKELINE_RECORD_STREAMS=1 pytest tests/system/test_agent_clis.py` rewrites
tests/fixtures/agent-streams/. A CLI that cannot be installed skips its tests with the reason.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model import FAKE_MODEL_ERROR, FakeModel, Fail, Shell, Text, Todo, WriteFile
from tests.support.agent_clis import (
    CliPackage,
    CliRun,
    claude_argv,
    claude_env,
    cli_package,
    codex_argv,
    codex_env,
    record_stream,
    recording,
    require_cli,
    run_cli,
)

pytestmark = pytest.mark.slow

PLAN = ("Say hi", "Report back")
# One scenario for both CLIs: a todo list, a command, the list done, a final text.
STREAM_SCRIPT = [Todo(PLAN), Shell("echo hi"), Todo(PLAN, completed=len(PLAN)),
                 Text("DONE: echo printed hi")]
# What each CLI may call on the fake; anything else (another host through the proxy too)
# shows up in FakeModel.endpoints(). Claude skips its `HEAD /` probe when a proxy is set.
CLAUDE_ENDPOINTS = {"HEAD /", "POST /v1/messages"}
CODEX_ENDPOINTS = {"POST /v1/responses"}


@dataclass
class Box:
    """One agent's world for a test: the fake model, a working directory and a private HOME
    that outlive a run, so a second run can resume the first."""

    cli: CliPackage
    executable: Path
    model: FakeModel
    root: Path

    @property
    def work(self) -> Path:
        """The working directory of every run."""
        return self.root / "work"

    @property
    def home(self) -> Path:
        """The private HOME (and, for Codex, CODEX_HOME inside it) of every run."""
        return self.root / "home"

    def run(self, prompt: str, resume: str | None = None,
            without: tuple[str, ...] = ()) -> CliRun:
        """Run the CLI once, the way wakeline does (less the environment names in `without`)."""
        if self.cli.name == "claude":
            argv, env = claude_argv(self.executable, resume), claude_env(self.model.url, self.home)
        else:
            argv, env = codex_argv(self.executable, resume), codex_env(self.model.url, self.home)
        for name in without:
            del env[name]
        return run_cli(argv, prompt, self.work, env)

    def record(self, name: str, run: CliRun, scenario: str) -> None:
        """Keep `run` as tests/fixtures/agent-streams/NAME.jsonl when re-recording."""
        if recording():
            port = self.model.url.rsplit(":", 1)[1]
            stand_in = "/tmp/wakeline-run"
            places = {str(self.root): stand_in, str(self.root.resolve()): stand_in,
                      f"127.0.0.1:{port}": "127.0.0.1:PORT"}
            # Claude also names a directory after the working directory, every non-alphanumeric
            # character a dash (~/.claude/projects/-tmp-...-work/memory/).
            for real in list(places)[:2]:
                places[re.sub(r"[^A-Za-z0-9]", "-", real)] = re.sub(r"[^A-Za-z0-9]", "-", stand_in)
            record_stream(name, run, self.cli, scenario, places)


@pytest.fixture
def model() -> Iterator[FakeModel]:
    """A started fake model; stopped after the test."""
    fake = FakeModel().start()
    yield fake
    fake.stop()


@pytest.fixture
def make_box(tmp_path: Path, model: FakeModel) -> Callable[[str], Box]:
    """`make_box("claude")`: the installed CLI (or a skip) with its own directories."""

    def make(name: str) -> Box:
        box = Box(cli_package(name), require_cli(name), model, tmp_path / name)
        box.work.mkdir(parents=True)
        return box

    return make


def tool_uses(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude: every tool_use block of the assistant lines, in order."""
    return [block for line in lines if line.get("type") == "assistant"
            for block in line["message"]["content"] if block.get("type") == "tool_use"]


def tool_results(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Claude: every tool_result block of the user lines, by tool_use_id."""
    return {block["tool_use_id"]: block for line in lines if line.get("type") == "user"
            for block in line["message"]["content"] if block.get("type") == "tool_result"}


def items(lines: list[dict[str, Any]], kind: str, event: str = "item.completed") -> list[Any]:
    """Codex: the items of one type from one kind of event, in order."""
    return [line["item"] for line in lines
            if line.get("type") == event and line["item"].get("type") == kind]


# --- Claude Code ----------------------------------------------------------------------------


def test_claude_runs_tools_and_a_todo_list_then_answers(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("claude")
    model.script(STREAM_SCRIPT)

    run = box.run("Say hi with echo and report back.")

    assert run.returncode == 0, run.describe()
    lines = run.lines
    assert (lines[0]["type"], lines[0]["subtype"]) == ("system", "init"), run.describe()
    assert lines[0]["session_id"] and lines[0]["cwd"] == str(box.work)
    uses = tool_uses(lines)
    assert [u["name"] for u in uses] == ["TaskCreate", "TaskCreate", "Bash", "TaskUpdate",
                                         "TaskUpdate"]
    bash = next(u for u in uses if u["name"] == "Bash")
    assert bash["input"]["command"] == "echo hi"
    assert tool_results(lines)[bash["id"]]["content"] == "hi"
    last = lines[-1]
    assert (last["type"], last["subtype"], last["is_error"]) == ("result", "success", False)
    assert last["result"] == "DONE: echo printed hi"
    assert last["session_id"] == lines[0]["session_id"]
    assert [r.step for r in model.turns()] == [0, 1, 2, 3]
    assert model.endpoints() <= CLAUDE_ENDPOINTS, model.endpoints()
    box.record("claude-stream", run, "a todo list (TaskCreate x2), Bash `echo hi`, the list "
                                     "done (TaskUpdate x2), a final text")


def test_claude_writes_a_file(make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("claude")
    target = box.work / "hello.txt"
    model.script([WriteFile(str(target), "hello from the fake model\n"),
                  Text("DONE: wrote hello.txt")])

    run = box.run("Write hello.txt.")

    assert run.returncode == 0, run.describe()
    assert target.read_text() == "hello from the fake model\n"
    lines = run.lines
    write = tool_uses(lines)[0]
    assert (write["name"], write["input"]["file_path"]) == ("Write", str(target))
    assert tool_results(lines)[write["id"]].get("is_error") in (None, False)
    assert (lines[-1]["type"], lines[-1]["is_error"]) == ("result", False)
    assert model.endpoints() <= CLAUDE_ENDPOINTS, model.endpoints()
    box.record("claude-write", run, "Write hello.txt (acceptEdits allows it), a final text")


def test_claude_model_http_500_is_an_error_result(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("claude")
    model.script([Fail(500)])

    run = box.run("This turn meets a broken model.")

    assert run.returncode == 1, run.describe()
    lines = run.lines
    assert lines[0]["type"] == "system"
    last = lines[-1]
    assert (last["type"], last["is_error"], last["api_error_status"]) == ("result", True, 500)
    assert FAKE_MODEL_ERROR in last["result"]
    # CLAUDE_CODE_MAX_RETRIES=0: one request, no retry.
    assert len(model.turns()) == 1
    box.record("claude-http500", run, "the model answers HTTP 500 (no retries)")


def test_claude_resume_keeps_the_session_and_resends_history(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("claude")
    model.script([Text("DONE: first")], key="first prompt")
    model.script([Text("DONE: second prompt carried {history} messages")], key="second prompt")
    first = box.run("The first prompt.")
    assert first.returncode == 0, first.describe()
    session = first.lines[0]["session_id"]

    second = box.run("The second prompt.", resume=session)

    assert second.returncode == 0, second.describe()
    lines = second.lines
    assert lines[0]["session_id"] == session
    assert lines[-1]["session_id"] == session
    resumed = model.turns()[-1]
    assert "second prompt" in resumed.prompt
    assert "The first prompt." in str(resumed.body["messages"])
    assert resumed.history >= 3  # first prompt, its answer, the second prompt
    assert lines[-1]["result"] == f"DONE: second prompt carried {resumed.history} messages"
    box.record("claude-resume", second, "--resume SESSION_ID after a one-answer first run "
                                        "(same HOME and cwd); the model sees the history")


def test_claude_resume_of_an_unknown_session_fails(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("claude")
    model.script([Text("DONE: should not be asked")])
    unknown = str(uuid.uuid4())

    run = box.run("Continue, please.", resume=unknown)

    assert run.returncode == 1, run.describe()
    assert f"No conversation found with session ID: {unknown}" in run.stderr
    last = run.lines[-1]
    assert (last["type"], last["subtype"], last["is_error"]) == (
        "result", "error_during_execution", True)
    assert model.turns() == []
    box.record("claude-resume-unknown", run, "--resume with a session id Claude never saw")


def test_a_call_to_another_host_shows_up_at_the_fake(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    """What makes every `endpoints() <= ...` above mean "nothing else": the fake is also every
    proxy. Without the DISABLE_* settings Claude Code calls api.anthropic.com; here the call
    arrives at the fake as a CONNECT, refused, and the run still ends normally."""
    box = make_box("claude")
    model.script([Text("DONE: hi")])

    run = box.run("Say hi.", without=("DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING",
                                      "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"))

    assert run.returncode == 0, run.describe()
    assert "CONNECT api.anthropic.com:443" in model.endpoints(), model.endpoints()


# --- Codex ----------------------------------------------------------------------------------


def test_codex_runs_tools_and_a_todo_list_then_answers(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("codex")
    model.script(STREAM_SCRIPT)

    run = box.run("Say hi with echo and report back.")

    assert run.returncode == 0, run.describe()
    lines = run.lines
    assert lines[0]["type"] == "thread.started" and lines[0]["thread_id"], run.describe()
    assert items(lines, "todo_list", "item.started")[0]["items"] == [
        {"text": step, "completed": False} for step in PLAN]
    command = items(lines, "command_execution")[0]
    assert "echo hi" in command["command"]
    assert (command["aggregated_output"], command["exit_code"]) == ("hi\n", 0)
    assert all(entry["completed"] for entry in items(lines, "todo_list")[-1]["items"])
    assert items(lines, "agent_message")[-1]["text"] == "DONE: echo printed hi"
    assert lines[-1]["type"] == "turn.completed"
    assert [r.step for r in model.turns()] == [0, 1, 2, 3]
    assert model.endpoints() <= CODEX_ENDPOINTS, model.endpoints()
    box.record("codex-stream", run, "update_plan, exec_command `echo hi`, update_plan all "
                                    "done, a final text")


def test_codex_writes_a_file(make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("codex")
    model.script([WriteFile("hello.txt", "hello from the fake model\n"),
                  Text("DONE: wrote hello.txt")])

    run = box.run("Write hello.txt.")

    assert run.returncode == 0, run.describe()
    assert (box.work / "hello.txt").read_text() == "hello from the fake model\n"
    lines = run.lines
    change = items(lines, "file_change")[0]
    assert change["status"] == "completed", change
    assert [(c["path"], c["kind"]) for c in change["changes"]] == [
        (str(box.work / "hello.txt"), "add")]
    assert lines[-1]["type"] == "turn.completed"
    assert model.endpoints() <= CODEX_ENDPOINTS, model.endpoints()
    box.record("codex-write", run, "apply_patch adding hello.txt (workspace-write), a final text")


def test_codex_model_http_500_fails_the_turn(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("codex")
    model.script([Fail(500)])

    run = box.run("This turn meets a broken model.")

    assert run.returncode == 1, run.describe()
    lines = run.lines
    assert lines[0]["type"] == "thread.started"
    assert lines[-1]["type"] == "turn.failed" and lines[-1]["error"]["message"]
    assert len(model.turns()) == 1  # request_max_retries = 0, stream_max_retries = 0
    box.record("codex-http500", run, "the model answers HTTP 500 (no retries)")


def test_codex_resume_keeps_the_thread_and_resends_history(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("codex")
    model.script([Text("DONE: first")], key="first prompt")
    model.script([Text("DONE: second prompt carried {history} input items")], key="second prompt")
    first = box.run("The first prompt.")
    assert first.returncode == 0, first.describe()
    thread = first.lines[0]["thread_id"]
    fresh = model.turns()[-1].history

    second = box.run("The second prompt.", resume=thread)

    assert second.returncode == 0, second.describe()
    lines = second.lines
    assert lines[0] == {"type": "thread.started", "thread_id": thread}
    resumed = model.turns()[-1]
    assert "second prompt" in resumed.prompt
    assert "The first prompt." in str(resumed.body["input"])
    assert resumed.history > fresh
    assert items(lines, "agent_message")[-1]["text"] == (
        f"DONE: second prompt carried {resumed.history} input items")
    assert lines[-1]["type"] == "turn.completed"
    box.record("codex-resume", second, "exec resume THREAD_ID after a one-answer first run "
                                       "(same CODEX_HOME); the model sees the history")


def test_codex_resume_of_an_unknown_thread_fails_with_nothing_on_stdout(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    box = make_box("codex")
    model.script([Text("DONE: should not be asked")])
    unknown = str(uuid.uuid4())

    run = box.run("Continue, please.", resume=unknown)

    # Unlike Claude, not one JSON line: only the exit code and stderr tell.
    assert run.returncode == 1, run.describe()
    assert run.stdout == ""
    assert f"no rollout found for thread id {unknown}" in run.stderr
    assert model.turns() == []
    box.record("codex-resume-unknown", run, "exec resume with a thread id Codex never saw")


def test_codex_resume_runs_read_only_unless_the_sandbox_comes_before_resume(
        make_box: Callable[[str], Box], model: FakeModel) -> None:
    """`exec resume` takes no `-s`: the resumed turn falls back to the read-only sandbox, so an
    edit is refused (exit 0, no file_change item). `-s workspace-write` before `resume` keeps
    the first turn's sandbox."""
    box = make_box("codex")
    model.script([Text("DONE: first")], key="first prompt")
    model.script([WriteFile("second.txt", "x\n"), Text("DONE: {tool_output}")], key="second")
    first = box.run("The first prompt.")
    assert first.returncode == 0, first.describe()
    thread = first.lines[0]["thread_id"]

    bare = [str(box.executable), "exec", "--json", "--skip-git-repo-check", "resume", thread, "-"]
    refused = run_cli(bare, "The second prompt.", box.work, codex_env(model.url, box.home))

    assert refused.returncode == 0, refused.describe()
    assert not (box.work / "second.txt").exists()
    assert items(refused.lines, "file_change") == []
    assert "read-only sandbox" in items(refused.lines, "agent_message")[-1]["text"]
    box.record("codex-resume-write-refused", refused,
               "exec resume (no -s) then apply_patch: refused by the read-only sandbox")

    sandboxed = box.run("The second prompt.", resume=thread)  # wakeline's: `-s` before resume

    assert sandboxed.returncode == 0, sandboxed.describe()
    assert (box.work / "second.txt").read_text() == "x\n"
    assert items(sandboxed.lines, "file_change")[0]["status"] == "completed"
