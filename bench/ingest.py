#!/usr/bin/env python3
"""Webhook ingest benchmark: wakeline against a naive durable baseline and the bare limit.

    .venv/bin/python bench/ingest.py [--seconds 10] [--rounds 2] [--concurrency 16]

Three servers run as child processes on 127.0.0.1 (each with its own GIL):

  A  the real `wakeline serve` (temp config and state dir, 32 ingress threads,
     secret from $WAKELINE_LINEAR_WEBHOOK_SECRET);
  B  bench/baseline_server.py: falcon + waitress (as many threads) + HMAC check +
     json.loads + one SQLite transaction per request (WAL, synchronous=FULL).
  C  bench/bare_server.py: wakeline's own waitress listener (as many threads, its CPU
     placement) answering 200 without verifying, parsing or storing anything:
     the limit a durable ingest is measured against (A/C, issue 26).

The load is `--concurrency` keep-alive connections, spread over `--procs`
generator processes, each connection sending one signed delivery at a time
(closed loop, no pipelining): a unique Linear-Delivery id and a unique ~1.2 KB
Comment event with a fresh webhookTimestamp. Requests are signed and encoded
before each run starts, so signing is not measured. Latency is taken
client-side, from just before the request is written to the socket until the
whole response has been read.

Runs alternate A B C A B C ... (`--rounds`), after one uncounted warm-up per
server. Printed per run and per server: deliveries/s (200 + "accepted"),
p50/p99 ack latency, errors (anything else), generator and server CPU per
request; then A/B throughput, A's p99 against the 50 ms target, a check that
every delivery A accepted is a row in its `receipts` table, and a markdown
table for docs/performance.md.

Other options: `--ref REV` / `--src DIR` run A from a commit or a patched copy
instead of the working tree; `--profile OUT` runs A under cProfile (CPU time,
every thread) and prints where its CPU went; `--baseline-db peewee` commits the
baseline through peewee, and `--baseline-db split` (`split-echo`, `split-nofsync`,
`one-process`) puts bench/split_server.py in B's place; `--client httpclient` uses one http.client thread per
connection instead of the selector loop; `--idle-wait` bounds the wait for a
quiet machine before each run.

Bounded: every loop has a deadline, only loopback is used, and every child
process is terminated on exit, on Ctrl-C and on error.
"""

from __future__ import annotations

import argparse
import array
import hashlib
import hmac
import http.client
import json
import math
import multiprocessing as mp
import os
import platform
import selectors
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
WEBHOOK_PATH = "/webhooks/linear"
SECRET_ENV = "WAKELINE_LINEAR_WEBHOOK_SECRET"
# wakeline's ingress threads (its default, `server.ingress_threads`); B and C get as many.
SERVER_THREADS = int(os.environ.get("BENCH_THREADS", "32"))
# Deliveries are signed before a run; Linear's freshness window is 60 s.
MAX_SECONDS = 45.0
# After the deadline, in-flight requests get this long before they count as timeouts.
DRAIN_SECONDS = 30.0
START_TIMEOUT = 60.0
TARGET_RATIO = 0.8
TARGET_P99_MS = 50.0
# Against the bare handler (C: the same server doing nothing durable), issue 26's limits.
TARGET_BARE_RATIO = 0.75
TARGET_BARE_P99_MS = 12.0
ORG = "org-bench"
# `--baseline-db` values that put bench/split_server.py in B's place, with its flags.
SPLIT_MODES = {"split": [], "split-echo": ["--echo"], "split-nofsync": ["--no-fsync"],
               "one-process": ["--one-process"]}
BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


# --- deliveries ------------------------------------------------------------------------------

_COMMENT = (
    "The retry loop in the sync worker never backs off on 429, so a burst of webhooks turns "
    "into a burst of retries. Proposal: honour Retry-After, cap at 30 s with jitter."
)


def comment_event(seq: int, now_ms: int) -> dict[str, Any]:
    """A Linear Comment `create` event of about 1.2 KB, unique by its comment id."""
    n = seq % 97 + 1
    issue_id = f"5b0c1f2e-7a4d-4f7e-9d1a-{n:012d}"
    comment_id = str(uuid.uuid4())
    created = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now_ms / 1000))
    user_id = "8f3e2d1c-0b9a-4c8d-8e7f-6a5b4c3d2e1f"
    team_id = "2c6f0e4a-1b3d-4e5f-8a9b-0c1d2e3f4a5b"
    return {
        "action": "create",
        "actor": {"id": user_id, "name": "Jane Doe", "email": "jane@example.com",
                  "url": "https://linear.app/bench/profiles/jane", "type": "user"},
        "createdAt": created,
        "data": {
            "id": comment_id,
            "createdAt": created,
            "updatedAt": created,
            "body": _COMMENT,
            "issueId": issue_id,
            "parentId": None,
            "userId": user_id,
            "reactionData": [],
            "issue": {
                "id": issue_id,
                "title": "Sync worker hammers upstream on 429",
                "teamId": team_id,
                "team": {"id": team_id, "key": "ENG", "name": "Engineering"},
                "identifier": f"ENG-{n}",
                "url": f"https://linear.app/bench/issue/ENG-{n}/sync-worker-hammers-upstream",
            },
        },
        "url": f"https://linear.app/bench/issue/ENG-{n}#comment-{comment_id[:8]}",
        "type": "Comment",
        "organizationId": ORG,
        "webhookTimestamp": now_ms,
        "webhookId": "0d9c8b7a-6f5e-4d3c-2b1a-0f9e8d7c6b5a",
    }


