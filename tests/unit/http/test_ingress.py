"""The public ingress, in-process: every check of CONTRACT section 2, in order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import (
    ORG, WEBHOOK_SECRET, comment_event, issue_event, now_ms, session_event, signed,
)
from wakeline.models.store import Store


def post(client: Any, body: dict[str, Any] | bytes, **kw: Any) -> Any:
    raw, headers = signed(body, **{k: v for k, v in kw.items() if k in ("delivery", "secret", "signature")})
    headers.update(kw.get("headers", {}))
    for name in kw.get("drop", ()):
        headers.pop(name)
    return client.simulate_post("/webhooks/linear", body=raw, headers=headers)


def state_counts(store: Store) -> tuple[int, int, int]:
    return (store.t.receipts.select().count(), store.t.deliveries.select().count(),
            store.t.inbox.select().count())


def test_comment_is_accepted_into_the_inbox(frozen: Any, ingress: Any, store: Store) -> None:
    resp = post(ingress, comment_event())
    assert resp.status_code == 200
    assert resp.json == {"outcome": "accepted"}
    assert state_counts(store) == (1, 0, 1)


def test_agent_session_for_a_routed_team_enters_the_fifo(frozen: Any, ingress: Any, store: Store) -> None:
    resp = post(ingress, session_event())
    assert resp.json == {"outcome": "accepted"}
    assert state_counts(store) == (1, 1, 0)
    conv = store.t.conversations.get(store.t.conversations.kind == "issue")
    assert conv.namespace == f"linear:{ORG}:issue" and conv.key == "issue-1"
    assert conv.title == "[ENG-1] Fix the thing"


def test_session_and_comment_on_one_issue_share_a_conversation(frozen: Any, ingress: Any,
                                                               store: Store) -> None:
    post(ingress, session_event(issue_id="i-9", identifier="ENG-9"))
    post(ingress, session_event("prompted", issue_id="i-9", identifier="ENG-9"))
    assert store.t.conversations.select().where(store.t.conversations.kind == "issue").count() == 1
    assert store.t.deliveries.select().count() == 2


def test_issue_route_events_enter_the_fifo_and_the_inbox(frozen: Any, ingress: Any, store: Store) -> None:
    resp = post(ingress, issue_event())
    assert resp.json == {"outcome": "accepted"}
    assert state_counts(store) == (1, 1, 1)


def test_unrouted_session_is_ignored_with_a_reason(frozen: Any, ingress: Any, store: Store) -> None:
    resp = post(ingress, session_event(identifier="XYZ-1"))
    assert resp.json == {"outcome": "ignored", "reason": "team_not_routed"}
    assert state_counts(store) == (1, 0, 0)


def test_unknown_event_type_is_recorded_and_ignored(frozen: Any, ingress: Any, store: Store) -> None:
    body = {"type": "OAuthApp", "action": "revoked", "organizationId": ORG, "webhookTimestamp": now_ms()}
    resp = post(ingress, body)
    assert resp.json == {"outcome": "ignored", "reason": "unsupported_event"}
    assert state_counts(store) == (1, 0, 0)


def test_replayed_delivery_id_is_a_duplicate_and_changes_nothing(frozen: Any, ingress: Any,
                                                                 store: Store) -> None:
    body = session_event()
    assert post(ingress, body, delivery="d-1").json["outcome"] == "accepted"
    before = state_counts(store)
    again = post(ingress, comment_event(), delivery="d-1")
    assert again.json == {"outcome": "duplicate", "first_outcome": "accepted"}
    assert state_counts(store) == before


def test_same_body_under_a_new_delivery_id_is_a_duplicate(frozen: Any, ingress: Any, store: Store) -> None:
    body = comment_event()
    post(ingress, body, delivery="d-1")
    resp = post(ingress, body, delivery="d-2")
    assert resp.json["outcome"] == "duplicate"
    assert state_counts(store) == (1, 0, 1)


# --- bad input: each answered with its code, nothing stored -------------------------------------

BAD_SIGNATURES = {
    "missing": None,
    "malformed": "not-hex",
    "wrong_secret": "WRONG",
    "upper_case": "UPPER",
    "empty": "",
}


@pytest.mark.parametrize("case", sorted(BAD_SIGNATURES))
def test_bad_signatures_are_refused(case: str, frozen: Any, ingress: Any, store: Store) -> None:
    body = comment_event()
    raw, headers = signed(body)
    if case == "missing":
        headers.pop("Linear-Signature")
    elif case == "wrong_secret":
        headers["Linear-Signature"] = signed(body, secret="another-secret")[1]["Linear-Signature"]
    elif case == "upper_case":
        headers["Linear-Signature"] = headers["Linear-Signature"].upper()
    else:
        headers["Linear-Signature"] = BAD_SIGNATURES[case]
    resp = ingress.simulate_post("/webhooks/linear", body=raw, headers=headers)
    assert resp.status_code == 401
    assert resp.json == {"error": "signature_invalid"}
    assert state_counts(store) == (0, 0, 0)


def test_non_ascii_signature_header_is_refused(frozen: Any, ingress: Any) -> None:
    resp = post(ingress, comment_event(), signature="é" * 64)
    assert resp.status_code == 401


@pytest.mark.parametrize("offset_s", [-61, 61])
def test_timestamps_outside_the_window_are_stale(offset_s: int, frozen: Any, ingress: Any,
                                                 store: Store) -> None:
    body = comment_event(webhookTimestamp=now_ms() + offset_s * 1000)
    resp = post(ingress, body)
    assert resp.status_code == 401
    assert resp.json == {"error": "timestamp_stale"}
    assert state_counts(store) == (0, 0, 0)


@pytest.mark.parametrize("offset_s", [-59, 59])
def test_timestamps_inside_the_window_pass(offset_s: int, frozen: Any, ingress: Any) -> None:
    assert post(ingress, comment_event(webhookTimestamp=now_ms() + offset_s * 1000)).status_code == 200


def test_a_timestamp_only_in_the_unsigned_header_is_stale(frozen: Any, ingress: Any) -> None:
    body = comment_event()
    del body["webhookTimestamp"]
    resp = post(ingress, body, headers={"Linear-Timestamp": str(now_ms())})
    assert resp.status_code == 401
    assert resp.json == {"error": "timestamp_stale"}


@pytest.mark.parametrize("value", ["1700000000000", None, True, [1]])
def test_non_numeric_timestamps_are_stale(value: Any, frozen: Any, ingress: Any) -> None:
    resp = post(ingress, comment_event(webhookTimestamp=value))
    assert resp.json == {"error": "timestamp_stale"}


def test_the_clock_moving_makes_a_delivery_stale(frozen: Any, ingress: Any) -> None:
    body = comment_event()
    frozen.tick(61)
    assert post(ingress, body).json == {"error": "timestamp_stale"}


def test_body_over_the_limit_is_too_large(frozen: Any, ingress: Any, store: Store, config: Any) -> None:
    body = comment_event()
    body["data"]["body"] = "x" * config.server.max_body_bytes
    resp = post(ingress, body)
    assert resp.status_code == 413
    assert resp.json == {"error": "too_large"}
    assert state_counts(store) == (0, 0, 0)


MALFORMED_BODIES: dict[str, bytes] = {
    "not_utf8": b'{"type": "Comment", "x": "\xff\xfe"}',
    "not_json": b"type=Comment&action=create",
    "array": b'[{"type": "Comment"}]',
    "string": b'"hello"',
    "deep_nesting": b"[" * 100_000 + b"]" * 100_000,
    "deep_object": b'{"type": "Comment", "data": ' + b'{"a": ' * 500 + b"1" + b"}" * 500 + b"}",
    "huge_integer": b'{"type": "Comment", "n": ' + b"9" * 5000 + b"}",
    "nan": b'{"type": "Comment", "action": "create", "n": NaN}',
    "infinity": b'{"type": "Comment", "action": "create", "n": -Infinity}',
    "empty": b"",
}


@pytest.mark.parametrize("case", sorted(MALFORMED_BODIES))
def test_malformed_bodies_are_refused(case: str, frozen: Any, ingress: Any, store: Store) -> None:
    resp = post(ingress, MALFORMED_BODIES[case])
    assert resp.status_code == 400
    assert resp.json["error"] == "malformed"
    assert state_counts(store) == (0, 0, 0)


@pytest.mark.parametrize("drop", ["type", "action", "data"])
def test_required_fields_are_checked(drop: str, frozen: Any, ingress: Any) -> None:
    body = comment_event()
    del body[drop]
    resp = post(ingress, body)
    assert resp.status_code == 400
    assert resp.json["error"] == "malformed"
    assert resp.json["detail"]


def test_session_without_agent_session_is_malformed(frozen: Any, ingress: Any) -> None:
    body = session_event()
    del body["agentSession"]
    assert post(ingress, body).json["error"] == "malformed"


def test_missing_delivery_header_is_malformed(frozen: Any, ingress: Any, store: Store) -> None:
    resp = post(ingress, comment_event(), drop=["Linear-Delivery"])
    assert resp.status_code == 400
    assert resp.json == {"error": "malformed", "detail": "missing Linear-Delivery header"}


def test_signature_is_checked_before_shape(frozen: Any, ingress: Any) -> None:
    resp = post(ingress, b"not json", signature="0" * 64, drop=["Linear-Delivery"])
    assert resp.json == {"error": "signature_invalid"}


def test_shape_is_checked_before_freshness(frozen: Any, ingress: Any) -> None:
    body = comment_event(webhookTimestamp=0)
    del body["type"]
    assert post(ingress, body).json["error"] == "malformed"


def test_foreign_organization_is_refused(frozen: Any, make_config: Any, store: Store, clock: Any) -> None:
    from falcon import testing

    from wakeline.admission.writer import AdmissionWriter
    from wakeline.http.ingress import create_ingress_app
    from wakeline.service.metrics import Metrics
    from wakeline.providers.linear.adapter import LinearWebhooks

    config = make_config(linear={"organization_id": "org-mine"})
    writer = AdmissionWriter(store)
    writer.start()
    try:
        webhooks = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=60, organization_id="org-mine")
        client = testing.TestClient(create_ingress_app(config, webhooks, writer, clock, Metrics()))
        resp = post(client, comment_event())
        assert resp.status_code == 403
        assert resp.json == {"error": "organization_refused"}
        assert post(client, comment_event(organizationId="org-mine")).status_code == 200
    finally:
        writer.stop()


def test_stale_is_checked_before_organization(frozen: Any, make_config: Any, store: Store,
                                              clock: Any) -> None:
    from falcon import testing

    from wakeline.admission.writer import AdmissionWriter
    from wakeline.http.ingress import create_ingress_app
    from wakeline.service.metrics import Metrics
    from wakeline.providers.linear.adapter import LinearWebhooks

    config = make_config(linear={"organization_id": "org-mine"})
    writer = AdmissionWriter(store)
    webhooks = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=60, organization_id="org-mine")
    client = testing.TestClient(create_ingress_app(config, webhooks, writer, clock, Metrics()))
    assert post(client, comment_event(webhookTimestamp=1)).json == {"error": "timestamp_stale"}


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_wrong_method_is_405_json(method: str, ingress: Any) -> None:
    resp = ingress.simulate_request(method, "/webhooks/linear")
    assert resp.status_code == 405
    assert resp.json == {"error": "method_not_allowed"}


def test_unknown_path_is_404_json(ingress: Any) -> None:
    resp = ingress.simulate_post("/webhooks/github", body=b"{}")
    assert resp.status_code == 404
    assert resp.json == {"error": "not_found"}


def test_healthz(ingress: Any) -> None:
    assert ingress.simulate_get("/healthz").json == {"ok": True}


def test_no_error_body_or_header_carries_the_secret(frozen: Any, ingress: Any) -> None:
    for body in (comment_event(), b"\xff", b"[]"):
        for sig in (None, "bad"):
            resp = post(ingress, body, signature=sig)
            assert WEBHOOK_SECRET not in resp.text
            assert WEBHOOK_SECRET not in json.dumps(dict(resp.headers))


def test_unsupported_event_of_the_configured_organization_is_ignored(frozen: Any, make_config: Any,
                                                                      store: Store, clock: Any) -> None:
    from falcon import testing

    from wakeline.admission.writer import AdmissionWriter
    from wakeline.http.ingress import create_ingress_app
    from wakeline.service.metrics import Metrics
    from wakeline.providers.linear.adapter import LinearWebhooks

    config = make_config(linear={"organization_id": ORG})
    writer = AdmissionWriter(store)
    writer.start()
    try:
        webhooks = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=60, organization_id=ORG)
        client = testing.TestClient(create_ingress_app(config, webhooks, writer, clock, Metrics()))
        body = {"type": "OAuthApp", "action": "revoked", "organizationId": ORG, "webhookTimestamp": now_ms()}
        assert post(client, body).json == {"outcome": "ignored", "reason": "unsupported_event"}
        body["organizationId"] = "org-other"
        assert post(client, body).status_code == 403
    finally:
        writer.stop()
