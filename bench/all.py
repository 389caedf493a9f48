#!/usr/bin/env python3
"""Every benchmark, one table: each figure beside the baseline measured in the same run.

    .venv/bin/python bench/all.py [--quick]      (what `make bench` runs)

Runs `ingest.py`, `turns.py`, `sessions.py`, `progress.py`, `control.py`, `discord.py`, `inbox.py`,
`journal.py` and `hosts.py` one after the other (each starts its own servers on loopback and cleans up), keeps their whole output
in `bench/last-run/`, and prints the figures that matter. Ratios are wakeline over its
baseline for rates (higher is better) and for times (lower is better), as the column says.
The machines here are noisy: compare ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "last-run"


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True,
                          text=True, timeout=3600, check=False)
    text = done.stdout + done.stderr
    (OUT / f"{script.removesuffix('.py')}.txt").write_text(text)
    if done.returncode not in (0, 1):  # 1: a target missed, still a result
        raise SystemExit(f"{script} failed ({done.returncode}); see {OUT}")
    return text


def number(pattern: str, text: str, group: int = 1) -> float:
    found = re.search(pattern, text)
    if found is None:
        raise SystemExit(f"cannot find {pattern!r} in the output; see {OUT}")
    return float(found.group(group).replace(",", ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter runs (a smoke test, not a result)")
    quick = ap.parse_args().quick
    OUT.mkdir(exist_ok=True)
    rows: list[tuple[str, str, str, str, str]] = []

    text = run("ingest.py", *(["--rounds", "1", "--seconds", "3"] if quick else ["--rounds", "3"]))
    a = number(r"\| \*\*all \d+\*\* \| \*\*wakeline\*\* \| \*\*([\d,]+)\*\* \| \*\*[\d.]+\*\* \| \*\*([\d.]+)", text)
    b = number(r"\| \*\*all \d+\*\* \| \*\*baseline\*\* \| \*\*([\d,]+)\*\*", text)
    bare = number(r"\| \*\*all \d+\*\* \| \*\*bare\*\* \| \*\*([\d,]+)\*\*", text)
    p99 = number(r"\| \*\*all \d+\*\* \| \*\*wakeline\*\* \| \*\*[\d,]+\*\* \| \*\*[\d.]+\*\* \| \*\*([\d.]+)", text)
    bp99 = number(r"\| \*\*all \d+\*\* \| \*\*baseline\*\* \| \*\*[\d,]+\*\* \| \*\*[\d.]+\*\* \| \*\*([\d.]+)", text)
    rows.append(("ingest", "deliveries/s (16 connections; baseline: the bare handler, target ≥ 0.75)",
                 f"{a:,.0f}", f"{bare:,.0f}", f"{a / bare:.2f}"))
    rows.append(("ingest", "deliveries/s (16 connections; baseline: a naive durable receiver)",
                 f"{a:,.0f}", f"{b:,.0f}", f"{a / b:.2f}"))
    rows.append(("ingest", "p99 ack latency, ms (target < 12; baseline: the naive receiver)", f"{p99:.1f}",
                 f"{bp99:.1f}", f"{p99 / bp99:.2f}"))

    text = run("turns.py", *(["--conversations", "1000", "--deliveries", "50"] if quick else
                             ["--conversations", "2000"]))
    spawn = number(r"spawn baseline .*?p50 ([\d.]+) ms", text)
    start = number(r"latency p50 ([\d.]+) ms", text)
    start99 = number(r"latency p50 [\d.]+ ms, p99 ([\d.]+) ms", text)
    rate = number(r"(\d+) turns/s \(first turn", text)
    with_start = number(r"(\d+) turns/s \(spawn -> done", text)
    cpu = number(r"CPU per turn: serve ([\d.]+) ms", text)
    rows.append(("turns", "webhook → agent start p50, ms (baseline: the spawn alone)", f"{start:.1f}",
                 f"{spawn:.1f}", f"{start / spawn:.2f}"))
    rows.append(("turns", "webhook → agent start p99, ms (target < 50)", f"{start99:.1f}", "—", "—"))
    spawns = number(r"spawn rate of the agent alone, \d+ at a time: (\d+) spawns/s", text)
    rows.append(("turns", "drain of `true`, turns/s, first turn → last (baseline: spawns/s of `true` "
                 "alone, as many at a time, before and after the drain; target ≥ 0.25)",
                 f"{rate:.0f}", f"{spawns:.0f}", f"{rate / spawns:.2f}"))
    rows.append(("turns", "the same drain from serve's spawn, start-up included (same baseline)",
                 f"{with_start:.0f}", f"{spawns:.0f}", f"{with_start / spawns:.2f}"))
    for network, start_c, added, drain_c, share in re.findall(
            r'network = "(\w+)", beside \[1\] and \[2\]:\n\s+webhook -> agent start p50 ([\d.]+) ms'
            r'.*?\+([\d.-]+) ms at p50.*?\n\s+drain (\d+) turns/s \(first turn -> last\) = ([\d.]+)',
            text):
        rows.append(("turns", f"confined (bubblewrap, network={network}): agent start p50, ms "
                     "(baseline: unconfined, same run; target ≤ +10 ms)", start_c,
                     f"{float(start_c) - float(added):.1f}", f"+{added}"))
        rows.append(("turns", f"confined (network={network}): drain, turns/s (baseline: "
                     "unconfined, same run; target ≥ 0.5)", drain_c,
                     f"{float(drain_c) / float(share):.0f}", share))
    agents = number(r"CPU per turn: serve [\d.]+ ms, agents ([\d.]+) ms", text)
    rows.append(("turns", "service CPU per turn, ms (target ≤ 3; baseline: the agent's own)",
                 f"{cpu:.1f}", f"{agents:.1f}", f"{cpu / agents:.2f}"))

    text = run("sessions.py")
    call = number(r"one call to the fake from Python takes (\d+) ms", text)
    last = number(r"\| \d+ \| \d+ ms \| [\d.]+ s \| [\d.]+ s \| ([\d.]+) s", text)
    rows.append(("sessions", "last of 50 acknowledgements, s (baseline: one call)", f"{last:.2f}",
                 f"{call / 1000:.2f}", f"{last * 1000 / call:.1f}"))

    text = run("progress.py", *(["--turns", "12"] if quick else []))
    lat = re.search(r"\| exit → answer at Linear p99, ms \| (\d+) \| (\d+) \| ([\d.]+)", text)
    cpu = re.search(r"\| service CPU per turn, ms \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)", text)
    req = re.search(r"\| Linear requests, one turn of 1,000 tool calls \(([\d.]+) s\) \| (\d+) \| "
                    r"bound ([\d.]+) \| ([\d.]+)", text)
    assert lat and cpu and req, f"see {OUT}"
    rows.append(("progress", "exit → answer p99, ms, agent at 200 tool calls/s (target < 1000; "
                 "baseline: a plain agent)", *lat.groups()))
    rows.append(("progress", "service CPU per turn, ms, 200 events (target ≤ 2x; baseline: plain)",
                 *cpu.groups()))
    rows.append(("progress", f"Linear requests, 1,000 tool calls in {req.group(1)} s (baseline: the "
                 "bound)", req.group(2), req.group(3), req.group(4)))

    text = run("control.py", *(["--turns", "2", "--calls", "40"] if quick else []))
    feed = re.search(r"\| printed → on the feed p99, ms \| ([\d.]+) \| ([\d.]+) \|", text)
    assert feed is not None, f"see {OUT}"
    rows.append(("control", "tool call printed → on the page's feed p99, ms (target < 200; "
                 "baseline: the agent's pipe)", feed.group(1), feed.group(2),
                 f"{float(feed.group(1)) / max(float(feed.group(2)), 0.1):.1f}"))

    text = run("discord.py", *(["--issues", "20"] if quick else []))
    hook = number(r"\[1\] webhook -> agent start, n=\d+ .*?p99 ([\d.]+) ms", text)
    message = number(r"\[2\] thread message -> agent start, n=\d+: p50 [\d.]+ ms, p99 ([\d.]+) ms", text)
    rows.append(("discord", "thread message → agent start p99, ms (baseline: the webhook's, same run)",
                 f"{message:.1f}", f"{hook:.1f}", f"{message / hook:.2f}"))
    per = re.search(r"per new issue, on the fake: ([\d.]+) thread creates, ([\d.]+) opening posts", text)
    assert per is not None, f"see {OUT}"
    rows.append(("discord", "thread creates / opening posts per new issue (target 1 / 1)",
                 f"{per.group(1)} / {per.group(2)}", "—", "—"))

    text = run("inbox.py")
    worst = max(float(m) for m in re.findall(r"\| (?:forward|after|before)[\w-]* \| [\d.]+ \| ([\d.]+) \|", text))
    rows.append(("inbox", "worst read p99, ms (target < 20)", f"{worst:.1f}", "—", "—"))

    text = run("journal.py")
    actor = re.search(r"\(a\) actor, 5000 told\s*\|\s*([\d,.]+) ms .*?\|\s*([\d,.]+) ms .*?\|\s*([\d.]+)", text)
    compact = number(r"\(c\) compact 2500 lines\s*\|\s*[\d.]+ ms\s*\|\s*([\d.]+) ms", text)
    assert actor is not None
    rows.append(("journal", "5,000 appends through the actor, ms (baseline: write+fsync each)",
                 actor.group(2), actor.group(1), actor.group(3)))
    rows.append(("journal", "compaction at 2,500 lines, ms", f"{compact:.1f}", "—", "—"))

    text = run("hosts.py", *(["--quick"] if quick else []))
    three = re.search(r"\| 3 \| \d+ \| [\d.]+ \| ([\d.]+) \| ([\d.]+) \|", text)
    one = number(r"\| 1 \| \d+ \| [\d.]+ \| ([\d.]+) \|", text)
    pg = re.search(r"SQLite ([\d,]+)/s p99 ([\d.]+) ms; PostgreSQL ([\d,]+)/s p99 ([\d.]+) ms", text)
    took = number(r"first interrupted turn again ([\d.]+) s after the kill", text)
    assert three and pg, f"see {OUT}"
    rows.append(("hosts", "turns/s on 3 hosts, sleeping agent (baseline: 1 host; ideal 3x)",
                 three.group(1), f"{one:.2f}", f"{float(three.group(1)) / one:.2f}"))
    pg_rate, sq_rate = (float(pg.group(k).replace(",", "")) for k in (3, 1))
    rows.append(("hosts", "ingest deliveries/s on PostgreSQL (baseline: on SQLite, same run)",
                 f"{pg_rate:,.0f}", f"{sq_rate:,.0f}", f"{pg_rate / sq_rate:.2f}"))
    rows.append(("hosts", "a dead host's turns start again after, s (baseline: host_timeout 5 s)",
                 f"{took:.1f}", "5.0", f"{took / 5:.2f}"))

    print("| bench | figure | wakeline | baseline (same run) | ratio |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nWhole outputs: {OUT}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