def signed_delivery(secret: bytes, seq: int) -> tuple[str, str, bytes]:
    """(delivery id, signature, raw body) of one fresh delivery."""
    body = json.dumps(comment_event(seq, int(time.time() * 1000)), separators=(",", ":")).encode()
    return str(uuid.uuid4()), hmac.new(secret, body, hashlib.sha256).hexdigest(), body


def raw_request(host_header: str, delivery: str, signature: str, body: bytes) -> bytes:
    """The whole HTTP/1.1 request, bytes ready for one `sendall`."""
    head = (
        f"POST {WEBHOOK_PATH} HTTP/1.1\r\n"
        f"Host: {host_header}\r\n"
        "User-Agent: Linear-Webhook\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Linear-Event: Comment\r\n"
        f"Linear-Delivery: {delivery}\r\n"
        f"Linear-Signature: {signature}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body


# --- the load generator (runs in child processes) --------------------------------------------


@dataclass
class WorkerResult:
    """What one generator process measured."""

    latencies: bytes = b""  # array('d') of seconds, one per completed request
    accepted: int = 0       # 200 with outcome "accepted"
    other_200: int = 0      # 200 with any other outcome (duplicate, ignored)
    non_200: dict[int, int] = field(default_factory=dict)
    conn_errors: int = 0    # reset, refused, closed mid-response
    timeouts: int = 0       # still in flight when the drain ended
    signed_late: int = 0    # deliveries signed during the run (pool ran out)
    first_send: float = math.inf
    last_done: float = 0.0
    cpu_seconds: float = 0.0
    error: str | None = None


def _cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _RawConn:
    """One keep-alive connection of the raw-socket generator."""

    def __init__(self, port: int, pool: list[bytes]) -> None:
        self.port = port
        self.pool = pool
        self.next = 0
        self.sock = _connect(port)
        self.sock.setblocking(False)
        self.buf = b""
        self.sent_at = 0.0
        self.busy = False


def _parse_response(buf: bytes) -> tuple[int, bytes, bool, int] | None:
    """(status, body, close, consumed) once `buf` holds a whole response, else None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].lower()
    status = int(head[9:12])
    at = head.find(b"\r\ncontent-length:")
    if at < 0:
        raise ValueError("response without Content-Length")
    eol = head.find(b"\r\n", at + 2)
    length = int(head[at + 17 : eol if eol >= 0 else len(head)])
    total = end + 4 + length
    if len(buf) < total:
        return None
    return status, buf[end + 4 : total], b"\r\nconnection: close" in head, total


def _record(res: WorkerResult, lat: array.array, status: int, body: bytes, seconds: float) -> None:
    lat.append(seconds)
    if status == 200:
        if b'"accepted"' in body:
            res.accepted += 1
        else:
            res.other_200 += 1
    else:
        res.non_200[status] = res.non_200.get(status, 0) + 1


def _run_raw(spec: dict[str, Any], pools: list[list[bytes]], res: WorkerResult,
             lat: array.array, start_at: float) -> None:
    """All of this process's connections on one selector thread."""
    port, secret = spec["port"], spec["secret"].encode()
    host_header = f"{HOST}:{port}"
    deadline = start_at + spec["seconds"]
    hard_deadline = deadline + DRAIN_SECONDS
    sel = selectors.DefaultSelector()
    conns = [_RawConn(port, pool) for pool in pools]

    def send(c: _RawConn) -> None:
        if c.next < len(c.pool):
            data = c.pool[c.next]
            c.pool[c.next] = b""  # free as we go
        else:
            res.signed_late += 1
            data = raw_request(host_header, *signed_delivery(secret, c.next))
        c.next += 1
        c.busy = True
        c.sent_at = time.monotonic()
        res.first_send = min(res.first_send, c.sent_at)
        sent = c.sock.send(data)  # ~1.4 KB: one send fills no socket buffer
        if sent < len(data):
            c.sock.setblocking(True)
            c.sock.sendall(data[sent:])
            c.sock.setblocking(False)

    def reopen(c: _RawConn) -> bool:
        """Replace a closed connection; True when a request is in flight on the new one."""
        sel.unregister(c.sock)
        c.sock.close()
        c.buf = b""
        c.busy = False
        if time.monotonic() >= deadline:
            return False
        try:
            c.sock = _connect(port)
        except OSError:
            res.conn_errors += 1
            c.sock = socket.socket()  # closed placeholder, never registered again
            c.sock.close()
            return False
        c.sock.setblocking(False)
        sel.register(c.sock, selectors.EVENT_READ, c)
        send(c)
        return True

    while time.monotonic() < start_at:
        time.sleep(min(0.005, max(0.0, start_at - time.monotonic())))
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ, c)
        send(c)
    active = len(conns)
    while active and time.monotonic() < hard_deadline:
        for key, _ in sel.select(timeout=0.5):
            c = key.data
            try:
                chunk = c.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            now = time.monotonic()
            if not chunk:  # closed (or reset) with a request in flight
                res.conn_errors += 1
                if not reopen(c):
                    active -= 1
                continue
            c.buf += chunk
            try:
                parsed = _parse_response(c.buf)
            except ValueError:
                res.conn_errors += 1
                if not reopen(c):
                    active -= 1
                continue
            if parsed is None:
                continue
            status, body, close, used = parsed
            c.buf = c.buf[used:]
            c.busy = False
            _record(res, lat, status, body, now - c.sent_at)
            res.last_done = max(res.last_done, now)
            if close:
                if not reopen(c):
                    active -= 1
            elif time.monotonic() < deadline:
                send(c)
            else:
                sel.unregister(c.sock)
                active -= 1
    for c in conns:
        if c.busy:
            res.timeouts += 1
        c.sock.close()
    sel.close()


