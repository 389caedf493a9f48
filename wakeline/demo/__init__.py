"""`wakeline demo`: a whole wakeline, offline, replaying a bundled session.

It builds a real service (its own state dir, free loopback ports, the bundled demo
agent) against a stand-in for Linear's API on loopback, sends the bundled session's
deliveries signed like Linear's, waits until everything has settled, and reports what
happened: the deliveries' answers, the writes Linear would have received in order,
the inbox headlines, and the journal. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from pydantic import SecretStr

from wakeline.app import build_service, prepare_state
from wakeline.clock import to_ms
from wakeline.service.net import http_session
from wakeline.config import load_config
from wakeline.models.views import list_conversations
from wakeline.providers.linear.signature import sign
from wakeline.testing.linear import StandInLinear

SETTLE_SECONDS = 45.0
THINK_SECONDS = 1.5  # the demo agent's pause: long enough for a follow-up to land mid-turn
DEMO_KEY = "wakeline-demo-stand-in-credential"


@dataclass
class DemoSummary:
    """What the demo did, for the CLI to print."""

    deliveries: list[tuple[str, str]] = field(default_factory=list)  # (label, outcome)
    writes: list[dict[str, Any]] = field(default_factory=list)
    inbox: list[str] = field(default_factory=list)
    journal: list[dict[str, Any]] = field(default_factory=list)
    conversations: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    kept: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """The summary as `--json` prints it."""
        return {"deliveries": [{"label": label, "outcome": outcome} for label, outcome in self.deliveries],
                "linearReceived": self.writes, "inbox": self.inbox, "journal": self.journal,
                "conversations": self.conversations, "seconds": round(self.seconds, 1),
                "keptAt": str(self.kept) if self.kept else None}


def session() -> dict[str, Any]:
    """The bundled session (it ships inside the package)."""
    return json.loads(resources.files("wakeline.demo").joinpath("session.json").read_text("utf-8"))


def _config_text(stand_in_url: str, webhook_port: int, operator_port: int) -> str:
    return f"""\
# Written by `wakeline demo`. Start this wakeline again with
#   wakeline --config {{this file}} serve
state_dir = "state"
log_level = "WARNING"

[server]
webhook_host = "127.0.0.1"
webhook_port = {webhook_port}
operator_host = "127.0.0.1"
operator_port = {operator_port}
threads = 4
single_cpu = false

[linear]
webhook_secret_file = "state/secrets/linear-webhook-secret"
api_key_file = "state/secrets/linear-api-key"
api_url = "{stand_in_url}"
organization_id = "demo-org"
owner_user_ids = ["demo-user-ana"]

[agent]
command = ["python", "-m", "wakeline.agents.demo", "--think", "{THINK_SECONDS}"]
max_concurrent_turns = 2

