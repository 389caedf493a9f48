"""A real PostgreSQL server for tests: a throwaway cluster on loopback, one per test session.

The server is Debian's `postgresql` package (any major version under
`/usr/lib/postgresql/<major>/bin`, the newest first). When it is missing, the first session
installs it (`apt-get install -y postgresql`, as root or through `sudo -n`, under a file lock
and a timeout); when that is impossible the tests that need it skip, saying why. In CI
(`CI=true`) or under `WAKELINE_REQUIRE_POSTGRES=1` they fail instead: CI installs the
package, so a server missing there is a broken install, not a machine without PostgreSQL.

Each session gets one cluster in a temp dir: trust authentication on 127.0.0.1 only, a free
port, the Unix socket inside the temp dir, a small `shared_buffers`, `fsync` on (the default).
The data directory is copied from a template initdb'd once per major version and cached under
`$XDG_CACHE_HOME/wakeline-tests/postgres-<major>` (default `~/.cache/...`); a cold cache runs
`initdb` once. PostgreSQL refuses to run as root, so as root the server (and `initdb`) run as
the `postgres` user the package creates, through `subprocess`'s `user=`/`group=` (no PAM, no
`su` in between): this process owns the postmaster's pid and stops it with a fast shutdown
(SIGINT) at the end of the session.

Tests get fresh databases: `postgres.create_database()` runs `CREATE DATABASE ... TEMPLATE
template0` (about 0.1 s) and returns its URL; the `postgres_url` fixture makes one per test
and drops it afterwards.

Load this module as a plugin (`pytest_plugins = ["tests.support.postgres"]`, in the root
`tests/conftest.py`), so every module shares the one session-scoped cluster.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import free_port

logger = logging.getLogger(__name__)

REQUIRE_ENV = "WAKELINE_REQUIRE_POSTGRES"
CI_ENV = "CI"
PG_ROOT = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"  # the system user Debian's package creates
SUPERUSER = "postgres"  # the cluster's superuser role
# apt on a warm mirror takes ~30 s for the package and its dependencies; the bound is for a
# slow one, not the normal case.
INSTALL_TIMEOUT_SECONDS = 600.0
INITDB_TIMEOUT_SECONDS = 120.0
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
LOG_TAIL_LINES = 40
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "shared_buffers": "32MB",
    "max_connections": "300",  # three hosts with pools, DBOS's engines, the test's own
    "fsync": "on",
    "synchronous_commit": "on",
    "log_min_messages": "warning",
    "log_line_prefix": "%m [%p] ",
    "deadlock_timeout": "200ms",
    "max_locks_per_transaction": "128",
}


@dataclass(frozen=True)
class Server:
    """Where PostgreSQL's server binaries are, or why there are none."""

    bin_dir: Path | None
    reason: str = ""
    installed_now: bool = False
    install_seconds: float = 0.0

    @property
    def major(self) -> str:
        assert self.bin_dir is not None
        return self.bin_dir.parent.name


def find_server(root: Path = PG_ROOT) -> Path | None:
    """The newest `/usr/lib/postgresql/<major>/bin` holding initdb and postgres, or None."""
    found = []
    for bin_dir in root.glob("*/bin"):
        if (bin_dir / "initdb").is_file() and (bin_dir / "postgres").is_file() \
                and (bin_dir / "pg_isready").is_file():
            major = bin_dir.parent.name
            found.append((int(major) if major.isdigit() else 0, bin_dir))
    return max(found)[1] if found else None


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wakeline-tests"


