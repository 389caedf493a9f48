"""A scriptable agent for tests: `python agent.py MODE [ARG]`.

Every mode first appends one JSON line to $FAKE_AGENT_LOG (when set) with the
turn's identity, the headlines it was given and its environment keys, so tests
can check ordering and exactly-once completion from the outside.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time


def record(prompt: str) -> None:
    path = os.environ.get("FAKE_AGENT_LOG")
    if not path:
        return
    line = {
        "conversation": os.environ.get("WAKELINE_CONVERSATION_ID"),
        "turn": os.environ.get("WAKELINE_TURN_ID"),
        "session": os.environ.get("WAKELINE_SESSION_ID"),
        "issue": os.environ.get("WAKELINE_ISSUE_IDENTIFIER"),
        "headlines": [l[2:] for l in prompt.splitlines() if l.startswith("- ")],
        "prompts": re.findall(r'"prompt": "([^"]+)"', prompt),
        "comments": re.findall(r'"comment": "([^"]+)"', prompt),
        "texts": re.findall(r'"text": "([^"]+)"', prompt),  # Matrix messages
        "public": "route is public" in prompt,
        "env": sorted(os.environ),
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "policy": os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None,
        "phase": os.environ.get("WAKELINE_PHASE"),
        "approvedPlan": "approved-plan" in prompt,
        "prompt": prompt,
        "at": time.time(),
    }
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def call(method: str, path: str, body: dict | None = None) -> tuple[int, object]:
    """One operator API call with the turn's token: (status, JSON body)."""
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(os.environ["WAKELINE_API_URL"] + path, data=data, method=method,
                                 headers={"Authorization": "Bearer " + os.environ["WAKELINE_TOKEN"],
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def matrix(mode: str, text: str) -> int:
    """`matrix-send TEXT`: propose TEXT; `matrix-api`: what this turn's token may do."""
    if mode == "matrix-send":
        status, body = call("POST", "/v1/matrix/send", {"text": text})
        print(json.dumps({"status": status, "body": body}))
        return 0 if status == 201 else 1
    read = call("GET", "/v1/matrix/read?limit=5")
    sent = call("POST", "/v1/matrix/send", {"text": text})
    approval = (sent[1] or {}).get("approval", {}).get("id", "apr_0000000000000000") \
        if isinstance(sent[1], dict) else "apr_0000000000000000"
    codes = {"read": read[0], "send": sent[0], "list": call("GET", "/v1/approvals")[0],
             "approve": call("POST", f"/v1/approvals/{approval}/approve", {})[0],
             "deny": call("POST", f"/v1/approvals/{approval}/deny", {})[0]}
    print(json.dumps({"codes": codes, "read": read[1], "approval": approval}))
    return 0


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    arg = sys.argv[2] if len(sys.argv) > 2 else ""
    prompt = sys.stdin.read()
    record(prompt)
    if mode == "ok":
        print(f"done: {len(prompt)} chars")
        return 0
    if mode == "exit":
        print(f"exiting with {arg}")
        return int(arg)
    if mode == "prompt":
        sys.stdout.write(prompt)
        return 0
    if mode == "env":
        print(json.dumps(dict(os.environ)))
        return 0
    if mode == "sleep":
        time.sleep(float(arg or 3600))
        return 0
    if mode == "sleep-first":  # the conversation's first turn sleeps, later ones answer at once
        marker = ".fake-agent-ran"
        if not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(float(arg or 3600))
        print("done")
        return 0
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(3600)
        return 0
    if mode == "flood":
        chunk = b"x" * 65536
        for _ in range(int(arg or 1600)):  # 1600 x 64 KiB = 100 MiB
            sys.stdout.buffer.write(chunk)
        return 0
    if mode == "api":  # what may this turn's token do? print the status code of each call
        import urllib.error
        import urllib.request

        codes = {}
        for method, path, body in (("GET", "/v1/inbox?view=headlines", None), ("GET", "/v1/status", None),
                                   ("PUT", "/v1/following", b'{"following": false}')):
            req = urllib.request.Request(os.environ["WAKELINE_API_URL"] + path, data=body, method=method,
                                         headers={"Authorization": "Bearer " + os.environ["WAKELINE_TOKEN"],
                                                  "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    codes[f"{method} {path}"] = resp.status
            except urllib.error.HTTPError as err:
                codes[f"{method} {path}"] = err.code
        print(json.dumps(codes))
        return 0
    if mode in ("matrix-send", "matrix-api"):  # a Matrix route's tools, with the turn's token
        return matrix(mode, arg or "a reply from the agent")
    if mode == "lines":  # a long answer: ARG numbered lines of 70 characters each
        for n in range(int(arg or 100)):
            print(f"{n:05d} " + "x" * 64)
        return 0
    if mode == "touch":  # leave an untracked file in the workspace, then answer
        with open(arg or "agent-notes.txt", "w", encoding="utf-8") as fh:
            fh.write("work in progress\n")
        print("done")
        return 0
    if mode == "planner":  # plans (and, in a planning turn, tries to change files anyway)
        if os.environ.get("WAKELINE_PHASE") == "plan":
            if arg == "meddle":
                with open("meddled.txt", "w", encoding="utf-8") as fh:
                    fh.write("should not survive\n")
                if os.path.exists("README.md"):
                    with open("README.md", "a", encoding="utf-8") as fh:
                        fh.write("changed by a planning turn\n")
            if arg == "long":
                print("1. A step\n" + "x" * 30_000)
                return 0
            if arg == "sleep-plan":
                time.sleep(3600)
            revision = len(re.findall(r"Plan, revision|previous revision", prompt)) + 1
            print(f"1. Read the failing test\n2. Fix the clock\n3. Run the suite\n(r{revision})")
            return 0
        print("executed " + ("the approved plan" if "approved-plan" in prompt else "without a plan"))
        if arg == "sleep-execute":
            time.sleep(3600)
        return 0
    if mode == "kill-self":
        os.kill(os.getpid(), signal.SIGKILL)
    print(f"unknown mode {mode}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
