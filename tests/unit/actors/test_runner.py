"""The turn runner: the prompt reaches a real child's stdin and never lands on the disk."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Iterator

import pytest

from wakeline.actors.runner import RunOutcome, TurnProcess, TurnSpec, prompt_stdin
from wakeline.forkserver import ForkServer

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
