"""`kill -9` of a `wakeline serve` that syncs a Matrix room loses and doubles nothing.

alice writes 60 messages into a room a route binds, at a steady pace, while a real
`wakeline serve` child is SIGKILLed four times and restarted: just as a page's admission
commits (the receipts move: the kill lands around the transaction that holds the page's
events and its cursor), while a turn runs, and twice at random. Each restart syncs from the
cursor that was committed. In the end every message is admitted exactly once (one receipt,
one FIFO entry), each completed once, in order, and the access token is in neither the
service's log nor the journal.
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

pytest.register_assert_rewrite("tests.support.synapse", "tests.support.matrix")

from tests.helpers import wait_until  # noqa: E402
from tests.support.matrix import World, make_world  # noqa: E402
from tests.support.serve import FAKE_AGENT, Served, agent_toml  # noqa: E402
from tests.support.synapse import Homeserver  # noqa: E402

pytest.importorskip("nio", reason="matrix-nio is not installed: pip install 'wakeline[matrix]'")

pytestmark = pytest.mark.slow
pytest_plugins = ["tests.support.synapse"]

MESSAGES = 60


class Serve(Served):
    """`wakeline serve` syncing the world's plain room, on one config and state dir."""

    def __init__(self, root: Path, world: World) -> None:
        self.log = root / "agent.jsonl"
        super().__init__(
            root,
            agent_toml([sys.executable, str(FAKE_AGENT), "sleep", "0.1"])
            + '[linear]\napi_url = "http://127.0.0.1:9/graphql"\n'
            f'[matrix.connections.me]\nhomeserver = "{world.server.url}"\n'
            f'user_id = "{world.me.user_id}"\naccess_token_file = "{world.token_file}"\n'
            "sync_timeout_seconds = 5.0\nretry_max_seconds = 1.0\n"
            f'[[matrix.routes]]\nname = "alice"\nconnection = "me"\nroom_id = "{world.plain}"\n',
            secret="matrix-crash-test-secret", env={"FAKE_AGENT_LOG": str(self.log)},
            unconfined=True)  # the fake agent logs into root

    def start(self) -> Served:
        super().start()
        wait_until(lambda: self.cursor() is not None, 60, message="the connection synced")
        return self

    def query(self, sql: str) -> list[Any]:
        if not self.database.exists():
            return []
        db = sqlite3.connect(self.database, timeout=5)
        try:
            return db.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return []  # not migrated yet
        finally:
            db.close()

    def cursor(self) -> str | None:
        assert self.proc is not None and self.proc.poll() is None, "serve exited"
        rows = self.query("SELECT cursor FROM matrix_cursors WHERE connection = 'me'")
        return rows[0][0] if rows else None

    def receipts(self) -> int:
        return self.query("SELECT COUNT(*) FROM receipts")[0][0] if self.database.exists() else 0

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()
                if line.strip().endswith("}")]


def test_sigkill_around_admission_and_cursor_loses_and_doubles_nothing(
        synapse: Homeserver, tmp_path: Path) -> None:
    rng = random.Random(24)
    world = make_world(synapse, tmp_path)
    serve = Serve(tmp_path, world)
    serve.start()
    sent: list[str] = []
    failure: list[BaseException] = []

    def write() -> None:
        try:
            for n in range(MESSAGES):
                sent.append(synapse.send_text(world.alice.access_token, world.plain, f"m-{n}"))
                time.sleep(0.05)  # a steady pace: kills land amid every kind of work
        except BaseException as exc:  # surfaced below
            failure.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    kills: list[str] = []
    try:
        def restart(moment: str) -> None:
            serve.kill9()
            kills.append(moment)
            serve.start()

        # 1, 2: the moment a page's receipts land, a few milliseconds either way.
        for _ in range(2):
            before = serve.receipts()
            wait_until(lambda: serve.receipts() > before, 60, interval=0.001)
            time.sleep(rng.uniform(0, 0.01))
            restart("admission")
        # 3: while a turn runs.
        started = len(serve.runs())
        wait_until(lambda: len(serve.runs()) > started, 60)
        restart("turn")
        # 4: at random.
        time.sleep(rng.uniform(0.05, 0.5))
        restart("random")
        writer.join(60)
        assert not failure and len(sent) == MESSAGES, failure

        def drained() -> bool:
            rows = serve.query("SELECT state FROM deliveries")
            return len(rows) == MESSAGES and all(s == "completed" for (s,) in rows)

        wait_until(drained, 120, message="every message admitted and completed")
    finally:
        serve.stop()
    assert kills == ["admission", "admission", "turn", "random"]

    receipts = serve.query("SELECT delivery_id FROM receipts ORDER BY id")
    assert [r for (r,) in receipts] == [f"matrix:me:{e}" for e in sent], "lost, doubled or reordered"
    rows = serve.query("SELECT d.state, d.completion, r.delivery_id FROM deliveries d"
                       " JOIN receipts r ON r.id = d.receipt_id ORDER BY d.id")
    assert [r[2] for r in rows] == [f"matrix:me:{e}" for e in sent]
    assert {(r[0], r[1]) for r in rows} == {("completed", "response")}
    assert serve.query("SELECT SUM(deliveries) FROM turn_results")[0][0] == MESSAGES
    seen: list[int] = []
    for run in serve.runs():
        for text in run["texts"]:
            n = int(text.split("-")[1])
            if n not in seen:
                seen.append(n)
    assert seen == list(range(MESSAGES)), "a message reached the agent out of order, or never"
    assert serve.query("PRAGMA integrity_check") == [("ok",)]
    log = (tmp_path / "serve.log").read_text()
    journal = (tmp_path / "state" / "journal" / "entries.jsonl").read_text()
    assert world.token not in log and world.token not in journal
    assert "m-0" in journal  # the journal did record the arrivals
