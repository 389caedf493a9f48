"""Operator API: `/v1/linear/*`, the raw GraphQL escape hatch, the curated comment write, connect.

`POST /v1/linear/graphql` sends one operation through the tracker, after the
guard (`providers/linear/graphql_guard.py`) has read it: a mutation needs the
operator or a worker lane, and a destructive one needs `confirm` to list
exactly its targets. All of that is decided before anything leaves. A
`commentCreate` or `issueCreate` in it gets an id chosen here, recorded before
the request leaves, so that the object's webhook comes back as a self-echo and
an agent commenting on its own issue does not wake itself. An update
(`issueUpdate`, `commentUpdate`) cannot be told apart by an id, so an intent is
recorded for it before it leaves: the account that writes, the event it expects
back and a fingerprint of the fields it writes; echo memory holds its echo until
the write answers. The account is the one `linear connect` recorded, or one
`viewer` query before the first such write. The tracker's client sends it once
and never retries; its errors map to statuses in `wakeline.http.errors`.

`POST /v1/linear/comment` goes through the outbox instead, like every write
wakeline makes on its own: the effect (and the comment's client-chosen id) is
on disk before the request leaves, so its webhook echo is recognised.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import TYPE_CHECKING, Any

import falcon
import pykka

from wakeline.clock import Clock, to_ms
from wakeline.errors import (
    BadRequest,
    ConfirmMismatch,
    InvalidQuery,
    LaneRefused,
    PossiblyDispatched,
    ProviderRejected,
    RequiresConnectedLinear,
    TargetUnnameable,
    WakelineError,
)
from wakeline.http.auth import lanes
from wakeline.http.params import json_body
from wakeline.models.outbox import EffectState
from wakeline.models.store import Store
from wakeline.providers.linear import replies
from wakeline.providers.linear.account import VIEWER_QUERY, record_account, recorded_account
from wakeline.providers.linear.credentials import Credential
from wakeline.providers.linear.intents import write_intents
from wakeline.turns.env import SettledSignal
from wakeline.turns.tokens import Grant, Lane

if TYPE_CHECKING:
    from wakeline.providers.linear.graphql_guard import Analysis

log = logging.getLogger(__name__)

MUTATING_LANES = frozenset({Lane.OPERATOR, Lane.WORKER})
ASK_TIMEOUT_SECONDS = 10.0
# The client gives up after 5 s to connect and 30 s to read; a little more covers the queue.
CALL_TIMEOUT_SECONDS = 40.0
COMMENT_WAIT_SECONDS = 30.0
PENDING_STATES = frozenset({EffectState.PREPARED.value, EffectState.DISPATCHED.value})


class TrackerCalls:
    """Runs one GraphQL operation through the tracker actor and waits for its outcome."""

    def __init__(self, tracker: Any, call_timeout: float = CALL_TIMEOUT_SECONDS) -> None:
        self._tracker = tracker
        self._timeout = call_timeout

    def connected(self) -> bool:
        """True when the tracker holds a credential."""
        if self._tracker is None:
            return False
        return bool(self._tracker.connected().get(timeout=ASK_TIMEOUT_SECONDS))

    def run(self, query: str, variables: dict[str, Any] | None, operation_name: str | None,
            *, mutation: bool = False, intents: list[str] | None = None) -> dict[str, Any]:
        """Linear's whole answer, or the wakeline error that says why there is none."""
        if self._tracker is None:
            raise RequiresConnectedLinear("the Linear tracker is not running")
        try:
            future: concurrent.futures.Future[dict[str, Any]] = self._tracker.call(
                query, variables, operation_name, mutation=mutation,
                intents=intents or ()).get(timeout=ASK_TIMEOUT_SECONDS)
        except pykka.Timeout:
            # The message is still queued and may yet be sent: its outcome is unknown.
            raise PossiblyDispatched("the tracker did not take the request in time") from None
        try:
            return future.result(timeout=self._timeout)
        except concurrent.futures.TimeoutError:
            raise PossiblyDispatched(f"no outcome from Linear within {self._timeout:.0f} s") from None
        except WakelineError:
            raise
        except Exception as exc:  # the request may have left before it failed
            log.exception("a Linear call failed unexpectedly")
            raise PossiblyDispatched(f"the call failed ({exc.__class__.__name__})") from None