[[routes]]
name = "eng"
teams = ["ENG"]
done_state_id = "demo-state-done"
"""


class _Run:
    """One demo run: the stand-in, the service, and the session sent to it."""

    def __init__(self, root: Path, progress: Callable[[str], None]) -> None:
        self.root = root
        self.progress = progress
        self.stand_in = StandInLinear(viewer={"id": "demo-app-user", "name": "wakeline (demo)"},
                                      organization={"id": "demo-org", "name": "Demo workspace"}).start()
        config_path = root / "wakeline.toml"
        config_path.write_text(_config_text(self.stand_in.url, 0, 0), encoding="utf-8")
        config = load_config(config_path, required=True)
        secrets = prepare_state(config, {})
        self.secret = secrets.webhook_secret
        assert self.secret is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
        self.service = build_service(config, replace(secrets, linear_api_key=SecretStr(DEMO_KEY)),
                                     base_env=env, tick_seconds=0.1)
        self.service.start()
        # The ports the service got, so `--keep` can start it again on the same ones.
        config_path.write_text(_config_text(self.stand_in.url, self.service.ingress.port,
                                            self.service.operator.port), encoding="utf-8")
        self.http = http_session(self.service.ingress.url)  # loopback: never a proxy

    def send(self, body: dict[str, Any]) -> str:
        body = {**body, "webhookTimestamp": to_ms(self.service.clock.now())}
        raw = json.dumps(body, separators=(",", ":")).encode()
        assert self.secret is not None
        headers = {"Content-Type": "application/json", "Linear-Delivery": str(uuid.uuid4()),
                   "Linear-Signature": sign(self.secret.get_secret_value(), raw),
                   "Linear-Event": str(body["type"])}
        resp = self.http.post(self.service.ingress.url + "/webhooks/linear", data=raw,
                              headers=headers, timeout=10)
        return str(resp.json().get("outcome") or resp.json().get("error"))

    def busy(self) -> str | None:
        """What is still going on, or None once everything has settled."""
        store = self.service.store
        counts = store.counts()
        writes = store.outbox.unsettled()
        store.close()
        if counts.running or counts.fifo_pending or counts.fifo_claimed or counts.fifo_held or writes:
            return (f"{counts.running} turn(s) running, {counts.fifo_pending + counts.fifo_claimed} "
                    f"delivery(ies) waiting, {writes} write(s) to Linear on their way")
        return None

    def settle(self, deadline: float) -> None:
        while (doing := self.busy()) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the demo did not settle in time ({doing})")
            self.progress(f"waiting: {doing}")
            time.sleep(0.1)  # a poll of a running service, bounded by the deadline
        self.service.journal.actor.flush().get(timeout=10)  # what the journal was told is written

    def stop(self) -> None:
        self.service.stop()
        self.stand_in.stop()


def run_demo(*, keep: bool = False, progress: Callable[[str], None] = lambda _: None,
             root: Path | None = None) -> DemoSummary:
    """Run the bundled session on a temporary wakeline; the state dir goes unless `keep`."""
    started = time.monotonic()
    root = root or Path(tempfile.mkdtemp(prefix="wakeline-demo-"))
    logger = logging.getLogger()
    handler = logging.FileHandler(root / "demo.log")
    handler.setLevel(logging.INFO)
    logger.addHandler(handler)
    summary = DemoSummary()
    run: _Run | None = None
    try:
        run = _Run(root, progress)
        deadline = time.monotonic() + SETTLE_SECONDS
        steps = session()["deliveries"]
        begin = time.monotonic()
        for number, step in enumerate(steps, 1):
            if step.get("after_settled"):
                run.settle(deadline)
            else:
                time.sleep(max(0.0, begin + step["at"] - time.monotonic()))  # the session's pace
            progress(f"delivery {number}/{len(steps)}: {step['label']}")
            summary.deliveries.append((step["label"], run.send(step["body"])))
        run.settle(deadline)
        summary.writes = [{"operation": w.operation, **_shown(w.input)} for w in run.stand_in.writes()]
        summary.inbox = [e["headline"] for e in run.service.inbox.forward(
            after=None, limit=100, headlines=True)["events"]]
        summary.journal = run.service.journal.entries.page(limit=500).entries
        summary.conversations = [
            {k: c[k] for k in ("id", "title", "state", "outcome")}
            for c in _conversations(run)]
    finally:
        if run is not None:
            run.stop()
        logger.removeHandler(handler)
        handler.close()
        if keep:
            summary.kept = root
        else:
            shutil.rmtree(root, ignore_errors=True)
    summary.seconds = time.monotonic() - started
    return summary


def _shown(given: dict[str, Any]) -> dict[str, Any]:
    """A write's fields as the summary shows them (what it targets, what it says)."""
    content = given.get("content") if isinstance(given.get("content"), dict) else {}
    return {"type": content.get("type"), "target": given.get("agentSessionId") or given.get("issueId"),
            "body": content.get("body") or given.get("body")}


def _conversations(run: _Run) -> list[dict[str, Any]]:
    try:
        return [c for c in list_conversations(run.service.store, limit=100) if c["kind"] == "issue"]
    finally:
        run.service.store.close()
