"""wakeline's default install (no extras) in a venv of its own, for tests of what it lacks.

`make test` installs every extra into `.venv`, so a test of "the extra is not installed"
needs another environment: `bare_install()` makes one with `pip install -e <repo>` (the
default install) once, under `$XDG_CACHE_HOME/wakeline-tests/venv-bare-<repo>-<setup>`
(default `~/.cache/...`), behind a file lock so two pytest processes never race. The name
holds a digest of this checkout's path (an editable install runs this checkout's code) and
one of `setup.cfg`, `pyproject.toml` and the Python version, so a change to the
dependencies builds it again (and removes this checkout's older ones); a warm one is reused
at once. A finished build is marked with a file, so an interrupted one is wiped and redone.

When it cannot be built (no network for pip, say) the tests that need it skip, saying why;
in CI (`CI=true`) or under `WAKELINE_REQUIRE_BARE_VENV=1` they fail instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.helpers import wait_until
from tests.support.agent_clis import cache_root

REPO = Path(__file__).resolve().parents[2]
REQUIRE_ENV = "WAKELINE_REQUIRE_BARE_VENV"
CI_ENV = "CI"
# A cold pip cache downloads the default install's few packages; the bound is for a slow index.
BUILD_TIMEOUT_SECONDS = 600.0
# The modules of every extra (wakeline.service.extras): none may be importable in the bare venv.
EXTRA_MODULES = ("discord", "aiohttp", "yarl", "nio", "vodozemac", "atomicwrites", "cachetools",
                 "dbos", "psycopg")
_MARK = ".wakeline-installed"


@dataclass(frozen=True)
class BareInstall:
    """The outcome of `bare_install`: the venv's `bin` directory, or why there is none."""

    bin_dir: Path | None
    reason: str = ""
    seconds: float = 0.0


def venv_dir(root: Path | None = None, repo: Path = REPO) -> Path:
    """Where this checkout's bare venv for its current dependencies is (or will be)."""
    setup = hashlib.sha256(sys.version.encode())
    for name in ("setup.cfg", "pyproject.toml"):
        setup.update((repo / name).read_bytes())
    checkout = hashlib.sha256(str(repo).encode()).hexdigest()[:10]
    return (root or cache_root()) / f"venv-bare-{checkout}-{setup.hexdigest()[:10]}"


def bare_install(root: Path | None = None, timeout: float = BUILD_TIMEOUT_SECONDS) -> BareInstall:
    """Build the bare venv once (reused while `setup.cfg` and `pyproject.toml` stay the
    same); its `bin` directory, or why it cannot be built here."""
    target = venv_dir(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(target.parent / f"{target.name}.lock", "w", encoding="utf-8") as lock:
        if not _lock(lock, started + timeout):
            return BareInstall(None, f"another build held {target.name}.lock for {timeout:.0f}s")
        try:
            if not (target / _MARK).is_file():
                reason = _build(target, started + timeout)
                if reason:
                    return BareInstall(None, reason, time.monotonic() - started)
            return BareInstall(target / "bin", seconds=time.monotonic() - started)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _lock(lock: IO[str], deadline: float) -> bool:
    """An exclusive flock, polled until `deadline` (a build in another process may be long)."""
    def take() -> bool:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        wait_until(take, timeout=max(0.0, deadline - time.monotonic()), interval=0.2,
                   message="the bare venv's lock")
    except AssertionError:
        return False
    return True


def _build(target: Path, deadline: float) -> str:
    """Make the venv and `pip install -e` the checkout into it; an empty string on success."""
    for old in target.parent.glob(target.name.rsplit("-", 1)[0] + "-*"):
        if old.is_dir() and old != target:  # this checkout's venv for older dependencies
            shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    python = target / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    steps = ([sys.executable, "-m", "venv", str(target)],
             [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "-e", str(REPO)])
    for argv in steps:
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                                  timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            shutil.rmtree(target, ignore_errors=True)
            return f"{' '.join(argv[1:4])} did not finish in time"
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            return f"{' '.join(argv[1:4])} exited {done.returncode}: {tail}"
    probe = ("import importlib.util as u; "
             f"print(' '.join(m for m in {EXTRA_MODULES!r} if u.find_spec(m)))")
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                           check=True, timeout=60).stdout.strip()
    if found:
        shutil.rmtree(target, ignore_errors=True)
        return f"the default install brought modules of the extras: {found}"
    (target / _MARK).write_text(sys.version + "\n", encoding="utf-8")
    return ""


def require_bare() -> Path:
    """The bare venv's `bin` directory, or skip the test saying why (fail in CI or under
    WAKELINE_REQUIRE_BARE_VENV=1: there a venv that cannot be built is a broken machine)."""
    installed = bare_install()
    if installed.bin_dir is not None:
        return installed.bin_dir
    if os.environ.get(REQUIRE_ENV) == "1" or os.environ.get(CI_ENV, "").lower() in ("1", "true"):
        pytest.fail(f"the bare venv is required here ({CI_ENV} or {REQUIRE_ENV} set): "
                    f"{installed.reason}")
    pytest.skip(installed.reason)
