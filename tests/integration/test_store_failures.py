"""When the store cannot commit, the ingress answers 503 and nothing is half-written.

Real SQLite files and a real waitress server: the failures are made by SQLite itself
(a read-only connection, another process's exclusive lock, a trigger that aborts one
insert), never by patching wakeline.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import requests
from pydantic import SecretStr

from tests.conftest import (
    OPERATOR_TOKEN,
    WEBHOOK_SECRET,
    comment_event,
    issue_event,
    now_ms,
    session_event,
    signed,
    sqlite_only,
)
from wakeline.admission.writer import AdmissionWriter
from wakeline.app import Service, build_service
from wakeline.clock import SystemClock
from wakeline.config import Config
from wakeline.errors import Unavailable
from wakeline.http.ingress import create_ingress_app
from wakeline.http.server import Listener
from wakeline.service.metrics import Metrics
from wakeline.models.db import open_database
from wakeline.models.states import Outcome
from wakeline.models.store import AdmissionResult, Store
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.admission.router import plan_admission
from wakeline.secrets import Secrets

pytestmark = pytest.mark.slow

UNAVAILABLE = {"error": "unavailable"}


@pytest.fixture
def secrets() -> Secrets:
    """No Linear API key: the local backend, so nothing here ever calls api.linear.app."""
    return Secrets(webhook_secret=SecretStr(WEBHOOK_SECRET), linear_api_key=None,
                   operator_token=SecretStr(OPERATOR_TOKEN))


def post(base_url: str, body: dict[str, Any] | bytes, delivery: str) -> requests.Response:
    raw, headers = signed(body, delivery=delivery)
    return requests.post(base_url + "/webhooks/linear", data=raw, headers=headers, timeout=30)


def counts(store: Store) -> dict[str, int]:
    """Rows of every table an admission writes."""
    t = store.t
    return {
        "receipts": t.receipts.select().count(),
        "conversations": t.conversations.select().count(),
        "deliveries": t.deliveries.select().count(),
        "inbox": t.inbox.select().count(),
    }


@contextmanager
def running(config: Config, secrets: Secrets) -> Iterator[Service]:
    svc = build_service(config, secrets)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


@contextmanager
def ingress_over(store: Store, config: Config) -> Iterator[str]:
    """The real ingress on loopback over a store the test opened itself."""
    writer = AdmissionWriter(store)
    webhooks = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=config.linear.freshness_seconds)
    listener = Listener(
        create_ingress_app(config, webhooks, writer, SystemClock(), Metrics()),
        host="127.0.0.1", port=0, threads=2, max_body_bytes=config.server.max_body_bytes,
        name="ingress",
    )
    writer.start()
    listener.start()
    try:
        yield listener.url
    finally:
        listener.stop()
        writer.stop()


@sqlite_only
def test_read_only_database_gives_503_and_writes_nothing(config: Config, secrets: Secrets,
                                                         store: Store) -> None:
    """A database refusing writes answers 503 unavailable; the same delivery later is accepted."""
    body = issue_event()  # would write a conversation, a FIFO entry, a receipt and an inbox message
    before = counts(store)
    with running(config, secrets) as svc:
        # Every write transaction runs on the store's one writer connection: set there
        # (inside a transaction, so on that connection), the pragma refuses every write.
        with svc.store.db.atomic():
            svc.store.db.pragma("query_only", 1)
        for _ in range(3):
            resp = post(svc.ingress.url, body, "d-readonly")
            assert resp.status_code == 503
            assert resp.json() == UNAVAILABLE
        # Reads still work: the operator side is not taken down with the writer.
        assert svc.store.receipt("d-readonly") is None
    assert counts(store) == before
    with running(config, secrets) as svc:
        resp = post(svc.ingress.url, body, "d-readonly")
        assert resp.json() == {"outcome": "accepted"}
    after = counts(store)
    assert {k: after[k] - before[k] for k in after} == {
        "receipts": 1, "conversations": 1, "deliveries": 1, "inbox": 1,
    }


def test_locked_database_gives_503_then_the_same_delivery_is_accepted(config: Config) -> None:
    """Another connection's exclusive lock outlasting the busy timeout: 503, never a half-write."""
    store = Store(open_database(config.database_path, busy_timeout=0.2), SystemClock())
    body = session_event()
    before = counts(store)
    try:
        with ingress_over(store, config) as url:
            locker = sqlite3.connect(config.database_path, isolation_level=None, timeout=0)
            try:
                locker.execute("BEGIN EXCLUSIVE")
                resp = post(url, body, "d-locked")
                assert resp.status_code == 503
                assert resp.json() == UNAVAILABLE
                locker.execute("ROLLBACK")
            finally:
                locker.close()
            assert counts(store) == before
            again = post(url, body, "d-locked")
            assert again.json() == {"outcome": "accepted"}
            assert post(url, body, "d-locked").json()["outcome"] == "duplicate"
        row = store.receipt("d-locked")
        assert row is not None and row.outcome == "accepted"
        after = counts(store)
        assert {k: after[k] - before[k] for k in after} == {
            "receipts": 1, "conversations": 1, "deliveries": 1, "inbox": 0,
        }
    finally:
        store.close()


