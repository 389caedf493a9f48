"""`wakeline demo` end to end, as a newcomer runs it: offline, one minute at most."""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def run(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "wakeline", "demo", *args], env=env,
                          capture_output=True, text=True, timeout=90, check=False)
    return done, time.monotonic() - started


def test_the_demo_replays_its_session_and_prints_what_happened() -> None:
    done, seconds = run()
    assert done.returncode == 0, done.stderr
    assert seconds < 60
    out = done.stdout
    for heading in ("What Linear sent", "What Linear would have received from wakeline, in order",
                    "The Linear inbox", "Conversations:", "The journal"):
        assert heading in out, heading
    received = out.split("in order:")[1].split("The Linear inbox")[0]
    assert received.index("thought activity") < received.index("response activity")  # ack first
    assert received.count("response activity") == 2  # the follow-up rode its own second turn
    assert "Comment create · DOCS-7 · Sam Okafor" in out
    assert "terminal (completed)  [ENG-42] Login test is flaky" in out
    for kind in ("inbound", "turn_brief", "turn_report", "outbound", "lifecycle"):
        assert f" {kind} " in out, kind


def test_keep_leaves_the_state_to_look_at_and_json_is_whole(tmp_path: Path) -> None:
    done, _ = run("--keep", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    kept = Path(data["keptAt"])
    try:
        assert (kept / "wakeline.toml").exists() and (kept / "state" / "wakeline.db").exists()
        assert (kept / "state" / "journal" / "entries.jsonl").exists()
        assert [d["outcome"] for d in data["deliveries"]] == ["accepted"] * 5
        assert len(data["inbox"]) == 3 and data["conversations"][0]["outcome"] == "completed"
    finally:
        shutil.rmtree(kept, ignore_errors=True)
