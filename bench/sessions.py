#!/usr/bin/env python3
"""Agent-session acknowledgements under load.

    .venv/bin/python bench/sessions.py [--sessions 50] [--latency-ms 200]

Starts a fake Linear on 127.0.0.1 that answers every GraphQL call after
`--latency-ms`, and `wakeline serve` as a child process pointed at it (a
credential in $WAKELINE_LINEAR_API_KEY, `max_concurrent_turns = 4`, an agent
that sleeps 30 s so every turn slot stays busy). It then sends `--sessions`
AgentSessionEvent `created` deliveries at once, from as many threads, and
prints, per delivery, when its `thought` acknowledgement reached the fake,
counted from the moment the burst started. Linear allows 10 s; the target is
every acknowledgement within 2 s.

For a same-run baseline it prints the fake's own floor: one GraphQL call with
the same latency, straight from Python.

Bounded: every wait has a deadline, only loopback is used, and the child is
terminated on exit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import session_event, signed  # noqa: E402
from tests.fakes.linear import FakeLinear  # noqa: E402
from tests.helpers import free_port, wait_until  # noqa: E402

SECRET = "bench-sessions-webhook-secret"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--latency-ms", type=int, default=200)
    args = parser.parse_args()

    fake = FakeLinear(latency=args.latency_ms / 1000).start()
    floor_start = time.monotonic()
    requests.post(fake.url, json={"query": "query { viewer { id } }"}, timeout=10)
    floor = time.monotonic() - floor_start
    fake.requests.clear()

    root = Path(tempfile.mkdtemp(prefix="wakeline-bench-sessions-"))
    webhook_port, operator_port = free_port(), free_port()
    (root / "wakeline.toml").write_text(
        f'state_dir = "state"\nlog_level = "WARNING"\n'
        f'[server]\nwebhook_host = "127.0.0.1"\nwebhook_port = {webhook_port}\noperator_port = {operator_port}\n'
        f'[linear]\napi_url = "{fake.url}"\n'
        f'[agent]\ncommand = {json.dumps(["/bin/sh", "-c", "sleep 30"])}\nmax_concurrent_turns = 4\n'
        f'[[routes]]\nname = "eng"\nteams = ["ENG"]\n'
    )
    env = {**os.environ, "WAKELINE_LINEAR_WEBHOOK_SECRET": SECRET,
           "WAKELINE_LINEAR_API_KEY": "lin_api_bench-not-a-real-key"}
    proc = subprocess.Popen([sys.executable, "-m", "wakeline", "--config", str(root / "wakeline.toml"), "serve"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{webhook_port}"
        wait_until(lambda: requests.get(url + "/healthz", timeout=1).ok, timeout=30, message="serve up")
        bodies = [signed(session_event(session_id=f"bench-{n}", issue_id=f"issue-{n}", identifier=f"ENG-{n}"),
                         secret=SECRET) for n in range(args.sessions)]
        go = threading.Barrier(args.sessions + 1)
        answers: list[int] = []

        def send(raw: bytes, headers: dict[str, str]) -> None:
            go.wait()
            answers.append(requests.post(url + "/webhooks/linear", data=raw, headers=headers, timeout=30).status_code)

        threads = [threading.Thread(target=send, args=body) for body in bodies]
        for t in threads:
            t.start()
        go.wait()
        burst = time.time()
        for t in threads:
            t.join(30)
        wait_until(lambda: len([r for r in fake.activities() if r.input["content"]["type"] == "thought"])
                   >= args.sessions, timeout=60, message="every acknowledgement")
        arrivals = sorted((r.at - burst) for r in fake.activities() if r.input["content"]["type"] == "thought")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        fake.stop()

    # A request is recorded when it arrives, before the fake's latency: add it back.
    reached = [a + args.latency_ms / 1000 for a in arrivals]
    print(f"{args.sessions} simultaneous `created` deliveries, fake Linear latency {args.latency_ms} ms")
    print(f"webhook answers: {sorted(set(answers))}")
    print(f"baseline: one call to the fake from Python takes {floor * 1000:.0f} ms")
    print("acknowledgement reached Linear after (s), in order:")
    print("  " + " ".join(f"{r:.2f}" for r in reached))
    worst = max(reached)
    print("\n| sessions | latency | first ack | median ack | last ack | target (all ≤ 2 s) |")
    print("|---|---|---|---|---|---|")
    print(f"| {args.sessions} | {args.latency_ms} ms | {reached[0]:.2f} s | {reached[len(reached) // 2]:.2f} s "
          f"| {worst:.2f} s | {'met' if worst <= 2 else 'missed'} |")
    return 0 if worst <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
