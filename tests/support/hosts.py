"""`wakeline serve` hosts as child processes (`tests/support/serve.py`), alone or sharing one
PostgreSQL database.

Used by the multi-host system test and `bench/hosts.py`. Each host has its own state dir
and free loopback ports; with a `database_url` it runs engine "dbos" on that database as
`name`. Its agent is `AGENT`: it logs each run's start and end (host, conversation, turn,
the prompts it was given) to `$HOSTS_AGENT_LOG`, sleeps `seconds`, and answers.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import session_event, signed
from tests.support.serve import ENG_ROUTE, Served, agent_toml

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


class Host(Served):
    """One `wakeline serve` of a cluster: its own state dir and ports under `root/name`;
    `database_url` None is SQLite. `url` is its webhook endpoint."""

    def __init__(self, root: Path, name: str, database_url: str | None, agent: Path, log: Path,
                 *, agent_seconds: float = 0.3, slots: int = 3, host_timeout: int = 30,
                 ingress_threads: int | None = None) -> None:
        self.name = name
        scale = (f'[scale]\nengine = "dbos"\ndatabase_url = "{database_url}"\n'
                 f'host_id = "{name}"\nhost_timeout_seconds = {host_timeout}\n'
                 if database_url else "")
        super().__init__(
            root / name,
            agent_toml([sys.executable, str(agent), str(agent_seconds)], max_concurrent_turns=slots)
            + '[linear]\napi_url = "http://127.0.0.1:9/graphql"\n' + scale + ENG_ROUTE,
            secret=SECRET, env={"HOSTS_AGENT_LOG": str(log), "HOSTS_NAME": name},
            unconfined=True,  # the agent logs into $HOSTS_AGENT_LOG
            server=f"ingress_threads = {ingress_threads}\n" if ingress_threads else "",
            start_seconds=90)

    def status(self) -> dict[str, Any]:
        """The operator API's status."""
        return dict(self.api("GET", "/v1/status").json())


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
