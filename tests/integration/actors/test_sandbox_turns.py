"""A confined turn's processes and network, and how wakeline says how turns run.

Real services run real agents in bubblewrap (CONTRACT section 12): what the agent left running
is looked for among the host's processes, its connections go to real servers on the host's
loopback, and what the service says is read from its API and its journal.
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import session_event
from tests.helpers import wait_until
from tests.integration.actors.test_progress import answered, writes
from tests.support.sandbox import processes_with, require_bwrap
from wakeline.errors import ConfigError

CONFINED = Path(__file__).resolve().parents[2] / "fakes" / "confined_agent.py"
ROUTE = {"name": "eng", "teams": ["ENG"], "network": "off"}
REQUIRED = {"mode": "required"}


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def host_server() -> Iterator[int]:
    """A real HTTP server on the host's loopback: the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def journal(h: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in h.api("GET", "/v1/journal?limit=100").json()["entries"] if e["kind"] == kind]


def probe(h: Any) -> dict[str, Any]:
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear, timeout=30)
    assert sent[-1]["kind"] == "response", sent[-1]
    return json.loads(sent[-1]["body"])


# --- processes ------------------------------------------------------------------------------


def test_a_daemonised_process_is_gone_once_the_turn_ends(harness: Callable[..., Any]) -> None:
    require_bwrap()
    marker = f"sleeper-{uuid.uuid4().hex}"
    h = harness("daemonise", marker, script=CONFINED, sandbox=REQUIRED, routes=[ROUTE])
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear, timeout=30)
    assert sent[-1]["body"].startswith("left a sleeper behind: ")  # it ran, setsid and all
    assert sent[-1]["body"] != "left a sleeper behind: "
    wait_until(lambda: not processes_with(marker), timeout=10, message="the sleeper gone")


def test_a_stop_ends_every_process_of_the_turn(harness: Callable[..., Any]) -> None:
    require_bwrap()
    marker = f"sleeper-{uuid.uuid4().hex}"
    h = harness(command=[sys.executable, str(CONFINED), "daemonise", marker, "3600"],
                sandbox=REQUIRED, routes=[ROUTE])
    h.deliver(session_event(session_id="s-1"))
    cid = wait_until(lambda: h.api("GET", "/v1/conversations").json()["conversations"],
                     message="the conversation")[0]["id"]
    pidfile = h.service.config.workspaces_path / cid / "daemon.pid"
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=30,
               message="the sleeper's pid written (as the agent sees it, in its PID namespace)")
    assert len(processes_with(marker)) >= 2  # the agent and its sleeper, seen from the host
    assert h.api("POST", f"/v1/conversations/{cid}/stop").json()["stopped"] is True
    wait_until(lambda: not processes_with(marker), timeout=10, message="every process gone")
    wait_until(lambda: h.conversation(cid)["state"] == "idle", message="the turn ended")


def test_a_stop_gives_the_agent_its_sigterm_first(harness: Callable[..., Any]) -> None:
    require_bwrap()
    marker = f"sleep\x003600.{uuid.uuid4().int % 10**9:09d}"  # argv as /proc shows it
    h = harness(command=["/bin/sh", "-c", 'trap "echo got TERM > term.txt; exit 0" TERM; '
                                          f'{marker.replace(chr(0), " ")} & wait'],
                sandbox=REQUIRED, routes=[ROUTE])
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: processes_with(marker), timeout=30, message="its sleep running: the "
                                                                    "trap is set")
    cid = h.only_conversation()["id"]
    h.api("POST", f"/v1/conversations/{cid}/stop")
    workspace = h.service.config.workspaces_path / cid
    wait_until(lambda: (workspace / "term.txt").exists(), message="the agent heard SIGTERM")
    wait_until(lambda: not processes_with(marker), message="its sleep gone with the sandbox")


def test_an_agent_stopped_without_a_network_still_reaches_wakeline_in_its_grace(
        harness: Callable[..., Any]) -> None:
    require_bwrap()
    marker = f"sleep\x003600.{uuid.uuid4().int % 10**9:09d}"  # argv as /proc shows it
    sleep = marker.replace(chr(0), " ")
    script = f'trap "wakeline agent thought goodbye; exit 0" TERM; {sleep} & wait'
    h = harness(command=["/bin/sh", "-c", script], sandbox=REQUIRED, routes=[ROUTE])
    h.service.turn_env.kill_grace_seconds = 60  # its interpreter may take a while to start
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: processes_with(marker), timeout=30, message="its sleep running: the "
                                                                    "trap is set")
    h.api("POST", f"/v1/conversations/{h.only_conversation()['id']}/stop")
    # The relay is the fork server's, outside the sandbox: the stop's SIGTERM is not its.
    wait_until(lambda: "goodbye" in [w.get("body") for w in writes(h.linear)], timeout=30,
               message="the thought sent from the SIGTERM trap")


