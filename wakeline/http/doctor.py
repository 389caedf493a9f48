"""Operator API: `GET /v1/doctor`, checks that never call Linear and never show a secret."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import falcon
from pydantic import SecretStr

from wakeline.config import Config
from wakeline.http.auth import lanes
from wakeline.models.health import check_store
from wakeline.models.store import Store
from wakeline.providers.linear.account import ACCOUNT_SETTING, credential_fingerprint
from wakeline.providers.linear.credentials import AppCredential, Credential
from wakeline.providers.linear.token_file import TokenFile
from wakeline.providers.linear.workflow import WorkflowRegistry
from wakeline.secrets import DISCORD_TOKEN_ENV, read_secret_file
from wakeline.service.checks import (
    command_checks, discord_checks, disk_check, extras_checks, route_checks,
)
from wakeline.turns.tokens import Lane

if TYPE_CHECKING:
    from wakeline.providers.linear.client import RequestBudget
    from wakeline.secrets import Secrets


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail}


def _secret(name: str, value: SecretStr | None, path: Path, *, required: bool, missing: str) -> dict[str, Any]:
    """Where a secret came from and, for a file, whether only its owner can read it."""
    if value is None:
        return _check(name, not required, missing)
    try:
        on_disk = read_secret_file(path)
    except OSError:
        on_disk = None
    if on_disk is None or on_disk.get_secret_value() != value.get_secret_value():
        return _check(name, True, "env")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return _check(name, False, f"{path}: mode {mode:04o}, should be 0600 (chmod 600 {path})")
    return _check(name, True, f"{path} (mode {mode:04o})")


class Doctor:
    """`GET /v1/doctor`: `{"ok", "checks": [{"name", "ok", "detail"}], "linear": {...}}`."""

    def __init__(self, config: Config, store: Store, secrets: Secrets | None,
                 budget: RequestBudget | None, credential: Credential | None = None,
                 workflow: WorkflowRegistry | None = None,
                 extra_checks: Sequence[Callable[[], list[dict[str, Any]]]] = ()) -> None:
        self._config = config
        self._store = store
        self._secrets = secrets
        self._budget = budget
        self._credential = credential
        self._workflow = workflow
        # More checks, each a list of {"name", "ok", "detail", "fix"?}: Discord's (which call
        # Discord, never Linear).
        self._extra = extra_checks

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Run every check; `ok` is true when all pass."""
        config = self._config
        checks = [_check("config", True, f"loaded; paths are relative to {config.base_dir}")]
        state = config.state_path
        if state.is_dir():
            mode = stat.S_IMODE(state.stat().st_mode)
            checks.append(_check("state_dir", not mode & 0o077, f"{state} (mode {mode:04o})"
                                 + (", should be 0700" if mode & 0o077 else "")))
        else:
            checks.append(_check("state_dir", False, f"{state} does not exist"))
        health = check_store(self._store)
        checks.append(_check("store", health.ok,
                             f"{self._store.location}: schema {health.schema_version} "
                             f"(expected {health.expected_version}), quick check {health.quick_check}"))
        checks += self._secret_checks()
        checks += [c.to_json() for c in (
            *route_checks(config), *command_checks(config), disk_check(config),
            *extras_checks(config, discord_key_of(config, self._secrets)))]
        linear, linear_checks = self._linear()
        checks += linear_checks
        checks += self._planning()
        for extra in self._extra:
            checks += extra()
        resp.media = {"ok": all(c["ok"] for c in checks), "checks": checks, "linear": linear}

    def _secret_checks(self) -> list[dict[str, Any]]:
        s, cfg = self._secrets, self._config
        checks = [
            _secret("webhook_secret", s.webhook_secret if s else None, cfg.path(cfg.linear.webhook_secret_file),
                    required=True, missing="missing: every delivery is refused (run `wakeline init`)"),
            _secret("linear_api_key", s.linear_api_key if s else None, cfg.path(cfg.linear.api_key_file),
                    required=False, missing="not set: the local backend (no writes to Linear)"
                    if not cfg.linear.client_id else "not set (the app's token is used)"),
            _secret("operator_token", s.operator_token if s else None, cfg.operator_token_path,
                    required=True, missing="missing"),
        ]
        discord = discord_token_check(cfg, s)
        if discord is not None:
            checks.append(discord)
        if cfg.linear.client_id:
            checks.append(_secret(
                "linear_client_secret", s.client_secret if s else None,
                cfg.path(cfg.linear.client_secret_file), required=True,
                missing="missing: the app's token cannot be installed or renewed (put the client "
                        "secret in linear.client_secret_file, then restart)"))
        return checks

    def _linear(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        credential = self._credential
        kind = credential.kind if credential is not None else "none"
        auth = credential.state() if credential is not None else None
        account = self._store.get_setting(ACCOUNT_SETTING)
        shown = {k: account.get(k) for k in ("id", "name", "kind", "connectedAt")} if account else None
        checks = [_check("linear_credential", True,
                         kind if credential is not None else "none (local backend)")]
        if isinstance(credential, AppCredential):
            checks.append(self._token_check(credential))
        if credential is None:
            checks.append(_check("linear_account", True, "no credential"))
        elif not account:
            checks.append(_check("linear_account", False,
                                 "not verified yet: run `wakeline linear connect`"
                                 if kind != "app" else "not installed: run `wakeline linear install`"))
        elif account.get("credentialFingerprint") != credential_fingerprint(credential.identity()):
            checks.append(_check("linear_account", False,
                                 f"recorded {account.get('name')} ({account.get('id')}) for another "
                                 "credential: run `wakeline linear connect` again"))
        else:
            checks.append(_check("linear_account", True, f"{account.get('name')} ({account.get('id')})"))
        usable = auth is not None and auth.ok
        checks.append(_check(
            "linear_graphql", credential is None or usable,
            f"usable as {kind}" if usable else
            "not usable: no Linear credential (set the API key file or $WAKELINE_LINEAR_API_KEY, "
            "or linear.client_id, then restart)" if credential is None else
            f"not usable: {auth.detail if auth else ''} ({auth.fix if auth else ''})",
        ))
        per_hour = self._config.linear.requests_per_hour
        used = self._budget.used() if self._budget is not None else 0
        checks.append(_check("linear_budget", used < per_hour,
                             f"{used} of {per_hour} requests used in the last hour"))
        summary = {"credentialKind": kind, "account": shown, "graphqlUsable": usable,
                   "auth": auth.to_json() if auth is not None else None,
                   "budget": {"usedThisHour": used, "perHour": per_hour}}
        return summary, checks

    def _planning(self) -> list[dict[str, Any]]:
        """Each planning route: its teams' three managed states, or why planning is off."""
        if self._workflow is None:
            return []
        checks = []
        for route, info in self._workflow.summary().items():
            if info["off"]:
                checks.append(_check(f"planning {route}", False,
                                     f"planning is off: {info['off']} (the route runs nothing)"))
                continue
            detail = "; ".join(
                f"{st['team']}: Ready for Planning {st['readyForPlanning']}, Awaiting Plan "
                f"Approval {st['awaitingPlanApproval']}, Approved {st['approved']}, In Progress "
                f"{st['inProgress'] or 'none'}" for st in info["states"])
            checks.append(_check(f"planning {route}", True, detail))
        return checks

    def _token_check(self, credential: AppCredential) -> dict[str, Any]:
        """The app's token file: owner-only, and a token that works (where hosts share a
        database, the tokens are a row of it: no file to check)."""
        auth = credential.state()
        shared = credential.tokens_where
        if shared is not None:
            return _check("linear_token", auth.ok, f"{shared}: {auth.detail}"
                          + (f"; fix: {auth.fix}" if auth.fix else ""))
        path = self._config.oauth_token_path
        mode = TokenFile(path).mode()
        if mode is not None and mode & 0o077:
            return _check("linear_token", False,
                          f"{path}: mode {mode:04o}, should be 0600 (chmod 600 {path})")
        where = f"{path} (mode {mode:04o})" if mode is not None else "no token file"
        detail = f"{where}: {auth.detail}" + (f"; fix: {auth.fix}" if auth.fix else "")
        return _check("linear_token", auth.ok, detail)


def discord_token_check(config: Config, secrets: Secrets | None) -> dict[str, Any] | None:
    """The Discord bot token (present when a route needs it, mode 0600); None when Discord
    is not used at all."""
    checks = discord_checks(config, discord_key_of(config, secrets))
    return checks[0].to_json() if checks else None


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


def add_routes(app: falcon.App, config: Config, store: Store, secrets: Secrets | None,
               budget: RequestBudget | None, credential: Credential | None = None,
               workflow: WorkflowRegistry | None = None,
               extra_checks: Sequence[Callable[[], list[dict[str, Any]]]] = ()) -> None:
    """Mount the doctor."""
    app.add_route("/v1/doctor", Doctor(config, store, secrets, budget, credential, workflow,
                                        extra_checks))
