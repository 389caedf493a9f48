"""The sandbox part: decides each turn's confinement and builds it (decision 0034).

Built once by the composition root with the start-up probe's answer. Per turn, on the actor,
`decide` says whether the turn runs confined, unconfined, or not at all (a public route
while bubblewrap cannot run and `mode = "auto"`); on the runner thread, once the workspace is
ready, `confine` gives the argv and environment to spawn, `bwrap ... -- agent`, and under
`network = "off"`/`"allow"` the addresses the fork server listens on inside the turn's network
namespace and relays to wakeline's sockets (`netns.py`). The part owns a runtime directory
(`<state_dir>/run`, owner-only) holding the operator API's Unix socket and each `allow` turn's
proxy socket, and the allow-list proxy.
"""

from __future__ import annotations

import itertools
import logging
import os
import pwd
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import wakeline
from wakeline.agents.registry import kind_of
from wakeline.config import Config, RouteConfig
from wakeline.errors import ConfigError, ConfinementFailed, WorkspaceFailed
from wakeline.sandbox.gitdirs import worktree_dirs
from wakeline.sandbox.hosts import AllowList
from wakeline.sandbox.layout import Layout, bwrap_argv, unseen, within
from wakeline.sandbox.probe import Probe
from wakeline.sandbox.proxy import AllowProxy, ProxyTurn
from wakeline.sandbox.tools import tool_paths
from wakeline.service.checks import sandbox_check
from wakeline.service.parts import BasePart, Check

log = logging.getLogger(__name__)

# Inside a sandbox of its own network, wakeline's API and proxy are on this loopback address:
# 127.0.0.1 is left to the proxy (an allowed `127.0.0.1:PORT` is the host's, through it).
INSIDE_HOST = "127.0.0.2"
API_PORT = 8788
PROXY_PORT = 3128
API_SOCKET = "api.sock"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
RUNTIME_PATH_MAX = 90  # leaves room for a socket's name within the 107 bytes of sun_path


@dataclass(frozen=True)
class Decision:
    """How one turn runs: its label for the journal, and either a refusal or (for a confined
    turn) the route it is confined for."""

    label: str  # "bwrap, network=off", or "unconfined"
    refused: str | None = None  # why the turn does not run at all (an error answer)
    route: RouteConfig | None = None  # set when the turn is confined
    note: str | None = None  # a lifecycle entry to journal: why it runs unconfined


@dataclass(frozen=True)
class _Parts:
    """What the turns of one route (and agent) share: see `Sandbox._parts`."""

    home: Path
    writable: tuple[Path, ...]
    hidden: tuple[Path, ...]
    tools: tuple[Path, ...]
    secrets: tuple[Path, ...]  # the files to cover, where they exist
    bound: tuple[Path, ...]  # home, writable and tools: what the sandbox shows of the host


@dataclass
class Confined:
    """One turn's confinement: what to spawn, what the fork server relays into its network
    ((address, port, wakeline's Unix socket)...), and how its process tree is signalled."""

    argv: tuple[str, ...]
    env: dict[str, str]
    listen: tuple[tuple[str, int, str], ...] = ()
    _closing: list[Callable[[], None]] = field(default_factory=list)

    def signal_target(self, pid: int, signum: int) -> int:
        """The process group a signal for the turn goes to, given bwrap's pid: SIGKILL ends
        bwrap, and with it the whole sandbox (its PID namespace goes with its first process);
        any other signal goes to the agent's own group inside, so that it can stop cleanly."""
        if signum == signal.SIGKILL:
            return pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        return int(children[0]) if children else pid

    @staticmethod
    def exit_code(code: int) -> int:
        """bwrap reports a signalled agent as 128 + the signal: as a signal again."""
        return -(code - 128) if 128 < code <= 128 + 64 else code

    @staticmethod
    def failure(code: int, stdout: str, stderr: str) -> str | None:
        """Why the sandbox never ran the agent (bwrap's own error), or None."""
        last = (stderr.strip().splitlines() or [""])[-1]
        if code == 1 and not stdout.strip() and last.startswith("bwrap: "):
            return f"not confined, not run: {last}"
        return None

    def close(self) -> None:
        """The turn has ended: its proxy socket goes (idempotent)."""
        while self._closing:
            self._closing.pop()()


