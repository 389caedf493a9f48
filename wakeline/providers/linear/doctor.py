"""The doctor's Linear items: the credential, the app's token, the account, whether
`linear graphql` is usable, the request budget, and each planning route's states. None of
them calls Linear."""

from __future__ import annotations

from typing import Any

from wakeline.config import Config
from wakeline.models.store import Store
from wakeline.providers.linear.account import ACCOUNT_SETTING, credential_fingerprint
from wakeline.providers.linear.client import RequestBudget
from wakeline.providers.linear.credentials import AppCredential, Credential
from wakeline.providers.linear.token_file import TokenFile
from wakeline.providers.linear.workflow import WorkflowRegistry
from wakeline.service.parts import Check


def linear_checks(config: Config, store: Store, credential: Credential | None,
                  budget: RequestBudget | None) -> tuple[dict[str, Any], list[Check]]:
    """The doctor's `linear` summary and its Linear items."""
    kind = credential.kind if credential is not None else "none"
    auth = credential.state() if credential is not None else None
    account = store.get_setting(ACCOUNT_SETTING)
    shown = {k: account.get(k) for k in ("id", "name", "kind", "connectedAt")} if account else None
    checks = [Check("linear_credential", True,
                    kind if credential is not None else "none (local backend)")]
    if isinstance(credential, AppCredential):
        checks.append(token_check(config, credential))
    if credential is None:
        checks.append(Check("linear_account", True, "no credential"))
    elif not account:
        checks.append(Check("linear_account", False,
                            "not verified yet: run `wakeline linear connect`"
                            if kind != "app" else "not installed: run `wakeline linear install`"))
    elif account.get("credentialFingerprint") != credential_fingerprint(credential.identity()):
        checks.append(Check("linear_account", False,
                            f"recorded {account.get('name')} ({account.get('id')}) for another "
                            "credential: run `wakeline linear connect` again"))
    else:
        checks.append(Check("linear_account", True, f"{account.get('name')} ({account.get('id')})"))
    usable = auth is not None and auth.ok
    checks.append(Check(
        "linear_graphql", credential is None or usable,
        f"usable as {kind}" if usable else
        "not usable: no Linear credential (set the API key file or $WAKELINE_LINEAR_API_KEY, "
        "or linear.client_id, then restart)" if credential is None else
        f"not usable: {auth.detail if auth else ''} ({auth.fix if auth else ''})",
    ))
    per_hour = config.linear.requests_per_hour
    used = budget.used() if budget is not None else 0
    checks.append(Check("linear_budget", used < per_hour,
                        f"{used} of {per_hour} requests used in the last hour"))
    summary = {"credentialKind": kind, "account": shown, "graphqlUsable": usable,
               "auth": auth.to_json() if auth is not None else None,
               "budget": {"usedThisHour": used, "perHour": per_hour}}
    return summary, checks


def token_check(config: Config, credential: AppCredential) -> Check:
    """The app's token file: owner-only, and a token that works (where hosts share a
    database, the tokens are a row of it: no file to check)."""
    auth = credential.state()
    shared = credential.tokens_where
    if shared is not None:
        return Check("linear_token", auth.ok, f"{shared}: {auth.detail}"
                     + (f"; fix: {auth.fix}" if auth.fix else ""))
    path = config.oauth_token_path
    mode = TokenFile(path).mode()
    if mode is not None and mode & 0o077:
        return Check("linear_token", False,
                     f"{path}: mode {mode:04o}, should be 0600 (chmod 600 {path})")
    where = f"{path} (mode {mode:04o})" if mode is not None else "no token file"
    detail = f"{where}: {auth.detail}" + (f"; fix: {auth.fix}" if auth.fix else "")
    return Check("linear_token", auth.ok, detail)


def planning_checks(workflow: WorkflowRegistry) -> list[Check]:
    """Each planning route: its teams' three managed states, or why planning is off."""
    checks = []
    for route, info in workflow.summary().items():
        if info["off"]:
            checks.append(Check(f"planning {route}", False,
                                f"planning is off: {info['off']} (the route runs nothing)"))
            continue
        detail = "; ".join(
            f"{st['team']}: Ready for Planning {st['readyForPlanning']}, Awaiting Plan "
            f"Approval {st['awaitingPlanApproval']}, Approved {st['approved']}, In Progress "
            f"{st['inProgress'] or 'none'}" for st in info["states"])
        checks.append(Check(f"planning {route}", True, detail))
    return checks