def _run_threads(spec: dict[str, Any], pools: list[list[tuple[bytes, dict[str, str]]]],
                 res: WorkerResult, lat: array.array, start_at: float) -> None:
    """One http.client keep-alive connection per thread."""
    import threading

    port, secret = spec["port"], spec["secret"].encode()
    deadline = start_at + spec["seconds"]
    lock = threading.Lock()

    def run(pool: list[tuple[bytes, dict[str, str]]]) -> None:
        local = array.array("d")
        conn = http.client.HTTPConnection(HOST, port, timeout=DRAIN_SECONDS)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        counts = WorkerResult()
        i = 0
        first = math.inf
        last = 0.0
        while time.monotonic() < start_at:
            time.sleep(min(0.005, max(0.0, start_at - time.monotonic())))
        while time.monotonic() < deadline:
            if i < len(pool):
                body, headers = pool[i]
                pool[i] = (b"", {})
            else:
                counts.signed_late += 1
                delivery, sig, body = signed_delivery(secret, i)
                headers = _headers(delivery, sig)
            i += 1
            t0 = time.monotonic()
            first = min(first, t0)
            try:
                conn.request("POST", WEBHOOK_PATH, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except TimeoutError:
                counts.timeouts += 1
                conn.close()
                continue
            except (OSError, http.client.HTTPException):
                counts.conn_errors += 1
                conn.close()  # http.client reconnects on the next request
                continue
            t1 = time.monotonic()
            _record(counts, local, resp.status, data, t1 - t0)
            last = t1
        conn.close()
        with lock:
            lat.extend(local)
            res.accepted += counts.accepted
            res.other_200 += counts.other_200
            for k, v in counts.non_200.items():
                res.non_200[k] = res.non_200.get(k, 0) + v
            res.conn_errors += counts.conn_errors
            res.timeouts += counts.timeouts
            res.signed_late += counts.signed_late
            res.first_send = min(res.first_send, first)
            res.last_done = max(res.last_done, last)

    threads = [threading.Thread(target=run, args=(pool,), daemon=True) for pool in pools]
    for t in threads:
        t.start()
    for t in threads:
        t.join(spec["seconds"] + DRAIN_SECONDS + 5)


def _headers(delivery: str, signature: str) -> dict[str, str]:
    return {
        "User-Agent": "Linear-Webhook",
        "Content-Type": "application/json; charset=utf-8",
        "Linear-Event": "Comment",
        "Linear-Delivery": delivery,
        "Linear-Signature": signature,
    }


def generator_main(spec: dict[str, Any], ready: Any, go: Any, start_at: Any, results: Any) -> None:
    """A generator process: sign its pool, report ready, run when told, send the result."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends us
    res = WorkerResult()
    lat = array.array("d")
    try:
        secret = spec["secret"].encode()
        host_header = f"{HOST}:{spec['port']}"
        pools: list[list[Any]] = []
        seq = 0
        for _ in range(spec["conns"]):
            pool: list[Any] = []
            for _ in range(spec["per_conn"]):
                delivery, sig, body = signed_delivery(secret, seq)
                seq += 1
                if spec["client"] == "raw":
                    pool.append(raw_request(host_header, delivery, sig, body))
                else:
                    pool.append((body, _headers(delivery, sig)))
            pools.append(pool)
        ready.put(os.getpid())
        if not go.wait(START_TIMEOUT):
            raise TimeoutError("never told to start")
        cpu0 = _cpu()
        if spec["client"] == "raw":
            _run_raw(spec, pools, res, lat, start_at.value)
        else:
            _run_threads(spec, pools, res, lat, start_at.value)
        res.cpu_seconds = _cpu() - cpu0
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which never hangs on it
        res.error = f"{exc.__class__.__name__}: {exc}"
    res.latencies = lat.tobytes()
    results.put(res)


# --- servers ---------------------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Linux: the child gets SIGTERM if the benchmark itself dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not glibc Linux: the finally in main() still cleans up
        return


class Server:
    """A server child process whose stdout announces its URL on one line."""

    def __init__(self, label: str, name: str, argv: list[str], env: dict[str, str], workdir: Path,
                 marker: str, db_path: Path) -> None:
        self.label, self.name = label, name
        self.db_path = db_path
        self.out_path = workdir / f"{label}.stdout"
        self.err_path = workdir / f"{label}.stderr"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                # The servers start before any thread of ours exists, so preexec_fn is safe here.
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )
        self.url = self._wait_url(marker)
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
        self._wait_healthy()

    def _wait_url(self, marker: str) -> str:
        limit = time.monotonic() + START_TIMEOUT
        while time.monotonic() < limit:
            text = self.out_path.read_text(errors="replace")
            for line in text.splitlines():
                if marker in line:
                    url = line.split(marker, 1)[1].split(",")[0].strip()
                    if not url.startswith(f"http://{HOST}:"):
                        raise RuntimeError(f"{self.name} is not on loopback: {url}")
                    return url
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n"
                                   + self.err_path.read_text(errors="replace")[-2000:])
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not announce its URL in {START_TIMEOUT:.0f} s:\n"
                           + self.err_path.read_text(errors="replace")[-2000:])

    def _wait_healthy(self) -> None:
        limit = time.monotonic() + START_TIMEOUT
        while time.monotonic() < limit:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: GET /healthz did not answer 200 in {START_TIMEOUT:.0f} s")

    def cpu_seconds(self) -> float:
        """User + system CPU of the server process so far (all its threads)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return math.nan

    def thread_stats(self) -> dict[str, tuple[int, int]]:
        """Per thread of the server: (user + system ticks, context switches) so far."""
        out: dict[str, tuple[int, int]] = {}
        task = Path(f"/proc/{self.proc.pid}/task")
        try:
            tids = [t.name for t in task.iterdir()]
        except OSError:
            return out
        for tid in tids:
            try:
                fields = (task / tid / "stat").read_text().rsplit(")", 1)[1].split()
                status = (task / tid / "status").read_text().splitlines()
            except OSError:
                continue  # the thread ended
            switches = sum(int(line.split(":")[1]) for line in status if "ctxt_switches" in line)
            out[tid] = (int(fields[11]) + int(fields[12]), switches)
        return out

    def stderr_count(self, needle: str) -> int:
        try:
            return self.err_path.read_text(errors="replace").count(needle)
        except OSError:
            return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def export_ref(ref: str, workdir: Path) -> Path:
    """`git archive` of `ref` into workdir/src; returns the directory to put on PYTHONPATH."""
    dest = workdir / "src"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", ref],
                             check=True, capture_output=True, timeout=60).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=60)
    if not (dest / "wakeline" / "__init__.py").exists():
        raise RuntimeError(f"{ref} has no wakeline package")
    return dest


