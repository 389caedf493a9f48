#!/usr/bin/env python3
"""Past one host (issue 25): turns on 1, 2 and 3 hosts, ingest on PostgreSQL beside SQLite,
and how long a survivor takes to pick up a dead host's turns.

    .venv/bin/python bench/hosts.py [--agent-seconds 0.5] [--slots 2] [--conversations 60]
                                    [--deliveries 1] [--ingest-seconds 5] [--quick]

Every host is a real `wakeline serve` child (tests/support/hosts.py), engine "dbos" on one
throwaway PostgreSQL cluster (Debian's server, tests/support/postgres.py), on loopback.

- **Turns**: `--conversations` issues with `--deliveries` prompts each, sent to the hosts
  in turn (no load balancer), before any turn can have ended; the agent sleeps
  `--agent-seconds` (agents, not wakeline, are the limit: the point of more hosts). The
  rate is turns per second from the first send until every delivery is completed; the
  ideal is hosts x slots / agent seconds. Each host count gets a fresh database.
- **Ingest**: bench/ingest.py's load (16 keep-alive connections, unique signed Comment
  deliveries, inbox-only) against one host on SQLite and one on PostgreSQL, alternated.
- **Takeover**: three hosts (`host_timeout_seconds` 5), one killed with SIGKILL while it
  runs turns: the seconds from the kill until the first of its interrupted turns starts
  again elsewhere, and until everything is completed.

Machines here have 2 cores: every host, the database and the load share them, so compare
the ratios printed beside each figure, not absolute rates.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]

import ingest  # noqa: E402
import requests  # noqa: E402

from tests.helpers import StoreShell, wait_until  # noqa: E402
from tests.support.hosts import (  # noqa: E402
    Host, agent_runs, overlaps, running_lately, signed_delivery, takeover_seconds, write_agent,
)
from tests.support.postgres import ensure_server, start_cluster  # noqa: E402

TAKEOVER_TIMEOUT = 5


def _store(url: str) -> StoreShell:
    return StoreShell(SimpleNamespace(scale=SimpleNamespace(engine="dbos", database_url=url)))


def _completed(url: str) -> tuple[int, int]:
    done, total = _store(url).execute(
        "SELECT SUM(CASE WHEN state = 'completed' THEN 1 ELSE 0 END), COUNT(*) FROM deliveries"
    ).fetchone()
    return int(done or 0), int(total)


def turns(cluster: Any, work: Path, hosts: int, args: argparse.Namespace) -> dict[str, float]:
    """One drain on `hosts` hosts; the rate, the ideal, and what went wrong (nothing)."""
    url = cluster.create_database()
    agent = write_agent(work / f"agent-{hosts}.py")
    log = work / f"runs-{hosts}.jsonl"
    cluster_hosts = [Host(work / f"turns-{hosts}", f"host-{n + 1}", url, agent, log,
                          agent_seconds=args.agent_seconds, slots=args.slots)
                     for n in range(hosts)]
    try:
        for host in cluster_hosts:
            host.start()
        session = requests.Session()
        work_items = [(i, n) for n in range(args.deliveries) for i in range(args.conversations)]
        first = time.monotonic()
        for k, (i, n) in enumerate(work_items):
            raw, headers = signed_delivery(i, n)
            target = cluster_hosts[k % hosts]
            resp = session.post(target.url, data=raw, headers=headers, timeout=10)
            resp.raise_for_status()
        wait_until(lambda: _completed(url) == (len(work_items), len(work_items)),
                   timeout=600, interval=0.05, message="the drain")
        elapsed = time.monotonic() - first
    finally:
        for host in cluster_hosts:
            host.stop()
    done = int(_store(url).execute("SELECT COUNT(*) FROM turn_results").fetchone()[0])
    runs = agent_runs(log)
    return {"hosts": hosts, "turns": done, "seconds": elapsed, "rate": done / elapsed,
            "ideal": hosts * args.slots / args.agent_seconds,
            "overlaps": overlaps(runs, {}), "used": len({r["host"] for r in runs})}


def ingest_on_both(cluster: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """bench/ingest.py's load against one host on SQLite (A) and one on PostgreSQL (D)."""
    secret = "bench-" + uuid.uuid4().hex
    load = ingest.parse_args(["--seconds", str(args.ingest_seconds), "--idle-wait", "5"])
    ctx = mp.get_context("spawn")
    children: list[Any] = []
    url = cluster.create_database()
    servers = {
        "sqlite": ingest.start_wakeline(work, secret, None, name="on-sqlite"),
        "postgresql": ingest.start_wakeline(
            work, secret, None, name="on-postgresql",
            extra_config=f'[scale]\nengine = "dbos"\ndatabase_url = "{url}"\n'),
    }
    runs: dict[str, list[Any]] = {name: [] for name in servers}
    try:
        hints = {name: 2000.0 for name in servers}
        for name, server in servers.items():  # warm-up, not counted
            hints[name] = max(ingest.run_load(server, load, 2.0, hints[name], secret, ctx,
                                              children).rate, 100.0)
        for _ in range(args.ingest_rounds):
            for name, server in servers.items():
                run = ingest.run_load(server, load, args.ingest_seconds, hints[name], secret, ctx,
                                      children)
                runs[name].append(run)
                print(ingest.describe(run, name, "ingest"), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return {name: ingest.aggregate(r) for name, r in runs.items()}


def takeover(cluster: Any, work: Path, args: argparse.Namespace) -> dict[str, float]:
    """Three hosts under load, one killed: seconds until its turns run elsewhere."""
    url = cluster.create_database()
    agent = write_agent(work / "agent-kill.py")
    log = work / "runs-kill.jsonl"
    hosts = [Host(work / "takeover", f"host-{n}", url, agent, log,
                  agent_seconds=args.agent_seconds, slots=args.slots,
                  host_timeout=TAKEOVER_TIMEOUT) for n in (1, 2, 3)]
    victim = hosts[0]
    try:
        for host in hosts:
            host.start()
        session = requests.Session()
        items = [(i, n) for n in range(args.deliveries) for i in range(args.conversations)]
        for k, (i, n) in enumerate(items):
            raw, headers = signed_delivery(i, n)
            session.post(hosts[k % 3].url, data=raw, headers=headers, timeout=10).raise_for_status()
        wait_until(lambda: running_lately(agent_runs(log), victim.name, args.agent_seconds / 2),
                   timeout=120, message="the victim runs a turn")
        victim.kill9()
        killed = time.time()
        wait_until(lambda: _completed(url) == (len(items), len(items)), timeout=600,
                   interval=0.05, message="the survivors' drain")
        drained = time.time() - killed
    finally:
        for host in hosts:
            host.stop()
    runs = agent_runs(log)
    turns_started = [r["turn"] for r in runs if "start" in r]
    return {"takeover": takeover_seconds(runs, victim.name, killed), "drained": drained,
            "ran_again": len(turns_started) - len(set(turns_started)),
            "overlaps": overlaps(runs, {victim.name: killed}),
            "doubled": int(_store(url).execute("SELECT SUM(deliveries) FROM turn_results")
                           .fetchone()[0]) - len(items)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agent-seconds", type=float, default=0.5)
    ap.add_argument("--slots", type=int, default=2, help="max_concurrent_turns of each host")
    ap.add_argument("--conversations", type=int, default=60)
    ap.add_argument("--deliveries", type=int, default=1,
                    help="prompts per conversation (more than one: some coalesce into one turn)")
    ap.add_argument("--ingest-seconds", type=float, default=5.0)
    ap.add_argument("--ingest-rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a smoke test, not a result")
    args = ap.parse_args()
    if args.quick:
        args.conversations, args.ingest_seconds, args.ingest_rounds = 12, 2.0, 1
    print(f"machine: {ingest.machine()}", flush=True)
    server = ensure_server()
    if server.bin_dir is None:
        print(f"cannot run: {server.reason}")
        return 2
    cluster = start_cluster(server.bin_dir)
    work = Path(tempfile.mkdtemp(prefix="wakeline-hosts-"))
    try:
        drains = [turns(cluster, work, n, args) for n in (1, 2, 3)]
        both = ingest_on_both(cluster, work, args)
        kill = takeover(cluster, work, args)
    finally:
        cluster.stop()
    base = drains[0]["rate"]
    print(f"\nturns: agent sleeps {args.agent_seconds:g} s, {args.slots} slots a host, "
          f"{args.conversations} conversations x {args.deliveries} prompts")
    print("| hosts | turns | seconds | turns/s | ideal turns/s | of ideal | x one host | overlaps |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in drains:
        print(f"| {d['hosts']} | {d['turns']} | {d['seconds']:.1f} | {d['rate']:.2f} | "
              f"{d['ideal']:.1f} | {d['rate'] / d['ideal']:.2f} | {d['rate'] / base:.2f} | "
              f"{d['overlaps']} |")
    sq, pg = both["sqlite"], both["postgresql"]
    print(f"\ningest, 16 connections: SQLite {sq.rate:,.0f}/s p99 {sq.pct(99):.1f} ms; "
          f"PostgreSQL {pg.rate:,.0f}/s p99 {pg.pct(99):.1f} ms; PostgreSQL/SQLite "
          f"{pg.rate / sq.rate:.2f}")
    print(f"\ntakeover (host_timeout_seconds {TAKEOVER_TIMEOUT}): first interrupted turn again "
          f"{kill['takeover']:.1f} s after the kill, all completed {kill['drained']:.1f} s after "
          f"it; agent runs that ran again {kill['ran_again']}, completed twice "
          f"{kill['doubled']}, overlaps {kill['overlaps']}")
    three = drains[2]["rate"] / base
    print(f"\nscaling with 3 hosts: {three:.2f}x one host (ideal 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
