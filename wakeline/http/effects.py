"""Operator API: `/v1/webhook-effects`, the outbound-effect records and their reconciliation.

An effect is a write to Linear: an outbox write (an activity, a comment) or the
intent of a `linear graphql` update. Each lists the deliveries held for it, by
headline, never a body. Reconciling an `outcome_unknown` one goes through echo
memory, which releases what it quarantined.
"""

from __future__ import annotations

from typing import Any

import falcon

from wakeline.errors import BadRequest, Unavailable
from wakeline.http.auth import lanes
from wakeline.http.params import int_param, json_body
from wakeline.models.outbox import EffectState
from wakeline.models.store import Store
from wakeline.turns.tokens import Lane

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
ASK_TIMEOUT_SECONDS = 15


class Effects:
    """`GET /v1/webhook-effects?state=&limit=`: newest first, without bodies."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`{"effects": [...]}`, each with the deliveries held for it (`held`)."""
        state = req.get_param("state") or None
        if state is not None and state not in {s.value for s in EffectState}:
            raise BadRequest(f"state must be one of {', '.join(s.value for s in EffectState)}")
        limit = int_param(req, "limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
        assert limit is not None
        effects = self._store.outbox.listing(limit=limit, state=state)
        held = self._store.echoes.held_for([e["id"] for e in effects if "expects" in e])
        for effect in effects:
            if "expects" in effect:
                effect["held"] = held.get(effect["id"], [])
        resp.media = {"effects": effects}


class ReconcileAbsent:
    """`POST /v1/webhook-effects/{id}/reconcile-absent` `{"verified_absent": true}`.

    The operator looked in Linear and the write of unknown outcome is not there:
    the effect is released, and so are the deliveries it held, which move on in
    their FIFOs. wakeline never sends it again either way; the operator redoes the
    write if it is still wanted.
    """

    def __init__(self, echo_memory: Any) -> None:
        self._echo_memory = echo_memory

    @falcon.before(lanes(Lane.OPERATOR))
    def on_post(self, req: falcon.Request, resp: falcon.Response, effect_id: str) -> None:
        """The released effect; 404 unknown id, 409 when it is not `outcome_unknown`."""
        if json_body(req).get("verified_absent") is not True:
            raise BadRequest("verified_absent must be true: check in Linear that the write is absent first")
        if self._echo_memory is None:
            raise Unavailable("echo memory is not running")
        resp.media = self._echo_memory.reconcile_absent(effect_id).get(timeout=ASK_TIMEOUT_SECONDS)


def add_routes(app: falcon.App, store: Store, echo_memory: Any) -> None:
    """Mount the effect resources."""
    app.add_route("/v1/webhook-effects", Effects(store))
    app.add_route("/v1/webhook-effects/{effect_id}/reconcile-absent", ReconcileAbsent(echo_memory))
