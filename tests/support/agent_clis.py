"""The real agent CLIs for tests: install them once from npm, and point them at a fake model.

`install_cli("claude")` / `install_cli("codex")` run `npm install --prefix <cache>` for the pinned
version once per machine (`$XDG_CACHE_HOME/wakeline-tests/npm-<pkg>-<version>`), under a file
lock so two pytest processes never race, and give back the executable or the reason it is not
there. `claude_env` and `codex_env` build a private HOME (and CODEX_HOME) whose every URL is the
fake model's, so a run can reach nothing but loopback.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from tests.helpers import wait_until
from wakeline.agents.registry import agent_argv

# What the recordings in /work/shared/agent-streams were made with; bump both together with
# tests/fixtures/agent-streams (re-record with WAKELINE_RECORD_STREAMS=1).
CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_VERSION = "2.1.197"
CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.171.0"

INSTALL_TIMEOUT_SECONDS = 600.0
VERSION_TIMEOUT_SECONDS = 30.0
# A run against the fake takes about a second; this only bounds a hung one.
RUN_TIMEOUT_SECONDS = 60.0
DUMMY_API_KEY = "sk-wakeline-fake-model-key"
# Model names the CLIs know: Codex prints an error item first for a name it has no metadata for
# (gpt-5.5 also makes it offer apply_patch as a freeform tool, as with OpenAI itself).
CLAUDE_MODEL = "claude-sonnet-4-5"
CODEX_MODEL = "gpt-5.5"
CODEX_KEY_ENV = "FAKE_MODEL_API_KEY"  # not WAKELINE_*: wakeline keeps those from agents
# Either makes a CLI that cannot be installed fail its tests instead of skipping them.
REQUIRE_ENV = "WAKELINE_REQUIRE_AGENT_CLIS"
CI_ENV = "CI"  # .ci/run runs with CI=true
# Set to re-record tests/fixtures/agent-streams from the real runs of tests/system.
RECORD_ENV = "WAKELINE_RECORD_STREAMS"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent-streams"
STDERR_TAIL_LINES = 10
_INSTALLED_MARK = ".wakeline-installed"


@dataclass(frozen=True)
class CliPackage:
    """One agent CLI as npm ships it."""

    name: str
    package: str
    version: str
    executable: str

    @property
    def spec(self) -> str:
        """The `npm install` argument, `package@version`."""
        return f"{self.package}@{self.version}"

    @property
    def slug(self) -> str:
        """The package as a directory name: `@openai/codex` -> `openai-codex`."""
        return self.package.lstrip("@").replace("/", "-")


CLIS: tuple[CliPackage, ...] = (
    CliPackage("claude", CLAUDE_PACKAGE, CLAUDE_VERSION, "claude"),
    CliPackage("codex", CODEX_PACKAGE, CODEX_VERSION, "codex"),
)


@dataclass(frozen=True)
class CliInstall:
    """The outcome of `install_cli`: the executable, or why there is none."""

    cli: CliPackage
    executable: Path | None
    reason: str = ""
    seconds: float = 0.0
    version_output: str = ""


def cli_package(name: str) -> CliPackage:
    """The pinned package for `name` ("claude" or "codex")."""
    for cli in CLIS:
        if cli.name == name:
            return cli
    raise KeyError(f"unknown agent CLI {name!r}; known: {[c.name for c in CLIS]}")


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/wakeline-tests`, `~/.cache/wakeline-tests` when XDG_CACHE_HOME is unset."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wakeline-tests"


def install_dir(cli: CliPackage, root: Path | None = None) -> Path:
    """Where `cli` is (or will be) installed: `<root>/npm-<pkg>-<version>`."""
    return (root or cache_root()) / f"npm-{cli.slug}-{cli.version}"


def install_cli(name: str, root: Path | None = None,
                timeout: float = INSTALL_TIMEOUT_SECONDS) -> CliInstall:
    """Install the pinned CLI `name` into the cache once; give back its executable or a reason.

    A finished install is marked with a file, so an interrupted one is wiped and redone. The lock
    is held across the check and the install: a second process waits, then finds it done.
    """
    cli = cli_package(name)
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return CliInstall(cli, None, f"{cli.spec}: npm or node is not on PATH")
    target = install_dir(cli, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(target.parent / f"{target.name}.lock", "w", encoding="utf-8") as lock:
        if not _lock(lock, deadline=started + timeout):
            return CliInstall(cli, None, f"{cli.spec}: another install held the lock for "
                                         f"{timeout:.0f}s")
        try:
            executable = target / "node_modules" / ".bin" / cli.executable
            mark = target / _INSTALLED_MARK
            if mark.is_file() and executable.exists():
                return CliInstall(cli, executable, seconds=time.monotonic() - started,
                                  version_output=mark.read_text().strip())
            reason = _npm_install(npm, cli, target, deadline=started + timeout)
            if reason:
                return CliInstall(cli, None, reason, time.monotonic() - started)
            if not executable.exists():
                return CliInstall(cli, None, f"{cli.spec}: installed, but {executable} is missing",
                                  time.monotonic() - started)
            version, reason = _check_runs(cli, executable)
            if reason:
                return CliInstall(cli, None, reason, time.monotonic() - started)
            mark.write_text(version + "\n", encoding="utf-8")
            return CliInstall(cli, executable, seconds=time.monotonic() - started,
                              version_output=version)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _lock(lock: IO[str], deadline: float) -> bool:
    """Take an exclusive flock on the open file `lock`, polling until `deadline`.

    A flock offers no blocking wait with a timeout, and another pytest process may be in the
    middle of a long install, so poll.
    """
    def take() -> bool:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        wait_until(take, timeout=max(0.0, deadline - time.monotonic()), interval=0.2,
                   message="the install lock")
    except AssertionError:
        return False
    return True


def _npm_install(npm: str, cli: CliPackage, target: Path, deadline: float) -> str:
    """Run `npm install` for `cli` into a fresh `target`; an empty string on success."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false",
           "npm_config_audit": "false", "npm_config_loglevel": "error"}
    argv = [npm, "install", "--prefix", str(target), "--no-save", "--no-package-lock",
            "--no-audit", "--no-fund", "--loglevel=error", cli.spec]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                              timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        shutil.rmtree(target, ignore_errors=True)
        return f"{cli.spec}: npm install did not finish in time"
    if done.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        return f"{cli.spec}: npm install exited {done.returncode}: {_tail(done.stderr)}"
    return ""


