"""A part the config turns on without its extra: `serve` exits 2 naming the key and the install
command, and `doctor` says the same (CONTRACT section 1), run for real in a venv that has
wakeline's default install and none of the extras (`tests/support/bare_venv.py`)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.bare_venv import require_bare

pytestmark = pytest.mark.slow

# Today's failures ran on: a wrong `serve` would keep serving, so it is stopped after this long.
SERVE_SECONDS = 30.0
BASE = '''state_dir = "state"
[server]
webhook_host = "127.0.0.1"
webhook_port = 0
operator_port = 0
[linear]
api_url = "http://127.0.0.1:9/graphql"
'''


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


def _setup(case: Case, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    config = tmp_path / "wakeline.toml"
    config.write_text(BASE + case.toml, encoding="utf-8")
    for name, text in case.files:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKELINE_")}
    env.update(case.env)
    return config, env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=SERVE_SECONDS, check=False)
    except subprocess.TimeoutExpired as exc:  # run() killed it: it was serving
        pytest.fail(f"{' '.join(argv[1:])} was still running after {SERVE_SECONDS:.0f}s; "
                    f"stderr: {exc.stderr!r}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_serve_refuses_a_part_whose_extra_is_missing_and_doctor_says_the_same(
        case: Case, bare_bin: Path, tmp_path: Path) -> None:
    config, env = _setup(case, tmp_path)
    wakeline = [str(bare_bin / "wakeline"), "--config", str(config)]
    done = _run([*wakeline, "serve"], env, tmp_path)
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
    doctor = _run([*wakeline, "doctor"], env, tmp_path)
    assert doctor.returncode == 3, doctor.stdout + doctor.stderr  # no service: local checks
    assert f"✗ {case.extra} extra: {said}\n" in doctor.stdout, doctor.stdout
    assert f"    fix: {install} into the environment" in doctor.stdout


def test_several_missing_parts_are_named_at_once(bare_bin: Path, tmp_path: Path) -> None:
    discord, dbos = CASES[1], CASES[3]
    config, env = _setup(Case("both", dbos.toml, "", "", "", env=discord.env), tmp_path)
    done = _run([str(bare_bin / "wakeline"), "--config", str(config), "serve"], env, tmp_path)
    assert done.returncode == 2
    assert "config error: WAKELINE_DISCORD_TOKEN: Discord is configured" in done.stderr
    assert "; scale.engine: DBOS is configured" in done.stderr
    assert "pip install 'wakeline[discord]'" in done.stderr
    assert done.stderr.rstrip().endswith("pip install 'wakeline[dbos]'")
