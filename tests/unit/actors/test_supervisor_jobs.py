"""An engine's job waiting on the supervisor ends when the supervisor does."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pykka

from wakeline.actors.supervisor import run_one_turn


class _Unanswering(pykka.ThreadingActor):
    """Takes the job's message and never answers it, as a supervisor stopping does."""

    def __init__(self, took: threading.Event) -> None:
        super().__init__()
        self._took = took

    def serve_one(self, conversation_id: str, done: Future[bool]) -> None:
        self._took.set()


def test_a_job_ends_when_the_supervisor_stops_without_answering() -> None:
    took = threading.Event()
    supervisor = _Unanswering.start(took).proxy()
    outcome: list[Any] = []

    def job() -> None:
        try:
            outcome.append(run_one_turn(supervisor, "conv-1"))
        except RuntimeError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    assert took.wait(10)
    supervisor.actor_ref.stop()
    thread.join(30)
    assert not thread.is_alive(), "the job still waits on a stopped supervisor"
    assert isinstance(outcome[0], RuntimeError) and "stopping" in str(outcome[0])


def test_a_job_returns_what_the_supervisor_answers() -> None:
    class Answering(pykka.ThreadingActor):
        def serve_one(self, conversation_id: str, done: Future[bool]) -> None:
            done.set_result(True)

    assert run_one_turn(Answering.start().proxy(), "conv-1") is True
