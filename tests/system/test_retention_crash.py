"""`kill -9` in the middle of pruning loses nothing the store must keep.

A real SQLite file holds a few thousand rows retention may delete (ignored receipts, the
FIFO entries and long turn results of closed issues) beside every kind of row it must
keep: open work (pending, claimed, a turn in flight, a held delivery and the write it waits
for), an open conversation's current session and latest result, the results its control
thread owes, effects not settled, an unread inbox message, a plan gate, receipts inside
the dedupe window. A child process prunes it pass after pass, in small steps; it is
SIGKILLed three times while it deletes rows and once while it gives pages back to the
file. After each kill the file passes `PRAGMA integrity_check` and `foreign_key_check`,
every must-keep row is exactly as it was, and a last pass removes everything else.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import issue_event
from tests.unit.models.test_echoes import admit as admit_event, intent, moved
from tests.unit.models.test_retention import admit, effect, other, run_turn, terminal
from wakeline.clock import SystemClock
from wakeline.config import parse_config
from wakeline.models.bindings import Binding
from wakeline.models.outbox import EffectState
from wakeline.models.retention import DAY_MS, HOUR_MS, Retention
from wakeline.models.store import Store
from wakeline.admission.router import Router

pytestmark = pytest.mark.slow

T0 = 1_800_000_000_000
NOW = T0 + 2 * DAY_MS  # when every pass runs: keep_days 1, dedupe 24 h
KEEP, DEDUPE = DAY_MS, 24 * HOUR_MS
CLOSED, IGNORED, OUTPUT = 300, 3_000, "answer " * 2_000  # ~14 KB of output per closed turn

CHILD = """
import sys
from pathlib import Path
from wakeline.clock import SystemClock
from wakeline.models.retention import Retention
from wakeline.models.store import Store

store = Store.open(Path(sys.argv[1]), SystemClock())
retention = Retention(store.db, int(sys.argv[3]), int(sys.argv[4]), batch=40, pages_per_step=25)
now = int(sys.argv[2])
while True:  # pass after pass until killed
    retention.begin(now)
    while retention.step(now):
        print(retention.doing, flush=True)