def source_label(ref: str | None) -> str:
    """Which wakeline code A runs, for the report."""
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True,
                                  text=True, timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    if ref:
        return f"git {ref} ({git('rev-parse', '--short', ref) or '?'})"
    dirty = git("status", "--porcelain", "--", "wakeline")
    head = git("rev-parse", "--short", "HEAD") or "?"
    return f"working tree at {head}" + (" with uncommitted changes in wakeline/" if dirty else "")


def start_wakeline(workdir: Path, secret: str, src: Path | None,
                   profile: Path | None = None, extra_config: str = "",
                   name: str = "wakeline") -> Server:
    """A: the real `wakeline serve`; `extra_config` adds TOML sections (bench/hosts.py puts
    its store on PostgreSQL with a `[scale]` section)."""
    home = workdir / name
    home.mkdir()
    config = home / "wakeline.toml"
    config.write_text(
        'state_dir = "state"\n'
        "\n[server]\n"
        f'webhook_host = "{HOST}"\n'
        "webhook_port = 0\n"
        f'operator_host = "{HOST}"\n'
        "operator_port = 0\n"
        f"ingress_threads = {SERVER_THREADS}\n"
        + extra_config
    )
    exe = Path(sys.executable).parent / "wakeline"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "wakeline"]
    if profile is not None:
        argv = [sys.executable, str(BENCH_DIR / "profile_server.py"), str(profile)]
    env = {**os.environ, SECRET_ENV: secret}
    env.pop("WAKELINE_CONFIG", None)
    if src is not None:  # PYTHONPATH comes before the editable install's finder
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
        where = subprocess.run([sys.executable, "-c", "import wakeline; print(wakeline.__file__)"],
                               env=env, cwd=home, capture_output=True, text=True, timeout=30,
                               check=False).stdout
        if not where.startswith(str(src)):
            raise RuntimeError(f"PYTHONPATH did not win: wakeline imports from {where.strip()}")
    return Server("A", name, [*argv, "--config", str(config), "serve"], env, home,
                  "webhooks on ", home / "state" / "wakeline.db")


def start_baseline(workdir: Path, secret: str, db_layer: str) -> Server:
    home = workdir / "baseline"
    home.mkdir()
    db = home / "baseline.db"
    argv = [sys.executable, str(BENCH_DIR / "baseline_server.py"), "--db", str(db),
            "--host", HOST, "--port", "0", "--threads", str(SERVER_THREADS),
            "--db-layer", db_layer]
    if db_layer in SPLIT_MODES:
        argv = [sys.executable, str(BENCH_DIR / "split_server.py"), "--db", str(db),
                "--host", HOST, "--port", "0", "--threads", str(SERVER_THREADS),
                *SPLIT_MODES[db_layer]]
    return Server("B", "baseline", argv, {**os.environ, SECRET_ENV: secret}, home,
                  "listening on ", db)


