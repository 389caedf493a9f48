"""Checks a config can be given without a running service: routes, agent commands, ports,
disk, the optional parts it turns on (installed, and the Discord token its routes need), and
whether bubblewrap can confine turns here.

The doctor (`GET /v1/doctor`) runs them inside the service; `wakeline doctor` runs them
itself when no service answers, so a newcomer can check a config before the first
`serve`. Every failing check says how to fix it. None of them calls Linear.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import stat
import sys
from pathlib import Path
from typing import Mapping

from pydantic import SecretStr

from wakeline.config import Config
from wakeline.models.health import check_store
from wakeline.models.store import Store
from wakeline.sandbox.probe import Probe, probe_for
from wakeline.secrets import DISCORD_TOKEN_ENV, Secrets, read_secret_file
from wakeline.service.extras import Finder, discord_token_key, wanted
from wakeline.service.parts import Check
from wakeline.turns.workspaces import Workspaces

TEAM_KEY = re.compile(r"^[A-Z][A-Z0-9]{0,9}$")
LINEAR_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
DISK_LOW_BYTES = 200 * 1024 * 1024
FIND_PROJECTS = "wakeline linear graphql 'query { projects { nodes { id name } } }'"
FIND_STATES = "wakeline linear graphql 'query { workflowStates { nodes { id name type team { key } } } }'"


def route_checks(config: Config) -> list[Check]:
    """Each route names its teams, its ids have Linear's shape, its repo is a git repository."""
    workspaces = Workspaces(config.workspaces_path)
    checks = []
    for index, route in enumerate(config.routes):
        name = f"route {route.name}"
        problems: list[tuple[str, str]] = []
        if not route.teams:
            problems.append(("serves no team", f'list its team keys: routes.{index}.teams = ["ENG"]'))
        for team in route.teams:
            if not TEAM_KEY.match(team):
                problems.append((f"team {team!r} is not a team key",
                                 "use the key from issue identifiers: ENG in ENG-123"))
        for project in route.projects:
            if not LINEAR_ID.match(project):
                problems.append((f"project {project!r} is not a Linear project id",
                                 f"find the ids with {FIND_PROJECTS}"))
        if route.projects and route.mode != "issue":
            problems.append(("has projects but mode = \"agent\"",
                             'projects only scope mode = "issue" routes: set mode or drop projects'))
        for key in ("done_state_id", "proposed_state_id"):
            value = getattr(route, key)
            if value and not LINEAR_ID.match(value):
                problems.append((f"{key} {value!r} is not a workflow state id",
                                 f"find the ids with {FIND_STATES}"))
        if problems:
            checks.append(Check(name, False, "; ".join(p for p, _ in problems),
                                "; ".join(dict.fromkeys(f for _, f in problems))))
        else:
            checks.append(Check(name, True, f"teams {', '.join(route.teams)}, mode {route.mode}"
                                + (f", projects {', '.join(route.projects)}" if route.projects else "")))
        if route.repo:
            checks.append(_repo_check(workspaces, f"{name} repo", config.path(route.repo),
                                      route.default_branch, f"routes.{index}.repo",
                                      f"routes.{index}.default_branch"))
        for n, entry in enumerate(route.repos):
            checks.append(_repo_check(workspaces, f"{name} repo {entry.name}",
                                      config.path(entry.path),
                                      entry.default_branch or route.default_branch,
                                      f"routes.{index}.repos.{n}.path",
                                      f"routes.{index}.repos.{n}.default_branch"))
    return checks


def _repo_check(workspaces: Workspaces, name: str, repo: Path, base: str, key: str,
                base_key: str) -> Check:
    """Whether `repo` is a git repository with `base` in it (`key` names it in the fix)."""
    reason = workspaces.check_repo(repo, base)
    return Check(name, reason is None,
                 reason or f"{repo}: git repository, worktrees from {base or 'HEAD'}",
                 None if reason is None else
                 f"point {key} at the top of a git clone (git clone URL {repo}), and "
                 f"{base_key} at a branch it has")