class Account:
    """wakeline's own Linear account: what "same account" means in echo rules."""

    def __init__(self, store: Store, calls: TrackerCalls, credential: Credential | None,
                 clock: Clock) -> None:
        self._store = store
        self._calls = calls
        self._credential_source = credential
        self._clock = clock

    def _credential(self) -> str | None:
        """Who the credential acts as (a key, or the app), for the account's fingerprint."""
        return self._credential_source.identity() if self._credential_source else None

    def known(self) -> str | None:
        """The recorded account's id, if it was recorded for today's credential."""
        account = recorded_account(self._store, self._credential())
        return str(account["id"]) if account else None

    def ensure(self) -> str:
        """The account id, asking Linear once (`viewer`) when none is recorded."""
        return self.known() or str(self.connect()["id"])

    def connect(self) -> dict[str, Any]:
        """One `viewer` query; the account Linear names is recorded and returned."""
        answer = self._calls.run(VIEWER_QUERY, None, "WakelineViewer")
        viewer = (answer.get("data") or {}).get("viewer")
        if not isinstance(viewer, dict) or not isinstance(viewer.get("id"), str):
            raise ProviderRejected("Linear's answer names no viewer")
        account = record_account(
            self._store, account_id=viewer["id"],
            name=viewer.get("name") if isinstance(viewer.get("name"), str) else None,
            kind=self._credential_source.kind if self._credential_source else "none",
            identity=self._credential(), now_ms=to_ms(self._clock.now()))
        log.info("linear account recorded", extra={"account_id": account["id"], "kind": account["kind"]})
        return account


def _string(body: dict[str, Any], key: str, *, error: type[WakelineError] = BadRequest) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise error(f"{key} must be a string")
    return value


def check_confirm(analysis: Analysis, confirm: Any) -> None:
    """`confirm` lists exactly the destructive targets: same ids, same count (none when no target).

    Raises:
        BadRequest: `confirm` is not a list of strings.
        ConfirmMismatch: with the real `targets`, when the lists differ.
    """
    if confirm is None:
        confirm = []
    if not isinstance(confirm, list) or not all(isinstance(c, str) for c in confirm):
        raise BadRequest("confirm must be a list of ids")
    targets = analysis.target_list
    if len(confirm) != len(targets) or set(confirm) != set(targets):
        detail = ("confirm must list exactly the ids this operation would destroy, archive or revoke"
                  if targets else "this operation destroys nothing: leave confirm out")
        raise ConfirmMismatch(detail, targets=targets)


class GraphQL:
    """`POST /v1/linear/graphql` `{query, variables?, operationName?, confirm?}`."""

    def __init__(self, calls: TrackerCalls, store: Store, clock: Clock, account: Account) -> None:
        self._calls = calls
        self._store = store
        self._clock = clock
        self._account = account

    @falcon.before(lanes(Lane.OPERATOR, Lane.WORKER, Lane.ROOM))
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Check, then send once; answers Linear's `data`."""
        # graphql-core loads with the first call: the service starts without it.
        from wakeline.providers.linear.graphql_guard import analyze, mark_creates

        body = json_body(req)
        grant: Grant = req.context.grant
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InvalidQuery("query must be a non-empty string")
        variables = body.get("variables")
        if variables is not None and not isinstance(variables, dict):
            raise InvalidQuery("variables must be a JSON object")
        operation_name = _string(body, "operationName", error=InvalidQuery) or None
        try:
            analysis = analyze(query, variables, operation_name)
        except TargetUnnameable:
            # Only a mutation has targets: a lane that may not mutate hears that first.
            if grant.lane not in MUTATING_LANES:
                raise LaneRefused("mutations need the operator or a worker lane") from None
            raise
        if analysis.is_mutation and grant.lane not in MUTATING_LANES:
            raise LaneRefused("mutations need the operator or a worker lane")
        check_confirm(analysis, body.get("confirm"))
        intents: list[str] = []
        if analysis.is_mutation:
            marked = mark_creates(query, variables, operation_name)
            query, variables = marked.query, marked.variables
            now = to_ms(self._clock.now())
            self._store.record_own_creates(marked.ids, now)
            updates = write_intents(query, variables, operation_name)
            if updates:
                intents = self._store.echoes.record_intents(updates, self._account.ensure(), now,
                                                            grant.conversation_id)
            log.info("linear mutation dispatched", extra={
                "operation": analysis.operation_name,
                "root_fields": [f.name for f in analysis.root_fields],
                "targets": analysis.target_list,
                "creates": list(marked.ids),
                "intents": intents,
                "lane": grant.lane.value,
                "conversation_id": grant.conversation_id,
            })
        try:
            answer = self._calls.run(query, variables, operation_name, mutation=analysis.is_mutation,
                                     intents=intents)
        except WakelineError as exc:
            if analysis.is_mutation:
                log.warning("linear mutation not confirmed",
                            extra={"operation": analysis.operation_name, "error": exc.code})
            raise
        out: dict[str, Any] = {"data": answer.get("data")}
        if answer.get("errors"):
            out["errors"] = answer["errors"]
        resp.media = out