"""

# Tables retention never deletes from: compared whole.
UNTOUCHED = ("conversations", "turns", "plan_gates", "control_bindings", "held_deliveries",
             "inbox_messages", "settings")


def fill(store: Store) -> dict[str, set[Any]]:
    """Rows to prune and rows to keep; returns the ids to keep in the tables retention prunes."""
    # Closed issues: their turns, with long answers, all old.
    for n in range(CLOSED):
        cid = admit(store, f"closed-{n}", T0 + n)
        run_turn(store, cid, T0 + n)
        store.db.execute_sql("UPDATE turn_results SET output = ? WHERE conversation_id = ?",
                             (OUTPUT, cid))
        terminal(store, cid)
    for start in range(0, IGNORED, 64):
        store.admit([other(T0 + start) for _ in range(64)])
    # An open conversation: an earlier session, then the current one, whose newest entry stays;
    # its control thread has shown only its first result.
    a = admit(store, "open", T0, session="s-old")
    run_turn(store, a, T0 + 1)
    for n in (2, 3):
        admit(store, "open", T0 + n, session="s-now")
        run_turn(store, a, T0 + n)
    r = store.t.turn_results
    first, *owed = [row.id for row in r.select().where(r.conversation_id == a).order_by(r.id)]
    store.bindings.bind(Binding(a, "discord", "1", "2", "ENG-open", False, False), T0)
    store.bindings.answered(a, first)
    store.gates.request(a, T0)
    # Open work: pending, claimed, completed while its turn still runs, held for a write.
    admit(store, "pending", T0)
    assert store.fifo.claim(admit(store, "claimed", T0), T0 + 1) is not None
    stopped = admit(store, "stopped", T0, session="s-1")
    admit(store, "stopped", T0 + 1, session="s-2")
    assert store.fifo.claim(stopped, T0 + 2) is not None
    with store.db.atomic():
        store.fifo.stop_session(stopped, "s-1", T0 + 3)
    router = Router(parse_config({"routes": [{"name": "ops", "teams": ["OPS"], "mode": "issue"}]},
                                 Path(".")))
    admit_event(store, router, issue_event("issue-7", "OPS-7", "create"), T0)
    in_flight = intent(store, T0)
    admit_event(store, router, moved(), T0 + 1_000)
    # Effects not settled, or confirmed inside the dedupe window; an unread inbox message;
    # receipts inside the dedupe window.
    unknown = effect(store, T0)
    store.outbox.mark_dispatched(unknown, T0)
    store.outbox.recover(T0)
    recent = effect(store, T0)
    store.outbox.settle(recent, EffectState.CONFIRMED, NOW - HOUR_MS)
    store.admit([other(T0, inbox=True)] + [other(NOW - HOUR_MS) for _ in range(20)])

    c, d, receipts = store.t.conversations, store.t.deliveries, store.t.receipts
    closed = [row.id for row in c.select().where(c.key.startswith("closed-"))]
    keep_deliveries = {row.id for row in d.select().where(
        d.conversation_id.not_in(closed) & (d.conversation_id != a))} | {
        max(row.id for row in d.select().where(d.conversation_id == a))}  # s-now's newest
    return {
        "deliveries": keep_deliveries,
        "turn_results": set(owed),
        "effects": {in_flight, unknown, effect(store, T0), recent},
        "receipts": {row.receipt_id for row in d.select().where(d.id.in_(keep_deliveries))}
        | {row.id for row in receipts.select().where(receipts.received_at >= NOW - DEDUPE)}
        | {row.receipt_id for row in store.t.inbox.select()}
        | {row.receipt_id for row in store.t.held.select()},
    }


def snapshot(db: Path, keep: dict[str, set[Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every must-keep row, whole."""
    with closing(sqlite3.connect(db)) as conn:
        out = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
               for t in UNTOUCHED}
        for table, ids in keep.items():
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            out[table] = sorted((r for r in rows if r[0] in ids), key=repr)
            assert len(out[table]) == len(ids), f"{table}: a must-keep row is missing"
    return out


def counts(db: Path) -> dict[str, int]:
    with closing(sqlite3.connect(db)) as conn:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("receipts", "deliveries", "turn_results", "effects")}


def healthy(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


def kill_while(db: Path, doing: str, rng: random.Random) -> None:
    """Start the pruning child, wait until it is `doing` that (a table or "pages"), let it
    work a moment more, then SIGKILL it."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(NOW), str(KEEP),
                              str(DEDUPE)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 60
        for line in child.stdout:
            if line.strip() == doing:
                break
            assert time.monotonic() < deadline, f"the child never got to {doing}"
        else:
            raise AssertionError(f"the child ended before {doing}")
        # Not a wait for an outcome: where the kill lands inside the step is the variable
        # under test, drawn from the test's seeded generator.
        time.sleep(rng.uniform(0, 0.02))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        child.stdout.close()  # type: ignore[union-attr]


def test_kill_9_during_a_prune_loses_nothing_it_must_keep(tmp_path: Path) -> None:
    db = tmp_path / "wakeline.db"
    store = Store.open(db, SystemClock())
    keep = fill(store)
    store.dispose()
    kept = snapshot(db, keep)
    rng = random.Random(36)
    start = counts(db)

    for doing in ("deliveries", "turn_results", "receipts"):
        kill_while(db, doing, rng)
        healthy(db)
        assert snapshot(db, keep) == kept
    assert counts(db) != start  # the kills came mid-prune: some went, not yet all
    kill_while(db, "pages", rng)
    healthy(db)
    assert snapshot(db, keep) == kept

    store = Store.open(db, SystemClock())
    report = Retention(store.db, KEEP, DEDUPE).run(NOW)
    assert report.stopped is None
    store.dispose()
    healthy(db)
    assert snapshot(db, keep) == kept
    assert counts(db) == {t: len(keep[t]) for t in ("receipts", "deliveries", "turn_results",
                                                    "effects")}
