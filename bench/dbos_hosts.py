"""Measure the DBOS scheduling design (issue 25): 1, 2 and 3 hosts on one PostgreSQL database.

Each host is a process with wakeline's real store on PostgreSQL (`Store.open(url)`) and a
`DbosScheduler` (wakeline/scheduling/dbos.py): a DBOS queue partitioned by conversation
(`partition_concurrency = 1`), `worker_concurrency` turns per host. There is no load
balancer: every host admits its share of the deliveries, round robin, so one
conversation's deliveries arrive at every host. A host enqueues a wake job only when the
conversation's waiting-turn flag flips in its admission transaction (coalescing). A turn
is the store's own claim (one delivery a turn, so order is visible), a sleeping "agent",
and the store's finalise; each run is logged with its host, deliveries and wall times.

Printed per run: turns, throughput, per-conversation order violations (a turn whose
delivery is not after the previous turn's), overlaps (two runs of one conversation at
once, on any host), deliveries completed once / twice / never, and with `--kill`, the time
from `kill -9` of one host (not restarted) to each of its interrupted turns starting again
on a survivor, and how many agent runs ran twice.

    .venv/bin/python bench/dbos_hosts.py                  # 1, 2, 3 hosts
    .venv/bin/python bench/dbos_hosts.py --hosts 3 --kill # takeover after kill -9

It starts a throwaway PostgreSQL cluster (tests/support/postgres.py) unless
`--database-url` names a server whose user may CREATE DATABASE. Loopback only; every loop is
bounded in time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH_DDL = (
    "CREATE TABLE IF NOT EXISTS bench_runs (run_id TEXT PRIMARY KEY, host TEXT NOT NULL,"
    " conversation_id TEXT NOT NULL, turn_id TEXT NOT NULL, seqs TEXT NOT NULL,"
    " started DOUBLE PRECISION NOT NULL, ended DOUBLE PRECISION, finalised BOOLEAN)",
    "CREATE TABLE IF NOT EXISTS bench_wake (conversation_id TEXT PRIMARY KEY,"
    " waiting BIGINT NOT NULL, gen BIGINT NOT NULL)",
)
# The waiting-turn flag flips 0 -> 1 in the admission transaction; a row back means "enqueue".
FLIP = (
    "INSERT INTO bench_wake (conversation_id, waiting, gen) VALUES (%s, 1, 1)"
    " ON CONFLICT (conversation_id) DO UPDATE SET waiting = 1, gen = bench_wake.gen + 1"
    " WHERE bench_wake.waiting = 0 RETURNING gen"
)


# --- a host -----------------------------------------------------------------------------------


def host_main(args: argparse.Namespace) -> None:
    import psycopg

    from tests.unit.models.test_fifo_state_machine import plan_for
    from wakeline.clock import SystemClock
    from wakeline.models.states import TurnResultKind
    from wakeline.models.store import Store
    from wakeline.scheduling.dbos import DbosScheduler, DbosSettings

    store = Store.open(args.url, SystemClock())
    log_conn = threading.local()
    running = [0]
    lock = threading.Lock()

    def logdb() -> Any:
        conn = getattr(log_conn, "conn", None)
        if conn is None:
            conn = log_conn.conn = psycopg.connect(args.url, autocommit=True)
        return conn

    def begin_wake(cid: str) -> None:
        logdb().execute("UPDATE bench_wake SET waiting = 0 WHERE conversation_id = %s", (cid,))

    def run_turn(cid: str) -> bool:
        now = int(time.time() * 1000)
        turn = store.fifo.claim(cid, now, max_deliveries=1)
        if turn is None:
            return False
        run_id = uuid.uuid4().hex
        seqs = json.dumps([e.seq for e in turn.entries])
        logdb().execute("INSERT INTO bench_runs (run_id, host, conversation_id, turn_id, seqs,"
                        " started) VALUES (%s, %s, %s, %s, %s, %s)",
                        (run_id, args.host_id, cid, turn.turn_id, seqs, time.time()))
        with lock:
            running[0] += 1
        try:
            time.sleep(args.agent_seconds)  # the agent
            ok = store.fifo.finalise(turn.turn_id, TurnResultKind.RESPONSE, int(time.time() * 1000))
        finally:
            with lock:
                running[0] -= 1
        logdb().execute("UPDATE bench_runs SET ended = %s, finalised = %s WHERE run_id = %s",
                        (time.time(), ok, run_id))
        return True

    scheduler = DbosScheduler(
        DbosSettings(database_url=args.url, host_id=args.host_id,
                     worker_concurrency=args.worker_concurrency,
                     host_timeout_seconds=args.host_timeout, heartbeat_seconds=args.heartbeat,
                     turns_per_job=args.turns_per_job),
        run_turn, begin_wake, running=lambda: running[0])
    scheduler.start()
    print("READY", flush=True)
    line = sys.stdin.readline()  # GO <json list of [issue, n]>: this host's share of deliveries
    share = json.loads(line.split(" ", 1)[1])
    now = int(time.time() * 1000)
    for issue, n in share:
        plan = plan_for(issue, now + n)
        with store.db.atomic():
            [result] = store.admit([plan])
            flipped = None
            if result.wake_ids:
                flipped = store.db.execute_sql(FLIP, (result.wake_ids[0],)).fetchone()
        if flipped is not None:
            scheduler.wake(result.wake_ids, generation=flipped[0])
    store.close()
    print("ADMITTED", flush=True)
    sys.stdin.readline()  # STOP
    scheduler.stop(grace_seconds=10)
    print("RECOVERIES " + json.dumps(scheduler.recoveries), flush=True)
    store.dispose()


# --- the bench --------------------------------------------------------------------------------


def spawn(url: str, host_id: str, args: argparse.Namespace) -> subprocess.Popen[str]:
    argv = [sys.executable, __file__, "host", "--url", url, "--host-id", host_id,
            "--worker-concurrency", str(args.worker_concurrency),
            "--agent-seconds", str(args.agent_seconds), "--host-timeout", str(args.host_timeout),
            "--heartbeat", str(args.heartbeat), "--turns-per-job", str(args.turns_per_job)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc


def expect(proc: subprocess.Popen[str], word: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"host exited before {word}")
        if line.startswith(word):
            return line
    raise RuntimeError(f"no {word} within {timeout} s")


def run(url: str, hosts: int, args: argparse.Namespace, kill: bool) -> dict[str, Any]:
    import psycopg

    from wakeline.clock import SystemClock
    from wakeline.models.store import Store

    Store.open(url, SystemClock()).dispose()  # migrate once
    with psycopg.connect(url, autocommit=True) as conn:
        for ddl in BENCH_DDL:
            conn.execute(ddl)
    from dbos import run_dbos_database_migrations

    run_dbos_database_migrations(url.replace("postgresql://", "postgresql+psycopg://", 1))
    procs = []
    for n in range(hosts):
        proc = spawn(url, f"host-{n + 1}", args)
        expect(proc, "READY", 120)
        procs.append(proc)
    deliveries = [(f"issue-{c}", d) for d in range(args.deliveries) for c in range(args.conversations)]
    shares: list[list[Any]] = [[] for _ in procs]
    for i, item in enumerate(deliveries):
        shares[i % hosts].append(item)
    t0 = time.time()
    for proc, share in zip(procs, shares):
        assert proc.stdin is not None
        proc.stdin.write("GO " + json.dumps(share) + "\n")
        proc.stdin.flush()
    for proc in procs:
        expect(proc, "ADMITTED", 120)
    admitted_at = time.time()
    total = len(deliveries)
    killed_at = None
    victim = None
    deadline = time.monotonic() + args.max_seconds
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            done = conn.execute("SELECT count(*) FROM deliveries WHERE state = 'completed'").fetchone()[0]
            if kill and killed_at is None and done >= total // 4:
                victim = procs[0]
                victim.send_signal(signal.SIGKILL)  # kill -9, not restarted
                killed_at = time.time()
            if done >= total:
                break
            time.sleep(0.05)
    finished = time.time()
    for proc in procs:
        if proc.poll() is None and proc.stdin is not None:
            proc.stdin.write("STOP\n")
            proc.stdin.flush()
    recoveries: list[Any] = []
    for proc in procs:
        if proc is victim:
            proc.wait(10)
            continue
        try:
            line = expect(proc, "RECOVERIES", 60)
            recoveries += json.loads(line.split(" ", 1)[1])
        except RuntimeError:
            pass
        proc.wait(60)
    with psycopg.connect(url, autocommit=True) as conn:
        runs = conn.execute("SELECT host, conversation_id, turn_id, seqs, started, ended, finalised"
                            " FROM bench_runs ORDER BY started").fetchall()
        states = dict(conn.execute("SELECT state, count(*) FROM deliveries GROUP BY state").fetchall())
        results = conn.execute("SELECT count(*), count(DISTINCT turn_id) FROM turn_results").fetchone()
    return analyse(runs, states, results, total, t0, admitted_at, finished, killed_at,
                   "host-1" if kill else None, recoveries, hosts, args)


def analyse(runs: list[Any], states: dict[str, int], results: Any, total: int, t0: float,
            admitted_at: float, finished: float, killed_at: float | None, victim: str | None,
            recoveries: list[Any], hosts: int, args: argparse.Namespace) -> dict[str, Any]:
    by_conv: dict[str, list[Any]] = {}
    for r in runs:
        by_conv.setdefault(r[1], []).append(r)
    order_violations = overlaps = 0
    for conv_runs in by_conv.values():
        last_seq = -1
        open_until = 0.0
        for host, _cid, _turn, seqs, started, ended, finalised in conv_runs:
            end = ended if ended is not None else (killed_at if host == victim and killed_at else started)
            if started < open_until - 1e-6:
                overlaps += 1
            open_until = max(open_until, end)
            if finalised:
                first = min(json.loads(seqs))
                if first <= last_seq:
                    order_violations += 1
                last_seq = max(last_seq, max(json.loads(seqs)))
    finalised = [r for r in runs if r[6]]
    completed_by_turn: dict[str, int] = {}
    for r in finalised:
        completed_by_turn[r[2]] = completed_by_turn.get(r[2], 0) + 1
    doubled = sum(1 for n in completed_by_turn.values() if n > 1)
    interrupted = [r for r in runs if r[5] is None]
    takeovers = []
    for r in interrupted:
        again = [x for x in runs if x[2] == r[2] and x[4] > r[4] and x[0] != r[0]]
        if again and killed_at is not None:
            takeovers.append(again[0][4] - killed_at)
    ended = [r[5] for r in runs if r[5] is not None]
    span = (max(ended) - t0) if ended else float("nan")
    out = {
        "hosts": hosts, "conversations": args.conversations, "deliveries": total,
        "worker_concurrency": args.worker_concurrency, "agent_seconds": args.agent_seconds,
        "turns_per_job": args.turns_per_job,
        "turn_runs": len(runs), "turns_finalised": len(finalised),
        "seconds": round(span, 2), "turns_per_second": round(len(finalised) / span, 2) if ended else 0,
        "ideal_turns_per_second": round(min(hosts * args.worker_concurrency, args.conversations)
                                        / args.agent_seconds, 2) if args.agent_seconds else None,
        "admit_seconds": round(admitted_at - t0, 2),
        "order_violations": order_violations, "overlaps": overlaps,
        "deliveries_completed": states.get("completed", 0),
        "deliveries_lost": total - states.get("completed", 0),
        "turns_completed_twice": doubled,
        "turn_results": results[0], "turn_results_distinct": results[1],
        "hosts_used": sorted({r[0] for r in runs}),
    }
    if killed_at is not None:
        out.update(
            killed="host-1", killed_after_seconds=round(killed_at - t0, 2),
            host_timeout_seconds=args.host_timeout, heartbeat_seconds=args.heartbeat,
            interrupted_runs=len(interrupted), agent_runs_twice=len(takeovers),
            takeover_seconds=[round(t, 2) for t in sorted(takeovers)],
            takeover_median=round(statistics.median(takeovers), 2) if takeovers else None,
            recoveries=recoveries,
            seconds_after_kill=round(finished - killed_at, 2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    h = sub.add_parser("host")
    h.add_argument("--url", required=True)
    h.add_argument("--host-id", required=True)
    for p in (parser, h):
        p.add_argument("--worker-concurrency", type=int, default=4)
        p.add_argument("--agent-seconds", type=float, default=0.25)
        p.add_argument("--host-timeout", type=float, default=5.0)
        p.add_argument("--heartbeat", type=float, default=1.0)
        p.add_argument("--turns-per-job", type=int, default=1)
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--deliveries", type=int, default=5, help="per conversation")
    parser.add_argument("--kill", action="store_true", help="kill -9 host-1 a quarter of the way")
    parser.add_argument("--max-seconds", type=float, default=180)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    if args.cmd == "host":
        host_main(args)
        return
    cluster = None
    if args.database_url:
        admin = args.database_url
    else:
        from tests.support.postgres import ensure_server, start_cluster

        server = ensure_server()
        if server.bin_dir is None:
            sys.exit(f"no PostgreSQL: {server.reason}")
        cluster = start_cluster(server.bin_dir)
        admin = cluster.url()
    try:
        import psycopg

        for hosts in args.hosts:
            name = f"bench_{hosts}_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")  # type: ignore[arg-type]
            url = admin.rsplit("/", 1)[0] + "/" + name
            print(json.dumps(run(url, hosts, args, args.kill)), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
