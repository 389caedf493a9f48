"""An agent that tries things from inside its sandbox and answers with what happened.

    python confined_agent.py probe '{"read": [...], "write": [...], ...}'
    python confined_agent.py daemonise MARKER [SECONDS]

`probe` attempts each thing the JSON names and prints one JSON object, its answer:
- "read": files to read; "list": directories to list; "write": files to create;
- "connect": [host, port] pairs to open a TCP connection to;
- "http": URLs to GET (through the proxies of the environment, as any client would),
  with `$WAKELINE_TOKEN` when the URL is wakeline's own;
- "run": argvs to run (exit code and output);
- "env": the environment's names, and "pids": the processes this agent can see.
Each result is "ok: ..." or "error: ..."; a test reads them from the answer Linear received.

`daemonise` leaves a sleeper behind (a double fork and a new session, so no group or parent
ties it to the agent), a `sleep` named MARKER so a test can look for it from the outside, writes
its pid (as seen inside) to `daemon.pid`, then answers (or first sleeps SECONDS).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def attempt(action, *args):  # type: ignore[no-untyped-def]
    try:
        return "ok: " + str(action(*args))[:2000]
    except Exception as exc:  # every failure is a result
        return f"error: {exc.__class__.__name__}: {exc}"[:500]


def read(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.read(4096).decode("utf-8", "replace")


def write(path: str) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("written from inside the sandbox\n")
    return "written"


def connect(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=5):
        return "connected"


def http(url: str) -> str:
    headers = {}
    if url.startswith(os.environ.get("WAKELINE_API_URL", "\0")):
        headers["Authorization"] = "Bearer " + os.environ["WAKELINE_TOKEN"]
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return f"{resp.status} {resp.read(300).decode('utf-8', 'replace')}"
    except urllib.error.HTTPError as err:
        return f"{err.code} {err.read(300).decode('utf-8', 'replace')}"


def run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return f"{done.returncode} {(done.stdout + done.stderr).strip()}".rstrip()


def probe(spec: dict) -> dict:  # type: ignore[type-arg]
    out: dict = {}  # type: ignore[type-arg]
    out["read"] = {p: attempt(read, p) for p in spec.get("read", [])}
    out["list"] = {p: attempt(lambda d: sorted(os.listdir(d)), p) for p in spec.get("list", [])}
    out["write"] = {p: attempt(write, p) for p in spec.get("write", [])}
    out["connect"] = {f"{h}:{p}": attempt(connect, h, p) for h, p in spec.get("connect", [])}
    out["http"] = {u: attempt(http, u) for u in spec.get("http", [])}
    out["run"] = {" ".join(a): attempt(run, a) for a in spec.get("run", [])}
    if spec.get("env"):
        out["env"] = dict(os.environ)
    if spec.get("pids"):
        out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    out["cwd"] = os.getcwd()
    return out


def daemonise(marker: str, seconds: float) -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for fd in (0, 1, 2):
                os.close(fd)
            os.execv("/bin/sleep", [marker, "3600"])  # its name is the marker
        os._exit(0)
    os.wait()
    time.sleep(0.2)
    found = [p for p in os.listdir("/proc") if p.isdigit()
             and open(f"/proc/{p}/cmdline", "rb").read().startswith(marker.encode() + b"\0")]
    with open("daemon.pid", "w", encoding="utf-8") as fh:
        fh.write(",".join(found) + "\n")
    if seconds:
        time.sleep(seconds)
    print(f"left a sleeper behind: {','.join(found)}")


def main() -> int:
    sys.stdin.read()
    mode = sys.argv[1]
    if mode == "probe":
        print(json.dumps(probe(json.loads(sys.argv[2]))))
        return 0
    if mode == "daemonise":
        daemonise(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
        return 0
    print(f"unknown mode {mode}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