def command_checks(config: Config) -> list[Check]:
    """Every agent command (the default and each route's) names a program that can run."""
    commands = {"agent.command": config.agent.command}
    commands.update({f"routes.{i}.command": r.command for i, r in enumerate(config.routes) if r.command})
    return [_command(key, argv[0]) for key, argv in commands.items()]


def _command(key: str, program: str) -> Check:
    if program in ("python", "python3"):
        return Check(key, True, f"{program}: wakeline's own interpreter, {sys.executable}")
    found = program if os.sep in program else shutil.which(program)
    if found and os.path.isfile(found) and os.access(found, os.X_OK):
        return Check(key, True, f"{program}: {found}")
    why = "is not executable" if found and os.path.exists(found) else "is not found"
    fix = (f"chmod +x {found}" if why == "is not executable" else
           "install it for the user wakeline runs as, or give its absolute path")
    return Check(key, False, f"{program} {why}", fix)


def port_checks(config: Config) -> list[Check]:
    """Both listeners' ports are free (only meaningful while wakeline is not running)."""
    server = config.server
    return [_port(f"server.{which}_port", host, port) for which, host, port in (
        ("webhook", server.webhook_host, server.webhook_port),
        ("operator", server.operator_host, server.operator_port))]


def _port(key: str, host: str, port: int) -> Check:
    if port == 0:
        return Check(key, True, "0: a free port is picked at start")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return Check(key, False, f"{host}:{port} is not available ({exc.strerror})",
                         f"stop what listens there (ss -ltnp 'sport = :{port}'), or set {key}")
    return Check(key, True, f"{host}:{port} is free")


def disk_check(config: Config) -> Check:
    """Room for the store, the journal and the worktrees where the state dir lives."""
    where = config.state_path
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    detail = f"{free / 1024 ** 3:.1f} GiB free at {where}"
    if free < DISK_LOW_BYTES:
        return Check("disk", False, detail, "free some space: a full disk makes admissions answer 503")
    return Check("disk", True, detail)


def extras_checks(config: Config, discord_key: str | None,
                  find_spec: Finder = importlib.util.find_spec) -> list[Check]:
    """One item per optional part the config turns on: failed, in `serve`'s words, when its
    extra is not installed. `discord_key`: where the bot token comes from, None without one."""
    return [Check(f"{w.extra.name} extra", not w.missing, w.detail, w.fix)
            for w in wanted(config, discord_key, find_spec)]


def discord_checks(config: Config, discord_key: str | None) -> list[Check]:
    """The Discord bot token: there when a route names a Discord channel, owner-only."""
    # Imported here: the Discord provider's doctor builds on this module's `Check`.
    from wakeline.providers.discord.doctor import token_check

    check = token_check(config, discord_key is not None, discord_key == DISCORD_TOKEN_ENV)
    return [check] if check is not None else []


def matrix_checks(config: Config) -> list[Check]:
    """Each Matrix connection's token file (there, owner-only). Whether matrix-nio is
    installed is `extras_checks`'s item; the routes are checked by the running service."""
    checks = []
    for name, conn in config.matrix.connections.items():
        path = config.path(conn.access_token_file)
        key = f"matrix {name} token"
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            empty = not path.read_text(encoding="utf-8").strip()
        except OSError:
            checks.append(Check(key, False, f"{path}: missing", "log in once with device_id "
                                f"{conn.device_id} and put the token there (docs/operations.md)"))
            continue
        if empty or mode & 0o077:
            checks.append(Check(key, False, f"{path}: " + ("empty" if empty else
                                                           f"mode {mode:04o}, should be 0600"),
                                f"chmod 600 {path}" if not empty else "put the token in it"))
        else:
            checks.append(Check(key, True, f"{path} (mode {mode:04o})"))
    return checks


def sandbox_check(config: Config, probe: Probe) -> Check:
    """Whether turns run confined (CONTRACT section 12): failed when bubblewrap cannot run
    here, said when the config turns confinement off."""
    mode = config.sandbox.mode
    if mode == "none":  # the operator's choice: said, not failed
        return Check("sandbox", True, 'sandbox.mode = "none": turns run unconfined, with the '
                     "service user's whole reach (docs/operations.md, Confined turns)")
    if probe.available:
        return Check("sandbox", True, f"{mode}: every turn runs in bubblewrap ({probe.detail})")
    what = ("serve refuses to start" if mode == "required" else
            "turns run unconfined and public routes' turns are refused")
    return Check("sandbox", False, f"sandbox.bwrap: {probe.detail}; {what}", probe.fix)


