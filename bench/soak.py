#!/usr/bin/env python3
"""A bounded soak: mixed traffic against a real `wakeline serve` for N minutes.

    .venv/bin/python bench/soak.py [--minutes 30] [--rate 20]

The serve child runs on a temp state dir with an instant shell agent, an agent route
(ENG), a team-wide issue route (OPS) and a project-scoped one (WEB, whose issues are
announced by signed Issue payloads). Every second it gets `--rate` signed deliveries:
agent sessions created and prompted, comments on routed and unrouted issues, issue
updates (a few closing their issue), plus inbox, journal and status reads. Every minute
it samples the child: RSS, threads, open files, database (+WAL) and journal sizes.

It fails (exit 1) if memory, threads or open files keep growing, or the journal or the
inbox's read history outgrow their retention; the database may grow by what it keeps
(receipts, deliveries, turn results), and the table shows how much per delivery.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from wakeline.config import load_config
from wakeline.service.threads import budget, total

# Memory is judged after the first third of the run: the writer connection's page cache (16 MB)
# fills in the first minutes (about 7 at 40 deliveries a second), the other caches sooner.
WARM_FRACTION = 1 / 3
# After warm-up, RSS (serve's, and the fork server's) may not rise faster than this (MB a
# minute, least squares over the samples): 3 MB over 30 minutes.
RSS_SLOPE_LIMIT = 0.1
SECRET = "soak-webhook-secret-4Hq8Ns2Vd7"
AGENT = "/bin/sh -c 'cat >/dev/null; echo done'"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def body(rng: random.Random, n: int) -> dict[str, Any]:
    """One delivery of the mix."""
    now = int(time.time() * 1000)
    issue = rng.randrange(200)
    team = rng.choice(["ENG", "OPS", "WEB", "DOCS"])
    ident, issue_id = f"{team}-{issue}", f"soak-{team}-{issue}"
    kind = rng.random()
    if kind < 0.25 and team == "ENG":
        action = rng.choice(["created", "prompted"])
        return {"type": "AgentSessionEvent", "action": action, "organizationId": "org",
                "webhookTimestamp": now,
                "agentSession": {"id": f"s-{issue}", "issue": {"id": issue_id, "identifier": ident,
                                                            "title": "Soak", "team": {"key": team}}},
                "agentActivity": {"id": f"a-{n}", "content": {"type": "prompt", "body": f"msg {n}"}}}
    if kind < 0.8:
        return {"type": "Comment", "action": "create", "organizationId": "org", "webhookTimestamp": now,
                "url": f"https://linear.app/soak/issue/{ident}", "actor": {"id": "u", "name": "Soak"},
                "data": {"id": f"c-{n}", "body": f"comment {n}", "issueId": issue_id,
                         "issue": {"id": issue_id, "identifier": ident, "title": "Soak",
                                   "team": {"key": team}}}}
    closed = rng.random() < 0.1
    return {"type": "Issue", "action": "update", "organizationId": "org", "webhookTimestamp": now,
            "url": f"https://linear.app/soak/issue/{ident}", "actor": {"id": "u", "name": "Soak"},
            "data": {"id": issue_id, "identifier": ident, "title": "Soak", "team": {"key": team},
                     "projectId": "5b1d0c2e-7a4d-4f7e-9d1a-000000000001",
                     "state": {"id": "st", "name": "x", "type": "completed" if closed else "started"}},
            "updatedFrom": {"title": "old"}}


def proc_status(pid: int) -> dict[str, str]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {line.split(":")[0]: line.split(":")[1].strip() for line in status.splitlines()}


def forkserver_rss_mb(pid: int) -> float:
    """RSS of serve's fork server (the child that starts the agents)."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            if b"forkserver" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(proc_status(int(child))["VmRSS"].split()[0]) / 1024
        except OSError:
            pass  # an agent that just ended
    return 0.0


def sample(pid: int, state: Path) -> dict[str, float]:
    field = proc_status(pid)
    size = sum(p.stat().st_size for p in state.glob("wakeline.db*"))
    journal = state / "journal" / "entries.jsonl"
    lines = journal.read_bytes().count(b"\n") if journal.exists() else 0
    return {"rss_mb": int(field["VmRSS"].split()[0]) / 1024, "threads": int(field["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd")), "db_mb": size / 1e6, "journal_lines": lines,
            "forkserver_mb": forkserver_rss_mb(pid)}


