"""`wakeline serve` as a real child process: the one way the system tests run it.

`Served` writes a config into its directory (both listeners on free loopback ports, `state/`
beside it, the tables a test adds), starts `python -m wakeline serve` there with a clean
environment (the test's variables and none of the `WAKELINE_*` of the shell that runs the
tests), and waits until both listeners answer. It knows its URLs and operator token, signs
and sends deliveries, calls the operator API and the CLI, stops the child with a signal or
SIGKILL, and starts it again on the same state and ports. The child's stdout and stderr go to
`serve.out` and `serve.log` in its directory, for failure messages.

No child outlives its test: one that does not come up is killed before the test fails, `stop`
kills one that does not stop in time, and `close()` kills one still running (a test's
`finally` or fixture calls it; `tests/support/leftovers.py` fails a session that leaks one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import requests

from tests.conftest import signed
from tests.helpers import free_port, wait_until

WEBHOOK_SECRET = "served-webhook-secret-Hw4Rk9Tz2Lq"
FAKE_AGENT = Path(__file__).resolve().parents[1] / "fakes" / "agent.py"
ENG_ROUTE = '[[routes]]\nname = "eng"\nteams = ["ENG"]\n'
START_SECONDS = 60.0
STOP_SECONDS = 60.0
PORT_ATTEMPTS = 3


def agent_toml(argv: Sequence[str], **keys: int | float | str) -> str:
    """An `[agent]` table that runs `argv`, with more keys (`max_concurrent_turns=4`)."""
    return "[agent]\n" + "".join(f"{key} = {json.dumps(value)}\n"
                                 for key, value in {"command": list(argv), **keys}.items())


class Served:
    """One `wakeline serve` child in `root` (its config, state dir and output files).

    `toml` holds the tables after `[server]` (agent, routes, linear...) and `server` more
    lines of `[server]`. `secret` is the webhook secret its environment gives it (None: none)
    and `env` more variables. `unconfined` writes `[sandbox] mode = "none"`, for fake agents
    that log into the test's directory: a confined turn sees only its workspace, so their
    log would never reach the test. `argv` runs the CLI (another venv's `wakeline`).
    """

    def __init__(self, root: Path, toml: str = "", *, secret: str | None = WEBHOOK_SECRET,
                 env: Mapping[str, str] | None = None, unconfined: bool = False,
                 log_level: str | None = None, server: str = "",
                 argv: Sequence[str] = (sys.executable, "-m", "wakeline"),
                 start_seconds: float = START_SECONDS) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.config = root / "wakeline.toml"
        self.database = root / "state" / "wakeline.db"
        self.stdout, self.stderr = root / "serve.out", root / "serve.log"
        self.secret = secret
        self.argv = list(argv)
        self.start_seconds = start_seconds
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
        self.env["PYTHONUNBUFFERED"] = "1"
        if secret is not None:
            self.env["WAKELINE_LINEAR_WEBHOOK_SECRET"] = secret
        self.env.update(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        head = 'state_dir = "state"\n' + (f'log_level = "{log_level}"\n' if log_level else "")
        tail = ('[sandbox]\nmode = "none"\n' if unconfined else "") + toml
        self._config = (head, server, tail)
        self._ports()

    def _ports(self) -> None:
        """Ports free a moment ago, written into the config."""
        self.webhook_port, self.operator_port = free_port(), free_port()
        head, server, tail = self._config
        self.config.write_text(
            head + '[server]\nwebhook_host = "127.0.0.1"\n'
            f"webhook_port = {self.webhook_port}\n"
            'operator_host = "127.0.0.1"\n'
            f"operator_port = {self.operator_port}\nthreads = 4\n" + server + tail,
            encoding="utf-8")

    @property
    def ingress_url(self) -> str:
        """The public listener."""
        return f"http://127.0.0.1:{self.webhook_port}"

    @property
    def url(self) -> str:
        """Where Linear's webhooks go."""
        return self.ingress_url + "/webhooks/linear"

    @property
    def operator_url(self) -> str:
        """The operator API's listener."""
        return f"http://127.0.0.1:{self.operator_port}"

    @property
    def operator_token(self) -> str:
        """The token the service wrote into its state dir."""
        return (self.root / "state" / "operator.token").read_text().strip()

    def start(self) -> Served:
        """Start the child and wait until both listeners answer (on new ports if its own
        were taken meanwhile); a child that exits or does not come up fails the test."""
        assert not self.alive(), "already running"
        for _ in range(PORT_ATTEMPTS):
            with self.stdout.open("ab") as out, self.stderr.open("ab") as err:
                self.proc = subprocess.Popen(
                    [*self.argv, "--config", str(self.config), "serve"],
                    env=self.env, stdout=out, stderr=err, cwd=self.root)
            try:
                state = wait_until(self._up, self.start_seconds, message="wakeline serve is up")
            except AssertionError:
                self.close()
                late = f"wakeline serve was not up after {self.start_seconds:.0f} s"
                raise AssertionError(f"{late}: {self.output()[-2000:]}") from None
            if state == "up":
                return self
            if "Address already in use" not in self.stderr.read_text(errors="replace")[-300:]:
                raise AssertionError(f"wakeline serve exited {self.proc.returncode}: "
                                     f"{self.output()[-2000:]}")
            self._ports()
        raise AssertionError(f"wakeline serve found no free ports in {PORT_ATTEMPTS} attempts")

    def _up(self) -> str | None:
        """"up" once both listeners answer, "exited" if the child did, else None."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return "exited"
        try:
            answered = all(requests.get(url + "/healthz", timeout=1).ok
                           for url in (self.ingress_url, self.operator_url))
        except requests.RequestException:
            return None
        return "up" if answered else None

    def alive(self) -> bool:
        """Whether the child runs."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, signum: int = signal.SIGTERM, timeout: float = STOP_SECONDS) -> int | None:
        """Signal the child (SIGTERM unless told) and return its exit code; one still running
        after `timeout` is killed. None if it never started."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.close()
        return self.proc.returncode

    def kill9(self) -> None:
        """SIGKILL the child, as a crash would, and reap it."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self) -> None:
        """Kill the child if it still runs."""
        if self.alive():
            self.kill9()

    def post(self, raw: bytes, headers: dict[str, str]) -> requests.Response:
        """Post one delivery as given to the webhook listener."""
        return requests.post(self.url, data=raw, headers=headers, timeout=30)

    def send(self, body: dict[str, Any], **signing: Any) -> requests.Response:
        """Sign one delivery with the child's secret (`signed`'s keywords) and post it."""
        assert self.secret is not None, "a child without a webhook secret"
        return self.post(*signed(body, secret=self.secret, **signing))

    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        """Call the operator API with the operator token."""
        return requests.request(method, self.operator_url + path, timeout=10, **kw,
                                headers={"Authorization": f"Bearer {self.operator_token}"})

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run `wakeline --config <its config> ARGS` in its own process, to the end."""
        return subprocess.run([*self.argv, "--config", str(self.config), *args], env=self.env,
                              cwd=self.root, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def output(self) -> str:
        """What the child printed: stdout, then stderr."""
        return "".join(p.read_text(errors="replace") for p in (self.stdout, self.stderr)
                       if p.exists())