def test_an_agent_that_ignores_sigterm_is_killed_after_the_grace(
        harness: Callable[..., Any]) -> None:
    require_bwrap()
    h = harness("ignore-term", sandbox=REQUIRED, routes=[ROUTE])
    h.deliver(session_event(session_id="s-1"))
    cid = wait_until(lambda: h.api("GET", "/v1/conversations").json()["conversations"],
                     message="the conversation")[0]["id"]
    wait_until(lambda: h.conversation(cid)["state"] == "running", message="the turn running")
    wait_until(lambda: processes_with("ignore-term"), timeout=30, message="the agent running")
    h.api("POST", f"/v1/conversations/{cid}/stop")
    wait_until(lambda: not processes_with("ignore-term"), timeout=10,
               message="killed after the grace (0.5 s here)")


def test_the_agent_sees_only_its_own_processes(harness: Callable[..., Any]) -> None:
    require_bwrap()
    said = probe(harness("probe", json.dumps({"pids": True}), script=CONFINED, sandbox=REQUIRED,
                         routes=[{**ROUTE, "network": "open"}]))
    # bwrap's init and the agent (no launcher under "open"): not one of the host's processes.
    assert said["pids"] == [1, 2]


def test_a_script_the_command_names_runs_wherever_it_lives(harness: Callable[..., Any],
                                                          tmp_path: Path) -> None:
    require_bwrap()
    script = tmp_path / "agent.py"  # under /tmp, which the sandbox covers
    script.write_text("import sys\nsys.stdin.read()\nprint('hello from a script in /tmp')\n")
    h = harness(command=[sys.executable, str(script)], sandbox=REQUIRED, routes=[ROUTE])
    h.deliver(session_event(session_id="s-1"))
    assert answered(h.linear, timeout=30)[-1]["body"] == "hello from a script in /tmp"


def test_a_missing_agent_fails_its_attempts_as_it_does_unconfined(
        harness: Callable[..., Any]) -> None:
    require_bwrap()
    h = harness(command=["/nonexistent/agent"], sandbox=REQUIRED, routes=[ROUTE])
    h.service.turn_env.backoff_seconds = (0, 0)
    h.deliver(session_event(session_id="s-1"))
    cid = wait_until(lambda: [c for c in h.api("GET", "/v1/conversations").json()["conversations"]
                              if c["state"] == "stalled"], message="stalled")[0]["id"]
    assert "FileNotFoundError" in h.conversation(cid)["turn"]["lastError"]


# --- network --------------------------------------------------------------------------------


def test_off_reaches_nothing_but_wakeline(harness: Callable[..., Any], host_server: int) -> None:
    require_bwrap()
    operator_port = harness("ok").service.operator.port  # a wakeline API on the host's loopback
    h = harness("probe", json.dumps({
        "connect": [["127.0.0.1", host_server], ["127.0.0.1", operator_port]],
        "http": [f"http://127.0.0.1:{host_server}/"],
        "run": [["wakeline", "agent", "thought", "thinking inside the sandbox"]], "env": True}),
        script=CONFINED, sandbox=REQUIRED, routes=[ROUTE])
    said = probe(h)
    for port in (host_server, operator_port):
        assert said["connect"][f"127.0.0.1:{port}"].startswith("error: ConnectionRefused")
    assert said["http"][f"http://127.0.0.1:{host_server}/"].startswith("error:")
    assert said["run"]["wakeline agent thought thinking inside the sandbox"] == "ok: 0"
    assert "thinking inside the sandbox" in [w.get("body") for w in writes(h.linear)]
    assert said["env"]["WAKELINE_API_URL"] == "http://127.0.0.2:8788"
    assert not {"HTTP_PROXY", "http_proxy"} & set(said["env"])


def test_allow_goes_through_the_proxy_to_allowed_hosts_only(
        harness: Callable[..., Any], host_server: int) -> None:
    require_bwrap()
    refused = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=refused.serve_forever, args=(0.05,), daemon=True).start()
    other = int(refused.server_address[1])
    try:
        h = harness("probe", json.dumps({
            "http": [f"http://127.0.0.1:{host_server}/", f"http://127.0.0.1:{other}/",
                     f"http://localhost:{host_server}/"],
            "connect": [["127.0.0.1", host_server]], "env": True}),
            script=CONFINED, sandbox=REQUIRED,
            routes=[{**ROUTE, "network": "allow", "allow_hosts": [f"127.0.0.1:{host_server}"]}])
        said = probe(h)
    finally:
        refused.shutdown()
        refused.server_close()
    http = said["http"]
    assert http[f"http://127.0.0.1:{host_server}/"] == "ok: 200 hello from the host"
    assert http[f"http://127.0.0.1:{other}/"].startswith("ok: 403 wakeline proxy:")
    assert http[f"http://localhost:{host_server}/"].startswith("ok: 403")  # names match exactly
    # A connection that skips the proxy finds nothing: its loopback is its own.
    assert said["connect"][f"127.0.0.1:{host_server}"].startswith("error: ConnectionRefused")
    env = said["env"]
    assert env["HTTPS_PROXY"] == env["http_proxy"] == env["ALL_PROXY"] == "http://127.0.0.2:3128"
    notes = wait_until(lambda: [e for e in journal(h, "lifecycle")
                                if "was refused" in e["text"]], message="the refusals journaled")
    assert {e["issueKeys"][0] for e in notes} == {"ENG-1"}
    assert any(f"127.0.0.1:{other}" in e["text"] for e in notes)
    assert any(f"localhost:{host_server}" in e["text"] for e in notes)


