"""`wakeline serve` hosts as child processes, alone or sharing one PostgreSQL database.

Used by the multi-host system test and `bench/hosts.py`. Each host has its own state dir
and free loopback ports; with a `database_url` it runs engine "dbos" on that database as
`name`. Its agent is `AGENT`: it logs each run's start and end (host, conversation, turn,
the prompts it was given) to `$HOSTS_AGENT_LOG`, sleeps `seconds`, and answers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from tests.conftest import session_event, signed
from tests.helpers import free_port, wait_until

SECRET = "hosts-webhook-secret-8Kq2Lm"
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


def write_agent(path: Path) -> Path:
    """The logging, sleeping agent, as a file."""
    path.write_text(AGENT)
    return path


class Host:
    """One `wakeline serve`: its own state dir and ports; `database_url` None is SQLite."""

    def __init__(self, root: Path, name: str, database_url: str | None, agent: Path, log: Path,
                 *, agent_seconds: float = 0.3, slots: int = 3, host_timeout: int = 30,
                 ingress_threads: int | None = None) -> None:
        self.name = name
        self.root = root / name
        self.root.mkdir(parents=True)
        self.config_path = self.root / "wakeline.toml"
        self._database_url = database_url
        self._agent = [sys.executable, str(agent), str(agent_seconds)]
        self._extra = (f"max_concurrent_turns = {slots}\n", host_timeout, ingress_threads)
        self._ports()
        self.env = {**os.environ, "WAKELINE_LINEAR_WEBHOOK_SECRET": SECRET,
                    "HOSTS_AGENT_LOG": str(log), "HOSTS_NAME": name}
        self.env.pop("WAKELINE_LINEAR_API_KEY", None)
        self.proc: subprocess.Popen[bytes] | None = None

    def _ports(self) -> None:
        """Ports free a moment ago, written into the host's config."""
        slots, host_timeout, ingress_threads = self._extra
        self.webhook_port, self.operator_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.webhook_port}/webhooks/linear"
        scale = (f'[scale]\nengine = "dbos"\ndatabase_url = "{self._database_url}"\n'
                 f'host_id = "{self.name}"\nhost_timeout_seconds = {host_timeout}\n'
                 if self._database_url else "")
        self.config_path.write_text(
            'state_dir = "state"\n'
            f'[server]\nwebhook_host = "127.0.0.1"\nwebhook_port = {self.webhook_port}\n'
            f"operator_port = {self.operator_port}\nthreads = 4\n"
            + (f"ingress_threads = {ingress_threads}\n" if ingress_threads else "")
            + f"[agent]\ncommand = {json.dumps(self._agent)}\n{slots}"
            # Unconfined: the agent's log ($HOSTS_AGENT_LOG) is out of a sandbox's sight.
            + '[sandbox]\nmode = "none"\n'
            '[linear]\napi_url = "http://127.0.0.1:9/graphql"\n'
            + scale + '[[routes]]\nname = "eng"\nteams = ["ENG"]\n')

    def start(self) -> None:
        """Start it and wait until it answers (new ports if its own were taken meanwhile)."""
        for _ in range(3):
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

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def status(self) -> dict[str, Any]:
        token = (self.root / "state" / "operator.token").read_text().strip()
        return requests.get(f"http://127.0.0.1:{self.operator_port}/v1/status",
                            headers={"Authorization": f"Bearer {token}"}, timeout=10).json()


def prompt_delivery(i: int, n: int) -> tuple[str, dict[str, Any]]:
    """Delivery n of issue i (a session's prompt `msg-i-n`): its id and body."""
    event = session_event("prompted", session_id=f"s{i}", issue_id=f"issue-{i}",
                          identifier=f"ENG-{i}")
    event["agentActivity"] = {"id": f"a-{i}-{n}", "content": {"type": "prompt",
                                                            "body": f"msg-{i}-{n}"}}
    return f"d-{i}-{n}", event


def signed_delivery(i: int, n: int) -> tuple[bytes, dict[str, str]]:
    """Delivery n of issue i, freshly timestamped and signed."""
    delivery, event = prompt_delivery(i, n)
    return signed(event, delivery=delivery, secret=SECRET)


def agent_runs(log: Path) -> list[dict[str, Any]]:
    """What the agent logged, start and end lines alike."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def misordered(runs: list[dict[str, Any]]) -> int:
    """Issues whose deliveries reached the agent out of order (a re-run repeats, never skips
    back)."""
    seen: dict[str, list[int]] = {}
    for run in sorted((r for r in runs if "start" in r), key=lambda r: r["start"]):
        for prompt in run["prompts"]:
            match = re.fullmatch(r"msg-(\d+)-(\d+)", prompt)
            if match:
                order = seen.setdefault(match.group(1), [])
                if int(match.group(2)) not in order:
                    order.append(int(match.group(2)))
    return sum(1 for order in seen.values() if order != sorted(order))


def overlaps(runs: list[dict[str, Any]], killed: dict[str, float]) -> int:
    """Pairs of runs of one conversation whose lifetimes crossed, on any hosts (a run of a
    killed host ends when it was killed: `killed` maps a host to that moment)."""
    spans: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        span = spans.setdefault(r["conversation"], {}).setdefault(f"{r['host']}:{r['pid']}",
                                                                 [0.0, 0.0])
        if "start" in r:
            span[0] = r["start"]
            span[1] = span[1] or killed.get(r["host"], float("inf"))
        else:
            span[1] = r["end"]
    crossed = 0
    for by_run in spans.values():
        ordered = sorted(by_run.values())
        crossed += sum(1 for a, b in zip(ordered, ordered[1:]) if b[0] < a[1])
    return crossed


def running_on(runs: list[dict[str, Any]], host: str) -> set[str]:
    """Turns the host started and did not end."""
    return {r["turn"] for r in runs if r["host"] == host and "start" in r} - {
        r["turn"] for r in runs if r["host"] == host and "end" in r}


def running_lately(runs: list[dict[str, Any]], host: str, within: float) -> set[str]:
    """Turns the host started less than `within` seconds ago and has not ended: a kill now
    cuts them mid-run, not between the agent's exit and the turn's finalisation."""
    now = time.time()
    return {r["turn"] for r in runs if r["host"] == host and "start" in r
            and now - r["start"] < within} & running_on(runs, host)


def takeover_seconds(runs: list[dict[str, Any]], victim: str, killed_at: float) -> float:
    """From the kill to the first start elsewhere of a turn the victim had started (a turn
    runs on a second host only when the first did not finish it)."""
    started = {r["turn"] for r in runs if r["host"] == victim and "start" in r}
    again = [r["start"] for r in runs if "start" in r and r["turn"] in started
             and r["host"] != victim and r["start"] >= killed_at]
    return min(again) - killed_at if again else float("inf")
