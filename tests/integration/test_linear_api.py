"""`/v1/linear/*`, `/v1/webhook-effects` and `/v1/doctor` through a real service and a fake Linear."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import pytest
import requests
from click.testing import CliRunner

from tests.conftest import LINEAR_KEY, OPERATOR_TOKEN, WEBHOOK_SECRET, comment_event, signed
from tests.fakes.linear import FakeLinear
from tests.helpers import free_port
from wakeline.app import Service, build_service
from wakeline.cli import cli
from wakeline.config import Config
from wakeline.secrets import Secrets
from wakeline.turns.tokens import Lane

DELETE_DOC = 'mutation Tidy { documentDelete(id: "doc-1") { success } }'
VIEWER = "query { viewer { id name } }"


def default_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The fake's usual answers, plus a success for any destructive or update mutation."""
    query = str(body.get("query", ""))
    for name in ("documentDelete", "issueArchive", "issueBatchArchive", "issueUpdate", "issueDelete"):
        if name in query:
            return {"data": {name: {"success": True}}}
    return FakeLinear().answer(body)


@dataclass
class Running:
    """A started service, its fake Linear, and an HTTP session per lane."""

    service: Service
    linear: FakeLinear

    def token(self, lane: Lane) -> str:
        if lane is Lane.OPERATOR:
            return OPERATOR_TOKEN
        return self.service.tokens.issue_turn_token(lane, f"cv_{lane.value}", f"turn_{lane.value}")

    def post(self, path: str, body: Any, lane: Lane = Lane.OPERATOR, token: str | None = None
             ) -> requests.Response:
        return requests.post(self.service.operator.url + path, json=body, timeout=60,
                             headers={"Authorization": f"Bearer {token or self.token(lane)}"})

    def get(self, path: str, lane: Lane = Lane.OPERATOR, **params: Any) -> requests.Response:
        return requests.get(self.service.operator.url + path, params=params, timeout=30,
                            headers={"Authorization": f"Bearer {self.token(lane)}"})

    def graphql(self, query: str, lane: Lane = Lane.OPERATOR, **extra: Any) -> requests.Response:
        return self.post("/v1/linear/graphql", {"query": query, **extra}, lane)

    def sent(self) -> int:
        return len(self.linear.requests)


@pytest.fixture
def running(make_config: Callable[..., Config], secrets: Secrets) -> Iterator[Callable[..., Running]]:
    """Start a service against a fresh fake Linear; keywords go to [linear]."""
    started: list[Running] = []

    def start(*, credential: bool = True, handler: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
              **linear: Any) -> Running:
        fake = FakeLinear(handler=handler or default_answer).start()
        config = make_config(state_dir=f"state{len(started)}", linear={"api_url": fake.url, **linear})
        keys = secrets if credential else replace(secrets, linear_api_key=None)
        service = build_service(config, keys, base_env={"PATH": "/usr/bin:/bin"}, tick_seconds=0.05)
        service.start()
        started.append(Running(service, fake))
        return started[-1]

    yield start
    for r in started:
        r.service.stop()
        r.linear.stop()


# --- lanes ---------------------------------------------------------------------------------------


def test_queries_run_in_every_lane(running: Callable[..., Running]) -> None:
    r = running()
    for lane in Lane:
        resp = r.graphql(VIEWER, lane)
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"data": {"viewer": {"id": "app-user-1", "name": "wakeline app"}}}
    assert r.sent() == 3
    assert r.linear.requests[0].headers["Authorization"] == LINEAR_KEY
    assert r.linear.requests[0].body == {"query": VIEWER}


def test_the_room_lane_may_not_mutate_and_nothing_is_sent(running: Callable[..., Running]) -> None:
    r = running()
    update = 'mutation { issueUpdate(id: "i-1", input: {title: "x"}) { success } }'
    for query, extra in [
        (update, {}),
        (DELETE_DOC, {"confirm": ["doc-1"]}),
        ("mutation { documentDelete { success } }", {}),  # unnameable: still the lane answers
    ]:
        resp = r.graphql(query, Lane.ROOM, **extra)
        assert resp.status_code == 403 and resp.json()["error"] == "lane_refused", resp.text
    assert r.sent() == 0


