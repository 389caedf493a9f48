"""`kill -9` of `wakeline serve`, five times under load, loses and doubles nothing.

Deliveries go to a real `wakeline serve` child whose agent takes a little
while: agent-session prompts on 10 issues of a team-wide route, and comments on
4 issues of a project-scoped issue route (two of them announced by an Issue
payload naming the project, two known only from their comments, so the tracker
looks their project up in a fake Linear), at a steady pace. The server is
SIGKILLed five times and restarted: during admission, during a turn, during the
journal's compaction (the journal starts just short of it), around a turn's
finalisation, and at a random moment. Unacknowledged deliveries are re-sent with
the same delivery id, as Linear retries. In the end every acknowledged delivery
is completed exactly once, each issue's deliveries reached the agent in order,
the database passes `PRAGMA integrity_check`, and the journal reads whole with
its sequence unbroken.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import LINEAR_KEY, comment_event, issue_event, session_event, signed
from wakeline.clock import SystemClock
from wakeline.journal.entries import COMPACT_AT_LINES, Note
from wakeline.journal.file import JournalFile
from tests.fakes.linear import FakeLinear
from tests.helpers import wait_until
from tests.support.serve import ENG_ROUTE, FAKE_AGENT, Served, agent_toml

pytestmark = pytest.mark.slow

SECRET = "crash-test-webhook-secret-5Jd8Qw"
ISSUES, PER_ISSUE = 10, 10
OPS_ISSUES, PROJECT = 4, "project-p"


class Server(Served):
    """`wakeline serve` with the fake agent, on one state dir; the agent logs to `agent.jsonl`."""

    def __init__(self, root: Path, linear_url: str, agent: tuple[str, ...] = ("sleep", "0.15"),
                 routes: str = "") -> None:
        self.log = root / "agent.jsonl"
        super().__init__(
            root,
            agent_toml([sys.executable, str(FAKE_AGENT), *agent], max_concurrent_turns=4)
            + f'[linear]\napi_url = "{linear_url}"\n'
            + (routes or ENG_ROUTE + '[[routes]]\nname = "ops"\nteams = ["OPS"]\nmode = "issue"\n'
               f'projects = ["{PROJECT}"]\n'),
            secret=SECRET, unconfined=True,  # the fake agent logs into root
            env={"FAKE_AGENT_LOG": str(self.log), "WAKELINE_LINEAR_API_KEY": LINEAR_KEY})

    def runs(self) -> list[dict[str, Any]]:
        """What the agent recorded, one entry per start."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


def _body(i: int, n: int) -> dict[str, Any]:
    """Delivery n of issue i: a session prompt (ENG), or a comment or an Issue create (OPS)."""
    if i < ISSUES:
        body = session_event("prompted", session_id=f"s{i}", issue_id=f"issue-{i}", identifier=f"ENG-{i}")
        body["agentActivity"] = {"id": f"a-{i}-{n}", "content": {"type": "prompt", "body": f"msg-{i}-{n}"}}
        return body
    if n < 0:  # announced by a signed Issue payload that names the project
        body = issue_event(f"issue-{i}", f"OPS-{i}", "create")
        body["data"]["projectId"] = PROJECT
        return body
    body = comment_event(f"issue-{i}", f"OPS-{i}")
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["data"]["body"] = f"msg-{i}-{n}"
    return body


def _prefill_journal(root: Path, lines: int) -> None:
    """A journal just short of its compaction threshold, so the run compacts it (and may be
    killed while it does)."""
    journal = JournalFile(root / "state" / "journal", SystemClock())
    journal.open()
    now = int(time.time() * 1000)
    journal.append([Note(id=f"prefill:{n}", kind="lifecycle", at_ms=now, sender="wakeline", to="-",
                         text=f"prefill {n}") for n in range(lines)])
    journal.close()


