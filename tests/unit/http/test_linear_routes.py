"""The Linear, effect and doctor routes in-process, with no tracker wired (the local backend)."""

from __future__ import annotations

from typing import Any

import pytest
from falcon import testing

DELETE = 'mutation { documentDelete(id: "d-1") { success } }'


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/linear/graphql"), ("POST", "/v1/linear/comment"), ("POST", "/v1/linear/connect"),
    ("GET", "/v1/webhook-effects"), ("POST", "/v1/webhook-effects/x/reconcile-absent"), ("GET", "/v1/doctor"),
])
def test_every_new_route_needs_a_token(operator: Any, method: str, path: str) -> None:
    resp = testing.TestClient(operator.app).simulate_request(method, path, json={})
    assert resp.status_code == 401 and resp.json == {"error": "unauthorized"}


def test_checks_run_before_the_missing_tracker_answers_503(operator: Any) -> None:
    assert operator.simulate_post("/v1/linear/graphql", json={"query": "{"}).status_code == 400
    assert operator.simulate_post("/v1/linear/graphql", json={"query": DELETE}).status_code == 409
    resp = operator.simulate_post("/v1/linear/graphql", json={"query": DELETE, "confirm": ["d-1"]})
    assert resp.status_code == 503 and resp.json["error"] == "requires_connected_linear"
    resp = operator.simulate_post("/v1/linear/comment", json={"issueId": "i-1", "body": "hi"})
    assert resp.status_code == 503
    assert operator.simulate_get("/v1/webhook-effects").json == {"effects": []}


def test_doctor_in_process_without_secrets(operator: Any) -> None:
    data = operator.simulate_get("/v1/doctor").json
    by_name = {c["name"]: c for c in data["checks"]}
    assert data["ok"] is False  # no webhook secret: every delivery would be refused
    assert not by_name["webhook_secret"]["ok"] and by_name["store"]["ok"]
    assert data["linear"]["graphqlUsable"] is False