def test_workers_and_the_operator_may_mutate(running: Callable[..., Running]) -> None:
    r = running()
    update = 'mutation { issueUpdate(id: "i-1", input: {title: "x"}) { success } }'
    for lane in (Lane.WORKER, Lane.OPERATOR):
        resp = r.graphql(update, lane)
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"data": {"issueUpdate": {"success": True}}}
    # The first update asks Linear once who wakeline is (its echo is held by that account).
    assert [q.body.get("operationName") for q in r.linear.requests] == ["WakelineViewer", None, None]


def test_no_token_or_a_revoked_one_is_unauthorized(running: Callable[..., Running]) -> None:
    r = running()
    token = r.token(Lane.WORKER)
    r.service.tokens.revoke(token)
    resp = r.post("/v1/linear/graphql", {"query": VIEWER}, token=token)
    assert resp.status_code == 401 and resp.json() == {"error": "unauthorized"}
    assert r.sent() == 0


# --- destructive mutations ----------------------------------------------------------------------


def test_a_destructive_mutation_needs_exactly_its_targets_confirmed(running: Callable[..., Running]) -> None:
    r = running()
    doc = ('mutation Wipe($ids: [String!]!, $one: String = "d-3") { '
           'a: issueBatchArchive(ids: $ids) { success } ...More } '
           'fragment More on Mutation { ... on Mutation { documentDelete(id: $one) { success } } }')
    variables = {"ids": ["i-1", "i-2"]}
    for confirm in (None, [], ["i-1", "i-2"], ["i-1", "i-2", "d-3", "x"], ["i-1", "i-2", "d-3", "d-3"],
                    ["I-1", "i-2", "d-3"]):
        extra: dict[str, Any] = {"variables": variables, "operationName": "Wipe"}
        if confirm is not None:
            extra["confirm"] = confirm
        resp = r.graphql(doc, **extra)
        assert resp.status_code == 409, (confirm, resp.text)
        assert resp.json()["error"] == "confirm_mismatch"
        assert resp.json()["targets"] == ["i-1", "i-2", "d-3"]
    assert r.sent() == 0
    ok = r.graphql(doc, variables=variables, operationName="Wipe", confirm=["d-3", "i-2", "i-1"])
    assert ok.status_code == 200, ok.text
    assert r.sent() == 1
    assert r.linear.requests[0].body == {"query": doc, "variables": variables, "operationName": "Wipe"}


def test_the_worker_lane_needs_the_confirmation_too(running: Callable[..., Running]) -> None:
    r = running()
    assert r.graphql(DELETE_DOC, Lane.WORKER).status_code == 409
    assert r.graphql(DELETE_DOC, Lane.WORKER, confirm=["doc-1"]).status_code == 200
    assert r.sent() == 1


def test_confirming_a_mutation_that_destroys_nothing_is_a_mismatch(running: Callable[..., Running]) -> None:
    r = running()
    resp = r.graphql('mutation { issueUnarchive(id: "i-1") { success } }', confirm=["i-1"])
    assert resp.status_code == 409 and resp.json()["targets"] == []
    assert r.sent() == 0


def test_unnameable_targets_are_refused_before_dispatch(running: Callable[..., Running]) -> None:
    r = running()
    for query, variables in [
        ("mutation { documentDelete { success } }", None),
        ("mutation ($id: String) { documentDelete(id: $id) { success } }", None),
        ('mutation { issueArchive(id: {eq: "x"}) { success } }', None),
    ]:
        resp = r.graphql(query, variables=variables, confirm=[])
        assert resp.status_code == 422, resp.text
        body = resp.json()
        assert body["error"] == "target_unnameable" and body["field"] in ("documentDelete", "issueArchive")
    assert r.sent() == 0


@pytest.mark.parametrize(("body", "code"), [
    ({"query": "mutation {"}, "invalid_query"),
    ({"query": "query A { viewer { id } } query B { viewer { id } }"}, "invalid_query"),
    ({"query": "subscription { issues { id } }"}, "invalid_query"),
    ({"query": ""}, "invalid_query"),
    ({"variables": {}}, "invalid_query"),
    ({"query": VIEWER, "variables": ["x"]}, "invalid_query"),
    ({"query": VIEWER, "operationName": 3}, "invalid_query"),
    ({"query": DELETE_DOC, "confirm": "doc-1"}, "bad_request"),
    ({"query": DELETE_DOC, "confirm": [1]}, "bad_request"),
])
def test_bad_requests_are_400(running: Callable[..., Running], body: dict[str, Any], code: str) -> None:
    r = running()
    resp = r.post("/v1/linear/graphql", body)
    assert resp.status_code == 400 and resp.json()["error"] == code, resp.text
    assert r.sent() == 0


