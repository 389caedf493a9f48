#!/usr/bin/env python3
"""Matrix benchmark: message-to-agent-start beside webhook-to-agent-start, and idle CPU.

    .venv/bin/python bench/matrix.py [--messages 100] [--idle-seconds 30]

A local Synapse (the tests' pinned one, installed once into its own cached venv,
`tests/support/synapse.py`) and a real `wakeline serve` (bench/turns.py's ServeChild: temp
config, loopback, free ports, the instant shell agent) with one Linear route and one Matrix
route whose connection acts as the owner's device `WAKELINE`.

  1  latency, closed loop, interleaved in the same run: a signed AgentSessionEvent to the
     webhook, then a plain `m.text` from alice to the bound room, `--messages` times each;
     every one waits for its agent to start before the next goes. Matrix: from just before
     alice's `PUT /send` to the agent's first line (Synapse, the sync long poll, the
     page and its cursor committed, the wake, the fork server). Webhook: as bench/turns.py.
  2  idle CPU: serve's own CPU (and its fork server's) over `--idle-seconds` with the
     connection syncing and nothing arriving, beside a serve without Matrix over the same
     window: the connection's share is the difference.

Bounded: every wait has a deadline; serve children and Synapse stop on exit and on error.
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import turns  # noqa: E402  (bench/turns.py: the serve child and /proc helpers)
from tests.support.matrix import login_device, write_token  # noqa: E402
from tests.support.synapse import Homeserver, install_synapse, start_homeserver  # noqa: E402
from wakeline.config import parse_config  # noqa: E402
from wakeline.providers.linear.signature import sign  # noqa: E402

_servers: list[Homeserver] = []


def matrix_child(root: Path, server: Homeserver, token_file: Path, user_id: str,
                 room: str) -> turns.ServeChild:
    """A ServeChild whose config also has connection `me` and route `room`."""
    child = turns.ServeChild(root, root / "starts")
    with child.config_path.open("a") as config:
        config.write(f'[matrix.connections.me]\nhomeserver = "{server.url}"\n'
                     f'user_id = "{user_id}"\naccess_token_file = "{token_file}"\n'
                     f'[[matrix.routes]]\nname = "room"\nconnection = "me"\nroom_id = "{room}"\n')
    child.config = parse_config(turns._toml(child.config_path), root)
    return child


def synced(child: turns.ServeChild) -> bool:
    if not child.database.exists():
        return False
    db = sqlite3.connect(f"file:{child.database}?mode=ro", uri=True, timeout=5)
    try:
        return bool(db.execute("SELECT 1 FROM matrix_cursors").fetchone())
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def latency(child: turns.ServeChild, server: Homeserver, alice_token: str, room: str,
            n: int) -> dict[str, Any]:
    """Closed loop, interleaved: one webhook, then one Matrix message, `n` times."""
    starts = child.starts
    run = uuid.uuid4().hex[:8]
    web: list[float] = []
    mx: list[float] = []
    conn = http.client.HTTPConnection(turns.HOST, child.webhook_port, timeout=20)
    try:
        for i in range(n):
            raw = turns.session_body(i, run)
            headers = {"Content-Type": "application/json", "Linear-Signature": sign(turns.SECRET, raw),
                       "Linear-Delivery": str(uuid.uuid4()), "Linear-Event": "AgentSessionEvent"}
            t0 = time.time_ns()
            conn.request("POST", "/webhooks/linear", body=raw, headers=headers)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, resp.status
            ident = f"ENG-{i}"
            row = turns.wait_until(lambda: next((t for t, k in turns.read_starts(starts)
                                                 if k == ident), None), 30, "webhook turn")
            web.append((row - t0) / 1e6)

            before = sum(1 for _, k in turns.read_starts(starts) if k == "")
            t0 = time.time_ns()
            server.send_text(alice_token, room, f"bench message {i}")
            row = turns.wait_until(lambda: [t for t, k in turns.read_starts(starts) if k == ""]
                                   [before:] or None, 30, "matrix turn")[0]
            mx.append((row - t0) / 1e6)
    finally:
        conn.close()
    return {"webhook": turns.summary(web), "matrix": turns.summary(mx)}


def idle_cpu(child: turns.ServeChild, seconds: float) -> float:
    """Serve's CPU (with its fork server's) over `seconds` of nothing arriving, in percent
    of one core."""
    assert child.proc is not None
    fork = turns.wait_until(lambda: turns.forkserver_of(child.proc.pid), 30, "fork server")
    time.sleep(2.0)  # let the last turn's bookkeeping settle first
    cpu0 = turns.cpu_times(child.proc.pid)[0] + turns.cpu_times(fork)[0]
    t0 = time.monotonic()
    time.sleep(seconds)
    cpu1 = turns.cpu_times(child.proc.pid)[0] + turns.cpu_times(fork)[0]
    return (cpu1 - cpu0) / (time.monotonic() - t0) * 100


def stop_all() -> None:
    turns._stop_children()
    for server in _servers:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100, help="of each kind, interleaved")
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, turns._on_sigterm)
    install = install_synapse()
    if install.python is None:
        print(f"no Synapse: {install.reason}")
        return 2
    work = Path(tempfile.mkdtemp(prefix="wakeline-bench-matrix-"))
    print(f"machine: nproc={os.cpu_count()}; temp dir {work}; load {turns.load()}", flush=True)
    try:
        server = start_homeserver(install.python, work / "synapse")
        _servers.append(server)
        me, alice = server.register("me"), server.register("alice")
        token_file = write_token(work / "matrix-me-token", login_device(server, me))
        room = server.create_room(me.access_token, invite=[alice.user_id])
        server.join(alice.access_token, room)

        (work / "with").mkdir()
        child = matrix_child(work / "with", server, token_file, me.user_id, room)
        child.start()
        child.wait_ready()
        turns.wait_until(lambda: synced(child), 60, "the Matrix connection synced")
        lat = latency(child, server, alice.access_token, room, args.messages)
        print(f"load after the latency part: {turns.load()}", flush=True)
        with_matrix = idle_cpu(child, args.idle_seconds)
        child.stop()

        (work / "without").mkdir()
        plain = turns.ServeChild(work / "without", work / "without" / "starts")
        plain.start()
        plain.wait_ready()
        without = idle_cpu(plain, args.idle_seconds)
        plain.stop()
    finally:
        stop_all()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    w, m = lat["webhook"], lat["matrix"]
    print(f"\n[1] agent start, closed loop, n={m['n']} each, interleaved:\n"
          f"    Matrix message  p50 {m['p50']:.1f} ms, p99 {m['p99']:.1f} ms, max {m['max']:.1f} ms\n"
          f"    webhook         p50 {w['p50']:.1f} ms, p99 {w['p99']:.1f} ms, max {w['max']:.1f} ms")
    print(f"\n[2] idle CPU over {args.idle_seconds:g} s: serve with a syncing Matrix connection "
          f"{with_matrix:.2f}% of a core, without Matrix {without:.2f}%: the connection's share "
          f"~{with_matrix - without:.2f}%")
    print("\nmarkdown:\n\n| measure | value |\n|---|---|")
    print(f"| Matrix message → agent start p50 / p99 / max (n={m['n']}) | "
          f"{m['p50']:.1f} / {m['p99']:.1f} / {m['max']:.1f} ms |")
    print(f"| webhook → agent start p50 / p99 / max, same run (n={w['n']}) | "
          f"{w['p50']:.1f} / {w['p99']:.1f} / {w['max']:.1f} ms |")
    print(f"| idle CPU, serve with / without a Matrix connection ({args.idle_seconds:g} s) | "
          f"{with_matrix:.2f}% / {without:.2f}% of a core |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