def _install_command() -> list[str] | None:
    """`apt-get` as root, else through `sudo -n` (never a password prompt), else None."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") is None:
        return None
    probe = subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False)
    return ["sudo", "-n"] if probe.returncode == 0 else None


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def ensure_server(timeout: float = INSTALL_TIMEOUT_SECONDS) -> Server:
    """Find the server binaries, installing Debian's `postgresql` package when missing."""
    bin_dir = find_server()
    if bin_dir is not None:
        return Server(bin_dir)
    prefix = _install_command()
    if prefix is None:
        return Server(None, "PostgreSQL is not installed and cannot be: no apt-get, or not root "
                            "and no password-less sudo (apt-get install postgresql)")
    started = time.monotonic()
    deadline = started + timeout
    lock_path = cache_root() / "postgres-install.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a parallel session installs first; then we find it
        bin_dir = find_server()
        if bin_dir is not None:
            return Server(bin_dir)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [*prefix, "apt-get", "install", "-y", "-q", "--no-install-recommends",
                   "postgresql"]
        output = ""
        for attempt in (install, [*prefix, "apt-get", "update", "-q"], install):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Server(None, f"installing postgresql took over {timeout:.0f} s")
            try:
                done = subprocess.run(attempt, capture_output=True, text=True, env=env,
                                      timeout=remaining, check=False)
            except subprocess.TimeoutExpired:
                return Server(None, f"installing postgresql took over {timeout:.0f} s")
            output = done.stdout + done.stderr
            if attempt is install and done.returncode == 0:
                break
    bin_dir = find_server()
    if bin_dir is None:
        return Server(None, f"apt-get install postgresql failed: {_tail(output)}")
    return Server(bin_dir, installed_now=True, install_seconds=time.monotonic() - started)


@dataclass
class Cluster:
    """One running throwaway cluster; `create_database` hands out fresh databases."""

    bin_dir: Path
    root: Path
    port: int
    process: subprocess.Popen[bytes]
    timings: dict[str, float] = field(default_factory=dict)
    host: str = "127.0.0.1"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres") -> str:
        """A libpq URL of a database of this cluster (trust auth: no password)."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        """Run one statement outside a transaction, as the superuser, on `postgres`."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self, name: str | None = None) -> str:
        """A new empty database (from template0); its URL."""
        name = name or "t_" + uuid.uuid4().hex[:12]
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise ValueError(f"not a plain database name: {name!r}")
        self.admin(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8'")
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, ending any session still connected to it."""
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Fast shutdown (SIGINT: roll back sessions, checkpoint, exit), then remove the dir."""
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGQUIT)  # immediate shutdown
                self.process.wait(10)
        self.timings["stop"] = time.monotonic() - started
        shutil.rmtree(self.root, ignore_errors=True)


def _server_user() -> pwd.struct_passwd | None:
    """The user the server runs as: `postgres` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise RuntimeError(f"running as root and there is no `{SERVER_USER}` user to run "
                           "PostgreSQL as (the postgresql package creates it)") from None


def _as_server_user(user: pwd.struct_passwd | None) -> dict[str, object]:
    """subprocess keywords that drop root to the server's user."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [],
            "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": user.pw_dir,
                    "LANG": "C.UTF-8"}}


def _chown_tree(path: Path, user: pwd.struct_passwd | None) -> None:
    if user is None:
        return
    for p in [path, *path.rglob("*")]:
        os.lchown(p, user.pw_uid, user.pw_gid)


def _initdb(bin_dir: Path, data: Path, user: pwd.struct_passwd | None) -> None:
    done = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
         "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions"],
        capture_output=True, text=True, timeout=INITDB_TIMEOUT_SECONDS, check=False,
        **_as_server_user(user),  # type: ignore[arg-type]
    )
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed: {_tail(done.stdout + done.stderr)}")


def template_cluster(bin_dir: Path, user: pwd.struct_passwd | None) -> tuple[Path, bool]:
    """A cached initdb'd data directory for this major version (made once); whether it was
    made now."""
    cache = cache_root() / f"postgres-{bin_dir.parent.name}"
    template = cache / "template-data"
    if (template / "PG_VERSION").is_file():
        return template, False
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (template / "PG_VERSION").is_file():
            return template, False
        # initdb writes as the server user, so it builds in a directory that user owns.
        scratch = Path(tempfile.mkdtemp(prefix="wakeline-pg-template-"))
        try:
            _chown_tree(scratch, user)
            _initdb(bin_dir, scratch / "data", user)
            partial = cache / f"template-data.{os.getpid()}"
            shutil.copytree(scratch / "data", partial, symlinks=True)
            partial.rename(template)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return template, True


