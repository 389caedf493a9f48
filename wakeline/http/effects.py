"""Operator API: `/v1/webhook-effects`, the outbound-effect records and their reconciliation."""

from __future__ import annotations

import logging

import falcon

from wakeline.clock import Clock, to_ms
from wakeline.errors import BadRequest, Conflict, NotFound
from wakeline.http.auth import lanes
from wakeline.http.params import int_param, json_body
from wakeline.models.outbox import EffectState
from wakeline.models.store import Store
from wakeline.tokens import Lane

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class Effects:
    """`GET /v1/webhook-effects?state=&limit=`: newest first, without bodies."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`{"effects": [...]}`."""
        state = req.get_param("state") or None
        if state is not None and state not in {s.value for s in EffectState}:
            raise BadRequest(f"state must be one of {', '.join(s.value for s in EffectState)}")
        limit = int_param(req, "limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
        assert limit is not None
        resp.media = {"effects": self._store.outbox.listing(limit=limit, state=state)}


class ReconcileAbsent:
    """`POST /v1/webhook-effects/{id}/reconcile-absent` `{"verified_absent": true}`.

    The operator looked in Linear and the write of unknown outcome is not there:
    the effect is released. wakeline never sends it again either way; the
    operator redoes the write if it is still wanted.
    """

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    @falcon.before(lanes(Lane.OPERATOR))
    def on_post(self, req: falcon.Request, resp: falcon.Response, effect_id: str) -> None:
        """The released effect; 404 unknown id, 409 when it is not `outcome_unknown`."""
        if json_body(req).get("verified_absent") is not True:
            raise BadRequest("verified_absent must be true: check in Linear that the write is absent first")
        outbox = self._store.outbox
        effect = outbox.get(effect_id)
        if effect is None:
            raise NotFound(f"no effect {effect_id}")
        if effect["state"] != EffectState.OUTCOME_UNKNOWN.value \
                or not outbox.release(effect_id, to_ms(self._clock.now())):
            current = outbox.get(effect_id) or effect
            raise Conflict(f"effect {effect_id} is {current['state']}, not outcome_unknown",
                           state=current["state"])
        log.info("effect released by the operator", extra={"effect_id": effect_id})
        resp.media = outbox.get(effect_id)


def add_routes(app: falcon.App, store: Store, clock: Clock) -> None:
    """Mount the effect resources."""
    app.add_route("/v1/webhook-effects", Effects(store))
    app.add_route("/v1/webhook-effects/{effect_id}/reconcile-absent", ReconcileAbsent(store, clock))
