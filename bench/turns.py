#!/usr/bin/env python3
"""Agent-turn benchmark: webhook-to-agent-start latency and a 10,000-conversation drain.

    .venv/bin/python bench/turns.py [--deliveries 200] [--conversations 10000]

Every part runs the real `wakeline serve` as a child process (temp config and
state dir, 127.0.0.1, free ports, secret from $WAKELINE_LINEAR_WEBHOOK_SECRET,
`max_concurrent_turns = 4`). The agent is an instant shell one:

    /bin/sh -c 'echo "$(date +%s%N) $WAKELINE_ISSUE_IDENTIFIER" >> "$BENCH_STARTS"; cat >/dev/null'

so a turn costs wakeline's own work plus one sh and one date process. No
Linear credential is given: the tracker is the local backend, so a `created`
session's acknowledgement is refused at once instead of costing a round trip
to Linear before the agent starts (with a credential it would).

  0  baseline: the same /bin/sh agent spawned `--baseline` times straight from
     Python with subprocess (prompt file on stdin, piped stdout/stderr, own
     session, as wakeline's runner does); fork-exec to the line it writes.
  0' spawn rate: the same agent spawned as above by `max_concurrent_turns` threads at
     once, each starting the next as soon as its child exits, for `--spawns` spawns
     (default: `--conversations`): the limit a drain is measured against. It runs
     right before and right after the drain, and the mean of the two counts.
  1  latency: `--deliveries` AgentSessionEvent `created` deliveries, each for a
     different issue, sent one every `--spacing-ms` over one keep-alive
     connection. Per issue, the client-side send time (just before the request
     is written) is matched with the agent's start timestamp. Target: p99 < 50 ms.
  2  drain: `--conversations` conversations with one pending delivery each are
     written into the store with wakeline's own `Store.admit` before serve
     starts; startup recovery wakes them all. Measured: turns/s from the first
     turn's start to the last one's end (as the store records them: the turns
     alone, as the spawn rate counts its spawns), and from serve's spawn until
     every delivery is completed (read-only polls of the database; this one
     includes the interpreter's start-up and recovery), peak threads and
     RSS of the serve process (/proc/PID/status every 25 ms) and VmHWM.
     Targets: peak threads <= max_concurrent_turns + the two listeners' request
     threads + 16 (bounded by the configuration, never growing with the
     conversations), peak RSS < 300 MB.

  3  confined: parts 1 and 2 again, each turn in bubblewrap (`sandbox.mode = "required"`),
     for each route network of `--sandbox` ("open": bwrap alone; "off": bwrap with a network
     namespace of its own, where the fork server listens and relays wakeline's API). The agent
     writes its line into its route's `writable` directory. Targets: at most 10 ms added to
     the unconfined start p50, and a drain at least 0.5 of the unconfined one.

Bounded: every loop has a deadline, only loopback is used, and the serve child
is terminated on exit, on Ctrl-C, on SIGTERM and on error.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wakeline.clock import SystemClock  # noqa: E402
from wakeline.config import parse_config  # noqa: E402
from wakeline.models.envelopes import AgentSession, InboundDelivery, IssueInfo, Subject  # noqa: E402
from wakeline.models.plans import AdmissionPlan, Decision, NewConversation  # noqa: E402
from wakeline.models.states import Outcome, Ownership  # noqa: E402
from wakeline.models.store import Store  # noqa: E402
from wakeline.providers.linear.adapter import ISSUE_NAMESPACE  # noqa: E402
from wakeline.providers.linear.signature import sign  # noqa: E402
from wakeline.sandbox.probe import probe  # noqa: E402

HOST = "127.0.0.1"
SECRET = "bench-turns-webhook-secret-7Qm2Zr9x"
ORG = "org-bench"
MAX_CONCURRENT_TURNS = 4
SERVER_THREADS = 8
INGRESS_THREADS = 32  # server.ingress_threads' default
AGENT = ["/bin/sh", "-c",
         'echo "$(date +%s%N) $WAKELINE_ISSUE_IDENTIFIER" >> "$BENCH_STARTS"; cat >/dev/null']
# The drain's agent (`--drain-agent`): the timestamping shell one, or `true`, the least an
# agent can be (issue 26 measured against it). The spawn rate runs the same one.
DRAIN_AGENTS = {"sh": AGENT, "true": ["/bin/true"]}
LATENCY_TARGET_MS = 50.0
# Confined turns (bubblewrap): at most this much added to the unconfined start p50, and a
# drain at least this share of the unconfined one (issue 37).
CONFINED_START_TARGET_MS = 10.0
CONFINED_DRAIN_TARGET = 0.5
RSS_TARGET_MB = 300.0
# Everything else (actors, the admission writer, the listeners' loops, the fork server's
# reader) is a fixed few: the target is that nothing grows with the number of turns.
THREADS_TARGET = MAX_CONCURRENT_TURNS + SERVER_THREADS + INGRESS_THREADS + 16

_children: list["ServeChild"] = []


# --- helpers ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    if not s:
        return float("nan")
    rank = max(1, min(len(s), int(-(-q * len(s) // 100))))
    return s[rank - 1]


def summary(values_ms: list[float]) -> dict[str, float]:
    return {"n": len(values_ms), "p50": pct(values_ms, 50), "p99": pct(values_ms, 99),
            "max": max(values_ms) if values_ms else float("nan")}


def read_starts(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            out.append((int(parts[0]), parts[1]))
        elif len(parts) == 1 and parts[0].isdigit():
            out.append((int(parts[0]), ""))
    return out


# --- the serve child --------------------------------------------------------------------------


@dataclass
class ServeChild:
    """One `wakeline serve` on free loopback ports, with its own state dir. `sandbox`: "none"
    (unconfined), or the route's network with every turn in bubblewrap ("open", "off")."""

    root: Path
    starts: Path
    agent: list[str] = field(default_factory=lambda: list(AGENT))
    sandbox: str = "none"
    webhook_port: int = field(default_factory=free_port)
    operator_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.config_path = self.root / "wakeline.toml"
        # A confined agent writes its line into a directory of its route's `writable`.
        confined = ('[sandbox]\nmode = "none"\n' if self.sandbox == "none" else
                    '[sandbox]\nmode = "required"\n')
        route = ("" if self.sandbox == "none" else
                 f'network = "{self.sandbox}"\nwritable = ["{self.starts.parent}"]\n')
        self.config_path.write_text(
            'state_dir = "state"\nlog_level = "WARNING"\n'
            f'[server]\nwebhook_host = "{HOST}"\nwebhook_port = {self.webhook_port}\n'
            f'operator_host = "{HOST}"\noperator_port = {self.operator_port}\n'
            f"threads = {SERVER_THREADS}\ningress_threads = {INGRESS_THREADS}\n"
            f"[agent]\ncommand = {json.dumps(self.agent)}\n"
            f"max_concurrent_turns = {MAX_CONCURRENT_TURNS}\n"
            # No credential is given (the local backend); were one found, it would stay on loopback.
            f'[linear]\norganization_id = "{ORG}"\napi_url = "http://{HOST}:9/graphql"\n'
            + confined + '[[routes]]\nname = "eng"\nteams = ["ENG"]\n' + route
        )
        self.config = parse_config(_toml(self.config_path), self.root)

    @property
    def database(self) -> Path:
        return self.config.database_path

    def start(self) -> float:
        """Spawn; returns the monotonic spawn time. Does not wait for readiness."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
        env.update(WAKELINE_LINEAR_WEBHOOK_SECRET=SECRET, BENCH_STARTS=str(self.starts))
        log = open(self.root / "serve.log", "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wakeline", "--config", str(self.config_path), "serve"],
            env=env, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, cwd=self.root,
        )
        log.close()
        _children.append(self)
        return t0

    def wait_ready(self, timeout: float = 120) -> None:
        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SystemExit(f"wakeline serve exited with {self.proc.returncode}; "
                                 f"see {self.root / 'serve.log'}")
            conn = http.client.HTTPConnection(HOST, self.webhook_port, timeout=1)
            try:
                conn.request("GET", "/healthz")
                return conn.getresponse().status == 200
            except OSError:
                return False
            finally:
                conn.close()
        wait_until(up, timeout, "wakeline serve up", interval=0.01)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def _stop_children() -> None:
    for child in list(_children):
        try:
            child.stop()
        except Exception:
            pass


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


# --- /proc sampler ----------------------------------------------------------------------------


def forkserver_of(pid: int) -> int | None:
    """The pid of serve's fork server (its child running wakeline/turns/forkserver.py), if any."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            if ppid == pid and b"forkserver.py" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except (OSError, IndexError, ValueError):
            continue
    return None


