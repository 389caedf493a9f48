#!/usr/bin/env python3
"""Where a delivery's ingest CPU goes, stage by stage, in one process.

    .venv/bin/python bench/ingest_stages.py [--n 20000] [--group 8]

bench/ingest.py measures the whole server against the bare handler; this script
takes the request path apart and times each stage on the same ~1.2 KB Comment
delivery bench/ingest.py sends (its `signed_delivery`), CPU time of this process
(`time.process_time`: time spent waiting for the disk is not CPU):

- verify: the HMAC-SHA256 check of `Linear-Signature` against the body;
- digest: the body's SHA-256 (the receipt's fingerprint);
- json: `json.loads` of the body;
- depth: the nesting check before anything recursive sees the object;
- validate: the pydantic payload models and the typed delivery built from them;
- read: the adapter as a whole (all of the above, plus freshness);
- plan: the router's admission plan;
- hand-off: one plan through the admission writer and back to its request thread
  (8 request threads, a store that commits nothing: the queue, the wake-ups, the
  thread switches);
- admit: the store's admission of groups of `--group` deliveries on a real SQLite
  file (`synchronous = FULL`), per delivery; its wall time per group, fsync
  included, is printed beside it.

The bare HTTP server's own CPU per request is bench/ingest.py's figure for C.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "bench"))
from ingest import signed_delivery  # noqa: E402
from wakeline.admission.writer import AdmissionWriter  # noqa: E402
from wakeline.clock import SystemClock, to_ms  # noqa: E402
from wakeline.config import parse_config  # noqa: E402
from wakeline.models.store import AdmissionResult, Store  # noqa: E402
from wakeline.models.states import Outcome  # noqa: E402
from wakeline.providers.linear import adapter  # noqa: E402
from wakeline.providers.linear.adapter import LinearWebhooks  # noqa: E402
from wakeline.providers.linear.signature import signature_valid  # noqa: E402
from wakeline.admission.router import Router  # noqa: E402

SECRET = "bench-stages-secret"


def per_call_us(fn: Callable[[int], Any], n: int) -> float:
    """CPU microseconds per call of `fn(i)`, the best of three passes."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for i in range(n):
            fn(i)
        best = min(best, (time.process_time() - start) / n * 1e6)
    return best


class _NoStore:
    """A store whose admission is instant: what is left is the writer's own cost."""

    def admit(self, plans: list[Any]) -> list[AdmissionResult]:
        return [AdmissionResult(Outcome.ACCEPTED) for _ in plans]

    def close(self) -> None:
        """Nothing to close."""


def hand_off_us(plans: list[Any], threads: int = 8) -> float:
    """CPU microseconds per plan sent through the admission writer by `threads` threads."""
    writer = AdmissionWriter(_NoStore())  # type: ignore[arg-type]
    writer.start()
    per_thread = len(plans) // threads

    def send(offset: int) -> None:
        for plan in plans[offset:offset + per_thread]:
            writer.submit(plan, 10.0)

    start = time.process_time()
    workers = [threading.Thread(target=send, args=(k * per_thread,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    spent = time.process_time() - start
    writer.stop()
    return spent / (per_thread * threads) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000, help="deliveries per stage")
    ap.add_argument("--group", type=int, default=8, help="deliveries per admission group")
    args = ap.parse_args()
    n = args.n
    key = SECRET.encode()
    deliveries = [signed_delivery(key, i) for i in range(n)]
    bodies = [d[2] for d in deliveries]
    tmp = Path(tempfile.mkdtemp(prefix="wakeline-stages-"))
    config = parse_config({"state_dir": str(tmp / "state"),
                           "routes": [{"name": "eng", "teams": ["ENG"], "mode": "issue"}]}, tmp)
    webhooks = LinearWebhooks(SECRET, freshness_seconds=3600)
    router = Router(config)
    clock = SystemClock()
    now = to_ms(clock.now())
    raw = [json.loads(b) for b in bodies]

    rows: list[tuple[str, float]] = []
    rows.append(("verify", per_call_us(lambda i: signature_valid(SECRET, bodies[i], deliveries[i][1]), n)))
    rows.append(("digest", per_call_us(lambda i: hashlib.sha256(bodies[i]).hexdigest(), n)))
    rows.append(("json", per_call_us(lambda i: json.loads(bodies[i].decode()), n)))
    rows.append(("depth", per_call_us(lambda i: adapter._check_depth(raw[i]), n)))
    rows.append(("validate", per_call_us(
        lambda i: adapter._parse(raw[i], deliveries[i][0], "0" * 64), n)))
    parsed = [webhooks.read(bodies[i], signature=deliveries[i][1], delivery_id=deliveries[i][0],
                            now_ms=now) for i in range(n)]
    rows.append(("read (all of the above)", per_call_us(
        lambda i: webhooks.read(bodies[i], signature=deliveries[i][1],
                                delivery_id=deliveries[i][0], now_ms=now), n)))
    plans = [router.plan(p, now) for p in parsed]
    rows.append(("plan", per_call_us(lambda i: router.plan(parsed[i], now), n)))
    rows.append(("hand-off (8 threads)", hand_off_us(plans)))

    store = Store.open(config.database_path, clock)
    groups = [plans[k:k + args.group] for k in range(0, len(plans), args.group)]
    walls: list[float] = []
    cpu_start = time.process_time()
    for group in groups:
        t0 = time.perf_counter()
        store.admit(group)
        walls.append((time.perf_counter() - t0) * 1000)
    rows.append((f"admit (groups of {args.group})", (time.process_time() - cpu_start) / n * 1e6))
    store.close()

    width = max(len(name) for name, _ in rows)
    print(f"{n} deliveries of {len(bodies[0])} bytes; CPU µs per delivery (best of 3):")
    for name, us in rows:
        print(f"  {name:<{width}}  {us:8.1f}")
    print(f"  admit wall time per group of {args.group}: median {statistics.median(walls):.2f} ms, "
          f"p99 {sorted(walls)[int(len(walls) * 0.99)]:.2f} ms (fsync included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
