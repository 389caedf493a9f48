#!/usr/bin/env python3
"""Progress benchmark: a chatty stream agent against a plain one, in the same run.

    .venv/bin/python bench/progress.py [--turns 60] [--calls 100]

A real `wakeline serve` (bench/turns.py's ServeChild: temp config, loopback, free ports)
with a Linear credential pointed at a small recording stand-in for Linear on loopback,
which answers every write at once and notes when it arrived. The agents are Python
scripts that print Claude Code's stream-json (`output = "claude"`):

  chatty  `--calls` tool calls at 200 per second (a tool_use and a tool_result line
          each: two progress events, so 100 calls are the issue's "200 events"), then
          the answer; it notes the moment just before it exits.
  plain   `output = "text"`: prints the answer and exits (the baseline).

  1  answer latency: `--turns` agent sessions of each kind, four at a time; per turn,
     the agent's exit to the response activity's arrival at Linear. Target: p99 < 1 s
     for the chatty agent.
  2  service CPU per turn: serve's own CPU plus its fork server's over the turns of each
     kind (agents excluded). Target: chatty at most 2x plain.
  3  Linear requests of one turn of 1,000 tool calls at 100 per second (10 s), against
     the bound minutes x 60 / progress_interval_seconds + 10.

Bounded: every wait has a deadline; the serve child is stopped on exit and on error.
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import turns  # noqa: E402  (bench/turns.py: the serve child and /proc helpers)

INTERVAL_SECONDS = 3.0
KEY = "lin_api_" + "bench0123456789abcdefghijklmnop"  # a fake, shaped like a personal key
AGENT = '''
import json, os, sys, time
sys.stdin.read()
calls, rate = int(sys.argv[1]), float(sys.argv[2])
out = sys.stdout
def put(obj):
    out.write(json.dumps(obj) + "\\n"); out.flush()
put({"type": "system", "subtype": "init", "session_id": "bench-" + os.environ["WAKELINE_TURN_ID"]})
started = time.monotonic()
for n in range(calls):
    put({"type": "assistant", "message": {"content": [{"type": "tool_use", "id": f"t{n}",
        "name": "Bash", "input": {"command": f"make step-{n}"}}]}})
    put({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": f"t{n}",
        "content": f"step {n}: ok"}]}})
    pause = started + (n + 1) / rate - time.monotonic()
    if pause > 0:
        time.sleep(pause)
put({"type": "result", "subtype": "success", "is_error": False, "result": f"done {calls}"})
with open(os.environ["BENCH_ENDS"], "a") as fh:
    fh.write(f"{time.time()} {os.environ['WAKELINE_ISSUE_IDENTIFIER']}\\n")
'''
PLAIN = '''
import os, sys, time
sys.stdin.read()
print("done plain")
sys.stdout.flush()
with open(os.environ["BENCH_ENDS"], "a") as fh:
    fh.write(f"{time.time()} {os.environ['WAKELINE_ISSUE_IDENTIFIER']}\\n")
'''


class Linear:
    """A stand-in for Linear that answers every write and notes when it came."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, dict[str, Any]]] = []
        lock = threading.Lock()
        linear = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    linear.seen.append((time.time(), body))
                field = next((f for f in ("agentActivityCreate", "agentSessionUpdate")
                              if f in body.get("query", "")), "viewer")
                raw = json.dumps({"data": {field: {"success": True}}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer((turns.HOST, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://{turns.HOST}:{self.server.server_address[1]}/graphql"

    def writes(self, session: str) -> list[tuple[float, dict[str, Any]]]:
        """Every request about one agent session, in arrival order."""
        out = []
        for at, body in list(self.seen):
            v = body.get("variables") or {}
            if (v.get("input") or {}).get("agentSessionId") == session or v.get("id") == session:
                out.append((at, body))
        return out


def serve(root: Path, linear: Linear, agent: list[str], output: str) -> turns.ServeChild:
    root.mkdir(parents=True)
    child = turns.ServeChild(root, root / "starts")
    text = child.config_path.read_text()
    text = text.replace(f"command = {json.dumps(turns.AGENT)}",
                        f"command = {json.dumps(agent)}\noutput = \"{output}\"\n"
                        f"progress_interval_seconds = {INTERVAL_SECONDS}")
    text = text.replace(f'api_url = "http://{turns.HOST}:9/graphql"', f'api_url = "{linear.url}"')
    child.config_path.write_text(text)
    return child


def start(child: turns.ServeChild, ends: Path) -> None:
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
    env.update(WAKELINE_LINEAR_WEBHOOK_SECRET=turns.SECRET, WAKELINE_LINEAR_API_KEY=KEY,
               BENCH_ENDS=str(ends))
    log = open(child.root / "serve.log", "ab")
    child.proc = subprocess.Popen(
        [sys.executable, "-m", "wakeline", "--config", str(child.config_path), "serve"],
        env=env, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, cwd=child.root)
    log.close()
    turns._children.append(child)
    child.wait_ready()


def run_turns(child: turns.ServeChild, linear: Linear, ends: Path, n: int, run: str
              ) -> tuple[list[float], float]:
    """Deliver `n` sessions; wait for every answer. (exit-to-answer seconds, serve CPU s)."""
    assert child.proc is not None
    fork = turns.wait_until(lambda: turns.forkserver_of(child.proc.pid), 30, "fork server")
    cpu0 = turns.cpu_times(child.proc.pid)[0] + turns.cpu_times(fork)[0]
    conn = http.client.HTTPConnection(turns.HOST, child.webhook_port, timeout=30)
    for i in range(n):
        raw = turns.session_body(i, run)
        conn.request("POST", "/webhooks/linear", body=raw, headers={
            "Content-Type": "application/json", "Linear-Delivery": f"{run}-{i}",
            "Linear-Signature": turns.sign(turns.SECRET, raw), "Linear-Event": "AgentSessionEvent"})
        conn.getresponse().read()
    conn.close()

    def answer(i: int) -> float | None:
        return next((at for at, body in linear.writes(f"session-{run}-{i}")
                     if '"response"' in json.dumps(body)), None)

    turns.wait_until(lambda: all(answer(i) for i in range(n)), 600, f"{run}: every answer")
    cpu1 = turns.cpu_times(child.proc.pid)[0] + turns.cpu_times(fork)[0]
    exits = {ident: float(at) for at, ident in
             (line.split() for line in ends.read_text().splitlines())}
    latencies = [answer(i) - exits[f"ENG-{i}"] for i in range(n)]  # type: ignore[operator]
    return latencies, cpu1 - cpu0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--calls", type=int, default=100, help="tool calls per chatty turn")
    args = ap.parse_args()
    atexit.register(turns._stop_children)
    work = Path(tempfile.mkdtemp(prefix="wakeline-bench-progress-"))
    agent, plain = work / "agent.py", work / "plain.py"
    agent.write_text(AGENT)
    plain.write_text(PLAIN)
    linear = Linear()
    results: dict[str, tuple[list[float], float]] = {}
    for kind, argv, output in (
            ("plain", [sys.executable, str(plain)], "text"),
            ("chatty", [sys.executable, str(agent), str(args.calls), "200"], "claude")):
        child = serve(work / kind, linear, argv, output)
        ends = work / f"{kind}.ends"
        start(child, ends)
        results[kind] = run_turns(child, linear, ends, args.turns, kind)
        child.stop()
    long_child = serve(work / "long", linear, [sys.executable, str(agent), "1000", "100"], "claude")
    long_ends = work / "long.ends"
    start(long_child, long_ends)
    t0 = time.time()
    run_turns(long_child, linear, long_ends, 1, "long")
    minutes = (time.time() - t0) / 60
    requests = len(linear.writes("session-long-0"))
    long_child.stop()

    plain_lat, plain_cpu = results["plain"]
    chat_lat, chat_cpu = results["chatty"]
    bound = minutes * 60 / INTERVAL_SECONDS + 10
    n = args.turns
    print(f"| figure | chatty ({2 * args.calls} events: {args.calls} tool calls at 200/s) | "
          "plain (baseline) | ratio | target |")
    print("|---|---:|---:|---:|---|")
    print(f"| exit → answer at Linear p50, ms | {turns.pct(chat_lat, 50) * 1000:.0f} | "
          f"{turns.pct(plain_lat, 50) * 1000:.0f} | {turns.pct(chat_lat, 50) / turns.pct(plain_lat, 50):.2f} | |")
    print(f"| exit → answer at Linear p99, ms | {turns.pct(chat_lat, 99) * 1000:.0f} | "
          f"{turns.pct(plain_lat, 99) * 1000:.0f} | {turns.pct(chat_lat, 99) / turns.pct(plain_lat, 99):.2f} | "
          f"< 1000 ms: {'met' if turns.pct(chat_lat, 99) < 1 else 'MISSED'} |")
    print(f"| service CPU per turn, ms | {chat_cpu / n * 1000:.1f} | {plain_cpu / n * 1000:.1f} | "
          f"{chat_cpu / plain_cpu:.2f} | ≤ 2x: {'met' if chat_cpu <= 2 * plain_cpu else 'MISSED'} |")
    print(f"| Linear requests, one turn of 1,000 tool calls ({minutes * 60:.1f} s) | {requests} | "
          f"bound {bound:.1f} | {requests / bound:.2f} | ≤ bound: {'met' if requests <= bound else 'MISSED'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