class Comment:
    """`POST /v1/linear/comment` `{"issueId", "body"}`: the curated comment write."""

    def __init__(self, store: Store, calls: TrackerCalls, tracker: Any, settled: SettledSignal,
                 clock: Clock, wait_seconds: float = COMMENT_WAIT_SECONDS) -> None:
        self._store = store
        self._calls = calls
        self._tracker = tracker
        self._settled = settled
        self._clock = clock
        self._wait = wait_seconds

    @falcon.before(lanes(Lane.OPERATOR, Lane.WORKER))
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Prepare the effect, kick the tracker, wait for the outcome."""
        body = json_body(req)
        issue_id = _string(body, "issueId")
        text = _string(body, "body")
        if not issue_id or not issue_id.strip():
            raise BadRequest("issueId must be a non-empty string")
        if not text or not text.strip():
            raise BadRequest("body must be a non-empty string")
        if len(text) > replies.BODY_MAX_CHARS:
            raise BadRequest(f"body must be at most {replies.BODY_MAX_CHARS} characters")
        if not self._calls.connected():
            raise RequiresConnectedLinear("no Linear credential is configured")
        grant: Grant = req.context.grant
        outbox = self._store.outbox
        with self._store.db.atomic():
            (effect_id,) = outbox.prepare([replies.comment(issue_id, text, grant.conversation_id)],
                                          to_ms(self._clock.now()))
        self._tracker.kick()

        def settled() -> bool:
            effect = outbox.get(effect_id)
            return effect is None or effect["state"] not in PENDING_STATES

        self._settled.wait_for(settled, self._wait)
        effect = outbox.get(effect_id) or {"state": EffectState.OUTCOME_UNKNOWN.value, "error": None}
        state, error = effect["state"], effect.get("error")
        if state == EffectState.CONFIRMED.value:
            resp.media = {"id": effect_id, "issueId": issue_id, "state": state}
        elif state == EffectState.REJECTED.value and error == RequiresConnectedLinear.code:
            raise RequiresConnectedLinear("no Linear credential is configured", id=effect_id, state=state)
        elif state == EffectState.REJECTED.value:
            raise ProviderRejected(error or "Linear refused the comment", id=effect_id, state=state)
        elif state in PENDING_STATES:
            # Still queued (the budget) or on the wire: the outbox will settle it; never send it again.
            resp.status = falcon.HTTP_202
            resp.media = {"id": effect_id, "issueId": issue_id, "state": state}
        else:
            raise PossiblyDispatched(error or "the comment may have reached Linear", id=effect_id,
                                     state=state)


class Connect:
    """`POST /v1/linear/connect`: check the credential once (`viewer`) and record the account."""

    def __init__(self, account: Account) -> None:
        self._account = account

    @falcon.before(lanes(Lane.OPERATOR))
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`{"id", "name", "kind"}` of the account Linear says the credential belongs to."""
        account = self._account.connect()
        resp.media = {k: account[k] for k in ("id", "name", "kind", "connectedAt")}


def add_routes(app: falcon.App, store: Store, clock: Clock, tracker: Any, settled: SettledSignal | None,
               credential: Credential | None) -> None:
    """Mount the `/v1/linear/*` resources; `settled` wakes comment writes as the tracker settles them."""
    calls = TrackerCalls(tracker)
    settled = settled or SettledSignal()
    account = Account(store, calls, credential, clock)
    app.add_route("/v1/linear/graphql", GraphQL(calls, store, clock, account))
    app.add_route("/v1/linear/comment", Comment(store, calls, tracker, settled, clock))
    app.add_route("/v1/linear/connect", Connect(account))
