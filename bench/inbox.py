#!/usr/bin/env python3
"""Inbox read benchmark: page reads of a 100,000-message inbox through the real HTTP API.

    .venv/bin/python bench/inbox.py [--messages 100000] [--requests 500] [--unread 0.4]

1. A temp state dir gets a real, migrated database (wakeline's own `Store.open`), and
   `--messages` inbox messages are bulk-inserted into the real schema (a receipt and an
   inbox message each, one transaction): Comment and Issue events of ~0.5-2 KB, with one
   in 200 carrying a 20-60 KB description so that bounding is exercised. The read
   boundary is set so that the newest `--unread` fraction is unread.
2. `wakeline serve` runs as a child process on 127.0.0.1 (its own GIL).
3. One keep-alive connection sends `--requests` GETs per kind, one at a time, and times
   each from just before the request is written until the whole body is read:

     forward            GET /v1/inbox                     (from the ack boundary, full)
     forward-headlines  GET /v1/inbox?view=headlines&limit=100
     after              GET /v1/inbox?after=<random>      (full)
     after-headlines    GET /v1/inbox?after=<random>&view=headlines&limit=100
     before             GET /v1/inbox?before=<random>     (full)
     before-headlines   GET /v1/inbox?before=<random>&view=headlines&limit=100
     ack                POST /v1/inbox/ack (the last cursor of the page just read; the
                        read is not timed; informational, it commits and prunes)

   A read that returns events never shown before also commits their `shown` marks,
   so random reads pay for a write (fsync) the first time they touch a page.

Prints p50/p99/max per kind and checks p99 < 20 ms for the reads; then a markdown
table for docs/performance.md. Bounded: every wait has a deadline, only loopback is
used, and the child is terminated on exit, on Ctrl-C and on error.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))

from wakeline.clock import SystemClock  # noqa: E402
from wakeline.models.store import Store  # noqa: E402

HOST = "127.0.0.1"
TARGET_P99_MS = 20.0
START_TIMEOUT = 60.0
REQUEST_TIMEOUT = 30.0
READ_KINDS = ("forward", "forward-headlines", "after", "after-headlines", "before",
              "before-headlines")

_WORDS = ("the sync worker retries without backing off when upstream answers 429 so a burst "
          "of webhooks becomes a burst of retries we should honour retry-after and cap the "
          "queue depth per tenant before this reaches the database").split()
_PEOPLE = ("Jane Doe", "Ravi Patel", "Mina Okafor", "Tom Berg", "Ana Lima")


# --- the data --------------------------------------------------------------------------------


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def make_event(rng: random.Random, n: int, created: str) -> tuple[str, str, str]:
    """(type, action, headline) and the event JSON as the admission stores it."""
    number = rng.randint(1, 4000)
    identifier = f"ENG-{number}"
    actor = rng.choice(_PEOPLE)
    issue = {"id": f"issue-{number}", "identifier": identifier, "title": _text(rng, 8)}
    if n % 3:
        kind, action = "Comment", rng.choice(("create", "create", "update"))
        data: dict[str, Any] = {"id": f"comment-{n}", "body": _text(rng, rng.randint(20, 250)),
                                "issueId": issue["id"], "issue": issue, "userId": f"user-{actor}"}
        updated_from = None if action == "create" else {"body": _text(rng, 30)}
    else:
        kind, action = "Issue", "update"
        data = {**issue, "description": _text(rng, rng.randint(10, 120)),
                "state": {"id": "state-1", "name": "In Progress", "type": "started"},
                "team": {"id": "team-eng", "key": "ENG"}, "priority": rng.randint(0, 4),
                "labelIds": [f"label-{i}" for i in range(rng.randint(0, 6))]}
        updated_from = {"stateId": "state-0", "updatedAt": created}
    if n % 200 == 7:  # now and then, a very large event
        data["description"] = _text(rng, rng.randint(3_000, 9_000))
    event: dict[str, Any] = {
        "type": kind, "action": action, "url": f"https://linear.app/bench/issue/{identifier}",
        "createdAt": created, "actor": {"id": f"user-{actor}", "name": actor, "type": "user"},
        "data": data,
    }
    if updated_from is not None:
        event["updatedFrom"] = updated_from
    headline = f"{kind} {action} · {identifier} · {actor}"
    return headline, json.dumps(event, ensure_ascii=False, separators=(",", ":")), kind


def populate(db_path: Path, messages: int, unread_fraction: float, seed: int) -> tuple[int, int]:
    """Create the real schema, bulk-insert the messages; returns (max cursor, ack cursor)."""
    Store.open(db_path, SystemClock()).close()  # creates and migrates the real schema
    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    start_ms = now_ms - 20 * 86_400_000  # spread over the last 20 days
    step = (now_ms - start_ms) // max(messages, 1)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # loading only; the server runs with its own pragmas
    conn.execute("BEGIN IMMEDIATE")
    receipts, inbox = [], []
    for n in range(1, messages + 1):
        at = start_ms + n * step
        created = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(at / 1000))
        headline, event, kind = make_event(rng, n, created)
        receipts.append((n, str(uuid.UUID(int=rng.getrandbits(128))), f"{n:064x}", kind,
                         "create", at, at, "accepted"))
        inbox.append((n, at, headline, event, len(event.encode("utf-8"))))
    conn.executemany(
        "INSERT INTO receipts (id, delivery_id, body_sha256, event_type, action, received_at, "
        "webhook_at, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", receipts)
    conn.executemany(
        "INSERT INTO inbox_messages (receipt_id, received_at, headline, event, size_bytes) "
        "VALUES (?, ?, ?, ?, ?)", inbox)
    ack = int(messages * (1 - unread_fraction))
    conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('inbox.ack_cursor', ?)",
                 (json.dumps(ack),))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    top = conn.execute("SELECT MAX(id) FROM inbox_messages").fetchone()[0]
    conn.close()
    return int(top), ack


# --- the server ------------------------------------------------------------------------------


class Child:
    """`wakeline serve` as a child process; its stdout names the operator URL."""

    def __init__(self, home: Path, config: Path) -> None:
        self.out = home / "serve.stdout"
        self.err = home / "serve.stderr"
        exe = Path(sys.executable).parent / "wakeline"
        argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "wakeline"]
        env = {**os.environ, "WAKELINE_LINEAR_WEBHOOK_SECRET": uuid.uuid4().hex}
        env.pop("WAKELINE_CONFIG", None)
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([*argv, "--config", str(config), "serve"], env=env,
                                         cwd=home, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        self.url = self._wait_url()

    def _wait_url(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for line in self.out.read_text(errors="replace").splitlines():
                if "operator API on " in line:
                    url = line.split("operator API on ", 1)[1].strip()
                    if not url.startswith(f"http://{HOST}:"):
                        raise RuntimeError(f"the operator API is not on loopback: {url}")
                    self._wait_healthy(url, deadline)
                    return url
            if self.proc.poll() is not None:
                raise RuntimeError(f"wakeline serve exited with {self.proc.returncode}:\n"
                                   + self.err.read_text(errors="replace")[-2000:])
            time.sleep(0.05)
        raise RuntimeError("wakeline serve did not announce its URLs in time:\n"
                           + self.err.read_text(errors="replace")[-2000:])

    def _wait_healthy(self, url: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError("GET /healthz did not answer in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# --- measuring -------------------------------------------------------------------------------


class Api:
    """One keep-alive connection to the operator API."""

    def __init__(self, url: str, token: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[float, int, bytes]:
        """(milliseconds, status, body): request written to whole response read."""
        data = None if body is None else json.dumps(body).encode()
        started = time.perf_counter()
        self.conn.request(method, path, body=data, headers=self.headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        return (time.perf_counter() - started) * 1000, resp.status, raw


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def measure(api: Api, top: int, ack: int, requests: int, rng: random.Random) -> dict[str, Any]:
    paths = {
        "forward": lambda: "/v1/inbox",
        "forward-headlines": lambda: "/v1/inbox?view=headlines&limit=100",
        "after": lambda: f"/v1/inbox?after={rng.randint(0, top)}",
        "after-headlines": lambda: f"/v1/inbox?after={rng.randint(0, top)}"
                                   "&view=headlines&limit=100",
        "before": lambda: f"/v1/inbox?before={rng.randint(1, top + 1)}",
        "before-headlines": lambda: f"/v1/inbox?before={rng.randint(1, top + 1)}"
                                    "&view=headlines&limit=100",
    }
    results: dict[str, Any] = {}
    for kind in READ_KINDS:
        for _ in range(20):  # warm-up, uncounted
            api.call("GET", paths[kind]())
        times, events, sizes = [], 0, []
        for _ in range(requests):
            ms, status, raw = api.call("GET", paths[kind]())
            if status != 200:
                raise RuntimeError(f"{kind}: HTTP {status}: {raw[:200]!r}")
            times.append(ms)
            sizes.append(len(raw))
            events += len(json.loads(raw)["events"])
        results[kind] = {"times": times, "events": events / requests, "bytes": max(sizes)}
    # Acks last: they move the boundary (and prune the read history beyond its bounds).
    times = []
    for _ in range(min(requests, 200)):
        page = json.loads(api.call("GET", "/v1/inbox?view=headlines&limit=5")[2])
        if not page["events"]:
            break
        cursor = page["events"][-1]["cursor"]
        ms, status, raw = api.call("POST", "/v1/inbox/ack", {"cursor": cursor})
        if status != 200:
            raise RuntimeError(f"ack: HTTP {status}: {raw[:200]!r}")
        times.append(ms)
    results["ack"] = {"times": times, "events": 0, "bytes": 0}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=500, help="timed requests per kind")
    parser.add_argument("--unread", type=float, default=0.4, help="fraction left unread")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="wakeline-bench-inbox-"))
    child: Child | None = None

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        config = workdir / "wakeline.toml"
        config.write_text('state_dir = "state"\n\n[server]\n'
                          f'webhook_host = "{HOST}"\nwebhook_port = 0\n'
                          f'operator_host = "{HOST}"\noperator_port = 0\nthreads = 8\n')
        db = workdir / "state" / "wakeline.db"
        t0 = time.perf_counter()
        top, ack = populate(db, args.messages, args.unread, args.seed)
        print(f"stored {args.messages:,} inbox messages in {time.perf_counter() - t0:.1f} s "
              f"({db.stat().st_size / 1e6:.0f} MB); ack boundary {ack:,}, "
              f"{top - ack:,} unread", flush=True)
        child = Child(workdir, config)
        token = (workdir / "state" / "operator.token").read_text().strip()
        api = Api(child.url, token)
        results = measure(api, top, ack, args.requests, random.Random(args.seed))
    finally:
        if child is not None:
            child.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept {workdir}")

    print(f"\n{platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {args.requests} timed requests per kind, one connection")
    print(f"{'kind':<18} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'events':>7} {'max bytes':>10}")
    failed = []
    for kind, r in results.items():
        t = r["times"]
        p99 = pct(t, 99)
        print(f"{kind:<18} {pct(t, 50):8.2f} {p99:8.2f} {max(t):8.2f} {r['events']:7.1f} "
              f"{r['bytes']:10,}")
        if kind in READ_KINDS and p99 >= TARGET_P99_MS:
            failed.append(kind)
    verdict = "met" if not failed else f"MISSED by {', '.join(failed)}"
    print(f"\nread p99 target < {TARGET_P99_MS:.0f} ms: {verdict}")
    print("\n| kind | p50 ms | p99 ms | events/page |\n|---|---|---|---|")
    for kind, r in results.items():
        print(f"| {kind} | {pct(r['times'], 50):.2f} | {pct(r['times'], 99):.2f} | "
              f"{r['events']:.1f} |")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