def test_a_dispatched_mutation_is_logged_with_fields_and_targets_only(
        running: Callable[..., Running], caplog: pytest.LogCaptureFixture) -> None:
    r = running()
    caplog.set_level(logging.INFO, logger="wakeline.http.linear")
    doc = ('mutation Tidy($id: String!, $note: String!) { documentDelete(id: $id) { success } '
           'commentCreate(input: {body: $note, issueId: "i-1"}) { success } }')
    resp = r.graphql(doc, variables={"id": "doc-1", "note": "private words"}, confirm=["doc-1"])
    assert resp.status_code == 200, resp.text
    (record,) = [rec for rec in caplog.records if rec.name == "wakeline.http.linear"
                 and rec.getMessage() == "linear mutation dispatched"]
    assert record.root_fields == ["documentDelete", "commentCreate"]  # type: ignore[attr-defined]
    assert record.targets == ["doc-1"]  # type: ignore[attr-defined]
    logged = json.dumps([vars(rec) for rec in caplog.records], default=str)
    assert "private words" not in logged and LINEAR_KEY not in logged


# --- one wire attempt, the budget and Linear's refusals -----------------------------------------------


def test_the_budget_refuses_before_dispatch(running: Callable[..., Running]) -> None:
    r = running(requests_per_hour=1)
    assert r.graphql(VIEWER).status_code == 200
    resp = r.graphql(VIEWER)
    assert resp.status_code == 429 and resp.json()["error"] == "budget_exhausted"
    assert resp.json()["retryAfterSeconds"] > 0
    assert r.sent() == 1


@pytest.mark.parametrize("behaviour", ["500", "drop"])
def test_a_failed_mutation_is_possibly_dispatched_and_never_retried(
        running: Callable[..., Running], behaviour: str) -> None:
    r = running()
    r.linear.script.append(behaviour)
    resp = r.graphql(DELETE_DOC, confirm=["doc-1"])
    assert resp.status_code == 504, resp.text
    assert resp.json()["error"] == "possibly_dispatched"
    for _ in range(3):  # the only path that sends again is the outbox: drive it
        r.service.tracker.kick().get()
    assert r.sent() == 1


def test_ratelimited_is_a_rejection_then_the_budget_waits_for_the_reset(running: Callable[..., Running]) -> None:
    r = running()
    r.linear.script.append("ratelimited")
    resp = r.graphql(VIEWER)
    assert resp.status_code == 502, resp.text
    body = resp.json()
    assert body["error"] == "provider_rejected" and body["detail"] == "Rate limit exceeded"
    assert body["codes"] == ["RATELIMITED"]
    # Linear's headers said nothing is left: the next call is refused here, not sent.
    again = r.graphql(VIEWER)
    assert again.status_code == 429 and again.json()["error"] == "budget_exhausted"
    assert r.sent() == 1


def test_graphql_errors_come_back_with_linears_message_redacted(running: Callable[..., Running]) -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return {"errors": [{"message": f"Argument Validation Error (key {LINEAR_KEY})",
                            "extensions": {"code": "INVALID_INPUT"}}], "data": None}

    r = running(handler=answer)
    resp = r.graphql('mutation { issueUpdate(id: "i-1", input: {}) { success } }')
    assert resp.status_code == 502
    assert resp.json()["detail"] == "Argument Validation Error (key [redacted])"
    assert LINEAR_KEY not in resp.text


def test_without_a_credential_linear_calls_are_503(running: Callable[..., Running]) -> None:
    r = running(credential=False)
    for resp in (r.graphql(VIEWER), r.post("/v1/linear/comment", {"issueId": "i-1", "body": "hi"}),
                 r.post("/v1/linear/connect", {})):
        assert resp.status_code == 503 and resp.json()["error"] == "requires_connected_linear", resp.text
    assert r.service.store.outbox.listing() == []
    assert r.sent() == 0


# --- the curated comment write --------------------------------------------------------------------


