"""`POST /v1/turn/progress`: a turn's own token only, the documented shapes only."""

from __future__ import annotations

from typing import Any

import falcon
import pytest
from falcon import testing

from tests.conftest import OPERATOR_TOKEN
from wakeline.turns.progress import Option, TurnProgress
from wakeline.agents.streams import LinkFound, PlanStep, PlanUpdate, SessionStarted, Thought, ToolStarted
from wakeline.http import errors
from wakeline.http.auth import BearerAuth
from wakeline.http.progress import add_routes
from wakeline.turns.tokens import Lane, TokenRegistry


@pytest.fixture
def setup() -> tuple[testing.TestClient, TokenRegistry, list[Any]]:
    tokens = TokenRegistry(OPERATOR_TOKEN)
    got: list[Any] = []
    progress = TurnProgress("turn-1", "cv-1", ["s-1"], [], lambda sessions, items: got.append(items),
                            remember_session=lambda sid: got.append(("session", sid)),
                            journal=lambda stage, text: None)
    progress.offer = lambda events: got.extend(events)  # type: ignore[method-assign]
    app = falcon.App(middleware=[BearerAuth(tokens)])
    errors.install(app)
    add_routes(app, {"turn-1": progress})
    got.append(progress)
    return testing.TestClient(app), tokens, got


def post(client: testing.TestClient, token: str, body: Any) -> Any:
    return client.simulate_post("/v1/turn/progress", json=body,
                                headers={"Authorization": f"Bearer {token}"})


def test_each_shape_becomes_its_event(setup: Any) -> None:
    client, tokens, got = setup
    token = tokens.issue_turn_token(Lane.WORKER, "cv-1", "turn-1")
    for body in ({"type": "thought", "body": "hm"},
                 {"type": "action", "action": "grep", "parameter": "TODO"},
                 {"type": "plan", "steps": [{"content": "a", "status": "inProgress"}]},
                 {"type": "link", "label": "PR", "url": "https://example.com/pr/1"},
                 {"type": "session", "id": "abc"},
                 {"type": "options", "options": [{"label": "Yes", "value": "y"}]}):
        resp = post(client, token, body)
        assert resp.status_code == 200 and resp.json == {"ok": True}, (body, resp.json)
    progress = got.pop(0)
    assert got == [Thought("hm"), ToolStarted("", "grep", "TODO"),
                   PlanUpdate((PlanStep("a", "inProgress"),)),
                   LinkFound("PR", "https://example.com/pr/1"), SessionStarted("abc")]
    assert progress.options == (Option("Yes", "y"),)


@pytest.mark.parametrize("body", [
    {"type": "link", "label": "x", "url": "javascript:alert(1)"},
    {"type": "link", "label": "x", "url": "ftp://host/file"},
    {"type": "plan", "steps": [{"content": "a", "status": "doing"}]},
    {"type": "plan", "steps": [{"content": "s", "status": "pending"}] * 501},
    {"type": "thought", "body": ""},
    {"type": "thought", "body": 5},
    {"type": "dance"},
    {"body": "no type"},
    {"type": "options", "options": []},
    {"type": "action", "action": "x", "parameter": "y", "extra": 1},
    [1, 2],
])
def test_a_malformed_event_is_400_invalid_progress(setup: Any, body: Any) -> None:
    client, tokens, _ = setup
    resp = post(client, tokens.issue_turn_token(Lane.ROOM, "cv-1", "turn-1"), body)
    assert resp.status_code == 400 and resp.json["error"] == "invalid_progress"
    assert resp.json.get("detail")


def test_only_a_running_turns_own_token(setup: Any) -> None:
    client, tokens, _ = setup
    thought = {"type": "thought", "body": "hm"}
    assert post(client, OPERATOR_TOKEN, thought).json["error"] == "no_turn"
    assert post(client, OPERATOR_TOKEN, thought).status_code == 409
    ended = tokens.issue_turn_token(Lane.WORKER, "cv-2", "turn-gone")
    assert post(client, ended, thought).status_code == 409
    token = tokens.issue_turn_token(Lane.WORKER, "cv-1", "turn-1")
    tokens.revoke(token)  # the turn ended
    assert post(client, token, thought).status_code == 401
