"""Tests that need a working bubblewrap: skip without one, or fail where one must be.

`.ci/run` installs Debian's `bubblewrap` and sets WAKELINE_REQUIRE_SANDBOX=1 (CI=true does
too), so CI runs every sandbox test; elsewhere a machine without it skips them with the reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wakeline.sandbox.probe import Probe, probe

REQUIRE_ENV = "WAKELINE_REQUIRE_SANDBOX"


def require_bwrap() -> Probe:
    """bubblewrap as a turn needs it (a network namespace included), or skip the test."""
    found = probe("bwrap", network=True)
    if found.available:
        return found
    if os.environ.get(REQUIRE_ENV) == "1" or os.environ.get("CI", "").lower() in ("1", "true"):
        pytest.fail(f"bubblewrap required here (CI or {REQUIRE_ENV} set): {found.detail}")
    pytest.skip(f"bubblewrap cannot confine turns here: {found.detail}")


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
