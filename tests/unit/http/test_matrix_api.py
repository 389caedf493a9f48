"""`/v1/matrix/read|send` and `/v1/approvals`: who may do what (no homeserver needed).

The connection here has no token, so it never runs: its route is off until a test turns it
on by hand, which is all the send path needs (a send only records an approval).
"""

from __future__ import annotations

from typing import Any, Callable

import falcon
import pytest
from falcon import testing
from pydantic import SecretStr

from tests.conftest import OPERATOR_TOKEN
from wakeline.clock import SystemClock
from wakeline.config import Config
from wakeline.http import errors
from wakeline.http.auth import BearerAuth
from wakeline.http.matrix import add_routes
from wakeline.models.approvals import body_digest
from wakeline.models.rooms import RoomEvent
from wakeline.models.envelopes import MatrixMessage
from wakeline.models.store import Store
from wakeline.providers.matrix.routes import RouteState
from wakeline.providers.matrix.part import MatrixRoutes
from wakeline.journal.recorder import Recorder
from wakeline.secrets import Secrets
from wakeline.turns.tokens import Lane, TokenRegistry


@pytest.fixture
def cfg(make_config: Callable[..., Config]) -> Config:
    return make_config(matrix={
        "connections": {"me": {"homeserver": "http://127.0.0.1:9", "user_id": "@me:x",
                               "access_token_file": "no-such-token"}},
        "routes": [{"name": "alice", "connection": "me", "room_id": "!a"}]})


class Api:
    def __init__(self, cfg: Config, store: Store, matrix: MatrixRoutes | None) -> None:
        self.tokens = TokenRegistry(OPERATOR_TOKEN)
        self.matrix = matrix
        self.store = store
        app = falcon.App(middleware=[BearerAuth(self.tokens)])
        errors.install(app)
        add_routes(app, matrix)
        self.client = testing.TestClient(app)
        message = MatrixMessage(connection="me", route="alice", room_id="!a", event_id="$1",
                                sender="@alice:x", body="hi")
        admitted = store.rooms.admit_page(
            "me", [RoomEvent(message, "h", "t", True, 1, 1)], "c", 1)
        self.room_conversation = admitted[0].conversation_id

    def call(self, method: str, path: str, token: str = OPERATOR_TOKEN, **kw: Any) -> Any:
        return self.client.simulate_request(method, path, headers={
            "Authorization": f"Bearer {token}"}, **kw)

    def turn(self, conversation: str, lane: Lane = Lane.ROOM) -> str:
        return self.tokens.issue_turn_token(lane, conversation, "turn_1")

    def route_on(self) -> None:
        c = self.matrix.connections["me"]  # type: ignore[union-attr]
        c.routes.set(RouteState(c.routes.get("alice").route, True, "checked by hand"))


@pytest.fixture
def api(cfg: Config, store: Store) -> Api:
    secrets = Secrets(None, None, SecretStr(OPERATOR_TOKEN))
    matrix = MatrixRoutes(cfg, store, SystemClock(), secrets, Recorder(None, lambda: 0),
                          lambda ids: None)
    return Api(cfg, store, matrix)


