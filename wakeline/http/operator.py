"""The operator API (loopback): status, following, inbox reads, metrics; Linear, effects, doctor."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import falcon
import pykka

from wakeline import __version__
from wakeline.clock import Clock, iso
from wakeline.config import Config
from wakeline.errors import BadRequest
from wakeline.http import (
    control,
    conversations,
    doctor,
    effects,
    errors,
    install,
    linear,
    progress,
)
from wakeline.http import (
    journal as journal_routes,
)
from wakeline.http import (
    matrix as matrix_routes,
)
from wakeline.http.auth import BearerAuth, lanes
from wakeline.http.health import Health
from wakeline.http.params import int_param, json_body
from wakeline.models.inbox import DEFAULT_LIMIT, MAX_LIMIT, Inbox
from wakeline.models.store import Store
from wakeline.providers.linear.doctor import linear_checks
from wakeline.service.checks import service_checks
from wakeline.service.metrics import Metrics
from wakeline.service.parts import Check
from wakeline.turns.tokens import Lane, TokenRegistry

if TYPE_CHECKING:
    from wakeline.control.part import ControlPart
    from wakeline.journal.entries import JournalStore
    from wakeline.providers.linear.part import LinearPart
    from wakeline.providers.matrix.part import MatrixRoutes
    from wakeline.sandbox.part import Sandbox
    from wakeline.scheduling.base import HostView
    from wakeline.secrets import Secrets
    from wakeline.turns.env import SettledSignal
    from wakeline.turns.progress import TurnProgress

log = logging.getLogger(__name__)


class ReleaseReadCache:
    """falcon middleware: after each request, the request thread's page cache is freed.

    The next commit of the writer would make those pages stale anyway, and kept, they
    follow what the thread read last: the whole unread inbox for a status count, the whole
    file for the doctor's quick check, on each of the listener's threads (decision 0033).
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         req_succeeded: bool) -> None:
        """Free what the request read."""
        try:
            self._store.release_memory()
        except Exception:  # never fails a request: the next read frees it as well
            log.exception("releasing the page cache failed")