class Sandbox(BasePart):
    """Confinement for every turn, as `[sandbox]` and the routes say: a part of the service."""

    name = "sandbox"

    def __init__(self, config: Config, probe: Probe,
                 on_refused: Callable[[str, str | None, str, str], None] = lambda *a: None
                 ) -> None:
        """`on_refused(conversation id, issue key, text, source)` hears of each destination
        the proxy refused a turn (once per turn and host:port; `source` says which).

        Raises:
            ConfigError: `mode = "required"` and bubblewrap cannot run here.
        """
        require_sandbox(config, probe)
        self.config = config
        self.probe = probe
        self.confining = config.sandbox.mode != "none" and probe.available
        self.runtime: Path | None = None
        self.proxy: AllowProxy | None = None
        if self.confining:
            self.runtime = _runtime_dir(config.state_path)
            if any(r.network == "allow" for r in config.routes):
                self.proxy = AllowProxy(self.runtime, lambda turn, host, port, why: on_refused(
                    turn.conversation_id, turn.issue_key,
                    f"The agent's request to {host}:{port} was refused: {why}.",
                    f"{turn.turn_id}:{host}:{port}"))
        self._serial = itertools.count(1)  # each `allow` turn's socket name (runner threads)
        self._tools = tool_paths_of_wakeline()
        self._cache: dict[tuple[str, str, tuple[str, ...], str], _Parts] = {}

    @property
    def api_socket(self) -> Path | None:
        """Where the operator API also listens, for confined turns (None when none are)."""
        return self.runtime / API_SOCKET if self.runtime is not None else None

    def start(self) -> None:
        """Start the proxy when a route needs it; say how turns will run."""
        if self.proxy is not None:
            self.proxy.start()
        if self.config.sandbox.mode == "auto" and not self.probe.available:
            log.warning("bubblewrap cannot run here: turns run unconfined and public routes' "
                        "turns are refused", extra={"detail": self.probe.detail,
                                                    "fix": self.probe.fix})

    def stop(self) -> None:
        """Stop the proxy; remove the runtime directory."""
        if self.proxy is not None:
            self.proxy.stop()
        if self.runtime is not None:
            shutil.rmtree(self.runtime, ignore_errors=True)

    # --- per turn --------------------------------------------------------------------------

    def decide(self, route: RouteConfig, public: bool) -> Decision:
        """How a turn of `route` runs (`public`: a tainted turn, `trust = "public"`). A turn
        of no `[[routes]]` entry (the inbox, a Matrix room) gets a route's defaults."""
        mode = self.config.sandbox.mode
        if self.confining:
            return Decision(f"bwrap, network={route.network}", route=route)
        if mode == "none":
            return Decision("unconfined")
        why = f"bubblewrap cannot run here ({self.probe.detail})"
        if public:
            return Decision("refused", refused=(
                f"This turn was not run: its route is public and {why}, so it cannot be "
                f"confined. The operator can fix it: {self.probe.fix}."))
        return Decision("unconfined", note=f"This turn runs unconfined: {why}. Fix: "
                                           f"{self.probe.fix}.")

    def confine(self, decision: Decision, *, turn_id: str, conversation_id: str,
                issue_key: str | None, workspace: Path, argv: Sequence[str],
                env: Mapping[str, str], output: str, repo: Path | None = None) -> Confined:
        """The confinement of one turn whose workspace is ready (the runner thread); `repo`:
        the repository the workspace is a worktree of (None: a plain directory).

        Raises:
            ConfinementFailed: the agent or a path the route names cannot be set up.
        """
        route = decision.route
        assert route is not None and self.runtime is not None
        config = self.config
        command = list(argv)
        path_env = env.get("PATH", os.defpath)
        found = shutil.which(command[0], path=path_env) if os.sep not in command[0] \
            else command[0]
        if found is None or not os.path.exists(found):
            raise ConfinementFailed(f"FileNotFoundError: No such file or directory: {command[0]}")
        command[0] = os.path.abspath(found)
        # A file the command names (a script for its interpreter) is shown too, read-only.
        files = tuple(a for a in command[1:] if a.startswith("/") and os.path.isfile(a))
        command = kind_of(output).confined_args(command)  # the CLI's own sandbox nests
        parts = self._parts(route, command[0], files, path_env)
        if not parts.home.is_dir():  # removed meanwhile: made again
            self._cache.clear()
            parts = self._parts(route, command[0], files, path_env)
        workspace = _real(workspace)
        git = None
        if repo is not None:
            try:
                git = worktree_dirs(workspace, repo)
            except WorkspaceFailed as exc:
                raise ConfinementFailed(exc.detail) from None
        bound = (workspace, *(git.writable if git else ()), *parts.bound)
        confined = Confined((), {})
        listen: list[tuple[str, int, str]] = []
        inside = _inside_env(env, parts.home, parts.hidden, bound)
        if route.network != "open":
            assert self.api_socket is not None
            listen.append((INSIDE_HOST, API_PORT, str(self.api_socket)))
            inside["WAKELINE_API_URL"] = f"http://{INSIDE_HOST}:{API_PORT}"
            for name in PROXY_VARS:
                inside.pop(name, None)
                inside.pop(name.lower(), None)
        if route.network == "allow" and self.proxy is not None:
            path = self.runtime / f"p{next(self._serial)}.sock"
            index = config.routes.index(route) if route in config.routes else 0
            self.proxy.open(ProxyTurn(turn_id, conversation_id, issue_key,
                                      AllowList(route.allow_hosts),
                                      f"routes.{index}.allow_hosts"), path)
            confined._closing.append(lambda: self.proxy.close(path))  # type: ignore[union-attr]
            listen.append((INSIDE_HOST, PROXY_PORT, str(path)))
            url = f"http://{INSIDE_HOST}:{PROXY_PORT}"
            for name in PROXY_VARS[:3]:
                inside[name] = inside[name.lower()] = url
            inside["NO_PROXY"] = inside["no_proxy"] = INSIDE_HOST
        layout = Layout(
            workspace=workspace, home=parts.home, network=route.network, hidden=parts.hidden,
            secrets=tuple(p for p in parts.secrets if p.is_file()), tools=parts.tools,
            writable=parts.writable, git=git)
        confined.argv = tuple(bwrap_argv(self.probe.bwrap, layout, command))
        confined.env = inside
        confined.listen = tuple(listen)
        return confined

    def _parts(self, route: RouteConfig, agent: str, files: tuple[str, ...],
               path_env: str) -> _Parts:
        """What every turn of `route` with this agent shares: worked out once (the paths are
        resolved, the home and writable paths created), then reused by every turn."""
        key = (route.name, agent, files, path_env)
        parts = self._cache.get(key)
        if parts is None:
            config = self.config
            home = _ready(config.route_home(route), "home")
            writable = tuple(_ready(config.path(w), "writable") for w in route.writable)
            hidden = (_real(config.state_path), *service_homes())
            tools = (*self._tools, *tool_paths(Path(agent), path_env),
                     *(_real(Path(f)) for f in files))
            bound = (home, *writable, *tools)
            candidates = [config.source] if config.source is not None else []
            candidates += [path for _, path in config.secret_files()]
            # A secret a covered directory already hides needs no cover of its own, unless a
            # bound path shows it again.
            secrets = tuple(p for p in dict.fromkeys(_real(c) for c in candidates)
                            if not any(within(p, h) for h in unseen(hidden))
                            or any(within(p, b) for b in bound))
            parts = _Parts(home, writable, hidden, tools, secrets, bound)
            self._cache[key] = parts
        return parts

    # --- what it says ------------------------------------------------------------------------

    def status(self) -> dict[str, object]:
        """`GET /v1/status`'s `sandbox`: `{"mode", "available", "detail"}`."""
        return {"mode": self.config.sandbox.mode, "available": self.probe.available,
                "detail": self.detail()}

    def detail(self) -> str:
        """How turns run here, in a sentence."""
        mode = self.config.sandbox.mode
        if mode == "none":
            return f"sandbox.mode = \"none\": every turn runs unconfined ({self.probe.detail})"
        if self.probe.available:
            return f"every turn runs in bubblewrap ({self.probe.detail})"
        return (f"bubblewrap cannot run here ({self.probe.detail}): turns run unconfined and "
                "public routes' turns are refused")

    def checks(self) -> list[Check]:
        """The doctor's `sandbox` item (as the running service's doctor lists it)."""
        return [sandbox_check(self.config, self.probe)]


