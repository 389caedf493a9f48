#!/usr/bin/env python3
"""Control page benchmark: how soon a running turn's progress reaches the page's feed.

    .venv/bin/python bench/control.py [--turns 4] [--calls 100]

A real `wakeline serve` (bench/progress.py's: temp config, loopback, free ports, a
recording stand-in for Linear). The agent prints Claude Code's stream-json: `--calls` tool
calls at 20 per second, each tool_use line carrying the wall-clock moment it was printed.
The bench follows `GET /v1/events` (what the control page's script follows) and, for each
tool call the feed delivers, takes the moment the event's line arrived minus the moment the
agent printed it. Target: p99 < 200 ms.

Baseline, in the same run: the same agent, same pace, its stdout read straight from the
pipe by this process (the floor any reader of the agent pays).

Bounded: every wait has a deadline; the serve child is stopped on exit and on error.
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import progress  # noqa: E402  (bench/progress.py: the Linear stand-in and the serve child)
import turns  # noqa: E402  (bench/turns.py: waits, percentiles, session bodies)

AGENT = '''
import json, os, sys, time
sys.stdin.read()
calls, rate = int(sys.argv[1]), float(sys.argv[2])
out = sys.stdout
def put(obj):
    out.write(json.dumps(obj) + "\\n"); out.flush()
put({"type": "system", "subtype": "init", "session_id": "bench-" + os.environ.get("WAKELINE_TURN_ID", "x")})
started = time.monotonic()
for n in range(calls):
    put({"type": "assistant", "message": {"content": [{"type": "tool_use", "id": f"t{n}",
        "name": "Bash", "input": {"command": f"make step-{n} @{time.time():.6f}"}}]}})
    put({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": f"t{n}",
        "content": f"step {n}: ok"}]}})
    pause = started + (n + 1) / rate - time.monotonic()
    if pause > 0:
        time.sleep(pause)
put({"type": "result", "subtype": "success", "is_error": False, "result": f"done {calls}"})
'''
RATE = 20.0
PRINTED = re.compile(r"@(\d+\.\d+)")


def follow(port: int, token: str, lags: list[float], stop: threading.Event) -> None:
    """Read the feed; for each tool call started, its lag behind the agent's print."""
    conn = http.client.HTTPConnection(turns.HOST, port, timeout=120)
    conn.request("GET", "/v1/events", headers={"Authorization": f"Bearer {token}"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    kind = ""
    while not stop.is_set():
        line = resp.fp.readline()
        if not line:
            return
        at = time.time()
        text = line.decode().rstrip("\n")
        if text.startswith("event: "):
            kind = text[7:]
        elif text.startswith("data: ") and kind == "progress":
            for item in json.loads(text[6:])["items"]:
                found = PRINTED.search(item.get("parameter", ""))
                if item["type"] == "action" and "result" not in item and found:
                    lags.append(at - float(found.group(1)))
    conn.close()


def on_the_page(work: Path, agent: Path, n_turns: int, calls: int) -> list[float]:
    linear = progress.Linear()
    child = progress.serve(work / "serve", linear,
                           [sys.executable, str(agent), str(calls), str(RATE)], "claude")
    progress.start(child, work / "ends")
    token = (child.root / "state" / "operator.token").read_text().strip()
    lags: list[float] = []
    stop = threading.Event()
    reader = threading.Thread(target=follow, args=(child.operator_port, token, lags, stop),
                              name="bench-feed", daemon=True)
    reader.start()
    time.sleep(0.2)  # the feed is open before the first turn starts
    conn = http.client.HTTPConnection(turns.HOST, child.webhook_port, timeout=30)
    for i in range(n_turns):
        raw = turns.session_body(i, "control")
        conn.request("POST", "/webhooks/linear", body=raw, headers={
            "Content-Type": "application/json", "Linear-Delivery": f"control-{i}",
            "Linear-Signature": turns.sign(turns.SECRET, raw), "Linear-Event": "AgentSessionEvent"})
        conn.getresponse().read()
    conn.close()
    turns.wait_until(lambda: len(lags) >= n_turns * calls, 120 + n_turns * calls / RATE,
                     "every tool call on the feed")
    stop.set()
    child.stop()
    return lags


def from_the_pipe(agent: Path, n_turns: int, calls: int) -> list[float]:
    """The baseline: the same agents, read straight from their stdout."""
    lags: list[float] = []

    def one() -> None:
        proc = subprocess.Popen([sys.executable, str(agent), str(calls), str(RATE)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env={**os.environ, "WAKELINE_TURN_ID": "pipe"})
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        for line in proc.stdout:
            at = time.time()
            found = PRINTED.search(line.decode())
            if found and '"tool_use"' in line.decode():
                lags.append(at - float(found.group(1)))
        proc.wait(timeout=60)

    readers = [threading.Thread(target=one, name=f"bench-pipe-{i}") for i in range(n_turns)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(120 + calls / RATE)
    return lags


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=4, help="agent sessions running at once")
    ap.add_argument("--calls", type=int, default=100, help="tool calls per turn")
    args = ap.parse_args()
    atexit.register(turns._stop_children)
    work = Path(tempfile.mkdtemp(prefix="wakeline-bench-control-"))
    agent = work / "agent.py"
    agent.write_text(AGENT)
    page = [lag * 1000 for lag in on_the_page(work, agent, args.turns, args.calls)]
    pipe = [lag * 1000 for lag in from_the_pipe(agent, args.turns, args.calls)]
    p99, base = turns.pct(page, 99), turns.pct(pipe, 99)
    print(f"{args.turns} turns at once, {args.calls} tool calls each at {RATE:.0f}/s: "
          f"{len(page)} tool calls on the feed")
    print("| figure | feed (GET /v1/events) | baseline: the agent's pipe | target |")
    print("|---|---:|---:|---|")
    print(f"| printed → on the feed p50, ms | {turns.pct(page, 50):.1f} | "
          f"{turns.pct(pipe, 50):.1f} | |")
    print(f"| printed → on the feed p99, ms | {p99:.1f} | {base:.1f} | < 200 "
          f"{'met' if p99 < 200 else 'MISSED'} |")
    return 0 if p99 < 200 else 1


if __name__ == "__main__":
    sys.exit(main())