def _check_runs(cli: CliPackage, executable: Path) -> tuple[str, str]:
    """Run `executable --version`: (its output, "") or ("", why it does not run here)."""
    try:
        done = subprocess.run([str(executable), "--version"], capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_SECONDS, check=False,
                              env={**os.environ, "DISABLE_AUTOUPDATER": "1"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"{cli.spec}: `{cli.executable} --version` failed: {exc}"
    if done.returncode != 0:
        return "", (f"{cli.spec}: `{cli.executable} --version` exited {done.returncode}: "
                    f"{_tail(done.stderr or done.stdout)}")
    return done.stdout.strip(), ""


def _tail(text: str, lines: int = 5) -> str:
    """The last few lines of a command's output, for a skip reason."""
    return " | ".join(text.strip().splitlines()[-lines:])


def _private_env(home: Path, model_url: str) -> dict[str, str]:
    """A clean environment with a private HOME, for a CLI that may reach only the fake model.

    Only PATH and the locale come from this process, so no real key, proxy or config of the
    machine reaches the CLI. The fake model is also every proxy: a call to any other host
    arrives there as `CONNECT host:443` (or an absolute URL), is refused and recorded, so a
    test sees it in `FakeModel.endpoints()`. NO_PROXY keeps the fake's own URL direct.
    """
    home.mkdir(parents=True, exist_ok=True)
    dirs = {"XDG_CONFIG_HOME": home / ".config", "XDG_CACHE_HOME": home / ".cache",
            "XDG_DATA_HOME": home / ".local" / "share", "XDG_STATE_HOME": home / ".local" / "state",
            "TMPDIR": home / "tmp"}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": str(home),
           "LANG": os.environ.get("LANG", "C.UTF-8"), "NO_COLOR": "1",
           **{name: str(path) for name, path in dirs.items()}}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = model_url
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def claude_env(model_url: str, home: Path) -> dict[str, str]:
    """The environment for `claude -p` to talk only to the fake model at `model_url`.

    No IS_SANDBOX: with `--permission-mode acceptEdits` Claude Code runs as root without it
    (only `--dangerously-skip-permissions` refuses root unless IS_SANDBOX=1).
    """
    env = _private_env(home, model_url)
    env.update({
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": DUMMY_API_KEY,
        "ANTHROPIC_MODEL": CLAUDE_MODEL,
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    })
    return env


def codex_config(model_url: str) -> str:
    """`CODEX_HOME/config.toml`: one custom provider on the fake's `/v1`, nothing remote."""
    return f'''\
# Written by tests/support/agent_clis.py: Codex talks only to the fake model.
model = "{CODEX_MODEL}"
model_provider = "fake"
approval_policy = "never"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{model_url}/v1"
wire_api = "responses"
env_key = "{CODEX_KEY_ENV}"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
in_app_updates = false

[tools.update_plan]
enabled = true
'''


def codex_env(model_url: str, home: Path) -> dict[str, str]:
    """The environment for `codex exec` to talk only to the fake model at `model_url`.

    Writes `home/.codex/config.toml` and points CODEX_HOME at it; the same `home` later lets a
    `codex exec resume` find the thread.
    """
    env = _private_env(home, model_url)
    codex_home = home / ".codex"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(model_url), encoding="utf-8")
    env.update({"CODEX_HOME": str(codex_home), CODEX_KEY_ENV: DUMMY_API_KEY})
    return env


