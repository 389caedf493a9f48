"""A part the config turns on without its extra: `serve` exits 2 naming the key and the install
command, and `doctor` says the same (CONTRACT section 1), run for real in a venv that has
wakeline's default install and none of the extras (`tests/support/bare_venv.py`)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.bare_venv import require_bare
from tests.support.serve import Served

pytestmark = pytest.mark.slow

# Today's failures ran on: a wrong `serve` would keep serving, so it is stopped after this long.
SERVE_SECONDS = 30.0
LINEAR = '[linear]\napi_url = "http://127.0.0.1:9/graphql"\n'


@dataclass(frozen=True)
class Case:
    """One optional part turned on: the config, the environment, and what must be named."""

    id: str
    toml: str
    key: str
    part: str
    extra: str
    env: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()


CASES = [
    Case("discord-token-file", '[discord]\ntoken_file = "secrets/discord-token"\n',
         "discord.token_file", "Discord", "discord",
         files=(("secrets/discord-token", "bot-token-Hq3Zr8Lw1Xv5\n"),)),
    Case("discord-token-env", "", "WAKELINE_DISCORD_TOKEN", "Discord", "discord",
         env=(("WAKELINE_DISCORD_TOKEN", "bot-token-Hq3Zr8Lw1Xv5"),)),
    Case("matrix-connection", '[matrix.connections.me]\nhomeserver = "http://127.0.0.1:9"\n'
         'user_id = "@me:example.org"\naccess_token_file = "secrets/matrix-me"\n',
         "matrix.connections.me", "Matrix", "matrix"),
    Case("dbos-engine", '[scale]\nengine = "dbos"\n'
         'database_url = "postgresql://wakeline@127.0.0.1:9/wakeline"\n',
         "scale.engine", "DBOS", "dbos"),
]


@pytest.fixture(scope="module")
def bare_bin() -> Path:
    """The bin directory of a venv with `pip install -e <repo>` and no extra."""
    return require_bare()


def _setup(case: Case, tmp_path: Path, bare_bin: Path) -> Served:
    """The config and files of `case`, run by the bare venv's `wakeline`, without a webhook
    secret: the environment has only the case's variables."""
    for name, text in case.files:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o600)
    return Served(tmp_path, LINEAR + case.toml, secret=None, env=dict(case.env),
                  argv=[str(bare_bin / "wakeline")])


def _run(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return served.cli(*args, timeout=SERVE_SECONDS)
    except subprocess.TimeoutExpired as exc:  # run() killed it: it was serving
        pytest.fail(f"{' '.join(args)} was still running after {SERVE_SECONDS:.0f}s; "
                    f"stderr: {exc.stderr!r}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_serve_refuses_a_part_whose_extra_is_missing_and_doctor_says_the_same(
        case: Case, bare_bin: Path, tmp_path: Path) -> None:
    served = _setup(case, tmp_path, bare_bin)
    done = _run(served, "serve")
    message = (f"wakeline: config error: {case.key}: {case.part} is configured but its extra "
               "is not installed")
    install = f"pip install 'wakeline[{case.extra}]'"
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message) and done.stderr.rstrip().endswith(install), \
        done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state").exists()  # refused before anything was made
    for _, secret in case.env + case.files:
        assert secret.strip() not in done.stderr + done.stdout

    said = done.stderr.strip().removeprefix("wakeline: config error: ")
    doctor = _run(served, "doctor")
    assert doctor.returncode == 3, doctor.stdout + doctor.stderr  # no service: local checks
    assert f"✗ {case.extra} extra: {said}\n" in doctor.stdout, doctor.stdout
    assert f"    fix: {install} into the environment" in doctor.stdout


def test_several_missing_parts_are_named_at_once(bare_bin: Path, tmp_path: Path) -> None:
    discord, dbos = CASES[1], CASES[3]
    served = _setup(Case("both", dbos.toml, "", "", "", env=discord.env), tmp_path, bare_bin)
    done = _run(served, "serve")
    assert done.returncode == 2
    assert "config error: WAKELINE_DISCORD_TOKEN: Discord is configured" in done.stderr
    assert "; scale.engine: DBOS is configured" in done.stderr
    assert "pip install 'wakeline[discord]'" in done.stderr
    assert done.stderr.rstrip().endswith("pip install 'wakeline[dbos]'")