def test_a_comment_is_written_once_with_its_recorded_id(running: Callable[..., Running]) -> None:
    r = running()
    resp = r.post("/v1/linear/comment", {"issueId": "issue-7", "body": "Looks good to me."})
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["state"] == "confirmed" and answer["issueId"] == "issue-7"
    (sent,) = r.linear.comments()
    assert sent.input == {"id": answer["id"], "issueId": "issue-7", "body": "Looks good to me."}
    (effect,) = r.get("/v1/webhook-effects").json()["effects"]
    assert (effect["id"], effect["kind"], effect["state"], effect["target"]) == (
        answer["id"], "comment", "confirmed", "issue-7")
    assert effect["resultIds"] == [answer["id"]]


def test_a_comment_created_through_graphql_comes_back_as_a_self_echo(running: Callable[..., Running]) -> None:
    """An agent commenting on its own issue through the escape hatch does not wake itself."""
    r = running()
    query = 'mutation { commentCreate(input: {issueId: "issue-1", body: "Done."}) { success } }'
    assert r.graphql(query, Lane.WORKER).status_code == 200
    (sent,) = r.linear.requests
    object_id = re.search(r'id: "([0-9a-f-]{36})"', sent.body["query"]).group(1)  # type: ignore[union-attr]
    echo = comment_event()
    echo["data"]["id"] = object_id
    raw, headers = signed(echo)
    answer = requests.post(r.service.ingress.url + "/webhooks/linear", data=raw, headers=headers, timeout=10)
    assert answer.json() == {"outcome": "self_echo", "reason": "own_write"}
    someone_else = comment_event()  # any other comment is an ordinary event
    raw, headers = signed(someone_else)
    answer = requests.post(r.service.ingress.url + "/webhooks/linear", data=raw, headers=headers, timeout=10)
    assert answer.json() == {"outcome": "accepted"}


def test_a_worker_comments_for_its_conversation_and_a_room_may_not(running: Callable[..., Running]) -> None:
    r = running()
    resp = r.post("/v1/linear/comment", {"issueId": "issue-7", "body": "done"}, Lane.WORKER)
    assert resp.status_code == 200, resp.text
    assert r.service.store.outbox.get(resp.json()["id"])["conversationId"] == "cv_worker"
    refused = r.post("/v1/linear/comment", {"issueId": "issue-7", "body": "done"}, Lane.ROOM)
    assert refused.status_code == 403 and refused.json()["error"] == "lane_refused"
    assert len(r.linear.comments()) == 1


@pytest.mark.parametrize("body", [
    {"body": "x"}, {"issueId": "", "body": "x"}, {"issueId": 7, "body": "x"}, {"issueId": "i-1"},
    {"issueId": "i-1", "body": "   "}, {"issueId": "i-1", "body": "x" * 30_001}, {"issueId": "i-1", "body": ["x"]},
])
def test_comment_validation(running: Callable[..., Running], body: dict[str, Any]) -> None:
    r = running()
    resp = r.post("/v1/linear/comment", body)
    assert resp.status_code == 400 and resp.json()["error"] == "bad_request", resp.text
    assert r.sent() == 0 and r.service.store.outbox.listing() == []


def test_a_comment_of_the_largest_size_is_accepted(running: Callable[..., Running]) -> None:
    r = running()
    resp = r.post("/v1/linear/comment", {"issueId": "i-1", "body": "x" * 30_000})
    assert resp.status_code == 200, resp.text
    assert len(r.linear.comments()[0].input["body"]) == 30_000


def test_a_rejected_comment_is_502_with_its_effect(running: Callable[..., Running]) -> None:
    r = running()
    r.linear.script.append("error")
    resp = r.post("/v1/linear/comment", {"issueId": "gone", "body": "hello"})
    assert resp.status_code == 502, resp.text
    body = resp.json()
    assert body["error"] == "provider_rejected" and body["state"] == "rejected"
    assert "Entity not found" in body["detail"]
    assert r.service.store.outbox.get(body["id"])["state"] == "rejected"