def status_of(pid: int) -> dict[str, int] | None:
    """Threads, VmRSS and VmHWM (kB) of a process from /proc; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Threads", "VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def cpu_times(pid: int) -> tuple[float, float]:
    """(own user+system, reaped children's user+system) of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


class Sampler:
    """Samples Threads and VmRSS of serve every `interval` seconds until stopped.

    Serve's CPU includes its fork server's own CPU (the helper that starts the agents);
    the agents' CPU is what both have reaped. Peak RSS is serve's plus the helper's.
    """

    def __init__(self, pid: int, interval: float = 0.025) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_threads = 0
        self.peak_rss_kb = 0
        self.hwm_kb = 0
        self.samples = 0
        self.cpu_s = self.children_cpu_s = 0.0
        self.helper: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _read(self) -> dict[str, int] | None:
        out = status_of(self.pid)
        if out is None:
            return None
        if self.helper is None:
            self.helper = forkserver_of(self.pid)
        helper = status_of(self.helper) if self.helper else None
        for key in ("VmRSS", "VmHWM"):
            out[key] = out.get(key, 0) + (helper or {}).get(key, 0)
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            s = self._read()
            if s is None:
                return
            self.samples += 1
            self.peak_threads = max(self.peak_threads, s.get("Threads", 0))
            self.peak_rss_kb = max(self.peak_rss_kb, s.get("VmRSS", 0))
            self.hwm_kb = max(self.hwm_kb, s.get("VmHWM", 0))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        s = self._read()
        if s is not None:
            self.hwm_kb = max(self.hwm_kb, s.get("VmHWM", 0))
        try:  # serve and its fork server, and the agents they reaped
            own, children = cpu_times(self.pid)
            if self.helper is not None:
                helper_own, helper_children = cpu_times(self.helper)
                own, children = own + helper_own, children + helper_children
            self.cpu_s, self.children_cpu_s = own, children
        except (OSError, IndexError, ValueError):
            pass
        self._stop.set()
        self._thread.join(5)


# --- part 0: spawn baseline -------------------------------------------------------------------


def spawn_baseline(n: int, work: Path) -> list[float]:
    """fork-exec of the agent from Python to its timestamp line, in ms."""
    starts = work / "baseline-starts"
    prompt = work / "baseline.prompt"
    prompt.write_text("x" * 2000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
    env.update(BENCH_STARTS=str(starts), WAKELINE_ISSUE_IDENTIFIER="BASE-0")
    out = []
    for _ in range(n):
        before = len(read_starts(starts))
        with open(prompt, "rb") as stdin:
            t0 = time.time_ns()
            proc = subprocess.Popen(AGENT, cwd=work, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        proc.communicate(timeout=10)
        rows = read_starts(starts)
        if len(rows) > before:
            out.append((rows[-1][0] - t0) / 1e6)
    return out


def spawn_rate(n: int, concurrency: int, work: Path, agent: list[str]) -> float:
    """Spawns per second of the agent alone, `concurrency` at a time, as a drain runs them."""
    prompt = work / "rate.prompt"
    prompt.write_text("x" * 2000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
    env.update(BENCH_STARTS=str(work / "rate-starts"), WAKELINE_ISSUE_IDENTIFIER="RATE-0")
    left = [n]
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            with open(prompt, "rb") as stdin:
                proc = subprocess.Popen(agent, cwd=work, env=env, stdin=stdin,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        start_new_session=True, close_fds=True)
            proc.communicate(timeout=10)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return n / (time.monotonic() - t0)


def _starts(work: Path, name: str) -> Path:
    """Where the agents write their start lines: a directory of its own, outside the state
    dir (a confined agent may write it: its route's `writable`)."""
    folder = work / f"{name}-starts"
    folder.mkdir()
    return folder / "starts"


# --- part 1: webhook-to-agent-start latency ---------------------------------------------------


def session_body(i: int, run: str) -> bytes:
    body = {
        "type": "AgentSessionEvent",
        "action": "created",
        "organizationId": ORG,
        "agentSession": {
            "id": f"session-{run}-{i}",
            "issue": {"id": f"issue-{run}-{i}", "identifier": f"ENG-{i}",
                      "title": f"Bench issue {i}", "team": {"key": "ENG"}},
            "creator": {"id": "user-1", "name": "Bench"},
        },
        "promptContext": f'<issue identifier="ENG-{i}">Bench issue {i}</issue>',
        "webhookTimestamp": int(time.time() * 1000),
    }
    return json.dumps(body).encode()


def latency(n: int, spacing_ms: float, work: Path, sandbox: str = "none") -> dict[str, Any]:
    root = work / f"latency-{sandbox}"
    root.mkdir()
    starts = _starts(work, f"latency-{sandbox}")
    child = ServeChild(root, starts, sandbox=sandbox)
    child.start()
    child.wait_ready()
    run = uuid.uuid4().hex[:8]
    sent: dict[str, int] = {}
    acks: list[float] = []
    errors = 0
    conn = http.client.HTTPConnection(HOST, child.webhook_port, timeout=20)
    try:
        next_at = time.monotonic()
        for i in range(n):
            raw = session_body(i, run)
            headers = {"Content-Type": "application/json", "Linear-Signature": sign(SECRET, raw),
                       "Linear-Delivery": str(uuid.uuid4()), "Linear-Event": "AgentSessionEvent"}
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            next_at += spacing_ms / 1000
            t0 = time.time_ns()
            conn.request("POST", "/webhooks/linear", body=raw, headers=headers)
            resp = conn.getresponse()
            resp.read()
            acks.append((time.time_ns() - t0) / 1e6)
            if resp.status == 200:
                sent[f"ENG-{i}"] = t0
            else:
                errors += 1
        try:
            wait_until(lambda: len({r[1] for r in read_starts(starts)}) >= len(sent), 30,
                       "every agent started", 0.05)
        except TimeoutError as exc:
            print(f"    {exc}: the missing ones are reported as unmatched", flush=True)
    finally:
        conn.close()
        child.stop()
    first: dict[str, int] = {}
    for ts, ident in read_starts(starts):
        first.setdefault(ident, ts)
    lat = [(first[k] - t0) / 1e6 for k, t0 in sent.items() if k in first]
    return {"latency": summary(lat), "ack": summary(acks), "errors": errors,
            "unmatched": len(sent) - len(lat), "series": lat}


# --- part 2: drain ----------------------------------------------------------------------------


def plan_for(i: int, now: int, run: str) -> AdmissionPlan:
    delivery_id = str(uuid.uuid4())
    issue = f"issue-{run}-{i}"
    info = IssueInfo(id=issue, identifier=f"ENG-{i}", title=f"Bench issue {i}", team_key="ENG")
    envelope = AgentSession(action="created", session_id=f"session-{run}-{i}",
                            organization_id=ORG, issue=info)
    subject = Subject(namespace=ISSUE_NAMESPACE.format(org=ORG), key=issue)
    parsed = InboundDelivery(delivery_id=delivery_id,
                            body_sha256=hashlib.sha256(delivery_id.encode()).hexdigest(),
                            event_type="AgentSessionEvent", action="created", webhook_ms=now,
                            envelope=envelope, subject=subject, headline=f"ENG-{i} session created",
                            inbox_event=None)
    new = NewConversation("eng", f"[ENG-{i}] Bench issue {i}", False, Ownership.OWNED)
    return AdmissionPlan.fixed(parsed, now, Decision(Outcome.ACCEPTED, create=new, to_fifo=True))


def populate(child: ServeChild, n: int, batch: int) -> float:
    t0 = time.monotonic()
    run = uuid.uuid4().hex[:8]
    store = Store.open(child.database, SystemClock())
    try:
        for start in range(0, n, batch):
            now = int(time.time() * 1000)
            plans = [plan_for(i, now, run) for i in range(start, min(n, start + batch))]
            results = store.admit(plans)
            bad = [r for r in results if getattr(r, "outcome", None) is not Outcome.ACCEPTED]
            if bad:
                raise SystemExit(f"pre-population failed: {bad[:3]}")
    finally:
        store.close()
    return time.monotonic() - t0


def open_count(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        left = conn.execute(
            "SELECT COUNT(*) FROM deliveries WHERE state != 'completed'").fetchone()[0]
        total = conn.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0]
        return left, total
    finally:
        conn.close()


def drain(n: int, batch: int, work: Path, agent: list[str], sandbox: str = "none"
          ) -> dict[str, Any]:
    root = work / f"drain-{sandbox}"
    root.mkdir()
    starts = _starts(work, f"drain-{sandbox}")
    child = ServeChild(root, starts, agent, sandbox)
    child.config.state_path.mkdir(parents=True, mode=0o700)
    populated_s = populate(child, n, batch)
    assert open_count(child.database) == (n, n)
    deadline = max(120.0, n / 20)
    t_spawn = child.start()
    assert child.proc is not None
    sampler = Sampler(child.proc.pid)
    sampler.start()
    try:
        child.wait_ready(timeout=deadline)
        t_ready = time.monotonic()
        wait_until(lambda: open_count(child.database)[0] == 0, deadline,
                   "every delivery completed", 0.1)
        t_done = time.monotonic()
    finally:
        sampler.stop()
        child.stop()
    rows = read_starts(starts)
    conn = sqlite3.connect(f"file:{child.database}?mode=ro", uri=True)
    try:
        results = dict(conn.execute(
            "SELECT result, COUNT(*) FROM turn_results GROUP BY result").fetchall())
        first, last = conn.execute(
            "SELECT MIN(started_at), MAX(finished_at) FROM turn_results").fetchone()
        turns_left = conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
    finally:
        conn.close()
    stamps = [r[0] for r in rows]
    agent_span = (max(stamps) - min(stamps)) / 1e9 if len(stamps) > 1 else 0.0
    elapsed = t_done - t_spawn
    return {
        "conversations": n, "populate_s": populated_s, "ready_s": t_ready - t_spawn,
        "drain_s": elapsed,
        "turns_per_s": n / elapsed, "agent_runs": len(rows),
        # The turns alone, as the spawn rate counts its spawns: first start to last end.
        "turn_span_s": (last - first) / 1000 if first is not None else float("nan"),
        "turn_rate": n * 1000 / (last - first) if first is not None and last > first
        else float("nan"),
        "agent_turns_per_s": (len(rows) - 1) / agent_span if agent_span > 0 else float("nan"),
        "peak_threads": sampler.peak_threads, "peak_rss_mb": sampler.peak_rss_kb / 1024,
        "hwm_mb": sampler.hwm_kb / 1024, "samples": sampler.samples,
        "cpu_ms_per_turn": sampler.cpu_s * 1000 / n,
        "agent_cpu_ms_per_turn": sampler.children_cpu_s * 1000 / n, "results": results,
        "turns_left": turns_left,
    }


# --- main -------------------------------------------------------------------------------------


def bwrap_agent(network: str, agent: list[str]) -> list[str]:
    """The agent in bubblewrap alone (a turn's namespaces, the host's root read-only): what
    the kernel's part of a confined turn costs, with no wakeline around it."""
    from wakeline.sandbox.layout import Layout, bwrap_argv

    scratch = Path("/tmp")
    return bwrap_argv("bwrap", Layout(workspace=scratch, home=scratch, network=network,
                                      hidden=(), secrets=(), tools=()), agent)


def sandboxes(wanted: str) -> list[str]:
    """The confined variants to measure: those asked for, where bubblewrap can run."""
    networks = [n.strip() for n in wanted.split(",") if n.strip()]
    if not networks:
        return []
    found = probe("bwrap", network="open" not in networks or len(networks) > 1)
    if not found.available:
        print(f"no confined figures: {found.detail}", flush=True)
        return []
    return networks


def load() -> str:
    """The 1, 5 and 15 minute load averages: other work on the machine skews every figure."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def yes(met: bool) -> str:
    return "met" if met else "MISSED"


def report(base: dict[str, float], lat: dict[str, Any], d: dict[str, Any] | None,
           spacing_ms: float, rates: list[float],
           confined: dict[str, tuple[dict[str, Any], dict[str, Any] | None, float | None]]
           | None = None) -> bool:
    """Print every figure, then a markdown table; True when every target is met."""
    L, A = lat["latency"], lat["ack"]
    met_latency = L["p99"] < LATENCY_TARGET_MS and not lat["errors"] and not lat["unmatched"]
    print(f"\n[0] spawn baseline (Python subprocess -> agent's line), n={base['n']}: "
          f"p50 {base['p50']:.2f} ms, p99 {base['p99']:.2f} ms, max {base['max']:.2f} ms")
    print(f"\n[1] webhook -> agent start, n={L['n']} (one every {spacing_ms:g} ms, "
          f"errors {lat['errors']}, unmatched {lat['unmatched']}):\n"
          f"    latency p50 {L['p50']:.2f} ms, p99 {L['p99']:.2f} ms, max {L['max']:.2f} ms "
          f"(target p99 < {LATENCY_TARGET_MS:g} ms: {yes(met_latency)})\n"
          f"    ack     p50 {A['p50']:.2f} ms, p99 {A['p99']:.2f} ms, max {A['max']:.2f} ms "
          f"(send -> 200, admission durable)\n"
          f"    spawning the agent alone (baseline p50) {base['p50']:.2f} ms: wakeline's share "
          f"at p50 ~ {L['p50'] - base['p50']:.2f} ms")
    rate = sum(rates) / len(rates) if rates else None
    if rate is not None:
        around = " / ".join(f"{r:.0f}" for r in rates)
        print(f"\n[0'] spawn rate of the agent alone, {MAX_CONCURRENT_TURNS} at a time: "
              f"{rate:.0f} spawns/s (before / after the drain: {around})")
    rows = [
        ("spawn baseline (Python subprocess → agent's line) p50 / p99",
         f"{base['p50']:.1f} / {base['p99']:.1f} ms", "—", "—"),
        (f"webhook → agent start p50 / p99 / max (n={L['n']})",
         f"{L['p50']:.1f} / {L['p99']:.1f} / {L['max']:.1f} ms", f"p99 < {LATENCY_TARGET_MS:g} ms",
         "yes" if met_latency else "no"),
        ("webhook ack (send → 200) p50 / p99", f"{A['p50']:.1f} / {A['p99']:.1f} ms", "—", "—"),
    ]
    ok = met_latency
    if d is not None:
        met_threads = d["peak_threads"] <= THREADS_TARGET
        met_rss = d["peak_rss_mb"] < RSS_TARGET_MB
        complete = d["results"] == {"response": d["conversations"]} and d["turns_left"] == 0
        ok = ok and met_threads and met_rss and complete
        share = f"{d['turns_per_s'] / rate:.2f} of spawning the agent alone; " if rate else ""
        turn_share = f"; {d['turn_rate'] / rate:.2f} of spawning the agent alone" if rate else ""
        print(f"\n[2] drain of {d['conversations']} conversations x 1 pending delivery "
              f"(pre-populated in {d['populate_s']:.1f} s):\n"
              f"    serve ready (recovery done) {d['ready_s']:.2f} s after spawn; "
              f"all completed {d['drain_s']:.2f} s after spawn\n"
              f"    {d['turn_rate']:.0f} turns/s (first turn -> last, {d['turn_span_s']:.2f} s)"
              f"{turn_share}\n"
              f"    {d['turns_per_s']:.0f} turns/s (spawn -> done); {share}"
              + (f"agent starts {d['agent_turns_per_s']:.0f}/s; agent runs {d['agent_runs']}\n"
                 if d["agent_runs"] else "\n") +
              f"    CPU per turn: serve {d['cpu_ms_per_turn']:.1f} ms, "
              f"agents {d['agent_cpu_ms_per_turn']:.1f} ms\n"
              f"    turn results {d['results']}, turns left {d['turns_left']} "
              f"({'complete' if complete else 'INCOMPLETE'})\n"
              f"    peak threads {d['peak_threads']} "
              f"(target <= {THREADS_TARGET}: {yes(met_threads)})\n"
              f"    peak RSS {d['peak_rss_mb']:.1f} MB, VmHWM {d['hwm_mb']:.1f} MB "
              f"(target < {RSS_TARGET_MB:g} MB: {yes(met_rss)}); {d['samples']} samples")
        rows += [
            (f"drain {d['conversations']} conversations: spawn → all completed",
             f"{d['drain_s']:.1f} s", "—", "—"),
            ("drain throughput, first turn → last", f"{d['turn_rate']:.0f} turns/s", "—", "—"),
            ("drain throughput, spawn → done (with start-up)", f"{d['turns_per_s']:.0f} turns/s",
             "—", "—"),
            *([(f"drain / spawning the agent alone ({rate:.0f}/s, {MAX_CONCURRENT_TURNS} at a time)",
                f"{d['turn_rate'] / rate:.2f}", "≥ 0.25", "yes" if d["turn_rate"] / rate >= 0.25
                else "no")] if rate else []),
            ("CPU per turn: serve / agents",
             f"{d['cpu_ms_per_turn']:.1f} / {d['agent_cpu_ms_per_turn']:.1f} ms", "—", "—"),
            ("startup with recovery (spawn → ready)", f"{d['ready_s']:.2f} s", "—", "—"),
            ("peak threads of serve", str(d["peak_threads"]), f"≤ {THREADS_TARGET}",
             "yes" if met_threads else "no"),
            ("peak RSS / VmHWM of serve", f"{d['peak_rss_mb']:.0f} / {d['hwm_mb']:.0f} MB",
             f"< {RSS_TARGET_MB:g} MB", "yes" if met_rss else "no"),
        ]
    for network, (cl, cd, alone) in (confined or {}).items():
        CL = cl["latency"]
        added = CL["p50"] - L["p50"]
        met_start = added <= CONFINED_START_TARGET_MS and not cl["errors"] and not cl["unmatched"]
        ok = ok and met_start
        print(f"\n[3] confined turns, bubblewrap with network = \"{network}\", beside [1] and [2]:\n"
              f"    webhook -> agent start p50 {CL['p50']:.2f} ms, p99 {CL['p99']:.2f} ms, "
              f"max {CL['max']:.2f} ms (unmatched {cl['unmatched']}): "
              f"+{added:.2f} ms at p50 (target <= {CONFINED_START_TARGET_MS:g} ms: {yes(met_start)})")
        rows.append((f"confined (network={network}): webhook → agent start p50 / p99, "
                     f"added at p50", f"{CL['p50']:.1f} / {CL['p99']:.1f} ms, +{added:.1f} ms",
                     f"≤ +{CONFINED_START_TARGET_MS:g} ms", "yes" if met_start else "no"))
        if cd is not None and d is not None:
            share = cd["turn_rate"] / d["turn_rate"]
            complete = cd["results"] == {"response": cd["conversations"]} and cd["turns_left"] == 0
            met_drain = share >= CONFINED_DRAIN_TARGET and complete
            ok = ok and met_drain
            print(f"    drain {cd['turn_rate']:.0f} turns/s (first turn -> last) = {share:.2f} of "
                  f"unconfined (target >= {CONFINED_DRAIN_TARGET:g}: {yes(met_drain)}); "
                  f"CPU per turn: serve {cd['cpu_ms_per_turn']:.1f} ms, agents (bwrap and all) "
                  f"{cd['agent_cpu_ms_per_turn']:.1f} ms; "
                  f"{'complete' if complete else 'INCOMPLETE'}")
            if alone:
                print(f"    the agent in bubblewrap alone, {MAX_CONCURRENT_TURNS} at a time: "
                      f"{alone:.0f} spawns/s; the confined drain is {cd['turn_rate'] / alone:.2f}"
                      " of it")
            rows.append((f"confined (network={network}): drain, turns/s, first turn → last "
                         "(share of unconfined)", f"{cd['turn_rate']:.0f} ({share:.2f})",
                         f"≥ {CONFINED_DRAIN_TARGET:g}", "yes" if met_drain else "no"))
            if alone:
                rows.append((f"confined (network={network}): the agent in bubblewrap alone, "
                             f"spawns/s, {MAX_CONCURRENT_TURNS} at a time", f"{alone:.0f}", "—",
                             "—"))
    print("\nmarkdown:\n\n| measure | value | target | met |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deliveries", type=int, default=200,
                    help="latency deliveries, one issue each")
    ap.add_argument("--spacing-ms", type=float, default=20.0,
                    help="gap between latency deliveries")
    ap.add_argument("--baseline", type=int, default=0,
                    help="baseline spawns (default: --deliveries)")
    ap.add_argument("--conversations", type=int, default=10_000,
                    help="conversations to drain (0 skips the drain)")
    ap.add_argument("--drain-agent", choices=sorted(DRAIN_AGENTS), default="true",
                    help="the drain's (and the spawn rate's) agent: /bin/true, or the shell one")
    ap.add_argument("--spawns", type=int, default=0,
                    help="spawns for the spawn rate (default: --conversations; 0 with no drain)")
    ap.add_argument("--batch", type=int, default=500,
                    help="admissions per pre-population transaction")
    ap.add_argument("--sandbox", default="open,off",
                    help="confined variants measured beside the unconfined one: route networks, "
                         "comma-separated (bubblewrap; skipped where it cannot run); '' for none")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases)")
    args = ap.parse_args()

    atexit.register(_stop_children)
    signal.signal(signal.SIGTERM, _on_sigterm)
    work = Path(tempfile.mkdtemp(prefix="wakeline-bench-turns-"))
    print(f"machine: nproc={os.cpu_count()}, python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}; temp dir {work}")
    print(f"agent: {AGENT!r}\nmax_concurrent_turns={MAX_CONCURRENT_TURNS}, "
          f"server threads={SERVER_THREADS}", flush=True)
    try:
        base = summary(spawn_baseline(args.baseline or args.deliveries, work))
        spawns = args.spawns or args.conversations
        drain_agent = DRAIN_AGENTS[args.drain_agent]
        print(f"load average before the latency part: {load()}", flush=True)
        lat = latency(args.deliveries, args.spacing_ms, work)
        print(f"load average after it: {load()}", flush=True)
        print(f"drain agent: {drain_agent!r}", flush=True)
        # The limit is measured right before and right after the drain: this machine's speed
        # moves within minutes, and the mean of the two is what the drain ran beside.
        rates = [spawn_rate(spawns, MAX_CONCURRENT_TURNS, work, drain_agent)] if spawns else []
        d = drain(args.conversations, args.batch, work, drain_agent) if args.conversations > 0 \
            else None
        if d is not None:
            print(f"load average after the drain: {load()}", flush=True)
            if rates:
                rates.append(spawn_rate(spawns, MAX_CONCURRENT_TURNS, work, drain_agent))
        confined = {}
        for network in sandboxes(args.sandbox):
            print(f"confined, network = {network}: latency, then drain", flush=True)
            alone = spawn_rate(spawns, MAX_CONCURRENT_TURNS, work, bwrap_agent(network, drain_agent))\
                if spawns else None
            confined[network] = (
                latency(args.deliveries, args.spacing_ms, work, network),
                drain(args.conversations, args.batch, work, drain_agent, network)
                if args.conversations > 0 else None, alone)
        ok = report(base, lat, d, args.spacing_ms, rates, confined)
    finally:
        _stop_children()
        if args.keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
