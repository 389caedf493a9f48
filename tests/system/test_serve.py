"""`wakeline serve` as a real child process, driven by the real CLI in other processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.conftest import comment_event, issue_event, session_event, signed
from tests.helpers import batch_scheduling_allowed, free_port, wait_until

pytestmark = pytest.mark.slow

# Deliberately unlike the unit tests' secret, so a leak cannot be confused with a fixture.
WEBHOOK_SECRET = "sys-webhook-secret-Zq7Xv2Lm9Pw4Rt8Ks1"
START_SECONDS = 30.0
STOP_SECONDS = 15.0


@dataclass
class Served:
    """One `wakeline serve` child and how to reach it."""

    proc: subprocess.Popen[bytes]
    config: Path
    env: dict[str, str]
    ingress_url: str
    operator_url: str
    stdout: Path
    stderr: Path

    @property
    def operator_token(self) -> str:
        return (self.config.parent / "state" / "operator.token").read_text().strip()

    @property
    def database(self) -> Path:
        return self.config.parent / "state" / "wakeline.db"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `python -m wakeline --config ... ARGS` in its own process."""
        return subprocess.run(
            [sys.executable, "-m", "wakeline", "--config", str(self.config), *args],
            env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )

    def post(self, raw: bytes, headers: dict[str, str]) -> requests.Response:
        return requests.post(self.ingress_url + "/webhooks/linear", data=raw, headers=headers,
                             timeout=30)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Signal the child and wait (with a deadline) for its exit code."""
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=STOP_SECONDS)

    def output(self) -> str:
        return self.stdout.read_text(errors="replace") + self.stderr.read_text(errors="replace")


def _up(served: Served) -> str | None:
    if served.proc.poll() is not None:
        return "exited"
    try:
        ok = all(requests.get(url + "/healthz", timeout=1).ok
                 for url in (served.ingress_url, served.operator_url))
    except requests.RequestException:
        return None
    return "up" if ok else None


@pytest.fixture
def start_serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Start `wakeline serve` on free loopback ports; the child is killed if a test leaves it up."""
    children: list[Served] = []

    def start(extra_config: str = "", extra_env: dict[str, str] | None = None,
              server_extra: str = "") -> Served:
        ingress_port, operator_port = free_port(), free_port()
        config = tmp_path / "wakeline.toml"
        config.write_text(
            'state_dir = "state"\n'
            'log_level = "DEBUG"\n'
            "[server]\n"
            'webhook_host = "127.0.0.1"\n'
            f"webhook_port = {ingress_port}\n"
            'operator_host = "127.0.0.1"\n'
            f"operator_port = {operator_port}\n"
            "threads = 4\n" + server_extra +
            "[[routes]]\n"
            'name = "eng"\n'
            'teams = ["ENG"]\n' + extra_config,
            encoding="utf-8",
        )
        env = {k: v for k, v in os.environ.items()
               if k not in ("WAKELINE_CONFIG", "WAKELINE_API_URL", "WAKELINE_TOKEN",
                            "WAKELINE_LINEAR_API_KEY")}  # no key: the local backend
        env.update(WAKELINE_LINEAR_WEBHOOK_SECRET=WEBHOOK_SECRET, PYTHONUNBUFFERED="1", **(extra_env or {}))
        stdout = tmp_path / f"serve-{len(children)}.out"
        stderr = tmp_path / f"serve-{len(children)}.err"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "wakeline", "--config", str(config), "serve"],
                env=env, stdout=out, stderr=err, cwd=tmp_path,
            )
        served = Served(proc, config, env, f"http://127.0.0.1:{ingress_port}",
                        f"http://127.0.0.1:{operator_port}", stdout, stderr)
        children.append(served)
        state = wait_until(lambda: _up(served), START_SECONDS, message="wakeline serve listening")
        assert state == "up", served.output()
        return served

    yield start
    for served in children:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(timeout=STOP_SECONDS)


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
    agent = Path(__file__).resolve().parents[1] / "fakes" / "agent.py"
    # Unconfined: the fake agent's log (FAKE_AGENT_LOG) is in tmp_path, out of a sandbox's sight.
    served = start_serve(f"[agent]\ncommand = {json.dumps([sys.executable, str(agent), 'ok'])}\n"
                         '[sandbox]\nmode = "none"\n',
                         {"FAKE_AGENT_LOG": str(runs)},
                         server_extra="" if single_cpu else "single_cpu = false\n")
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
    config = tmp_path / "wakeline.toml"
    config.write_text('state_dir = "state"\n[server]\nwebhook_host = "127.0.0.1"\n'
                      f"webhook_port = {free_port()}\noperator_port = {free_port()}\n"
                      '[sandbox]\nmode = "required"\nbwrap = "/nonexistent/bwrap"\n',
                      encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wakeline", "--config", str(config), *args],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              check=False)

    served = run("serve")
    assert served.returncode == 2, served.stderr
    assert "config error: sandbox.bwrap:" in served.stderr
    assert "apt-get install bubblewrap" in served.stderr
    assert not (tmp_path / "state").exists()
    doctor = run("doctor", "--json")
    item = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "sandbox")
    assert item["ok"] is False and "not found" in item["detail"] and "bubblewrap" in item["fix"]