def test_a_lost_comment_is_504_then_the_operator_releases_it(running: Callable[..., Running]) -> None:
    r = running()
    r.linear.script.append("500")
    resp = r.post("/v1/linear/comment", {"issueId": "i-1", "body": "hello"})
    assert resp.status_code == 504, resp.text
    effect_id = resp.json()["id"]
    assert resp.json()["state"] == "outcome_unknown"
    for _ in range(3):
        r.service.tracker.kick().get()
    assert len(r.linear.comments()) == 1  # never sent again

    unknown = r.get("/v1/webhook-effects", state="outcome_unknown").json()["effects"]
    assert [e["id"] for e in unknown] == [effect_id]
    assert r.get("/v1/webhook-effects", state="confirmed").json()["effects"] == []

    path = f"/v1/webhook-effects/{effect_id}/reconcile-absent"
    for bad in ({}, {"verified_absent": False}, {"verified_absent": "true"}, {"verified_absent": 1}):
        assert r.post(path, bad).status_code == 400
    assert r.post(path, {"verified_absent": True}, Lane.WORKER).status_code == 403
    released = r.post(path, {"verified_absent": True})
    assert released.status_code == 200, released.text
    assert released.json()["state"] == "released" and released.json()["id"] == effect_id
    again = r.post(path, {"verified_absent": True})
    assert again.status_code == 409 and again.json() == {
        "error": "conflict", "detail": f"effect {effect_id} is released, not outcome_unknown",
        "state": "released"}
    missing = r.post("/v1/webhook-effects/no-such-effect/reconcile-absent", {"verified_absent": True})
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert len(r.linear.comments()) == 1


def test_a_confirmed_effect_cannot_be_released(running: Callable[..., Running]) -> None:
    r = running()
    effect_id = r.post("/v1/linear/comment", {"issueId": "i-1", "body": "hi"}).json()["id"]
    resp = r.post(f"/v1/webhook-effects/{effect_id}/reconcile-absent", {"verified_absent": True})
    assert resp.status_code == 409 and resp.json()["state"] == "confirmed"


def test_effects_listing_is_operator_only_and_checks_its_parameters(running: Callable[..., Running]) -> None:
    r = running()
    assert r.get("/v1/webhook-effects", Lane.ROOM).status_code == 403
    assert r.get("/v1/webhook-effects", Lane.WORKER).status_code == 403
    assert r.get("/v1/webhook-effects", state="lost").status_code == 400
    assert r.get("/v1/webhook-effects", limit=0).status_code == 400
    for i in range(3):
        r.post("/v1/linear/comment", {"issueId": f"i-{i}", "body": "hi"})
    listed = r.get("/v1/webhook-effects", limit=2).json()["effects"]
    assert [e["target"] for e in listed] == ["i-2", "i-1"]  # newest first
    assert all("body" not in e for e in listed)


# --- connect and doctor ------------------------------------------------------------------------------


def checks(r: Running) -> dict[str, dict[str, Any]]:
    data = r.get("/v1/doctor").json()
    return {c["name"]: c for c in data["checks"]}


def test_connect_records_the_account_and_doctor_reports_it(running: Callable[..., Running]) -> None:
    r = running()
    before = r.get("/v1/doctor").json()
    assert before["ok"] is False
    assert not checks(r)["linear_account"]["ok"]
    assert "wakeline linear connect" in checks(r)["linear_account"]["detail"]
    assert r.sent() == 0  # the doctor never calls Linear

    assert r.post("/v1/linear/connect", {}, Lane.WORKER).status_code == 403
    resp = r.post("/v1/linear/connect", {})
    assert resp.status_code == 200, resp.text
    account = resp.json()
    assert {k: account[k] for k in ("id", "name", "kind")} == {
        "id": "app-user-1", "name": "wakeline app", "kind": "personal_api_key"}
    assert "viewer" in r.linear.requests[0].query and r.sent() == 1

    after = r.get("/v1/doctor").json()
    assert after["ok"] is True, after
    by_name = {c["name"]: c for c in after["checks"]}
    assert by_name["linear_account"]["detail"] == "wakeline app (app-user-1)"
    assert by_name["linear_credential"]["detail"] == "personal_api_key"
    assert by_name["linear_graphql"]["ok"] and "usable" in by_name["linear_graphql"]["detail"]
    assert by_name["linear_budget"]["detail"] == "1 of 2500 requests used in the last hour"
    assert by_name["store"]["ok"] and "quick check ok" in by_name["store"]["detail"]
    assert after["linear"]["account"]["id"] == "app-user-1"
    assert after["linear"]["budget"] == {"usedThisHour": 1, "perHour": 2500}
    text = json.dumps(after)
    for secret in (LINEAR_KEY, OPERATOR_TOKEN, WEBHOOK_SECRET):
        assert secret not in text
    assert r.sent() == 1


