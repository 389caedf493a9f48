"""A scriptable stream agent for tests: prints what Claude Code's stream-json prints.

`python stream_agent.py SCENARIO [ARG] [claude flags...]`. Every run first appends one
JSON line to $FAKE_AGENT_LOG (argv, the session it was asked to resume, the
environment's keys), so tests can check resumption and secrets from the outside. The
line shapes follow the real CLI's (tests/fixtures/agent-streams/claude-*.jsonl).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

WORK_SESSION = "claude-session-1"


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def init(session: str) -> None:
    emit({"type": "system", "subtype": "init", "session_id": session, "tools": ["Bash"]})


def tool(name: str, tool_input: dict, result: str, session: str, structured: dict | None = None,
         takes: float = 0.0) -> None:
    call = f"toolu_{uuid.uuid4().hex[:12]}"
    emit({"type": "assistant", "session_id": session, "message": {
        "role": "assistant", "content": [{"type": "tool_use", "id": call, "name": name,
                                          "input": tool_input}]}})
    time.sleep(takes)  # the tool runs
    line = {"type": "user", "session_id": session, "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call, "content": result}]}}
    if structured is not None:
        line["tool_use_result"] = structured
    emit(line)


def text(body: str, session: str) -> None:
    emit({"type": "assistant", "session_id": session, "message": {
        "role": "assistant", "content": [{"type": "text", "text": body}]}})


def result(body: str, session: str, is_error: bool = False) -> None:
    emit({"type": "result", "subtype": "success", "is_error": is_error, "result": body,
          "session_id": session, "num_turns": 1})


def record(prompt: str, resume: str | None) -> None:
    path = os.environ.get("FAKE_AGENT_LOG")
    if not path:
        return
    line = {"argv": sys.argv[1:], "resume": resume, "prompt": prompt,
            "agentSession": os.environ.get("WAKELINE_AGENT_SESSION"),
            "turn": os.environ.get("WAKELINE_TURN_ID"), "env": sorted(os.environ),
            "envValues": dict(os.environ), "headlines": [
                line[2:] for line in prompt.splitlines() if line.startswith("- ")],
            "at": time.time()}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def main() -> int:
    scenario = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("-") else ""
    resume = sys.argv[sys.argv.index("--resume") + 1] if "--resume" in sys.argv else None
    prompt = sys.stdin.read()
    record(prompt, resume)
    if resume == "forgotten":
        sys.stderr.write(f"No conversation found with session ID: {resume}\n")
        emit({"type": "result", "subtype": "error_during_execution", "is_error": True,
              "errors": [f"No conversation found with session ID: {resume}"]})
        return 1
    session = resume or f"{WORK_SESSION}-{uuid.uuid4().hex[:6]}"
    init(session)
    if scenario == "work":  # paced like a real agent: tools and thinking take a moment
        tool("TaskCreate", {"subject": "Reproduce", "activeForm": "Reproducing"},
             "Task #1 created successfully: Reproduce", session, {"task": {"id": "1"}})
        tool("TaskCreate", {"subject": "Fix", "activeForm": "Fixing"},
             "Task #2 created successfully: Fix", session, {"task": {"id": "2"}})
        time.sleep(0.05)
        text("Looking at the failing test first.", session)
        tool("Bash", {"command": "pytest -q tests/test_login.py"}, "1 failed, 3 passed", session,
             takes=0.05)
        time.sleep(0.05)
        tool("TaskUpdate", {"taskId": "1", "status": "completed"}, "Updated task #1", session)
        text("Fixed it; opened https://github.com/acme/app/pull/42 for review.", session)
        time.sleep(0.05)
        result("Fixed the flaky login test: https://github.com/acme/app/pull/42", session)
    elif scenario == "chatty":  # ARG tool calls as fast as possible, then the answer
        for n in range(int(arg or "200")):
            tool("Bash", {"command": f"echo step {n}"}, f"step {n}", session)
        result(f"done after {arg} steps", session)
    elif scenario == "slow":  # ARG tool calls of 0.05 s each, 0.05 s apart
        for n in range(int(arg or "20")):
            tool("Bash", {"command": f"echo step {n}"}, f"step {n}", session, takes=0.05)
            time.sleep(0.05)
        result("done slowly", session)
    elif scenario == "secret":
        tool("Bash", {"command": "env"}, f"GITHUB_TOKEN=ghp_{'a' * 36} and {arg}", session)
        time.sleep(0.3)  # thinking: the result's action goes out before the answer
        result("printed the environment", session)
    elif scenario == "question":
        result("I found two ways to fix it.\nQUESTION: Which one should I take?", session)
    elif scenario == "garbage":
        sys.stdout.write("not json at all\n")
        sys.stdout.buffer.write(b"\xff\xfe invalid utf-8 \xc3\x28\n")
        sys.stdout.write("[1, 2, 3]\n" + "x" * (10 * 1024 * 1024) + "\n")
        sys.stdout.flush()
        tool("Bash", {"command": "ls"}, "README.md", session)
        result("survived the garbage", session)
        sys.stdout.write('{"type": "assistant", "message": {"con')  # stops mid-line
        sys.stdout.flush()
    elif scenario == "fail":
        result("the model is down", session, is_error=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
