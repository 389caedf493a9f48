#!/usr/bin/env python3
"""Discord benchmark: a thread message reaches the agent as fast as a webhook does.

    .venv/bin/python bench/discord.py [--issues 100] [--spacing-ms 20]

A real `wakeline serve` (bench/turns.py's ServeChild: temp config, loopback, free ports,
the instant /bin/sh agent that notes when it starts) whose route names a parent channel on
the project's fake Discord (tests/fakes/discord.py: REST and Gateway on 127.0.0.1, in this
process); serve runs the real discord.py client against it. Needs the `discord` extra.

  1  webhook -> agent start: `--issues` AgentSessionEvent `created` deliveries, one issue
     each, one every `--spacing-ms`; per issue, the send time to the agent's first start
     (the same measure as bench/turns.py's part 1).
  2  thread message -> agent start, in the same run and service: once every issue has its
     thread and its answer, a person posts one message in each thread, one every
     `--spacing-ms`; per issue, the moment the fake Discord dispatches it to the agent's
     second start. Target: p99 within 1.5x the webhook's p99 (and under 50 ms).
  3  Discord requests per new issue, counted on the fake: thread creates (target: exactly
     one) and posts (the thread's opening line: one; the answer: one per 2,000
     characters), and 429s (none).

Bounded: every wait has a deadline; the serve child is stopped on exit and on error.
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import json
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
# This file's name shadows discord.py in this process: nothing here imports it (serve, a
# child process, does).
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import turns  # noqa: E402  (bench/turns.py: the serve child, the agent, percentiles)
from tests.fakes.discord import FakeDiscord  # noqa: E402

TOKEN = "bench-discord-bot-token-Vd82kQ"
PERSON = "555000000000000001"
TARGET_RATIO = 1.5
TARGET_MS = 50.0


def serve_with_discord(root: Path, fake: FakeDiscord) -> turns.ServeChild:
    """A ServeChild whose route has a parent channel on the fake and a bot token file."""
    root.mkdir()
    child = turns.ServeChild(root, root / "starts")
    token = root / "discord-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    text = child.config_path.read_text()
    text = text.replace('[[routes]]\nname = "eng"\nteams = ["ENG"]\n',
                        f'[discord]\ntoken_file = "{token}"\napi_url = "{fake.api_url}"\n'
                        f'[[routes]]\nname = "eng"\nteams = ["ENG"]\n'
                        f'discord_channel_id = "{fake.channel_id}"\n')
    child.config_path.write_text(text)
    child.config = turns.parse_config(turns._toml(child.config_path), root)
    return child


def operator_get(child: turns.ServeChild, path: str) -> Any:
    token = (child.config.state_path / "operator.token").read_text().strip()
    conn = http.client.HTTPConnection(turns.HOST, child.operator_port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def gateway_connected(child: turns.ServeChild) -> bool:
    checks = operator_get(child, "/v1/doctor")["checks"]
    return any(c["name"] == "discord_gateway" and c["detail"].startswith("connected")
               for c in checks)


def bindings(child: turns.ServeChild) -> dict[str, str]:
    """Issue identifier -> its thread id."""
    db = sqlite3.connect(f"file:{child.database}?mode=ro", uri=True, timeout=5)
    try:
        return dict(db.execute("SELECT c.issue_identifier, b.thread_id FROM control_bindings b"
                               " JOIN conversations c ON c.id = b.conversation_id").fetchall())
    finally:
        db.close()


def starts_by_issue(path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for ts, ident in turns.read_starts(path):
        out.setdefault(ident, []).append(ts)
    return out


def run(issues: int, spacing_ms: float, work: Path) -> dict[str, Any]:
    fake = FakeDiscord(token=TOKEN).start()
    child = serve_with_discord(work / "serve", fake)
    try:
        child.start()
        child.wait_ready()
        turns.wait_until(lambda: gateway_connected(child), 60, "the Gateway connected", 0.1)
        before = len(fake.requests)
        run_id = uuid.uuid4().hex[:8]

        # 1: webhooks, one new issue each.
        sent: dict[str, int] = {}
        conn = http.client.HTTPConnection(turns.HOST, child.webhook_port, timeout=20)
        next_at = time.monotonic()
        for i in range(issues):
            raw = turns.session_body(i, run_id)
            headers = {"Content-Type": "application/json",
                       "Linear-Signature": turns.sign(turns.SECRET, raw),
                       "Linear-Delivery": str(uuid.uuid4()), "Linear-Event": "AgentSessionEvent"}
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += spacing_ms / 1000
            t0 = time.time_ns()
            conn.request("POST", "/webhooks/linear", body=raw, headers=headers)
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                sent[f"ENG-{i}"] = t0
        conn.close()
        turns.wait_until(lambda: len(starts_by_issue(child.starts)) >= len(sent), 60,
                         "every webhook's agent started")
        turns.wait_until(lambda: len(bindings(child)) >= len(sent), 60, "every thread made")
        threads = bindings(child)

        def answered() -> bool:
            said = Counter(r.path for r in fake.requests_to("POST", "/channels/*/messages")
                           if r.status == 200)
            return all(said[f"/channels/{t}/messages"] >= 2 for t in threads.values())

        turns.wait_until(answered, 60, "every thread's opening line and answer")
        per_issue = fake.requests[before:]

        # 2: a person's message in each thread.
        posted: dict[str, int] = {}
        next_at = time.monotonic()
        for i in range(issues):
            key = f"ENG-{i}"
            if key not in threads:
                continue
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += spacing_ms / 1000
            posted[key] = time.time_ns()
            fake.post_user_message(threads[key], PERSON, f"one more thing for {key}")
        turns.wait_until(lambda: sum(len(v) >= 2 for v in starts_by_issue(child.starts).values())
                         >= len(posted), 60, "every message's agent started")
    finally:
        child.stop()
        fake.stop()
    starts = starts_by_issue(child.starts)
    webhook = [(starts[k][0] - t0) / 1e6 for k, t0 in sent.items() if k in starts]
    message = [(starts[k][1] - t0) / 1e6 for k, t0 in posted.items() if len(starts.get(k, [])) > 1]
    creates = [r for r in per_issue if r.method == "POST" and r.path.endswith("/threads")]
    posts = [r for r in per_issue if r.method == "POST" and r.path.endswith("/messages")]
    opening = [r for r in posts if (r.json or {}).get("content", "").startswith("wakeline follows")]
    return {
        "webhook": turns.summary(webhook), "message": turns.summary(message),
        "issues": len(sent), "threads": len(threads),
        "creates_per_issue": len([r for r in creates if r.status == 201]) / max(len(sent), 1),
        "opening_posts_per_issue": len([r for r in opening if r.status == 200]) / max(len(sent), 1),
        "answer_posts_per_issue": len([r for r in posts if r.status == 200 and r not in opening])
        / max(len(sent), 1),
        "limited": sum(r.status == 429 for r in per_issue),
    }


def report(d: dict[str, Any], spacing_ms: float) -> bool:
    w, m = d["webhook"], d["message"]
    ratio = m["p99"] / w["p99"] if w["p99"] else float("inf")
    met_latency = (ratio <= TARGET_RATIO or m["p99"] < TARGET_MS) and m["n"] == d["issues"]
    met_requests = (d["creates_per_issue"] == 1.0 and d["opening_posts_per_issue"] == 1.0
                    and d["answer_posts_per_issue"] == 1.0 and d["limited"] == 0)
    print(f"\n[1] webhook -> agent start, n={w['n']} (one every {spacing_ms:g} ms): "
          f"p50 {w['p50']:.2f} ms, p99 {w['p99']:.2f} ms, max {w['max']:.2f} ms")
    print(f"[2] thread message -> agent start, n={m['n']}: p50 {m['p50']:.2f} ms, "
          f"p99 {m['p99']:.2f} ms, max {m['max']:.2f} ms "
          f"(p99 {ratio:.2f}x the webhook's; target <= {TARGET_RATIO:g}x or < {TARGET_MS:g} ms: "
          f"{turns.yes(met_latency)})")
    print(f"[3] per new issue, on the fake: {d['creates_per_issue']:.2f} thread creates, "
          f"{d['opening_posts_per_issue']:.2f} opening posts, {d['answer_posts_per_issue']:.2f} "
          f"answer posts (the answer is under 2,000 characters), {d['limited']} 429s "
          f"({turns.yes(met_requests)})")
    rows = [
        (f"webhook → agent start p50 / p99 (n={w['n']})", f"{w['p50']:.1f} / {w['p99']:.1f} ms",
         "—", "—"),
        (f"thread message → agent start p50 / p99 (n={m['n']})",
         f"{m['p50']:.1f} / {m['p99']:.1f} ms",
         f"≤ {TARGET_RATIO:g}x webhook p99 or < {TARGET_MS:g} ms",
         "yes" if met_latency else "no"),
        ("thread creates / opening posts / answer posts per new issue",
         f"{d['creates_per_issue']:.2f} / {d['opening_posts_per_issue']:.2f} / "
         f"{d['answer_posts_per_issue']:.2f}", "1 / 1 / 1", "yes" if met_requests else "no"),
        ("Discord 429s", str(d["limited"]), "0", "yes" if d["limited"] == 0 else "no"),
    ]
    print("\nmarkdown:\n\n| measure | value | target | met |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return met_latency and met_requests


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--issues", type=int, default=100, help="new issues, one thread each")
    ap.add_argument("--spacing-ms", type=float, default=20.0, help="gap between sends")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, database)")
    args = ap.parse_args()
    atexit.register(turns._stop_children)
    signal.signal(signal.SIGTERM, turns._on_sigterm)
    work = Path(tempfile.mkdtemp(prefix="wakeline-bench-discord-"))
    print(f"machine: nproc={os.cpu_count()}; temp dir {work}; load {turns.load()}", flush=True)
    try:
        result = run(args.issues, args.spacing_ms, work)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {turns.load()}")
    return 0 if report(result, args.spacing_ms) else 1


if __name__ == "__main__":
    sys.exit(main())