def test_doctor_reports_secret_files_and_their_modes(running: Callable[..., Running]) -> None:
    r = running()
    r.post("/v1/linear/connect", {})
    config = r.service.config
    webhook = config.path(config.linear.webhook_secret_file)
    webhook.parent.mkdir(parents=True, exist_ok=True)
    webhook.write_text(WEBHOOK_SECRET + "\n")
    webhook.chmod(0o644)
    token = config.operator_token_path
    token.write_text(OPERATOR_TOKEN + "\n")
    token.chmod(0o600)
    by_name = checks(r)
    assert not by_name["webhook_secret"]["ok"]
    assert "mode 0644" in by_name["webhook_secret"]["detail"] and "0600" in by_name["webhook_secret"]["detail"]
    assert by_name["operator_token"] == {"name": "operator_token", "ok": True,
                                         "detail": f"{token} (mode 0600)"}
    assert by_name["linear_api_key"] == {"name": "linear_api_key", "ok": True, "detail": "env"}
    webhook.chmod(0o600)
    assert checks(r)["webhook_secret"]["ok"]
    assert r.get("/v1/doctor").json()["ok"] is True
    assert r.get("/v1/doctor", Lane.WORKER).status_code == 403


def test_doctor_without_a_credential(running: Callable[..., Running]) -> None:
    r = running(credential=False)
    data = r.get("/v1/doctor").json()
    by_name = {c["name"]: c for c in data["checks"]}
    assert data["ok"] is True, data
    assert by_name["linear_credential"]["detail"] == "none (local backend)"
    assert by_name["linear_api_key"]["detail"].startswith("not set")
    assert "not usable" in by_name["linear_graphql"]["detail"]
    assert data["linear"]["graphqlUsable"] is False and data["linear"]["credentialKind"] == "none"


def test_a_key_replaced_after_connect_asks_for_connect_again(running: Callable[..., Running]) -> None:
    r = running()
    r.post("/v1/linear/connect", {})
    stale = dict(r.service.store.get_setting("linear.account"), credentialFingerprint="0" * 16)
    r.service.store.set_setting("linear.account", stale)
    account = checks(r)["linear_account"]
    assert not account["ok"] and "connect` again" in account["detail"]


# --- the CLI -------------------------------------------------------------------------------------------


def cli_env(r: Running, lane: Lane = Lane.OPERATOR) -> dict[str, str | None]:
    return {"WAKELINE_API_URL": r.service.operator.url, "WAKELINE_TOKEN": r.token(lane),
            "WAKELINE_CONFIG": None}


def test_cli_linear_graphql(running: Callable[..., Running], tmp_path: Path) -> None:
    r = running()
    runner = CliRunner()
    env = cli_env(r)
    out = runner.invoke(cli, ["linear", "graphql", VIEWER], env=env)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"data": {"viewer": {"id": "app-user-1", "name": "wakeline app"}}}

    piped = runner.invoke(cli, ["linear", "graphql", "-"], input=VIEWER, env=env)
    assert piped.exit_code == 0 and json.loads(piped.stdout)["data"]["viewer"]["id"] == "app-user-1"

    doc = tmp_path / "wipe.graphql"
    doc.write_text('query Read { viewer { id } } '
                   'mutation Wipe($ids: [String!]!) { issueBatchArchive(ids: $ids) { success } }')
    args = ["linear", "graphql", f"@{doc}", "--operation-name", "Wipe", "--variables", '{"ids": ["a", "b"]}']
    refused = runner.invoke(cli, [*args, "--confirm", "a"], env=env)
    assert refused.exit_code == 1
    assert "confirm_mismatch" in refused.stderr and '"targets": ["a", "b"]' in refused.stderr
    done = runner.invoke(cli, [*args, "--confirm", "b", "--confirm", "a"], env=env)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"data": {"issueBatchArchive": {"success": True}}}
    assert r.linear.requests[-1].body["operationName"] == "Wipe"

    for bad in (["--variables", "{nope"], ["--variables", "[1]"]):
        assert runner.invoke(cli, ["linear", "graphql", VIEWER, *bad], env=env).exit_code == 2
    assert runner.invoke(cli, ["linear", "graphql", f"@{tmp_path / 'missing'}"], env=env).exit_code == 2

    room = runner.invoke(cli, ["linear", "graphql", DELETE_DOC, "--confirm", "doc-1"], env=cli_env(r, Lane.ROOM))
    assert room.exit_code == 1 and "lane_refused" in room.stderr
    invalid = runner.invoke(cli, ["linear", "graphql", "mutation {"], env=env)
    assert invalid.exit_code == 1 and "invalid_query" in invalid.stderr