def service_checks(config: Config, store: Store, secrets: Secrets | None) -> list[Check]:
    """What the running service checks of itself, beside its parts' items: the config, the
    state dir, the store, the secrets' sources and modes, routes, commands, disk, extras."""
    checks = [Check("config", True, f"loaded; paths are relative to {config.base_dir}")]
    state = config.state_path
    if state.is_dir():
        mode = stat.S_IMODE(state.stat().st_mode)
        checks.append(Check("state_dir", not mode & 0o077, f"{state} (mode {mode:04o})"
                            + (", should be 0700" if mode & 0o077 else "")))
    else:
        checks.append(Check("state_dir", False, f"{state} does not exist"))
    health = check_store(store)
    checks.append(Check("store", health.ok,
                        f"{store.location}: schema {health.schema_version} "
                        f"(expected {health.expected_version}), quick check {health.quick_check}"))
    discord_key = discord_key_of(config, secrets)
    return [*checks, *secret_checks(config, secrets, discord_key), *route_checks(config),
            *command_checks(config), disk_check(config), *extras_checks(config, discord_key)]


def secret_checks(config: Config, secrets: Secrets | None, discord_key: str | None
                  ) -> list[Check]:
    """Where each secret came from and, for a file, that only its owner can read it."""
    s, linear = secrets, config.linear
    checks = [
        _secret("webhook_secret", s.webhook_secret if s else None,
                config.path(linear.webhook_secret_file), required=True,
                missing="missing: every delivery is refused (run `wakeline init`)"),
        _secret("linear_api_key", s.linear_api_key if s else None,
                config.path(linear.api_key_file), required=False,
                missing="not set: the local backend (no writes to Linear)"
                if not linear.client_id else "not set (the app's token is used)"),
        _secret("operator_token", s.operator_token if s else None, config.operator_token_path,
                required=True, missing="missing"),
        *discord_checks(config, discord_key)[:1],
    ]
    if linear.client_id:
        checks.append(_secret(
            "linear_client_secret", s.client_secret if s else None,
            config.path(linear.client_secret_file), required=True,
            missing="missing: the app's token cannot be installed or renewed (put the client "
                    "secret in linear.client_secret_file, then restart)"))
    return checks


def _secret(name: str, value: SecretStr | None, path: Path, *, required: bool,
            missing: str) -> Check:
    """Where a secret came from and, for a file, whether only its owner can read it."""
    if value is None:
        return Check(name, not required, missing)
    try:
        on_disk = read_secret_file(path)
    except OSError:
        on_disk = None
    if on_disk is None or on_disk.get_secret_value() != value.get_secret_value():
        return Check(name, True, "env")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return Check(name, False, f"{path}: mode {mode:04o}, should be 0600 (chmod 600 {path})")
    return Check(name, True, f"{path} (mode {mode:04o})")


def discord_key_of(config: Config, secrets: Secrets | None) -> str | None:
    """Where the service's Discord bot token came from: `$WAKELINE_DISCORD_TOKEN` unless
    the file holds the same; None without a token."""
    token = secrets.discord_token if secrets is not None else None
    if token is None:
        return None
    try:
        on_disk = read_secret_file(config.path(config.discord.token_file))
    except OSError:
        on_disk = None
    if on_disk is None or on_disk.get_secret_value() != token.get_secret_value():
        return DISCORD_TOKEN_ENV
    return "discord.token_file"


def local_checks(config: Config, environ: Mapping[str, str] | None = None) -> list[Check]:
    """What `wakeline doctor` can tell without the service: routes, commands, ports, disk,
    the optional parts; `environ` (the CLI's) may hold the Discord token."""
    discord_key = discord_token_key(config, environ or {})
    return [*route_checks(config), *command_checks(config), *port_checks(config),
            disk_check(config), *extras_checks(config, discord_key),
            *discord_checks(config, discord_key), *matrix_checks(config),
            sandbox_check(config, probe_for(config))]