def start_cluster(bin_dir: Path, settings: Mapping[str, str] | None = None,
                  timeout: float = START_TIMEOUT_SECONDS) -> Cluster:
    """A fresh cluster in a temp dir, started on a free loopback port and ready."""
    user = _server_user()
    timings: dict[str, float] = {}
    started = time.monotonic()
    template, made = template_cluster(bin_dir, user)
    timings["initdb" if made else "template"] = time.monotonic() - started
    root = Path(tempfile.mkdtemp(prefix="wakeline-pg-"))
    try:
        copied = time.monotonic()
        shutil.copytree(template, root / "data", symlinks=True)
        (root / "data").chmod(0o700)
        _chown_tree(root, user)
        timings["copy"] = time.monotonic() - copied
        options = {**SERVER_SETTINGS, **(settings or {}), "unix_socket_directories": str(root)}
        for attempt in range(3):  # a free port can be taken between the probe and the bind
            port = free_port()
            launched = time.monotonic()
            log = open(root / "server.log", "ab")
            argv = [str(bin_dir / "postgres"), "-D", str(root / "data"), "-p", str(port)]
            for key, value in options.items():
                argv += ["-c", f"{key}={value}"]
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                       start_new_session=True,
                                       **_as_server_user(user))  # type: ignore[arg-type]
            log.close()
            cluster = Cluster(bin_dir, root, port, process, timings)
            if _wait_ready(cluster, time.monotonic() + timeout):
                timings["start"] = time.monotonic() - launched
                return cluster
            tail = cluster.log_tail(8)
            if cluster.running():
                cluster.process.kill()
                cluster.process.wait(10)
            if "could not bind" not in tail and "already in use" not in tail:
                raise RuntimeError(f"PostgreSQL did not start within {timeout:.0f} s: {tail}")
        raise RuntimeError("PostgreSQL found no free port in 3 tries")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def _wait_ready(cluster: Cluster, deadline: float) -> bool:
    """Poll pg_isready until the server accepts connections, it exits, or the deadline."""
    probe = [str(cluster.bin_dir / "pg_isready"), "-q", "-h", cluster.host, "-p",
             str(cluster.port), "-U", SUPERUSER, "-d", "postgres", "-t", "1"]
    while time.monotonic() < deadline:
        if not cluster.running():
            return False
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return True
        time.sleep(0.02)
    return False


def required() -> bool:
    """Whether a missing server fails the test instead of skipping it."""
    return os.environ.get(REQUIRE_ENV) == "1" or os.environ.get(CI_ENV, "").lower() in ("1", "true")


def unavailable(reason: str) -> None:
    """Skip (or, where PostgreSQL is required, fail) with the reason."""
    if required():
        pytest.fail(f"PostgreSQL required here ({CI_ENV} or {REQUIRE_ENV} set): {reason}")
    pytest.skip(reason)


_cluster_failure: list[str] = []  # one failed start per session: later tests skip at once


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """The session's throwaway PostgreSQL cluster (started on first use)."""
    if _cluster_failure:
        unavailable(_cluster_failure[0])
    server = ensure_server()
    if server.bin_dir is None:
        _cluster_failure.append(server.reason)
        unavailable(server.reason)
    assert server.bin_dir is not None
    try:
        cluster = start_cluster(server.bin_dir)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        _cluster_failure.append(f"cannot start PostgreSQL {server.major}: {exc}")
        unavailable(_cluster_failure[0])
        raise  # unreachable: unavailable() raises
    if server.installed_now:
        cluster.timings["install"] = server.install_seconds
    logger.info("postgres %s on port %d: %s", server.major, cluster.port, cluster.timings)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres: Cluster) -> Iterator[str]:
    """A fresh, empty database of the session's cluster, dropped after the test."""
    url = postgres.create_database()
    yield url
    postgres.drop_database(url.rsplit("/", 1)[1])
