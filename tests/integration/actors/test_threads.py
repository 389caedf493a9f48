"""A running service's threads, counted by name against the budget its config allows
(`wakeline/service/threads.py`): at rest, while turns run in every slot, and after it stops."""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Callable

import pytest

from tests.conftest import comment_event, session_event
from tests.helpers import wait_until
from wakeline.service.threads import budget, over_budget

SLOTS = 2
CONVERSATIONS = 8
# The fakes' threads, not the service's: their servers and the stdlib's thread per request.
FAKES = re.compile(r"fake-.*|stand-in-linear|Thread-\d+ \(process_request_thread\)")


def service_threads(before: set[int | None]) -> list[str]:
    """Names of the threads started since `before` (idents), the fakes' left out."""
    return [t.name for t in threading.enumerate()
            if t.ident not in before and not FAKES.fullmatch(t.name)]


@pytest.mark.parametrize("discord", [False, True], ids=["plain", "discord"])
def test_every_thread_of_a_running_service_is_named_and_budgeted(
        harness: Callable[..., Any], discord: bool) -> None:
    if discord:
        pytest.importorskip("discord")
    before = {t.ident for t in threading.enumerate()}
    h = harness("sleep", "0.2", max_concurrent_turns=SLOTS, discord=True if discord else None)
    kinds = budget(h.service.config, discord=discord)
    assert over_budget(service_threads(before), kinds) == []  # at rest

    for n in range(CONVERSATIONS // 2):
        h.deliver(session_event(session_id=f"s-{n}", issue_id=f"eng-{n}", identifier=f"ENG-{n}"))
        h.deliver(comment_event(issue_id=f"ops-{n}", identifier=f"OPS-{n}"))
    problems: set[str] = set()
    runners = [0]  # the most runner threads seen at once

    def all_answered() -> bool:
        names = service_threads(before)
        problems.update(over_budget(names, kinds))
        runners[0] = max(runners[0], sum(n.startswith("turn-runner_") for n in names))
        convs = h.api("GET", "/v1/conversations").json()["conversations"]
        return sum(1 for c in convs if c["lastTurn"]) >= CONVERSATIONS

    wait_until(all_answered, 60, message="every conversation's turn")
    assert not problems, sorted(problems)
    assert runners[0] == SLOTS  # the turns did fill every slot
    if os.path.isdir("/proc/self/task"):
        # No thread outside Python's sight (a native one would have no name here).
        wait_until(lambda: len(os.listdir("/proc/self/task")) == threading.active_count(), 5,
                   message="every OS thread is a Python thread")

    h.service.stop()
    try:
        wait_until(lambda: not service_threads(before), 15)
    except AssertionError:
        pytest.fail(f"threads outlived the service: {service_threads(before)}")
