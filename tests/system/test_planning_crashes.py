"""`kill -9` of `wakeline serve` in the middle of plan, approve, execute.

A real `wakeline serve` child with a planning route, the fake agent in `planner` mode,
and the fake Linear on loopback. Killed between taking the execution lease and the move
of the issue to In Progress, the issue is moved once and the execution runs once after
the restart; killed during the execution itself, it resumes, at most three times, then
the conversation is stalled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.linear import FakeLinear
from tests.helpers import wait_until
from tests.integration.actors.test_planning import APPROVED, AWAITING, DOING, READY, move, team
from tests.system.test_crash_recovery import Server

pytestmark = pytest.mark.slow

ROUTES = '[[routes]]\nname = "ops"\nteams = ["OPS"]\nmode = "issue"\nplanning = true\n'


def conversation(server: Server) -> dict[str, Any]:
    convs = [c for c in server.api("GET", "/v1/conversations").json()["conversations"]
             if c["kind"] == "issue"]
    return server.api("GET", f"/v1/conversations/{convs[0]['id']}").json()


def planned(server: Server) -> None:
    """Start, ask for a plan, and wait until it waits for approval."""
    server.start()
    wait_until(lambda: next(c for c in server.api("GET", "/v1/doctor").json()["checks"]
                            if c["name"] == "planning ops")["ok"], timeout=30, message="set up")
    assert server.send(move(READY)).json() == {"outcome": "accepted"}
    wait_until(lambda: conversation(server)["plan"]["phase"] == "awaiting", timeout=30,
               message="the plan waits for approval")


def test_killed_between_the_lease_and_the_move_one_move_and_one_execution(tmp_path: Path) -> None:
    fake = FakeLinear(teams={"OPS": team()}).start()
    server = Server(tmp_path, fake.url, agent=("planner",), routes=ROUTES)
    try:
        planned(server)
        held = fake.hold(DOING)  # Linear takes the move but has not answered when the kill comes
        assert server.send(move(APPROVED, AWAITING)).json() == {"outcome": "accepted"}
        wait_until(lambda: [r for r in fake.updates() if DOING in str(r.body)], timeout=30,
                   message="the move reached Linear")
        server.kill9()
        held.set()
        server.start()
        wait_until(lambda: len(server.runs()) == 2, timeout=60, message="the execution ran")
        wait_until(lambda: conversation(server)["state"] == "idle", timeout=30, message="done")
        moves = [r.body["variables"]["input"]["stateId"] for r in fake.updates()]
        assert moves == [AWAITING, DOING]  # one move to In Progress, never sent again
        assert [r["phase"] for r in server.runs()] == ["plan", "execute"]  # one execution
        plan = conversation(server)["plan"]
        assert plan["lease"] is not None and plan["approvedRev"] == 1
    finally:
        server.stop()
        fake.stop()


def test_killed_during_the_execution_it_resumes_at_most_three_times(tmp_path: Path) -> None:
    fake = FakeLinear(teams={"OPS": team()}).start()
    server = Server(tmp_path, fake.url, agent=("planner", "sleep-execute"), routes=ROUTES)
    try:
        planned(server)
        assert server.send(move(APPROVED, AWAITING)).json() == {"outcome": "accepted"}
        for attempt in range(1, 4):
            wait_until(lambda n=attempt: len(server.runs()) == 1 + n, timeout=60,
                       message=f"execution attempt {attempt} started")
            server.kill9()
            server.start()
        conv = wait_until(lambda: (c := conversation(server))["state"] == "stalled" and c,
                          timeout=30, message="stalled after three attempts")
        runs = server.runs()
        assert [r["phase"] for r in runs] == ["plan", "execute", "execute", "execute"]
        assert conv["plan"]["lease"] is not None  # the lease stays; an operator decides
        assert "interrupted" in conv["turn"]["lastError"]
    finally:
        server.stop()
        fake.stop()
