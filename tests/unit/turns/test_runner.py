"""The turn runner: the prompt reaches a real child's stdin and never lands on the disk."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from wakeline.turns.forkserver import ForkServer
from wakeline.turns.runner import STDOUT_MAX_BYTES, RunOutcome, TurnProcess, TurnSpec, prompt_stdin

PROMPT = "Fix the flaky login test. ✓ ünïcode and a long tail " + "x" * 200_000


def spec(tmp_path: Path, argv: tuple[str, ...] = ("cat",)) -> TurnSpec:
    return TurnSpec(turn_id="t1", argv=argv, cwd=tmp_path, env={"PATH": os.environ["PATH"]},
                    prompt=PROMPT, prompt_dir=tmp_path / "turns")


@pytest.fixture
def forkserver() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.stop()


def run(turn: TurnSpec, forkserver: ForkServer) -> RunOutcome:
    done: list[RunOutcome] = []
    ended = threading.Event()
    TurnProcess(turn, lambda outcome: (done.append(outcome), ended.set()), forkserver).start()
    assert ended.wait(30), "the child never ended"
    return done[0]


def test_a_real_child_reads_the_whole_prompt_on_stdin(tmp_path: Path,
                                                      forkserver: ForkServer) -> None:
    outcome = run(spec(tmp_path), forkserver)
    assert outcome.exit_code == 0 and outcome.stdout == PROMPT
    assert not (tmp_path / "turns").exists()  # a memfd: nothing was written to the state dir


def test_without_memfd_the_prompt_file_is_gone_before_the_child_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forkserver: ForkServer) -> None:
    monkeypatch.delattr(os, "memfd_create")
    turn = spec(tmp_path, ("sh", "-c", 'ls "$0"; cat', str(tmp_path / "turns")))
    outcome = run(turn, forkserver)
    assert outcome.exit_code == 0 and outcome.stdout == PROMPT  # `ls` listed nothing
    assert list((tmp_path / "turns").iterdir()) == []
    assert (tmp_path / "turns").stat().st_mode & 0o777 == 0o700


def test_the_prompt_file_is_owner_only_while_it_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "memfd_create")
    with prompt_stdin(spec(tmp_path)) as fh:
        assert os.fstat(fh.fileno()).st_mode & 0o777 == 0o600
        assert fh.read().decode("utf-8") == PROMPT


STREAMER = """
import json, os, sys, time
sys.stdin.read()
print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-9"}), flush=True)
# Wait until the runner has handed that line on: a runner that buffered stdout to the end
# would never let this child go on.
deadline = time.monotonic() + 20
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.01)
sys.stdout.buffer.write(b"\\xff\\xfe not utf-8\\n" + b"y" * 5_000_000 + b"\\n")
print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                  "result": "seen " + str(os.path.exists(sys.argv[1]))}))
sys.stdout.write('{"type": "assistant", "mess')  # the stream stops mid-line
"""


def test_a_stream_is_read_line_by_line_while_the_agent_runs(
        tmp_path: Path, forkserver: ForkServer) -> None:
    from dataclasses import replace

    from wakeline.agents.registry import reader_for
    from wakeline.agents.streams import SessionStarted

    marker = tmp_path / "handed-on"
    seen: list[object] = []

    def on_progress(events: list[object]) -> None:
        seen.extend(events)
        marker.touch()

    script = tmp_path / "streamer.py"
    script.write_text(STREAMER)
    turn = replace(spec(tmp_path, (sys.executable, str(script), str(marker))),
                   reader=reader_for("claude"), on_progress=on_progress)
    outcome = run(turn, forkserver)
    assert seen == [SessionStarted("s-9")]
    assert outcome.answer is not None and outcome.answer.text == "seen True"
    assert outcome.stdout == "seen True" and outcome.runner_session == "s-9"
    assert outcome.skipped_lines == 3  # not UTF-8 (nor JSON), the 5 MB line, the cut-off one


def test_a_text_agent_keeps_the_head_of_a_flood_and_the_tail_of_its_stderr(
        tmp_path: Path, forkserver: ForkServer) -> None:
    flood = f"head -c {STDOUT_MAX_BYTES + 5000} /dev/zero; echo oops >&2; exit 1"
    outcome = run(spec(tmp_path, ("sh", "-c", flood)), forkserver)
    assert outcome.exit_code == 1 and outcome.stdout == "\0" * STDOUT_MAX_BYTES
    assert outcome.stdout_truncated and outcome.stderr_tail == "oops\n"


BURST = """
import json, os, sys, time
sys.stdin.read()
print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-1"}), flush=True)
deadline = time.monotonic() + 20  # until the runner has handed that line on (and gathers)
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.01)
call = {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t",
        "name": "Bash", "input": {"command": "x" * 150}}]}}
sys.stdout.write((json.dumps(call) + "\\n") * int(sys.argv[2]))  # written before it exits
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "ok"}))
"""


@pytest.mark.parametrize("calls", [0, 3_000], ids=["quiet", "a 700 KB burst"])
def test_a_gathering_runner_never_holds_up_the_agent_or_its_answer(
        tmp_path: Path, forkserver: ForkServer, calls: int) -> None:
    """The runner waits between reads of a stream so that lines gather; with that wait made
    far longer than the test's deadline, the agent's exit must still end it at once, and a
    burst larger than a default pipe must not block the agent's writes meanwhile."""
    from dataclasses import replace

    from wakeline.agents.registry import reader_for
    from wakeline.agents.streams import ToolStarted

    if calls and not hasattr(__import__("fcntl"), "F_SETPIPE_SZ"):
        pytest.skip("the pipe cannot be widened on this platform")
    marker = tmp_path / "handed-on"
    started: list[object] = []

    def on_progress(events: list[object]) -> None:
        started.extend(e for e in events if isinstance(e, ToolStarted))
        marker.touch()

    script = tmp_path / "burst.py"
    script.write_text(BURST)
    turn = replace(spec(tmp_path, (sys.executable, str(script), str(marker), str(calls))),
                   reader=reader_for("claude"), on_progress=on_progress, gather_seconds=600.0)
    outcome = run(turn, forkserver)
    assert outcome.exit_code == 0 and outcome.stdout == "ok"
    assert len(started) == calls


def test_lines_gather_for_a_tenth_of_the_progress_interval_at_most() -> None:
    from wakeline.turns.runner import STREAM_GATHER_SECONDS, gather_seconds

    assert gather_seconds(0) == 0  # no interval: every step may show on its own
    assert gather_seconds(0.5) == pytest.approx(0.05)
    assert gather_seconds(3) == gather_seconds(3600) == STREAM_GATHER_SECONDS