# The commands a user configures (examples/claude-code, examples/codex); wakeline's
# `agent_argv` adds what the output mode needs and the resume arguments, as in the service.
CLAUDE_COMMAND = ("--permission-mode", "acceptEdits")
CODEX_COMMAND = ("exec", "--json", "--skip-git-repo-check", "-s", "workspace-write", "-")


def claude_argv(executable: Path, resume: str | None = None) -> list[str]:
    """Exactly what wakeline runs for `output = "claude"` (the prompt goes on stdin)."""
    return agent_argv([str(executable), *CLAUDE_COMMAND], "claude", resume)


def codex_argv(executable: Path, resume: str | None = None) -> list[str]:
    """Exactly what wakeline runs for `output = "codex"` (the prompt goes on stdin, `-`)."""
    return agent_argv([str(executable), *CODEX_COMMAND], "codex", resume)


@dataclass(frozen=True)
class CliRun:
    """One finished run of a CLI: its argv, exit code, output and wall time."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def lines(self) -> list[dict[str, Any]]:
        """stdout's JSON lines, parsed (a line that is not a JSON object fails the test)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def describe(self) -> str:
        """Everything about the run, for an assertion message."""
        return (f"argv={self.argv}\nexit={self.returncode} in {self.seconds:.2f}s\n"
                f"stdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-2000:]}")


def run_cli(argv: list[str], prompt: str, cwd: Path, env: dict[str, str],
            timeout: float = RUN_TIMEOUT_SECONDS) -> CliRun:
    """Run `argv` in `cwd` with `prompt` on stdin and wait (bounded) for it to exit."""
    started = time.monotonic()
    done = subprocess.run(argv, input=prompt, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return CliRun(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def require_cli(name: str) -> Path:
    """The installed CLI `name`, or skip the test saying why.

    In CI (CI=true) or under WAKELINE_REQUIRE_AGENT_CLIS=1 the test fails instead: CI installs
    every part, so a CLI missing there is a broken install, not a machine without npm.
    """
    installed = install_cli(name)
    if installed.executable is not None:
        return installed.executable
    if os.environ.get(REQUIRE_ENV) == "1" or os.environ.get(CI_ENV, "").lower() in ("1", "true"):
        pytest.fail(f"agent CLI required here ({CI_ENV} or {REQUIRE_ENV} set): {installed.reason}")
    pytest.skip(installed.reason)


def recording() -> bool:
    """Whether this test session re-records the stream fixtures (WAKELINE_RECORD_STREAMS=1)."""
    return os.environ.get(RECORD_ENV) == "1"


def record_stream(name: str, run: CliRun, cli: CliPackage, scenario: str,
                  placeholders: Mapping[str, str], folder: Path = FIXTURES) -> None:
    """Write `run`'s stdout to `folder/NAME.jsonl` and what else it did to `NAME.json`.

    `placeholders` maps text of this machine (temp paths, the fake's port) to stable stand-ins;
    the longest is replaced first, so a path wins over its own prefix.
    """
    def clean(text: str) -> str:
        for real in sorted(placeholders, key=len, reverse=True):
            text = text.replace(real, placeholders[real])
        return text

    argv = [cli.executable, *run.argv[1:]]
    meta = {"cli": cli.executable, "package": cli.spec, "scenario": scenario,
            "argv": [clean(arg) for arg in argv], "exit_code": run.returncode,
            "stderr_tail": clean(run.stderr).splitlines()[-STDERR_TAIL_LINES:]}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text(clean(run.stdout), encoding="utf-8")
    (folder / f"{name}.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
