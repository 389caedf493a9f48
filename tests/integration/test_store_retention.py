"""The store stays bounded: under steady traffic with retention, the database file levels off.

A real SQLite file takes hours of traffic (agent sessions, turns with their output,
ignored deliveries), each hour's pass pruning what is older than `keep_days` and giving the
pages back; a store without pruning grows all the way. Then a running service prunes on its
own ticker, counts the rows in `/metrics` and shows the pass in `doctor`.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest
import requests

from tests.conftest import OPERATOR_TOKEN, on_postgres, session_event, signed, sqlite_only
from tests.helpers import wait_until
from tests.unit.models.test_fifo_state_machine import plan_for
from wakeline.app import build_service
from wakeline.clock import SystemClock
from wakeline.config import Config
from wakeline.models.envelopes import InboundDelivery
from wakeline.models.plans import AdmissionPlan, Decision
from wakeline.models.retention import HOUR_MS, Retention
from wakeline.models.states import Outcome, TurnResultKind
from wakeline.models.store import Store
from wakeline.secrets import Secrets

pytestmark = pytest.mark.slow

T0 = 1_800_000_000_000
ISSUES, PER_ISSUE, HOURS = 20, 6, 24
TEXT = "x" * 1_000  # a headline and an answer of realistic size


def ignored(now: int) -> AdmissionPlan:
    delivery_id = str(uuid.uuid4())
    parsed = InboundDelivery(
        delivery_id=delivery_id, body_sha256=hashlib.sha256(delivery_id.encode()).hexdigest(),
        event_type="Issue", action="update", webhook_ms=now, envelope=None, subject=None,
        headline="", inbox_event=None)
    return AdmissionPlan.fixed(parsed, now, Decision(Outcome.IGNORED, reason="team_not_routed"))


def an_hour(store: Store, hour: int) -> None:
    """An hour of traffic: each issue's agent session prompted a few times, one turn each,
    and as many ignored deliveries (a new session every hour, as people start new ones)."""
    now = T0 + hour * HOUR_MS
    plans = []
    for issue in range(ISSUES):
        for n in range(PER_ISSUE):
            plan = plan_for(f"i-{issue}", now + n, session=f"s-{issue}-{hour}")
            plans.append(replace(plan, delivery=replace(plan.delivery, headline=TEXT)))
            plans.append(ignored(now + n))
    for start in range(0, len(plans), 64):
        store.admit(plans[start:start + 64])
    for issue in range(ISSUES):
        cid = store.t.conversations.get(store.t.conversations.key == f"i-{issue}").id
        turn = store.fifo.claim(cid, now + 100)
        assert turn is not None
        store.fifo.finalise(turn.turn_id, TurnResultKind.RESPONSE, now + 200, output=TEXT)


@pytest.mark.skipif(on_postgres(), reason="measures the SQLite file (PostgreSQL: decision 0030)")
def test_the_database_file_levels_off_while_retention_runs(tmp_path: Path) -> None:
    pruned = Store.open(tmp_path / "pruned.db", SystemClock())
    unpruned = Store.open(tmp_path / "unpruned.db", SystemClock())
    retention = Retention(pruned.db, keep_ms=3 * HOUR_MS, dedupe_ms=2 * HOUR_MS)
    sizes = []
    for hour in range(HOURS):
        an_hour(pruned, hour)
        an_hour(unpruned, hour)
        report = retention.run(T0 + hour * HOUR_MS + 300)
        assert report.stopped is None
        sizes.append((tmp_path / "pruned.db").stat().st_size)
    # Once three hours are kept, the file holds steady: each pass frees what the next hour
    # fills. (Its write-ahead log is bounded by the checkpoints, pruned or not.)
    steady = sizes[HOURS // 2]
    assert max(sizes[HOURS // 2:]) <= steady * 1.2, sizes
    assert (tmp_path / "unpruned.db").stat().st_size > 3 * max(sizes), sizes
    # Everything finished and old: the pages go back to the file (the checkpoint truncates it).
    before = pruned.db.execute_sql("PRAGMA page_count").fetchone()[0]
    report = retention.run(T0 + (HOURS + 10) * HOUR_MS)
    assert report.pages > 0 and pruned.db.execute_sql("PRAGMA freelist_count").fetchone()[0] == 0
    assert pruned.db.execute_sql("PRAGMA page_count").fetchone()[0] < before / 2
    pruned.db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    assert (tmp_path / "pruned.db").stat().st_size < steady / 2
    for store in (pruned, unpruned):
        store.dispose()


@sqlite_only
def test_a_file_made_before_retention_is_converted_once(tmp_path: Path) -> None:
    import sqlite3

    Store.open(tmp_path / "old.db", SystemClock()).dispose()
    with sqlite3.connect(tmp_path / "old.db", isolation_level=None) as old:
        old.execute("PRAGMA auto_vacuum = NONE")
        old.execute("VACUUM")  # as every file was before
        assert old.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    store = Store.open(tmp_path / "old.db", SystemClock())
    assert store.db.execute_sql("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    store.dispose()


def test_a_running_service_prunes_on_its_own_and_says_so(make_config: Callable[..., Config],
                                                          secrets: Secrets) -> None:
    # About a second each: what the service admits is old news almost at once.
    config = make_config(store={"keep_days": 0.00001, "dedupe_hours": 0.0002})
    service = build_service(config, secrets, tick_seconds=0.05)
    service.start()
    try:
        for n in range(5):  # a team no route serves: ignored, a receipt each
            raw, headers = signed(session_event(session_id=f"s-{n}", identifier=f"XYZ-{n}"))
            resp = requests.post(service.ingress.url + "/webhooks/linear", data=raw,
                                 headers=headers, timeout=10)
            assert resp.json()["outcome"] == "ignored"
        receipts = service.store.t.receipts
        assert receipts.select().count() == 5
        wait_until(lambda: receipts.select().count() == 0, timeout=30,
                   message="the ticker's pass pruned the receipts")
        auth = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        metrics = requests.get(service.operator.url + "/metrics", timeout=10).text
        counted = re.search(r'wakeline_store_pruned_rows_total\{table="receipts"\} (\S+)', metrics)
        assert counted is not None and float(counted.group(1)) == 5.0
        checks = requests.get(service.operator.url + "/v1/doctor", headers=auth, timeout=10).json()
        [check] = [c for c in checks["checks"] if c["name"] == "store_retention"]
        assert check["ok"] and "receipts 5" in check["detail"], check
    finally:
        service.stop()