def start_bare(workdir: Path) -> Server:
    home = workdir / "bare"
    home.mkdir()
    argv = [sys.executable, str(BENCH_DIR / "bare_server.py"), "--host", HOST, "--port", "0",
            "--threads", str(SERVER_THREADS)]
    return Server("C", "bare", argv, dict(os.environ), home, "listening on ", home / "none")


def count_rows(db: Path, table: str) -> int:
    """Rows of `table`, read-only (WAL lets us read while the server writes)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def describe_wakeline_db(db: Path) -> str:
    """What A's admissions wrote: receipts by outcome and the rows of the other tables."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    parts = []
    try:
        rows = conn.execute("SELECT outcome, COUNT(*) FROM receipts GROUP BY outcome").fetchall()
        parts.append("receipts " + ", ".join(f"{o}={n}" for o, n in rows))
        for table in ("inbox_messages", "conversations", "deliveries"):
            try:
                n = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            except sqlite3.Error:
                continue
            parts.append(f"{table} {n}")
    finally:
        conn.close()
    return "; ".join(parts)


# --- one run ---------------------------------------------------------------------------------


@dataclass
class Run:
    """One measured run against one server."""

    label: str
    seconds: float
    accepted: int
    other_200: int
    errors: int
    latencies_ms: list[float]
    gen_cpu: float
    server_cpu: float
    signed_late: int
    error_detail: dict[str, int]
    other_cpu: float = 0.0  # CPU seconds of everything else on the machine during the run
    switches: int = 0  # context switches of the server's threads during the run
    busiest: tuple[float, ...] = ()  # CPU shares of the server's two busiest threads

    @property
    def rate(self) -> float:
        return self.accepted / self.seconds if self.seconds > 0 else 0.0

    def pct(self, q: float) -> float:
        return percentile(self.latencies_ms, q)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def run_load(server: Server, args: argparse.Namespace, seconds: float, rate_hint: float,
             secret: str, ctx: Any, children: list[Any]) -> Run:
    """Sign a fresh pool, run `seconds` of closed-loop load, collect."""
    if args.idle_wait > 0:
        used = wait_for_quiet(args.idle_wait)
        if used >= 0.15:
            print(f"{'':<15}note: other processes still use {used:.2f} CPUs after waiting "
                  f"{args.idle_wait:g} s", flush=True)
    procs = max(1, min(args.procs, args.concurrency))
    split = [args.concurrency // procs + (1 if i < args.concurrency % procs else 0)
             for i in range(procs)]
    # Closed-loop runs vary; sign twice what the last run of this server needed.
    per_conn = int(rate_hint * seconds * 2.0 / args.concurrency) + 200
    ready, results = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    start_at = ctx.Value("d", 0.0)
    workers = []
    for conns in split:
        spec = {"port": server.port, "secret": secret, "conns": conns, "per_conn": per_conn,
                "seconds": seconds, "client": args.client}
        p = ctx.Process(target=generator_main, args=(spec, ready, go, start_at, results),
                        daemon=True)
        p.start()
        workers.append(p)
        children.append(p)
    try:
        for _ in workers:
            ready.get(timeout=START_TIMEOUT + 60)
        cpu0 = server.cpu_seconds()
        threads0 = server.thread_stats()
        busy0 = machine_busy_seconds()
        start_at.value = time.monotonic() + 0.05
        go.set()
        collected: list[WorkerResult] = [
            results.get(timeout=seconds + DRAIN_SECONDS + 30) for _ in workers
        ]
        cpu1 = server.cpu_seconds()
        threads1 = server.thread_stats()
        busy1 = machine_busy_seconds()
    finally:
        for p in workers:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
            children.remove(p)
    failures = [r.error for r in collected if r.error]
    if failures:
        raise RuntimeError(f"generator failed: {failures}")
    lat: array.array = array.array("d")
    for r in collected:
        lat.frombytes(r.latencies)
    detail: dict[str, int] = {}
    for r in collected:
        for status, n in r.non_200.items():
            detail[str(status)] = detail.get(str(status), 0) + n
        for name in ("other_200", "conn_errors", "timeouts"):
            if getattr(r, name):
                detail[name] = detail.get(name, 0) + getattr(r, name)
    first = min(r.first_send for r in collected)
    last = max(r.last_done for r in collected)
    accepted = sum(r.accepted for r in collected)
    return Run(
        label=server.label,
        seconds=max(last - first, 1e-9),
        accepted=accepted,
        other_200=sum(r.other_200 for r in collected),
        errors=sum(detail.values()),
        latencies_ms=sorted(x * 1000 for x in lat),
        gen_cpu=sum(r.cpu_seconds for r in collected),
        server_cpu=cpu1 - cpu0,
        signed_late=sum(r.signed_late for r in collected),
        error_detail=detail,
        other_cpu=max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - sum(r.cpu_seconds for r in collected)),
        switches=sum(after[1] - threads0.get(tid, (0, 0))[1] for tid, after in threads1.items()),
        busiest=_busiest(threads0, threads1),
    )


