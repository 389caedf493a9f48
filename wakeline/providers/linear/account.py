"""wakeline's own Linear account, as recorded: what "same account" means in echo rules.

`linear connect` records it from one `viewer` query, an install from the app's own;
the record carries a digest of who the credential acts as (a key, or the app), so a
record made for another credential is never taken for today's.
"""

from __future__ import annotations

import hashlib
from typing import Any

from wakeline.clock import iso
from wakeline.models.store import Store

ACCOUNT_SETTING = "linear.account"
VIEWER_QUERY = "query WakelineViewer { viewer { id name } }"


def credential_fingerprint(identity: str | None) -> str | None:
    """A short digest that tells whether the recorded account belongs to today's credential."""
    if not identity:
        return None
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def record_account(store: Store, *, account_id: str, name: str | None, kind: str,
                   identity: str | None, now_ms: int) -> dict[str, Any]:
    """Record the account a credential acts as; returns the record."""
    account = {"id": account_id, "name": name, "kind": kind, "connectedAt": iso(now_ms),
               "credentialFingerprint": credential_fingerprint(identity)}
    store.set_setting(ACCOUNT_SETTING, account)
    return account


def recorded_account(store: Store, identity: str | None) -> dict[str, Any] | None:
    """The recorded account, if it was recorded for this credential."""
    account = store.get_setting(ACCOUNT_SETTING)
    if not account or account.get("credentialFingerprint") != credential_fingerprint(identity):
        return None
    return dict(account)