def test_open_is_the_hosts_network(harness: Callable[..., Any], host_server: int) -> None:
    require_bwrap()
    h = harness("probe", json.dumps({"http": [f"http://127.0.0.1:{host_server}/"], "env": True}),
                script=CONFINED, sandbox=REQUIRED, routes=[{**ROUTE, "network": "open"}])
    said = probe(h)
    assert said["http"][f"http://127.0.0.1:{host_server}/"] == "ok: 200 hello from the host"
    assert said["env"]["WAKELINE_API_URL"] == h.service.operator.url


# --- what it says, and failing closed -------------------------------------------------------


def test_status_doctor_and_each_turn_brief_say_how_turns_run(
        harness: Callable[..., Any]) -> None:
    require_bwrap()
    h = harness("probe", "{}", script=CONFINED, sandbox=REQUIRED,
                routes=[{**ROUTE, "network": "allow", "allow_hosts": ["api.anthropic.com"]}])
    probe(h)
    sandbox = h.api("GET", "/v1/status").json()["sandbox"]
    assert (sandbox["mode"], sandbox["available"]) == ("required", True)
    assert "bubblewrap" in sandbox["detail"]
    check = next(c for c in h.api("GET", "/v1/doctor").json()["checks"] if c["name"] == "sandbox")
    assert check["ok"] is True
    brief = wait_until(lambda: journal(h, "turn_brief"), message="the turn brief")[0]
    assert brief["text"].endswith("(confinement: bwrap, network=allow)")


def test_auto_without_bubblewrap_refuses_public_turns_and_runs_the_others_unconfined(
        harness: Callable[..., Any], tmp_path: Path) -> None:
    h = harness("ok", sandbox={"mode": "auto", "bwrap": str(tmp_path / "no-bwrap")},
                routes=[{"name": "eng", "teams": ["ENG"]},
                        {"name": "pub", "teams": ["PUB"], "trust": "public"}])
    sandbox = h.api("GET", "/v1/status").json()["sandbox"]
    assert (sandbox["mode"], sandbox["available"]) == ("auto", False)
    assert "no-bwrap: not found" in sandbox["detail"]
    check = next(c for c in h.api("GET", "/v1/doctor").json()["checks"] if c["name"] == "sandbox")
    assert check["ok"] is False and "bubblewrap" in check["fix"]
    h.deliver(session_event(session_id="s-pub", issue_id="issue-9", identifier="PUB-9"))
    refused = answered(h.linear)
    assert refused[-1]["kind"] == "error" and "cannot be confined" in refused[-1]["body"]
    assert h.runs() == []  # nothing ran
    h.deliver(session_event(session_id="s-eng"))
    wait_until(lambda: h.runs(), message="the private route's turn ran")
    note = wait_until(lambda: [e for e in journal(h, "lifecycle") if e["stage"] == "unconfined"],
                      message="the unconfined turn journaled")
    assert "runs unconfined" in note[0]["text"]
    assert any(e["text"].endswith("(confinement: unconfined)") for e in journal(h, "turn_brief"))


def test_required_without_bubblewrap_does_not_start(harness: Callable[..., Any],
                                                     tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        harness("ok", sandbox={"mode": "required", "bwrap": str(tmp_path / "no-bwrap")})
    assert info.value.key == "sandbox.bwrap" and "not found" in info.value.reason


def test_none_runs_unconfined_and_says_so(harness: Callable[..., Any]) -> None:
    h = harness("ok", sandbox={"mode": "none"})
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: h.runs(), message="the turn ran")
    sandbox = h.api("GET", "/v1/status").json()["sandbox"]
    assert sandbox["mode"] == "none" and "unconfined" in sandbox["detail"]
    check = next(c for c in h.api("GET", "/v1/doctor").json()["checks"] if c["name"] == "sandbox")
    assert "unconfined" in check["detail"]
    brief = wait_until(lambda: journal(h, "turn_brief"), message="the turn brief")[0]
    assert brief["text"].endswith("(confinement: unconfined)")