def _busiest(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> tuple[float, ...]:
    """The CPU shares of the two busiest threads (in a server: its loop, A's admission writer)."""
    ticks = sorted((t[0] - before.get(tid, (0, 0))[0] for tid, t in after.items()), reverse=True)
    total = sum(ticks)
    return tuple(t / total for t in ticks[:2]) if total else ()


# --- reporting -------------------------------------------------------------------------------


def describe(run: Run, name: str, title: str) -> str:
    n = max(len(run.latencies_ms), 1)
    text = (
        f"{title:<14} {name:<9} {run.rate:8.1f} deliveries/s  p50 {run.pct(50):6.2f} ms  "
        f"p99 {run.pct(99):6.2f} ms  errors {run.errors}  "
        f"({run.accepted} accepted in {run.seconds:.2f} s; CPU/request: "
        f"server {run.server_cpu / n * 1000:.2f} ms, generator {run.gen_cpu / n * 1000:.2f} ms)"
    )
    other = run.other_cpu / run.seconds if run.seconds else 0.0
    if other > 0.25:
        text += (f"\n{'':<15}note: other processes used {other:.2f} CPUs on average during "
                 "this run: the figures are skewed")
    text += f"\n{'':<15}context switches/request {run.switches / n:.1f}"
    if run.busiest:
        text += "; busiest threads " + ", ".join(f"{share:.0%}" for share in run.busiest) + " of its CPU"
    if run.error_detail:
        text += f"\n{'':<15}errors by kind: {run.error_detail}"
    if run.signed_late:
        text += f"\n{'':<15}note: {run.signed_late} deliveries were signed during the run"
    return text


def cpu_per_request(run: Run) -> float:
    """Server CPU milliseconds per answered request."""
    return run.server_cpu / max(len(run.latencies_ms), 1) * 1000


def aggregate(runs: list[Run]) -> Run:
    return Run(
        label=runs[0].label,
        seconds=sum(r.seconds for r in runs),
        accepted=sum(r.accepted for r in runs),
        other_200=sum(r.other_200 for r in runs),
        errors=sum(r.errors for r in runs),
        latencies_ms=sorted(x for r in runs for x in r.latencies_ms),
        gen_cpu=sum(r.gen_cpu for r in runs),
        server_cpu=sum(r.server_cpu for r in runs),
        signed_late=sum(r.signed_late for r in runs),
        error_detail={k: sum(r.error_detail.get(k, 0) for r in runs)
                      for r0 in runs for k in r0.error_detail},
        other_cpu=sum(r.other_cpu for r in runs),
        switches=sum(r.switches for r in runs),
    )


def markdown(runs: list[tuple[str, Run]], agg: dict[str, Run], names: dict[str, str],
             ratio: float, args: argparse.Namespace, code: str) -> str:
    lines = [
        ("| run | server | deliveries/s | p50 ms | p99 ms | errors | server CPU ms/req "
         "| other load (CPUs) |"),
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def row(title: str, name: str, run: Run, b: str = "") -> str:
        other = run.other_cpu / run.seconds if run.seconds else 0.0
        cells = [title, name, f"{run.rate:.0f}", f"{run.pct(50):.1f}", f"{run.pct(99):.1f}",
                 str(run.errors), f"{cpu_per_request(run):.2f}", f"{other:.2f}"]
        return "| " + " | ".join(f"{b}{c}{b}" for c in cells) + " |"

    for title, run in runs:
        lines.append(row(title, names[run.label], run))
    for label in ("A", "B", "C"):
        lines.append(row(f"all {len(runs) // 3}", names[label], agg[label], "**"))
    p99 = agg["A"].pct(99)
    bare = agg["A"].rate / agg["C"].rate if agg["C"].rate else math.nan
    lines += [
        "",
        (f"- A/C throughput (of the bare handler): **{bare:.2f}** (target >= {TARGET_BARE_RATIO}: "
         f"{'met' if bare >= TARGET_BARE_RATIO else 'NOT met'}); A p99 {p99:.1f} ms "
         f"(target < {TARGET_BARE_P99_MS:.0f} ms: {'met' if p99 < TARGET_BARE_P99_MS else 'NOT met'})"),
        (f"- A/B throughput: **{ratio:.2f}** (target >= {TARGET_RATIO}: "
         f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})"),
        (f"- A p99: **{p99:.1f} ms** (target <= {TARGET_P99_MS:.0f} ms: "
         f"{'met' if p99 <= TARGET_P99_MS else 'NOT met'})"),
        (f"- server CPU per delivery: A {cpu_per_request(agg['A']):.2f} ms, "
         f"B {cpu_per_request(agg['B']):.2f} ms (B/A "
         f"{cpu_per_request(agg['B']) / cpu_per_request(agg['A']):.2f})"),
        (f"- load: {args.concurrency} keep-alive connections, {args.seconds:g} s per run, "
         f"{args.rounds} rounds A B C, client `{args.client}` in {args.procs} processes, "
         f"baseline on `{args.baseline_db}`"),
        f"- wakeline code: {code}",
    ]
    return "\n".join(lines)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all CPUs, from /proc/stat)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return math.nan
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(limit: float) -> float:
    """Wait (at most `limit` s) until the rest of the machine uses under 0.15 CPUs.

    Returns the CPUs the last 1 s sample saw in use; nothing of ours runs between runs.
    """
    end = time.monotonic() + limit
    while True:
        b0, t0 = machine_busy_seconds(), time.monotonic()
        time.sleep(1.0)
        used = (machine_busy_seconds() - b0) / (time.monotonic() - t0)
        if not used >= 0.15 or time.monotonic() >= end:  # NaN (no /proc) counts as quiet
            return used