def test_a_connection_without_its_token_names_why_its_routes_are_off(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    state = api.matrix.connections["me"].routes.get("alice")  # type: ignore[union-attr]
    assert not state.on and "no access token in" in state.detail and "no-such-token" in state.detail
    [logged] = [r for r in caplog.get_records("setup") if r.getMessage() == "matrix connection off"]
    assert logged.connection == "me" and logged.reason == state.detail  # type: ignore[attr-defined]
    status = api.matrix.status()["connections"][0]  # type: ignore[union-attr]
    assert status["state"] == "failed" and status["routes"][0]["on"] is False


def test_a_route_s_turn_proposes_and_nothing_else_does(api: Api) -> None:
    api.route_on()
    turn = api.turn(api.room_conversation)
    resp = api.call("POST", "/v1/matrix/send", turn, json={"text": "a reply"})
    assert resp.status_code == 201, resp.json
    approval = resp.json["approval"]
    assert (approval["status"], approval["body"], approval["room"], approval["route"],
            approval["conversation"]) == ("pending", "a reply", "!a", "alice",
                                          api.room_conversation)
    assert approval["bodySha256"] == body_digest("a reply")

    other = api.turn("cv_linear0000000000", Lane.WORKER)
    assert api.call("POST", "/v1/matrix/send", other, json={"text": "x"}).json == {
        "error": "lane_refused", "detail": "this turn is not a Matrix route's"}
    assert api.call("GET", "/v1/matrix/read", other).status_code == 403
    assert api.call("POST", "/v1/matrix/send", json={"text": "x"}).status_code == 403  # operator
    for path in ("/v1/approvals", f"/v1/approvals/{approval['id']}/approve"):
        method = "GET" if path == "/v1/approvals" else "POST"
        assert api.call(method, path, turn, json={}).status_code == 403


@pytest.mark.parametrize("body,detail", [
    ({"text": ""}, "text must not be empty"),
    ({"text": "   "}, "text must not be empty"),
    ({"text": "x" * 30_001}, "text must be at most 30000 characters"),
    ({"text": 5}, "text must be a string"),
    ({"room": "!elsewhere"}, "text must be a string"),
])
def test_a_send_takes_text_and_nothing_else(api: Api, body: Any, detail: str) -> None:
    api.route_on()
    resp = api.call("POST", "/v1/matrix/send", api.turn(api.room_conversation), json=body)
    assert resp.status_code == 400 and resp.json["detail"] == detail


def test_an_off_route_proposes_and_reads_nothing(api: Api) -> None:
    turn = api.turn(api.room_conversation)
    resp = api.call("POST", "/v1/matrix/send", turn, json={"text": "x"})
    assert resp.status_code == 409 and resp.json["error"] == "route_off"
    assert api.call("GET", "/v1/matrix/read", turn).json["error"] == "route_off"
    assert api.call("GET", "/v1/matrix/read?route=alice").json["error"] == "route_off"
    assert api.call("GET", "/v1/matrix/read?route=nobody").status_code == 400
    assert api.call("GET", "/v1/matrix/read").status_code == 400  # the operator names it
    assert api.call("GET", "/v1/matrix/read?route=alice", turn).status_code == 400


def test_the_operator_decides(api: Api) -> None:
    api.route_on()
    turn = api.turn(api.room_conversation)
    first = api.call("POST", "/v1/matrix/send", turn, json={"text": "one"}).json["approval"]["id"]
    second = api.call("POST", "/v1/matrix/send", turn, json={"text": "two"}).json["approval"]["id"]

    listed = api.call("GET", "/v1/approvals").json["approvals"]
    assert {a["id"] for a in listed} == {first, second}
    assert api.call("POST", f"/v1/approvals/{first}/approve").json["approval"]["status"] == \
        "approved"  # the connection is down: it waits for it, approved
    assert api.call("POST", f"/v1/approvals/{first}/approve").status_code == 200
    assert api.call("POST", f"/v1/approvals/{first}/deny").status_code == 409
    assert api.call("POST", f"/v1/approvals/{second}/deny").json["approval"]["status"] == "denied"
    assert api.call("POST", f"/v1/approvals/{second}/approve").status_code == 409
    assert api.call("POST", "/v1/approvals/apr_nope/approve").status_code == 404
    assert api.call("POST", f"/v1/approvals/{first}/undo").status_code == 404
    assert api.call("GET", "/v1/approvals?status=denied").json["approvals"][0]["id"] == second
    assert api.call("GET", "/v1/approvals?status=maybe").status_code == 400


def test_without_matrix_there_is_nothing_to_approve_and_no_tool(cfg: Config, store: Store) -> None:
    api = Api(cfg, store, None)
    assert api.call("GET", "/v1/approvals").json == {"approvals": []}
    assert api.call("POST", "/v1/approvals/apr_x/approve").status_code == 404
    turn = api.turn(api.room_conversation)
    assert api.call("POST", "/v1/matrix/send", turn, json={"text": "x"}).status_code == 403