def test_cli_linear_comment_and_connect(running: Callable[..., Running]) -> None:
    r = running()
    runner = CliRunner()
    out = runner.invoke(cli, ["linear", "comment", "issue-3", "-"], input="from stdin\n",
                        env=cli_env(r, Lane.WORKER))
    assert out.exit_code == 0, out.output
    (sent,) = r.linear.comments()
    assert out.stdout.strip() == f"comment {sent.input['id']} on issue-3: confirmed"
    assert sent.input["body"] == "from stdin"

    connected = runner.invoke(cli, ["linear", "connect"], env=cli_env(r))
    assert connected.exit_code == 0, connected.output
    assert connected.stdout.strip() == "connected to Linear as wakeline app (app-user-1) with a personal api key"
    as_json = runner.invoke(cli, ["linear", "connect", "--json"], env=cli_env(r))
    assert json.loads(as_json.stdout)["kind"] == "personal_api_key"


def test_cli_doctor(running: Callable[..., Running]) -> None:
    r = running()
    runner = CliRunner()
    env = cli_env(r)
    failing = runner.invoke(cli, ["doctor"], env=env)
    assert failing.exit_code == 1
    assert "✗ linear_account: not verified yet" in failing.stdout
    assert "✓ store:" in failing.stdout and failing.stdout.strip().endswith("some checks failed")
    runner.invoke(cli, ["linear", "connect"], env=env)
    passing = runner.invoke(cli, ["doctor"], env=env)
    assert passing.exit_code == 0, passing.output
    assert "✗" not in passing.stdout and passing.stdout.strip().endswith("all checks passed")
    data = json.loads(runner.invoke(cli, ["doctor", "--json"], env=env).stdout)
    assert data["ok"] is True and {c["name"] for c in data["checks"]} >= {
        "config", "store", "webhook_secret", "linear_api_key", "operator_token", "linear_credential",
        "linear_account", "linear_graphql", "linear_budget"}


def test_cli_effects(running: Callable[..., Running]) -> None:
    r = running()
    runner = CliRunner()
    env = cli_env(r)
    assert runner.invoke(cli, ["effects"], env=env).stdout.strip() == "no effects"
    r.linear.script.append("500")
    lost = r.post("/v1/linear/comment", {"issueId": "i-1", "body": "hello"}).json()["id"]
    listed = runner.invoke(cli, ["effects", "list", "--state", "outcome_unknown"], env=env)
    assert listed.exit_code == 0 and listed.stdout.startswith(f"{lost}  outcome_unknown")
    assert "comment on i-1" in listed.stdout
    as_json = json.loads(runner.invoke(cli, ["effects", "--json"], env=env).stdout)
    assert [e["id"] for e in as_json["effects"]] == [lost]

    usage = runner.invoke(cli, ["effects", "reconcile-absent", lost], env=env)
    assert usage.exit_code == 2 and "--verified-absent" in usage.output
    done = runner.invoke(cli, ["effects", "reconcile-absent", lost, "--verified-absent"], env=env)
    assert done.exit_code == 0 and done.stdout.strip() == f"{lost}: released"
    again = runner.invoke(cli, ["effects", "reconcile-absent", lost, "--verified-absent"], env=env)
    assert again.exit_code == 1 and "conflict" in again.stderr


def test_cli_unreachable_is_exit_3(running: Callable[..., Running]) -> None:
    env = {"WAKELINE_API_URL": f"http://127.0.0.1:{free_port()}", "WAKELINE_TOKEN": "x",
           "WAKELINE_CONFIG": None}
    runner = CliRunner()
    for args in (["linear", "graphql", VIEWER], ["linear", "comment", "i-1", "hi"], ["linear", "connect"],
                 ["doctor"], ["effects"]):
        assert runner.invoke(cli, args, env=env).exit_code == 3, args
