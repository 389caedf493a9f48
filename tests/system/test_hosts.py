"""Three `wakeline serve` hosts on one PostgreSQL database (engine "dbos"), no load balancer.

Deliveries of 12 issues go to whichever host the sender picks (each one to a random host,
a fifth of them sent again to another host, as a retry through another address would be).
Under load one host is killed with SIGKILL and not restarted: the other two take its turns
over and finish everything. Then it is started again and rejoins. In the end every
acknowledged delivery is completed exactly once, each issue's deliveries reached the agent
in order, no two runs of one conversation overlapped on any hosts, and status lists the
hosts. The figures (lost, doubled, misordered, overlapping, agent runs that ran again, and
how long the takeover took) are printed, as the single-host crash test's are.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import session_event, signed
from tests.helpers import StoreShell, free_port, wait_until

pytest.importorskip("dbos")

pytestmark = pytest.mark.slow

SECRET = "hosts-test-webhook-secret-8Kq2Lm"
ISSUES, PER_ISSUE = 12, 8
HOST_TIMEOUT = 4
AGENT_SECONDS = 0.3
AGENT = """\
import json, os, re, sys, time
prompt = sys.stdin.read()
log = os.environ["HOSTS_AGENT_LOG"]
run = {"host": os.environ["HOSTS_NAME"], "conversation": os.environ["WAKELINE_CONVERSATION_ID"],
       "turn": os.environ["WAKELINE_TURN_ID"], "prompts": re.findall(r'"prompt": "([^"]+)"', prompt),
       "pid": os.getpid()}
