"""The public ingress: `POST /webhooks/linear`.

Checks run in the contract's order; the first failure answers. The request
thread verifies and parses, then waits for the admission writer to make the
delivery durable: a 2xx always means durable. Nothing here calls Linear or
waits on an agent.
"""

from __future__ import annotations

import logging

import falcon

from wakeline.admission.router import Router
from wakeline.admission.writer import AdmissionWriter
from wakeline.clock import Clock, to_ms
from wakeline.config import Config
from wakeline.errors import SignatureInvalid, TooLarge, WakelineError
from wakeline.http import errors
from wakeline.http.health import Health
from wakeline.models.states import Outcome
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.service.metrics import Metrics

log = logging.getLogger(__name__)


class LinearWebhookResource:
    """Receives Linear deliveries."""

    def __init__(
        self,
        config: Config,
        webhooks: LinearWebhooks | None,
        writer: AdmissionWriter,
        clock: Clock,
        metrics: Metrics,
        router: Router | None = None,
    ) -> None:
        self._config = config
        self._router = router or Router(config)
        self._webhooks = webhooks
        self._writer = writer
        self._clock = clock
        self._metrics = metrics

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Verify, parse, admit durably, answer `{"outcome": ...}`."""
        started = self._clock.monotonic()
        try:
            body = self._read_body(req)
            if self._webhooks is None:
                # No secret configured: nothing can be verified, so nothing is trusted.
                raise SignatureInvalid()
            now_ms = to_ms(self._clock.now())
            parsed = self._webhooks.read(
                body,
                signature=req.get_header("Linear-Signature"),
                delivery_id=req.get_header("Linear-Delivery"),
                now_ms=now_ms,
            )
            plan = self._router.plan(parsed, now_ms)
            result = self._writer.submit(plan, self._config.server.admission_wait_seconds)
        except WakelineError as exc:
            self._metrics.delivery(exc.code, self._clock.monotonic() - started)
            raise
        answer: dict[str, str] = {"outcome": result.outcome.value}
        if result.reason:
            answer["reason"] = result.reason
        if result.outcome is Outcome.DUPLICATE and result.first_outcome is not None:
            answer["first_outcome"] = result.first_outcome.value
        resp.media = answer
        self._metrics.delivery(result.outcome.value, self._clock.monotonic() - started)

    def _read_body(self, req: falcon.Request) -> bytes:
        limit = self._config.server.max_body_bytes
        if req.content_length is not None and req.content_length > limit:
            raise TooLarge()
        body = req.bounded_stream.read(limit + 1)
        if len(body) > limit:
            raise TooLarge()
        return body


def create_ingress_app(
    config: Config,
    webhooks: LinearWebhooks | None,
    writer: AdmissionWriter,
    clock: Clock,
    metrics: Metrics,
    router: Router | None = None,
) -> falcon.App:
    """The public WSGI app; `router` is the service's (it knows the planning routes' states)."""
    app = falcon.App(media_type=falcon.MEDIA_JSON)
    errors.install(app)
    app.add_route("/webhooks/linear",
                  LinearWebhookResource(config, webhooks, writer, clock, metrics, router))
    app.add_route("/healthz", Health())
    return app
