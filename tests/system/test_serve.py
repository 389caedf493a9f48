"""`wakeline serve` as a real child process, driven by the real CLI in other processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import comment_event, issue_event, session_event, signed
from tests.helpers import batch_scheduling_allowed, wait_until
from tests.support.serve import ENG_ROUTE, FAKE_AGENT, Served, agent_toml

pytestmark = pytest.mark.slow

# Deliberately unlike the unit tests' secret, so a leak cannot be confused with a fixture.
WEBHOOK_SECRET = "sys-webhook-secret-Zq7Xv2Lm9Pw4Rt8Ks1"


@pytest.fixture
def start_serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Start `wakeline serve` on free loopback ports; the child is killed if a test leaves it up."""
    children: list[Served] = []

    def start(extra_config: str = "", extra_env: dict[str, str] | None = None,
              server_extra: str = "", unconfined: bool = False) -> Served:
        served = Served(tmp_path, ENG_ROUTE + extra_config, secret=WEBHOOK_SECRET,
                        env=extra_env, log_level="DEBUG", server=server_extra,
                        unconfined=unconfined)
        children.append(served)
        return served.start()

    yield start
    for served in children:
        served.close()


def test_status_json_and_human_status_against_a_running_server(
    start_serve: Callable[[], Served],
) -> None:
    """`wakeline status --json` prints the API's JSON and exits 0; plain status is readable."""
    served = start_serve()
    result = served.cli("status", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["following"] is False and data["fifo"] == {"pending": 0, "claimed": 0, "held": 0}
    human = served.cli("status")
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith("wakeline ") and "inbox: 0 unread" in human.stdout
    assert data["sandbox"]["mode"] == "auto"
    assert ("sandbox: on (auto)" if data["sandbox"]["available"] else
            "sandbox: TURNS UNCONFINED (auto)") in human.stdout


def test_replay_signs_and_sends_recorded_deliveries(start_serve: Callable[[], Served],
                                                    tmp_path: Path) -> None:
    """`wakeline replay file.jsonl` sends each line with a fresh timestamp and prints outcomes."""
    served = start_serve()
    stale = comment_event(webhookTimestamp=1)  # replay refreshes the timestamp
    recorded = tmp_path / "recorded.jsonl"
    recorded.write_text(
        "\n".join([
            json.dumps(stale),
            "",
            json.dumps({"body": session_event(), "delivery": "fixed-1",
                        "event": "AgentSessionEvent"}),
            json.dumps({"body": issue_event(identifier="ENG-5"), "delivery": "fixed-1"}),
        ]) + "\n",
        encoding="utf-8",
    )
    result = served.cli("replay", str(recorded))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("line 1: ") and '"accepted"' in lines[0]
    assert lines[1].startswith("line 3: fixed-1 -> 200") and '"accepted"' in lines[1]
    assert lines[2].startswith("line 4: fixed-1 -> 200") and '"duplicate"' in lines[2]
    status = json.loads(served.cli("status", "--json").stdout)
    assert status["inbox"]["unread"] == 1
    with sqlite3.connect(f"file:{served.database}?mode=ro", uri=True) as db:
        receipts = dict(db.execute("SELECT delivery_id, event_type FROM receipts").fetchall())
    assert receipts["fixed-1"] == "AgentSessionEvent" and len(receipts) == 2

    refused = tmp_path / "refused.jsonl"
    refused.write_text(json.dumps({"action": "create", "data": {}}) + "\n", encoding="utf-8")
    result = served.cli("replay", str(refused))
    assert result.returncode == 1
    assert "400" in result.stdout and "refused" in result.stderr


@pytest.mark.parametrize("signum", [pytest.param(signal.SIGTERM, id="SIGTERM"),
                                    pytest.param(signal.SIGINT, id="SIGINT")])
def test_a_stop_signal_stops_serve_cleanly(start_serve: Callable[[], Served], signum: int) -> None:
    """SIGTERM or SIGINT: serve exits 0 within the deadline and its ports close."""
    served = start_serve()
    raw, headers = signed(comment_event(), secret=WEBHOOK_SECRET)
    assert served.post(raw, headers).json() == {"outcome": "accepted"}
    assert served.stop(signum) == 0, served.output()
    assert "wakeline stopped" in served.stderr.read_text()
    with pytest.raises(requests.ConnectionError):
        requests.get(served.operator_url + "/healthz", timeout=2)


def test_the_follow_switch_survives_a_restart(start_serve: Callable[[], Served]) -> None:
    """PUT /v1/following is persisted: after a restart it wins over the config's initial value."""
    served = start_serve()
    auth = {"Authorization": f"Bearer {served.operator_token}"}
    resp = requests.put(served.operator_url + "/v1/following", json={"following": True},
                        headers=auth, timeout=10)
    assert resp.json() == {"following": True}
    assert served.stop() == 0
    again = start_serve()
    resp = requests.get(again.operator_url + "/v1/following", headers=auth, timeout=10)
    assert resp.json() == {"following": True}


def test_status_against_a_stopped_server_exits_3(start_serve: Callable[[], Served]) -> None:
    """Once serve has stopped, `wakeline status` cannot reach it and exits 3."""
    served = start_serve()
    assert served.stop() == 0
    result = served.cli("status")
    assert result.returncode == 3
    assert "cannot reach" in result.stderr


def test_serve_output_never_carries_the_webhook_secret_or_operator_token(
    start_serve: Callable[[], Served],
) -> None:
    """Good and bad deliveries and bad API calls, at DEBUG: neither secret reaches stdout/stderr."""
    served = start_serve()
    token = served.operator_token
    bad: list[tuple[bytes, dict[str, str]]] = []
    # A wrong signature that is the secret itself, and a body quoting both secrets.
    body = comment_event(data={"id": "c-1", "body": f"{WEBHOOK_SECRET} {token}", "issueId": "i-1"})
    raw, headers = signed(body, secret=WEBHOOK_SECRET)
    bad.append((raw, {**headers, "Linear-Signature": WEBHOOK_SECRET}))
    bad.append((raw, {**headers, "Linear-Delivery": token * 10}))  # too long: malformed
    not_json = f'{{"secret": "{WEBHOOK_SECRET}"'.encode()
    bad.append(signed(not_json, secret=WEBHOOK_SECRET))
    bad.append(signed(comment_event(webhookTimestamp=1), secret=WEBHOOK_SECRET))  # stale
    bad.append(signed(b"\xff" + WEBHOOK_SECRET.encode(), secret=WEBHOOK_SECRET))  # not UTF-8
    statuses = [served.post(r, h).status_code for r, h in bad]
    assert statuses == [401, 400, 400, 401, 400]
    assert served.post(raw, headers).json() == {"outcome": "accepted"}
    for authorization in (f"Bearer {WEBHOOK_SECRET}", f"Bearer {token}x", f"Basic {token}"):
        resp = requests.get(served.operator_url + "/v1/status",
                            headers={"Authorization": authorization}, timeout=10)
        assert resp.status_code == 401
    ok = requests.get(served.operator_url + "/v1/inbox",
                      headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert ok.status_code == 200 and WEBHOOK_SECRET in ok.text  # the body was stored as sent
    assert served.stop() == 0
    output = served.output()
    assert "wakeline serving" in output and "wakeline stopped" in output  # logging was live
    assert WEBHOOK_SECRET not in output
    assert token not in output



@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two CPUs")
@pytest.mark.parametrize("single_cpu", [True, False])
def test_the_service_runs_on_one_cpu_and_its_agents_on_all(start_serve: Callable[..., Served],
                                                            tmp_path: Path, single_cpu: bool) -> None:
    """With `server.single_cpu` (the default), every thread of serve shares one CPU, batch-scheduled;
    agents never do, and are scheduled normally."""
    allowed = os.sched_getaffinity(0)
    runs = tmp_path / "agent-runs.jsonl"
    served = start_serve(agent_toml([sys.executable, str(FAKE_AGENT), "ok"]),
                         {"FAKE_AGENT_LOG": str(runs)},
                         server_extra="" if single_cpu else "single_cpu = false\n",
                         unconfined=True)  # the fake agent logs into tmp_path
    raw, headers = signed(session_event(session_id="s-cpu"), secret=WEBHOOK_SECRET)
    assert served.post(raw, headers).json()["outcome"] == "accepted"
    wait_until(lambda: runs.exists() and runs.read_text().strip(), 30, message="the agent ran")
    run = json.loads(runs.read_text().splitlines()[0])
    assert run["cpus"] == sorted(allowed)
    assert run["policy"] == os.SCHED_OTHER
    threads, policies = {}, {}
    for tid in Path(f"/proc/{served.proc.pid}/task").iterdir():
        try:
            threads[tid.name] = os.sched_getaffinity(int(tid.name))
            policies[tid.name] = os.sched_getscheduler(int(tid.name))
        except ProcessLookupError:
            pass  # a thread that just ended (the turn's runner)
    assert len(threads) > 10  # both listeners' threads, the writer, the actors...
    expected = frozenset({max(allowed)}) if single_cpu else frozenset(allowed)
    assert set(map(frozenset, threads.values())) == {expected}, threads
    batch = single_cpu and batch_scheduling_allowed()  # refused: serve runs as before
    assert set(policies.values()) == {os.SCHED_BATCH if batch else os.SCHED_OTHER}, policies


def test_serve_never_runs_turns_unconfined_when_the_sandbox_is_required(tmp_path: Path) -> None:
    """`sandbox.mode = "required"` with a bwrap that cannot run: exit 2 naming `sandbox.bwrap`
    and the fix, before anything is created (CONTRACT section 12); `doctor` fails the item."""
    run = Served(tmp_path, '[sandbox]\nmode = "required"\nbwrap = "/nonexistent/bwrap"\n',
                 secret=None).cli
    served = run("serve")
    assert served.returncode == 2, served.stderr
    assert "config error: sandbox.bwrap:" in served.stderr
    assert "apt-get install bubblewrap" in served.stderr
    assert not (tmp_path / "state").exists()
    doctor = run("doctor", "--json")
    item = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "sandbox")
    assert item["ok"] is False and "not found" in item["detail"] and "bubblewrap" in item["fix"]


def test_a_serve_that_cannot_start_fails_with_its_output_and_leaves_no_child(
        tmp_path: Path) -> None:
    """The harness itself: a child that exits at start-up fails the test, saying why."""
    served = Served(tmp_path, '[sandbox]\nmode = "required"\nbwrap = "/nonexistent/bwrap"\n')
    with pytest.raises(AssertionError, match=r"exited 2: .*sandbox\.bwrap"):
        served.start()
    assert not served.alive() and served.stop() == 2
