"""Fuzzing both HTTP surfaces with hypothesis: whatever a caller sends, the answer is a clear
4xx or 200 (503 only on purpose), a refusal changes nothing, and no secret comes back or is
logged.

`make test` runs a fast slice; `make fuzz` (WAKELINE_FUZZ_EXAMPLES=10000) the long run.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any

import hypothesis.strategies as st
import pytest
from falcon import testing
from hypothesis import HealthCheck, given, settings

from tests.conftest import LINEAR_KEY, OPERATOR_TOKEN, WEBHOOK_SECRET, comment_event, now_ms, session_event
from wakeline.models.store import Store
from wakeline.providers.linear.signature import sign

EXAMPLES = int(os.environ.get("WAKELINE_FUZZ_EXAMPLES", "150"))
SECRETS = (WEBHOOK_SECRET, OPERATOR_TOKEN, LINEAR_KEY)
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
HEADER_TEXT = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


def state(store: Store) -> tuple[int, ...]:
    t = store.t
    return (t.receipts.select().count(), t.deliveries.select().count(), t.inbox.select().count(),
            t.effects.select().count(), t.settings.select().count(), t.conversations.select().count())


def no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[bytes, dict[str, str], bool]:
    """A request to the ingress, and whether it is properly signed, fresh and whole."""
    kind = draw(st.sampled_from(["linear", "mutated", "json", "bytes", "huge"]))
    if kind in ("linear", "mutated"):
        body: Any = draw(st.sampled_from([comment_event, session_event]))()
        if kind == "mutated":
            path = draw(st.sampled_from([["data"], ["type"], ["action"], ["agentSession"],
                                          ["webhookTimestamp"], ["data", "issue"], ["organizationId"]]))
            target = body
            for key in path[:-1]:
                target = target.setdefault(key, {}) if isinstance(target, dict) else {}
            if isinstance(target, dict):
                target[path[-1]] = draw(JSON)
        raw = json.dumps(body, ensure_ascii=draw(st.booleans())).encode()
    elif kind == "json":
        raw = json.dumps(draw(JSON)).encode()
    elif kind == "bytes":
        raw = draw(st.binary(max_size=300))
    else:
        raw = b'{"type": "Comment", "pad": "' + b"x" * 1_100_000 + b'"}'
    signature = draw(st.sampled_from(["good", "bad", "missing", "upper"]))
    headers = {"Content-Type": draw(st.sampled_from(["application/json", "text/plain", ""]))}
    good = sign(WEBHOOK_SECRET, raw)
    if signature == "good":
        headers["Linear-Signature"] = good
    elif signature == "bad":
        headers["Linear-Signature"] = draw(HEADER_TEXT)
    elif signature == "upper":
        headers["Linear-Signature"] = good.upper()
    delivery = draw(st.sampled_from(["uuid", "text", "missing", "long"]))
    if delivery == "uuid":
        headers["Linear-Delivery"] = str(uuid.uuid4())
    elif delivery == "text":
        headers["Linear-Delivery"] = draw(HEADER_TEXT)
    elif delivery == "long":
        headers["Linear-Delivery"] = "d" * 300
    return raw, headers, signature == "good" and kind == "linear" and delivery == "uuid"


@FUZZ
@given(request=deliveries())
def test_the_ingress_answers_every_request_clearly(ingress: testing.TestClient, store: Store,
                                                   caplog: pytest.LogCaptureFixture,
                                                   request: tuple[bytes, dict[str, str], bool]) -> None:
    raw, headers, proper = request
    before = state(store)
    with caplog.at_level(logging.DEBUG):
        resp = ingress.simulate_post("/webhooks/linear", body=raw, headers=headers)
    assert resp.status_code in (200, 400, 401, 403, 413), resp.text
    body = resp.json
    assert set(body) <= {"outcome", "reason", "first_outcome", "error", "detail"}
    if resp.status_code != 200:
        assert body["error"] in ("malformed", "signature_invalid", "timestamp_stale",
                                 "organization_refused", "too_large")
        assert state(store) == before  # a refusal changes nothing
    elif proper:
        assert body["outcome"] in ("accepted", "ignored", "duplicate")
    no_secret(resp.text)
    no_secret(caplog.text)


PATHS = ["/v1/status", "/v1/following", "/v1/inbox", "/v1/inbox/ack", "/v1/conversations",
         "/v1/conversations/{x}", "/v1/conversations/{x}/{x}", "/v1/webhook-effects",
         "/v1/webhook-effects/{x}/reconcile-absent", "/v1/doctor", "/v1/linear/graphql",
         "/v1/linear/comment", "/v1/journal", "/metrics", "/healthz", "/journal", "/{x}", "/v1/{x}"]
PARAMS = st.dictionaries(st.sampled_from(["after", "before", "limit", "view", "state", "older",
                                          "newer", "wait", "cursor", "x"]),
                         st.text(max_size=12) | st.integers(-5, 10**12).map(str), max_size=3)


@st.composite
def operator_requests(draw: st.DrawFn) -> tuple[str, str, dict[str, str], dict[str, str], bytes]:
    path = draw(st.sampled_from(PATHS)).replace(
        "{x}", draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-0123456789%.", min_size=1, max_size=12)))
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
    token = draw(st.sampled_from(["operator", "none", "wrong", "scheme", "turn-ish"]))
    headers = {"Content-Type": "application/json"}
    if token == "operator":
        headers["Authorization"] = f"Bearer {OPERATOR_TOKEN}"
    elif token == "wrong":
        headers["Authorization"] = f"Bearer {draw(HEADER_TEXT)}"
    elif token == "scheme":
        headers["Authorization"] = f"Basic {OPERATOR_TOKEN}"
    elif token == "turn-ish":
        headers["Authorization"] = "Bearer wlt_" + draw(HEADER_TEXT)
    body = draw(st.one_of(JSON.map(lambda v: json.dumps(v).encode()), st.binary(max_size=100)))
    return method, path, headers, draw(PARAMS), body


@FUZZ
@given(request=operator_requests())
def test_the_operator_api_answers_every_request_clearly(operator: testing.TestClient, store: Store,
                                                        caplog: pytest.LogCaptureFixture,
                                                        request: tuple[Any, ...]) -> None:
    method, path, headers, params, body = request
    before = state(store)
    with caplog.at_level(logging.DEBUG):
        resp = operator.simulate_request(method, path, headers=headers, params=params, body=body)
    # 503: the Linear routes without a tracker, and the journal without one, on purpose.
    assert resp.status_code < 500 or resp.status_code == 503, (method, path, resp.text)
    if resp.status_code >= 400 and resp.headers.get("content-type", "").startswith("application/json"):
        assert "error" in resp.json
    if resp.status_code in (400, 401, 403, 404, 405):
        assert state(store) == before  # a refusal changes nothing
    no_secret(resp.text)
    no_secret(caplog.text)


def test_a_proper_delivery_is_still_accepted_among_the_noise(ingress: testing.TestClient) -> None:
    raw = json.dumps({**comment_event(), "webhookTimestamp": now_ms()}).encode()
    resp = ingress.simulate_post("/webhooks/linear", body=raw, headers={
        "Linear-Signature": sign(WEBHOOK_SECRET, raw), "Linear-Delivery": str(uuid.uuid4())})
    assert resp.json == {"outcome": "accepted"}