def slope(rows: list[dict[str, float]], key: str) -> float:
    """Least-squares growth of `key` per minute over `rows`."""
    xs, ys = [r["minute"] for r in rows], [r[key] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=20.0, help="deliveries per second")
    ap.add_argument("--keep-days", type=float, default=None,
                    help="[store] keep_days: a short one shows the database level off")
    ap.add_argument("--dedupe-hours", type=float, default=None, help="[store] dedupe_hours")
    ap.add_argument("--ack-inbox", action="store_true",
                    help="acknowledge what each inbox read showed: unread messages are kept for "
                    "good (decision 0005), so without it the database never levels off")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wakeline-soak-"))
    webhook, operator = free_port(), free_port()
    (root / "wakeline.toml").write_text(f"""state_dir = "state"
log_level = "WARNING"
[server]
webhook_host = "127.0.0.1"
webhook_port = {webhook}
operator_port = {operator}
[agent]
command = {json.dumps(["/bin/sh", "-c", "cat >/dev/null; echo done"])}
max_concurrent_turns = 4
[store]
{f"keep_days = {args.keep_days}" if args.keep_days is not None else ""}
{f"dedupe_hours = {args.dedupe_hours}" if args.dedupe_hours is not None else ""}
[[routes]]
name = "eng"
teams = ["ENG"]
[[routes]]
name = "ops"
teams = ["OPS"]
mode = "issue"
[[routes]]
name = "web"
teams = ["WEB"]
mode = "issue"
projects = ["5b1d0c2e-7a4d-4f7e-9d1a-000000000001"]
""")
    # Every thread this config allows (the architecture's thread table, wakeline/service/threads.py).
    allowed = total(budget(load_config(root / "wakeline.toml")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
    env["WAKELINE_LINEAR_WEBHOOK_SECRET"] = SECRET
    child = subprocess.Popen([sys.executable, "-m", "wakeline", "--config", str(root / "wakeline.toml"),
                              "serve"], env=env, stdout=subprocess.DEVNULL,
                             stderr=open(root / "serve.log", "wb"))
    url, api = f"http://127.0.0.1:{webhook}/webhooks/linear", f"http://127.0.0.1:{operator}"
    http = requests.Session()
    rng = random.Random(1)
    rows: list[dict[str, float]] = []
    sent = refused = 0
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http.get(api + "/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise SystemExit("serve did not start") from None
            time.sleep(0.1)
        token = (root / "state" / "operator.token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        start = time.monotonic()
        next_sample = start
        while time.monotonic() - start < args.minutes * 60:
            if time.monotonic() >= next_sample:
                row = sample(child.pid, root / "state")
                row["minute"] = round((time.monotonic() - start) / 60, 1)
                row["sent"] = sent
                rows.append(row)
                print(json.dumps(row), flush=True)
                next_sample += 60
            for _ in range(int(args.rate)):
                raw = json.dumps(body(rng, sent)).encode()
                resp = http.post(url, data=raw, timeout=30, headers={
                    "Linear-Delivery": str(uuid.uuid4()), "Content-Type": "application/json",
                    "Linear-Signature": hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()})
                sent += 1
                refused += resp.status_code != 200
            for path in ("/v1/inbox?view=headlines", "/v1/journal?limit=50", "/v1/status"):
                read = http.get(api + path, headers=auth, timeout=30)
                if args.ack_inbox and path.startswith("/v1/inbox") and read.json()["events"]:
                    http.post(api + "/v1/inbox/ack", headers=auth, timeout=30,
                              json={"cursor": read.json()["events"][-1]["cursor"]})
            time.sleep(max(0.0, 1.0 - 0.001))
        rows.append({**sample(child.pid, root / "state"), "minute": args.minutes, "sent": sent})
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    print("\n| minute | sent | RSS MB | fork server MB | threads | open files | db+wal MB "
          "| journal lines |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['minute']} | {r['sent']} | {r['rss_mb']:.1f} | {r['forkserver_mb']:.1f} | "
              f"{r['threads']} | {r['fds']} | {r['db_mb']:.1f} | {r['journal_lines']} |")
    warm = next(r for r in rows if r["minute"] >= args.minutes * WARM_FRACTION)
    last = rows[-1]
    after = [r for r in rows if r["minute"] >= warm["minute"]]
    problems = []
    if len(after) >= 4:
        for key, name in (("rss_mb", "RSS"), ("forkserver_mb", "the fork server's RSS")):
            growth = slope(after, key)
            print(f"{name}: {rows[0][key]:.1f} MB at the start, {warm[key]:.1f} at minute "
                  f"{warm['minute']}, {last[key]:.1f} at the end; {growth:+.3f} MB a minute since")
            if growth > RSS_SLOPE_LIMIT:
                problems.append(f"{name} rose {growth:.2f} MB a minute after warm-up")
    else:
        print("too short to judge memory: fewer than 4 samples after warm-up")
    if max(r["threads"] for r in rows) > allowed:
        problems.append(f"more threads than its config allows ({allowed})")
    if last["threads"] > warm["threads"] + 8:  # a lazily started pool may still fill up
        problems.append(f"threads grew from {warm['threads']} to {last['threads']}")
    if last["fds"] > warm["fds"] + 20:
        problems.append(f"open files grew from {warm['fds']} to {last['fds']}")
    if max(r["journal_lines"] for r in rows) > 2500:
        problems.append("the journal outgrew its compaction threshold")
    per = (last["db_mb"] - rows[0]["db_mb"]) * 1e6 / max(1, last["sent"] - rows[0]["sent"])
    print(f"\nsent {sent} deliveries ({refused} refused); the database kept {per:.0f} bytes per delivery")
    print("soak: " + ("; ".join(problems) if problems else "no growth beyond retention"))
    shutil.rmtree(root, ignore_errors=True)
    return 1 if problems or refused else 0


if __name__ == "__main__":
    sys.exit(main())