def require_sandbox(config: Config, found: Probe) -> None:
    """`mode = "required"` never runs a turn unconfined: refuse to start without bubblewrap.

    Raises:
        ConfigError: naming `sandbox.bwrap`, what the probe found and the fix.
    """
    if config.sandbox.mode == "required" and not found.available:
        raise ConfigError("sandbox.bwrap", f'sandbox.mode = "required" but {found.detail}; '
                                           f"fix: {found.fix}")


def tool_paths_of_wakeline() -> tuple[Path, ...]:
    """wakeline's own interpreter, its environment and its package: read-only in every
    sandbox, so `wakeline agent ...` runs there."""
    exe = Path(sys.executable)
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
             Path(sys.base_exec_prefix), exe.parent, _real(exe).parent,
             _real(Path(wakeline.__file__).parent)}
    return tuple(_real(p) for p in sorted(paths) if p.exists())


def service_homes() -> tuple[Path, ...]:
    """The service user's home (as $HOME and the user database say), never `/`."""
    homes = {os.environ.get("HOME", "")}
    try:
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    return tuple(p for p in sorted({_real(Path(h)) for h in homes if h}) if p != Path("/")
                 and p.is_dir())


def _inside_env(env: Mapping[str, str], home: Path, hidden: Sequence[Path],
                visible: Sequence[Path]) -> dict[str, str]:
    """The turn's environment as it is inside: HOME is the route's, TMPDIR the private /tmp,
    and a variable that names a path nothing in the sandbox shows is dropped (a socket or a
    config file of the service user's, another HOME)."""
    covered = [str(u) for u in unseen(hidden)]  # strings: this runs for every turn
    shown = [str(v) for v in visible]
    out = {}
    for name, value in env.items():
        if value.startswith("/") and os.pathsep not in value:
            path = os.path.normpath(value)
            if any(within(path, u) for u in covered) and not any(within(path, v) for v in shown):
                continue
        out[name] = value
    out.pop("XDG_RUNTIME_DIR", None)
    out["HOME"] = str(home)
    out["TMPDIR"] = "/tmp"
    return out


def _ready(path: Path, what: str) -> Path:
    """`path` (a route's home or writable path), created owner-only when missing."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfinementFailed(f"cannot create the route's {what} {path}: "
                                f"{exc.strerror or exc}") from exc
    return _real(path)


def _runtime_dir(state: Path) -> Path:
    """Where wakeline's sockets for the sandboxes live: `<state_dir>/run` (what a crash
    left there is cleared; confined agents never see the state dir), or a private temporary
    directory when that path is too long for a Unix socket's 108 bytes."""
    run = state / "run"
    if len(str(run)) > RUNTIME_PATH_MAX:
        return Path(tempfile.mkdtemp(prefix="wakeline-", dir="/tmp"))
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(mode=0o700, parents=True)
    return run


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))