def _journal_lines(server: Server) -> int:
    path = server.root / "state" / "journal" / "entries.jsonl"
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigkill_five_times_loses_and_doubles_nothing(tmp_path: Path) -> None:
    rng = random.Random(7)
    ops = range(ISSUES, ISSUES + OPS_ISSUES)
    linear = FakeLinear(issues={f"issue-{i}": {"project": PROJECT, "team": "OPS"} for i in ops}).start()
    server = Server(tmp_path, linear.url)
    _prefill_journal(tmp_path, COMPACT_AT_LINES - 60)
    server.start()
    work = [(i, -1) for i in ops if i % 2 == 0]
    work += [(i, n) for n in range(PER_ISSUE) for i in [*range(ISSUES), *ops]]
    acknowledged: dict[str, tuple[int, int]] = {}
    refusals: list[int] = []
    done = threading.Event()

    def send_all() -> None:
        session = requests.Session()
        for i, n in work:
            body = _body(i, n)
            delivery = f"d-{i}-{n}"
            while True:  # as Linear does: retry until acknowledged
                body["webhookTimestamp"] = int(time.time() * 1000)  # Linear signs each retry anew
                raw, headers = signed(body, delivery=delivery, secret=SECRET)
                try:
                    resp = session.post(server.url, data=raw, headers=headers, timeout=10)
                except requests.RequestException:
                    wait_until(lambda: _reachable(server), timeout=60, message="server back")
                    continue
                if resp.status_code == 200:
                    acknowledged[delivery] = (i, n)
                    break
                refusals.append(resp.status_code)
                done.wait(0.1)  # a 503 while it stops: try again shortly
            done.wait(0.02)  # a steady load, not a burst: kills land amid all kinds of work
        done.set()

    def runs() -> int:
        return _agent_runs(server.log)

    failure: list[BaseException] = []

    def sender_main() -> None:
        try:
            send_all()
        except BaseException as exc:  # surfaced by the assertion below
            failure.append(exc)
            raise

    sender = threading.Thread(target=sender_main, daemon=True)
    sender.start()
    kills: list[str] = []
    try:
        # Each restart must make progress before the next kill: a turn interrupted by five
        # restarts in a row stalls by design (MAX_INTERRUPTED_ATTEMPTS), which is not this test.
        def restart(moment: str) -> None:
            server.kill9()
            kills.append(moment)
            before = _completed(server)
            server.start()
            wait_until(lambda: _completed(server) > before or done.is_set(), timeout=60,
                       message="progress after a restart")

        # 1: during admission, while deliveries stream in.
        wait_until(lambda: len(acknowledged) >= rng.randint(10, 25), timeout=60)
        restart("admission")
        # 2: during a turn: an agent has just started.
        started = runs()
        wait_until(lambda: runs() > started, timeout=60)
        restart("turn")
        # 3: during journal compaction: the file is at its threshold.
        wait_until(lambda: _journal_lines(server) >= COMPACT_AT_LINES - 3 or done.is_set(), timeout=60)
        restart("compaction")
        # 4: during finalisation: just after an agent ran, before its turn is recorded.
        started = runs()
        wait_until(lambda: runs() > started, timeout=60)
        done.wait(rng.uniform(0.15, 0.25))  # the agent sleeps 0.15 s: its turn ends about now
        restart("finalisation")
        # 5: at a random moment.
        done.wait(rng.uniform(0.1, 1.0))
        restart("random")
        sender.join(timeout=120)
        assert done.is_set(), f"the sender did not finish: {failure!r}, refused {refusals[-5:]}"
        wait_until(lambda: _drained(server, len(work)), timeout=120, message="all work completed")
    finally:
        server.stop()
        linear.stop()
    assert len(kills) == 5

    assert len(acknowledged) == len(work)
    db = sqlite3.connect(tmp_path / "state" / "wakeline.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = db.execute(
        "SELECT r.delivery_id, d.state, d.completion, d.turn_id FROM receipts r "
        "JOIN deliveries d ON d.receipt_id = r.id"
    ).fetchall()
    by_delivery = {r[0]: r for r in rows}
    assert set(by_delivery) == set(acknowledged), "a delivery was lost or admitted twice"
    assert {r[1] for r in rows} == {"completed"} and {r[2] for r in rows} == {"response"}
    completed_by_results = db.execute("SELECT SUM(deliveries) FROM turn_results").fetchone()[0]
    assert completed_by_results == len(rows), "a delivery was completed twice"
    assert db.execute("SELECT COUNT(*) FROM turns").fetchone()[0] == 0

    seen: dict[str, list[int]] = {}
    for run in _runs(server.log):
        for prompt in run["prompts"] + run["comments"]:
            _, i, n = prompt.split("-")
            order = seen.setdefault(i, [])
            if int(n) not in order:
                order.append(int(n))
    assert len(seen) == ISSUES + OPS_ISSUES, "an issue's work never reached the agent"
    for i, order in seen.items():
        assert order == sorted(order), f"issue {i} saw its deliveries out of order: {order}"
        assert order == list(range(PER_ISSUE))
    lookups = {r.body["variables"]["id"] for r in linear.lookups()}
    assert lookups == {f"issue-{i}" for i in ops if i % 2}, "only unannounced issues are looked up"

    # The journal reads whole, its sequence unbroken, each source id once, across five crashes.
    journal = JournalFile(tmp_path / "state" / "journal", SystemClock())
    journal.open()
    entries: list[dict[str, Any]] = []
    while more := journal.page(limit=500, newer=entries[-1]["seq"] if entries else 0).entries:
        entries += more
    journal.close()
    seqs = sorted({e["seq"] for e in entries})
    assert len(seqs) == len(entries) and seqs == list(range(seqs[0], seqs[-1] + 1))
    assert len({e["id"] for e in entries}) == len(entries)
    assert seqs[-1] > COMPACT_AT_LINES  # it grew past its compaction and kept counting
    assert any(e["kind"] == "turn_report" for e in entries)


def _reachable(server: Server) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{server.webhook_port}/healthz", timeout=1).ok
    except requests.RequestException:
        return False


def _runs(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip().endswith("}")]


def _agent_runs(log: Path) -> int:
    return len(_runs(log))


def _completed(server: Server) -> int:
    db = sqlite3.connect(server.root / "state" / "wakeline.db", timeout=5)
    try:
        return int(db.execute("SELECT COUNT(*) FROM deliveries WHERE state = 'completed'").fetchone()[0])
    finally:
        db.close()


def _drained(server: Server, expected: int) -> bool:
    db = sqlite3.connect(server.root / "state" / "wakeline.db", timeout=5)
    try:
        open_count = db.execute("SELECT COUNT(*) FROM deliveries WHERE state != 'completed'").fetchone()[0]
        total = db.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0]
    finally:
        db.close()
    return open_count == 0 and total == expected