@contextmanager
def failing_inbox_inserts(config: Config) -> Iterator[None]:
    """Every inbox insert aborts, as a full disk would halfway through an admission."""
    conn = sqlite3.connect(config.database_path, isolation_level=None)
    try:
        conn.execute(
            "CREATE TRIGGER fail_inbox BEFORE INSERT ON inbox_messages "
            "BEGIN SELECT RAISE(ABORT, 'simulated write failure'); END"
        )
        yield
        conn.execute("DROP TRIGGER fail_inbox")
    finally:
        conn.close()


@sqlite_only
def test_a_failure_halfway_through_a_delivery_rolls_all_of_it_back(service: Service, store: Store,
                                                                    config: Config) -> None:
    """The receipt, conversation and FIFO entry written before a failing inbox insert are undone."""
    body = issue_event(issue_id="issue-half", identifier="OPS-7")
    before = counts(store)
    with failing_inbox_inserts(config):
        resp = post(service.ingress.url, body, "d-half")
        assert resp.status_code == 503
        assert resp.json() == UNAVAILABLE
        assert counts(store) == before
        # A delivery that writes no inbox message is unaffected.
        other = post(service.ingress.url, session_event(), "d-other")
        assert other.json() == {"outcome": "accepted"}
    resp = post(service.ingress.url, body, "d-half")
    assert resp.json() == {"outcome": "accepted"}
    after = counts(store)
    assert {k: after[k] - before[k] for k in after} == {
        "receipts": 2, "conversations": 2, "deliveries": 2, "inbox": 1,
    }


@sqlite_only
def test_one_failing_delivery_does_not_take_its_group_down(config: Config, store: Store) -> None:
    """In one group commit the failing delivery is Unavailable and its neighbours are durable."""
    webhooks = LinearWebhooks(WEBHOOK_SECRET, freshness_seconds=60)

    def plan(body: dict[str, Any], delivery: str) -> Any:
        raw, headers = signed(body, delivery=delivery)
        parsed = webhooks.read(raw, signature=headers["Linear-Signature"], delivery_id=delivery,
                               now_ms=now_ms())
        return plan_admission(parsed, config, now_ms())

    plans = [
        plan(session_event(), "d-1"),
        plan(comment_event(), "d-2"),  # its inbox insert fails
        plan(issue_event(action="create"), "d-3"),  # so does this one's, after its FIFO entry
        plan(session_event(session_id="session-2", issue_id="issue-9", identifier="ENG-9"), "d-4"),
    ]
    before = counts(store)
    with failing_inbox_inserts(config):
        results = store.admit(plans)
    assert [type(r) for r in results] == [
        AdmissionResult, Unavailable, Unavailable, AdmissionResult,
    ]
    assert all(r.outcome is Outcome.ACCEPTED for r in results if isinstance(r, AdmissionResult))
    assert {row.delivery_id for row in store.t.receipts.select()} == {"d-1", "d-4"}
    after = counts(store)
    assert {k: after[k] - before[k] for k in after} == {
        "receipts": 2, "conversations": 2, "deliveries": 2, "inbox": 0,
    }