class Status:
    """`GET /v1/status`."""

    def __init__(self, store: Store, inbox: Inbox, clock: Clock, parts: OperatorParts) -> None:
        self._store = store
        self._inbox = inbox
        self._clock = clock
        self._started = clock.monotonic()
        self._parts = parts

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Version, uptime, following and the counters."""
        counts = self._store.counts()
        parts = self._parts
        credential = parts.linear.credential if parts.linear is not None else None
        resp.media = {
            "version": __version__,
            "uptimeSeconds": round(self._clock.monotonic() - self._started, 3),
            "following": self._inbox.following(),
            "conversations": {
                "total": counts.conversations,
                "running": counts.running,
                "stalled": counts.stalled,
                "waitingOwnership": counts.waiting_ownership,
                "terminal": counts.terminal,
                "completed": counts.completed,
                "canceled": counts.canceled,
            },
            "fifo": {"pending": counts.fifo_pending, "claimed": counts.fifo_claimed,
                     "held": counts.fifo_held},
            "inbox": {"unread": counts.inbox_unread},
            "liveActors": len(pykka.ActorRegistry.get_all()),
            "threads": threading.active_count(),
            "linear": credential.state().to_json() if credential is not None else
            {"ok": False, "state": "none", "kind": "none",
             "detail": "no Linear credential: the local backend (nothing is written to Linear)"},
        }
        if parts.matrix is not None:
            resp.media["matrix"] = parts.matrix.status()
        if parts.hosts is not None:
            resp.media["hosts"] = hosts_json(parts.hosts)
        if parts.sandbox is not None:
            resp.media["sandbox"] = parts.sandbox.status()


def hosts_json(hosts: Callable[[], list[HostView]]) -> list[dict[str, Any]]:
    """The hosts sharing the work, as status lists them; unreadable, none (the rest of the
    status still answers)."""
    try:
        return [{"id": h.id, "lastSeen": iso(h.last_seen_ms), "alive": h.alive,
                 "running": h.running, "skewMs": h.skew_ms} for h in hosts()]
    except Exception:
        log.exception("hosts unreadable")
        return []


class Following:
    """`GET/PUT /v1/following`: the persisted follow switch."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The switch."""
        resp.media = {"following": self._inbox.following()}

    @falcon.before(lanes(Lane.OPERATOR))
    def on_put(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Set the switch: `{"following": bool}`."""
        value = json_body(req).get("following")
        if not isinstance(value, bool):
            raise BadRequest("following must be true or false")
        self._inbox.set_following(value)
        resp.media = {"following": value}


class InboxPage:
    """`GET /v1/inbox`: forward reads (`after`) and history reads (`before`) of the Linear inbox."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox

    @falcon.before(lanes(Lane.OPERATOR, Lane.ROOM))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """A page of events; reads never consume, but mark what they return as shown."""
        view = req.get_param("view") or "full"
        if view not in ("full", "headlines"):
            raise BadRequest("view must be full or headlines")
        limit = int_param(req, "limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
        after = int_param(req, "after")
        before = int_param(req, "before")
        assert limit is not None
        headlines = view == "headlines"
        if after is not None and before is not None:
            raise BadRequest("after and before cannot be combined")
        if before is not None:
            resp.media = self._inbox.before(cursor=before, limit=limit, headlines=headlines)
        else:
            resp.media = self._inbox.forward(after=after, limit=limit, headlines=headlines)


class InboxAck:
    """`POST /v1/inbox/ack` `{"cursor": C}`: move the read boundary to a shown, unread event."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox

    @falcon.before(lanes(Lane.OPERATOR, Lane.ROOM))
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`{"ackCursor", "unreadCount"}`; 409 not_shown for a cursor no read has shown."""
        cursor = json_body(req).get("cursor")
        if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
            raise BadRequest("cursor must be a non-negative integer")
        resp.media = self._inbox.ack(cursor)


class MetricsPage:
    """`GET /metrics`: Prometheus text, no token (loopback only)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The exposition."""
        resp.content_type = "text/plain; version=0.0.4; charset=utf-8"
        resp.data = self._metrics.render()


@dataclass(frozen=True)
class OperatorParts:
    """What the running service's parts give the operator API. Each may be absent (a test
    of one route, a service without Linear): its routes then answer 503, or say so."""

    supervisor: Any = None  # stop, reset, retry, abandon a conversation
    live_turns: Mapping[str, TurnProgress] | None = None  # the turns' progress, by turn id
    settled: SettledSignal | None = None  # wakes a `linear comment` waiting for its write
    linear: LinearPart | None = None
    echo_memory: Any = None  # releases what an effect of unknown outcome held
    journal: JournalStore | None = None
    matrix: MatrixRoutes | None = None
    hosts: Callable[[], list[HostView]] | None = None  # hosts sharing the work (engine "dbos")
    sandbox: Sandbox | None = None
    checks: Callable[[], list[Check]] | None = None  # every doctor item of the service
    control: ControlPart | None = None  # the owner's control page, its sessions and feed


def create_operator_app(config: Config, store: Store, inbox: Inbox, tokens: TokenRegistry,
                        clock: Clock, metrics: Metrics, parts: OperatorParts = OperatorParts(),
                        secrets: Secrets | None = None) -> falcon.App:
    """The operator WSGI app; without Linear's part, the Linear routes answer 503."""
    linear_part = parts.linear
    tracker = linear_part.tracker if linear_part is not None else None
    credential = linear_part.credential if linear_part is not None else None
    app = falcon.App(media_type=falcon.MEDIA_JSON,
                     middleware=[BearerAuth(tokens, parts.control.sessions if parts.control
                                            else None), ReleaseReadCache(store)])
    errors.install(app)
    app.add_route("/healthz", Health())
    app.add_route("/metrics", MetricsPage(metrics))
    app.add_route("/v1/status", Status(store, inbox, clock, parts))
    app.add_route("/v1/following", Following(inbox))
    app.add_route("/v1/inbox", InboxPage(inbox))
    app.add_route("/v1/inbox/ack", InboxAck(inbox))
    conversations.add_routes(app, store, parts.supervisor)
    linear.add_routes(app, store, clock, tracker, parts.settled, credential)
    install.add_routes(app, linear_part.installer if linear_part is not None else None)
    progress.add_routes(app, parts.live_turns)
    effects.add_routes(app, store, parts.echo_memory)

    def checks() -> list[Check]:
        if parts.checks is not None:
            return parts.checks()
        return service_checks(config, store, secrets) + linear_checks(config, store, None, None)[1]

    doctor.add_routes(app, checks, lambda: linear_part.doctor()[0] if linear_part is not None
                      else linear_checks(config, store, None, None)[0])
    journal_routes.add_routes(app, parts.journal)
    matrix_routes.add_routes(app, parts.matrix)
    control.add_routes(app, parts.control)
    return app