def loadavg() -> str:
    """The 1-minute load average: other work on the machine skews every figure."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))})"
            f"{', ' + model if model else ''}; Python {platform.python_version()}; "
            f"{platform.system()} {platform.release()}")


def print_profile(path: Path, limit: int = 30) -> None:
    """Where A's CPU went: top functions by own time, then wakeline's by cumulative time."""
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(r"(ingress|admission|store|adapter|routing)\.py",
                                               limit)
    print(f"\nprofile of A ({path}):\n" + out.getvalue())


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Webhook ingest: wakeline (A) against a naive "
                                "durable baseline (B).")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each run (default 10)")
    p.add_argument("--rounds", type=int, default=2, help="A B rounds (default 2)")
    p.add_argument("--concurrency", type=int, default=16,
                   help="keep-alive connections (default 16)")
    p.add_argument("--procs", type=int, default=2, help="generator processes (default 2)")
    p.add_argument("--client", choices=("raw", "httpclient"), default="raw",
                   help="raw: pre-encoded requests on non-blocking sockets, one selector loop "
                   "per process (default); httpclient: one http.client thread per connection")
    p.add_argument("--warmup", type=float, default=2.0,
                   help="uncounted warm-up per server, seconds (default 2)")
    p.add_argument("--rate-hint", type=float, default=3000.0,
                   help="deliveries/s to pre-sign for before the warm-up (default 3000)")
    p.add_argument("--ref", metavar="REV",
                   help="run A from `git archive REV` instead of the working tree "
                   "(same venv and dependencies)")
    p.add_argument("--idle-wait", type=float, default=30.0,
                   help="before each run, wait up to this many seconds for other processes "
                   "to use under 0.15 CPUs (default 30; 0 disables)")
    p.add_argument("--baseline-db", choices=("sqlite3", "peewee", *SPLIT_MODES),
                   default="sqlite3",
                   help="how the baseline commits: the sqlite3 module (default) or peewee; "
                   "split*: B is bench/split_server.py instead (the bare listener handing "
                   "each delivery to a second process that verifies and group-commits it; "
                   "split-echo answers at once, split-nofsync does not fsync; one-process: "
                   "the same work in one process, committed by wakeline's admission writer)")
    p.add_argument("--src", metavar="DIR", type=Path,
                   help="run A from the wakeline package in DIR (DIR/wakeline), e.g. a patched "
                   "copy, instead of the working tree")
    p.add_argument("--profile", metavar="OUT", type=Path,
                   help="run A under cProfile (every thread) and write merged pstats to OUT; "
                   "slows A down, so its figures are then not results")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (configs, DBs, logs)")
    args = p.parse_args(argv)
    if not 0 < args.seconds <= MAX_SECONDS:
        p.error(f"--seconds must be in (0, {MAX_SECONDS:g}]: deliveries are signed up front "
                "and must stay within Linear's 60 s freshness window")
    if not 1 <= args.rounds <= 20:
        p.error("--rounds must be in 1..20")
    if not 1 <= args.concurrency <= 256:
        p.error("--concurrency must be in 1..256")
    if not 1 <= args.procs <= 16:
        p.error("--procs must be in 1..16")
    if args.ref and args.src:
        p.error("--ref and --src exclude each other")
    if args.src:
        args.src = args.src.resolve()
        if not (args.src / "wakeline" / "__init__.py").exists():
            p.error(f"--src {args.src}: no wakeline package there")
    if not 0 <= args.idle_wait <= 600:
        p.error("--idle-wait must be in [0, 600]")
    if not 0 <= args.warmup <= MAX_SECONDS:
        p.error(f"--warmup must be in [0, {MAX_SECONDS:g}]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    secret = "bench-" + uuid.uuid4().hex
    workdir = Path(tempfile.mkdtemp(prefix="wakeline-bench-"))
    ctx = mp.get_context("spawn")
    servers: list[Server] = []
    children: list[Any] = []

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    names = {"A": "wakeline", "B": {"sqlite3": "baseline", "peewee": "baseline-pw"}.get(
        args.baseline_db, args.baseline_db), "C": "bare"}
    try:
        print(f"machine: {machine()}", flush=True)
        busy = loadavg()
        if busy != "?" and float(busy) > 0.5:
            print(f"warning: 1-min load average is {busy} before starting: other work on this "
                  "machine will skew the figures", flush=True)
        print(f"load: {args.concurrency} keep-alive connections, client {args.client} in "
              f"{args.procs} processes, {args.seconds:g} s per run, {args.rounds} rounds, "
              f"{args.warmup:g} s warm-up per server", flush=True)
        src = export_ref(args.ref, workdir) if args.ref else args.src
        code = str(args.src) if args.src else source_label(args.ref)
        print(f"wakeline code: {code}", flush=True)
        if args.profile:
            args.profile = args.profile.resolve()
            print(f"PROFILING A into {args.profile}: its figures are not results", flush=True)
        a = start_wakeline(workdir, secret, src, args.profile)
        servers.append(a)
        b = start_baseline(workdir, secret, args.baseline_db)
        servers.append(b)
        c = start_bare(workdir)
        servers.append(c)
        by_label = {"A": a, "B": b, "C": c}
        print(f"A wakeline  {a.url}  (pid {a.proc.pid}, {a.db_path})", flush=True)
        print(f"B baseline  {b.url}  (pid {b.proc.pid}, {b.db_path})", flush=True)
        print(f"C bare      {c.url}  (pid {c.proc.pid}: the same server, nothing durable)",
              flush=True)
        accepted_total = {"A": 0, "B": 0, "C": 0}
        hints = {"A": args.rate_hint, "B": args.rate_hint, "C": args.rate_hint}
        tables = {"A": "receipts", "B": "deliveries"}
        mismatches = 0

        def check_db(label: str) -> None:
            nonlocal mismatches
            server = by_label[label]
            rows = count_rows(server.db_path, tables[label])
            ok = rows == accepted_total[label]
            mismatches += not ok
            print(f"{'':<15}{names[label]} DB: {rows} rows in {tables[label]}, "
                  f"{accepted_total[label]} accepted so far: {'OK' if ok else 'MISMATCH'}",
                  flush=True)

        if args.warmup > 0:
            for label in ("A", "B", "C"):
                run = run_load(by_label[label], args, args.warmup, hints[label], secret, ctx,
                               children)
                accepted_total[label] += run.accepted
                hints[label] = max(run.rate, 100.0)
                print(describe(run, names[label], "warm-up"), flush=True)
        measured: list[tuple[str, Run]] = []
        for rnd in range(1, args.rounds + 1):
            for label in ("A", "B", "C"):
                run = run_load(by_label[label], args, args.seconds, hints[label], secret, ctx,
                               children)
                accepted_total[label] += run.accepted
                hints[label] = max(hints[label], run.rate)
                title = f"round {rnd}"
                measured.append((title, run))
                print(describe(run, names[label], title), flush=True)
                if label == "A":
                    check_db("A")
        if args.baseline_db != "split-echo":  # it stores nothing, by design
            check_db("B")
        print(f"{'':<15}wakeline wrote: {describe_wakeline_db(a.db_path)}", flush=True)
        agg = {label: aggregate([r for _, r in measured if r.label == label])
               for label in ("A", "B", "C")}
        print("\naggregate", flush=True)
        for label in ("A", "B", "C"):
            print(describe(agg[label], names[label], f"all {args.rounds}"))
        ratio = agg["A"].rate / agg["B"].rate if agg["B"].rate else math.nan
        p99 = agg["A"].pct(99)
        print(f"\nA/B throughput ratio: {ratio:.2f} (target >= {TARGET_RATIO}: "
              f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})")
        print(f"A p99 ack latency: {p99:.1f} ms (target <= {TARGET_P99_MS:.0f} ms: "
              f"{'met' if p99 <= TARGET_P99_MS else 'NOT met'})")
        bare = agg["A"].rate / agg["C"].rate if agg["C"].rate else math.nan
        print(f"A/C throughput ratio (of the bare handler): {bare:.2f} (target >= "
              f"{TARGET_BARE_RATIO}: {'met' if bare >= TARGET_BARE_RATIO else 'NOT met'}); "
              f"A p99 {p99:.1f} ms (target < {TARGET_BARE_P99_MS:.0f} ms: "
              f"{'met' if p99 < TARGET_BARE_P99_MS else 'NOT met'})")
        cpu_a, cpu_b = (cpu_per_request(agg[k]) for k in ("A", "B"))
        print(f"server CPU per delivery: A {cpu_a:.2f} ms, B {cpu_b:.2f} ms; B/A {cpu_b / cpu_a:.2f} "
              "(what the throughput ratio tends to when both servers are CPU-bound; it is "
              "less sensitive to other load on the machine)")
        for label in ("A", "B", "C"):
            warnings = by_label[label].stderr_count("Task queue depth")
            if warnings:
                print(f"{names[label]} logged {warnings} waitress 'Task queue depth' warnings")
        print("\n" + markdown(measured, agg, names, ratio, args, code))
        print(f"\nmachine: {machine()}")
        if mismatches:
            print("FAILED: accepted deliveries and stored rows differ", file=sys.stderr)
            return 1
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        for p in children:
            if p.is_alive():
                p.terminate()
            p.join(5)
        for server in reversed(servers):
            server.stop()
        if args.keep:
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        if args.profile and args.profile.exists():
            print_profile(args.profile)


if __name__ == "__main__":
    sys.exit(main())