def write(line):
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\\n")
write({**run, "start": time.time()})
time.sleep(float(sys.argv[1]))
write({**run, "end": time.time()})
print("done")
"""


class Host:
    """One `wakeline serve` of the cluster: its own state dir and ports, the shared database."""

    def __init__(self, root: Path, name: str, database_url: str, agent: Path, log: Path) -> None:
        self.name = name
        self.root = root / name
        self.root.mkdir()
        self.config_path = self.root / "wakeline.toml"
        self._settings = (database_url, agent)
        self._ports()
        self.env = {**os.environ, "WAKELINE_LINEAR_WEBHOOK_SECRET": SECRET,
                    "HOSTS_AGENT_LOG": str(log), "HOSTS_NAME": name}
        self.env.pop("WAKELINE_LINEAR_API_KEY", None)
        self.proc: subprocess.Popen[bytes] | None = None

    def _ports(self) -> None:
        """Free ports a moment ago, written into the host's config."""
        database_url, agent = self._settings
        self.webhook_port, self.operator_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.webhook_port}/webhooks/linear"
        self.config_path.write_text(
            'state_dir = "state"\n'
            f'[server]\nwebhook_host = "127.0.0.1"\nwebhook_port = {self.webhook_port}\n'
            f"operator_port = {self.operator_port}\nthreads = 4\n"
            f"[agent]\ncommand = {json.dumps([sys.executable, str(agent), str(AGENT_SECONDS)])}\n"
            "max_concurrent_turns = 3\n"
            '[linear]\napi_url = "http://127.0.0.1:9/graphql"\n'
            f'[scale]\nengine = "dbos"\ndatabase_url = "{database_url}"\nhost_id = "{self.name}"\n'
            f"host_timeout_seconds = {HOST_TIMEOUT}\n"
            '[[routes]]\nname = "eng"\nteams = ["ENG"]\n')

    def start(self) -> None:
        for _ in range(3):  # a port taken since it was picked: pick others
            with open(self.root / "serve.log", "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "wakeline", "--config", str(self.config_path), "serve"],
                    env=self.env, stdout=subprocess.DEVNULL, stderr=log)
            if wait_until(self.up, timeout=90, message=f"{self.name} is up") == "up":
                return
            self._ports()
        raise AssertionError(f"{self.name} found no free ports")

    def up(self) -> str | None:
        """"up", "exited" (its ports were taken meanwhile), or None while it starts."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            log = (self.root / "serve.log").read_text()
            if "Address already in use" in log[-300:]:
                return "exited"
            raise AssertionError(f"{self.name} exited: {log[-2000:]}")
        try:
            ok = requests.get(f"http://127.0.0.1:{self.webhook_port}/healthz", timeout=1).ok
        except requests.RequestException:
            return None
        return "up" if ok else None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def status(self) -> dict[str, Any]:
        token = (self.root / "state" / "operator.token").read_text().strip()
        return requests.get(f"http://127.0.0.1:{self.operator_port}/v1/status",
                            headers={"Authorization": f"Bearer {token}"}, timeout=10).json()


def body(i: int, n: int) -> dict[str, Any]:
    event = session_event("prompted", session_id=f"s{i}", issue_id=f"issue-{i}",
                          identifier=f"ENG-{i}")
    event["agentActivity"] = {"id": f"a-{i}-{n}", "content": {"type": "prompt",
                                                            "body": f"msg-{i}-{n}"}}
    return event


def test_three_hosts_lose_double_and_reorder_nothing_when_one_is_killed(
        tmp_path: Path, postgres: Any) -> None:
    url = postgres.create_database()
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    log = tmp_path / "runs.jsonl"
    hosts = [Host(tmp_path, f"host-{n}", url, agent, log) for n in (1, 2, 3)]
    for host in hosts:
        host.start()
    victim = hosts[0]
    rng = random.Random(25)
    work = [(i, n) for n in range(PER_ISSUE) for i in range(ISSUES)]
    acknowledged: dict[str, tuple[int, int]] = {}
    sent_twice = 0
    killed: dict[str, float] = {}
    halfway = threading.Event()
    try:
        session = requests.Session()

        def deliver(i: int, n: int) -> None:
            nonlocal sent_twice
            delivery = f"d-{i}-{n}"
            live = [h for h in hosts if h.proc is not None and h.proc.poll() is None]
            targets = rng.sample(live, 2 if rng.random() < 0.2 else 1)
            for target in targets:
                while True:  # as Linear does: until some host acknowledges it
                    event = body(i, n)
                    event["webhookTimestamp"] = int(time.time() * 1000)
                    raw, headers = signed(event, delivery=delivery, secret=SECRET)
                    try:
                        resp = session.post(target.url, data=raw, headers=headers, timeout=10)
                    except requests.RequestException:
                        target = rng.choice([h for h in hosts if h is not victim])
                        continue
                    if resp.status_code == 200:
                        outcome = resp.json()["outcome"]
                        assert outcome in ("accepted", "duplicate"), outcome
                        acknowledged[delivery] = (i, n)
                        break
                    time.sleep(0.05)
            sent_twice += len(targets) - 1

        for count, (i, n) in enumerate(work):
            deliver(i, n)
            if count == len(work) // 2:
                halfway.set()
                # Kill a host in the middle of its turns, and never bring it back (yet).
                wait_until(lambda: _running_on(log, victim.name), timeout=60,
                           message="the victim runs a turn")
                victim.kill9()
                killed["at"] = time.time()
            time.sleep(0.02)
        wait_until(lambda: _drained(url, len(work)), timeout=HOST_TIMEOUT + 120,
                   message="the survivors finished everything")
        finished = time.time()
        survivors = hosts[1].status()["hosts"]
        assert {h["id"]: h["alive"] for h in survivors} == {
            "host-1": False, "host-2": True, "host-3": True}

        # The victim comes back with the same id: it rejoins and takes work again.
        victim.start()
        wait_until(lambda: all(h["alive"] for h in victim.status()["hosts"]), timeout=30,
                   message="the victim rejoined")
        extra = [(i, PER_ISSUE) for i in range(ISSUES)]
        for i, n in extra:
            event = body(i, n)
            raw, headers = signed(event, delivery=f"d-{i}-{n}", secret=SECRET)
            assert session.post(victim.url, data=raw, headers=headers, timeout=10).ok
            acknowledged[f"d-{i}-{n}"] = (i, n)
        wait_until(lambda: _drained(url, len(work) + len(extra)), timeout=120,
                   message="the rejoined cluster finished the rest")
    finally:
        for host in hosts:
            host.stop()

    runs = _runs(log)
    store = StoreShell(_config(url))
    rows = store.execute("SELECT r.delivery_id, d.state, d.completion FROM receipts r"
                         " JOIN deliveries d ON d.receipt_id = r.id")
    by_delivery = {r[0]: r for r in rows}
    lost = set(acknowledged) - set(by_delivery)
    admitted_twice = len(rows) - len(by_delivery)
    completed_by_results = store.execute("SELECT SUM(deliveries) FROM turn_results").fetchone()[0]
    doubled = int(completed_by_results) - len(rows)
    misordered = _misordered(runs)
    overlaps = _overlaps(runs, victim.name, killed["at"])
    turns = [r["turn"] for r in runs if "start" in r]
    ran_again = len(turns) - len(set(turns))
    takeover = _takeover_seconds(runs, killed["at"])
    print(f"\nthree hosts, one killed: {len(acknowledged)} acknowledged ({sent_twice} sent to two"
          f" hosts), lost {len(lost)}, doubled {doubled}, admitted twice {admitted_twice},"
          f" misordered {misordered}, overlapping {overlaps}, agent runs that ran again"
          f" {ran_again}, first takeover {takeover:.1f} s after the kill (timeout {HOST_TIMEOUT} s),"
          f" drained {finished - killed['at']:.1f} s after it")
    assert not lost and admitted_twice == 0 and doubled == 0
    assert {r[1] for r in rows} == {"completed"} and {r[2] for r in rows} == {"response"}
    assert store.execute("SELECT COUNT(*) FROM turns").fetchone()[0] == 0
    assert misordered == 0 and overlaps == 0
    assert {r["host"] for r in runs} == {"host-1", "host-2", "host-3"}
    assert takeover < HOST_TIMEOUT + 10 + AGENT_SECONDS


def _config(url: str) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(scale=SimpleNamespace(engine="dbos", database_url=url))


def _runs(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def _running_on(log: Path, host: str) -> bool:
    runs = _runs(log)
    started = {r["turn"] for r in runs if r["host"] == host and "start" in r}
    ended = {r["turn"] for r in runs if r["host"] == host and "end" in r}
    return bool(started - ended)


def _drained(url: str, expected: int) -> bool:
    store = StoreShell(_config(url))
    open_count, total = store.execute(
        "SELECT SUM(CASE WHEN state = 'completed' THEN 0 ELSE 1 END), COUNT(*) FROM deliveries"
    ).fetchone()
    return total == expected and not open_count


def _misordered(runs: list[dict[str, Any]]) -> int:
    """Issues whose deliveries reached the agent out of order (a re-run repeats, never skips
    back)."""
    seen: dict[str, list[int]] = {}
    for run in sorted((r for r in runs if "start" in r), key=lambda r: r["start"]):
        for prompt in run["prompts"]:
            _, i, n = prompt.split("-")
            order = seen.setdefault(i, [])
            if int(n) not in order:
                order.append(int(n))
    return sum(1 for order in seen.values() if order != sorted(order))


def _overlaps(runs: list[dict[str, Any]], victim: str, killed_at: float) -> int:
    """Pairs of runs of one conversation whose lifetimes crossed, on any hosts (a run of the
    killed host ends at the kill)."""
    spans: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        span = spans.setdefault(r["conversation"], {}).setdefault(f"{r['host']}:{r['pid']}", [0, 0])
        if "start" in r:
            span[0] = r["start"]
            span[1] = span[1] or (killed_at if r["host"] == victim else float("inf"))
        else:
            span[1] = r["end"]
    crossed = 0
    for by_run in spans.values():
        ordered = sorted(by_run.values())
        crossed += sum(1 for a, b in zip(ordered, ordered[1:]) if b[0] < a[1])
    return crossed


def _takeover_seconds(runs: list[dict[str, Any]], killed_at: float) -> float:
    """From the kill to the first start of a turn the victim was running when it died."""
    cut = {r["turn"] for r in runs if r["host"] == "host-1" and "start" in r} - {
        r["turn"] for r in runs if r["host"] == "host-1" and "end" in r}
    again = [r["start"] for r in runs if "start" in r and r["turn"] in cut and r["host"] != "host-1"]
    return min(again) - killed_at if again else float("inf")
