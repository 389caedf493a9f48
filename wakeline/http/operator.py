"""The operator API (loopback): status, following, inbox reads, metrics; Linear, effects, doctor."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable

import falcon

from wakeline import __version__
from wakeline.clock import Clock, iso
from wakeline.config import Config
from wakeline.errors import BadRequest
from wakeline.http import (
    conversations, doctor, effects, errors, install, journal as journal_routes, linear,
    matrix as matrix_routes, progress,
)
from wakeline.http.auth import BearerAuth, lanes
from wakeline.http.params import int_param, json_body
from wakeline.http.health import Health
from wakeline.models.inbox import DEFAULT_LIMIT, MAX_LIMIT, Inbox
from wakeline.service.metrics import Metrics
from wakeline.models.store import Store
from wakeline.turns.tokens import Lane, TokenRegistry

if TYPE_CHECKING:
    from wakeline.turns.progress import TurnProgress
    from wakeline.journal.entries import JournalStore
    from wakeline.providers.linear.client import RequestBudget
    from wakeline.providers.linear.credentials import Credential
    from wakeline.providers.linear.install import Installer
    from wakeline.providers.linear.workflow import WorkflowRegistry
    from wakeline.providers.matrix.part import MatrixRoutes
    from wakeline.scheduling.base import HostView
    from wakeline.secrets import Secrets

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

    def __init__(self, store: Store, inbox: Inbox, clock: Clock, live_actors: Callable[[], int],
                 credential: Credential | None = None, matrix: MatrixRoutes | None = None,
                 hosts: Callable[[], list[HostView]] | None = None,
                 sandbox: Callable[[], dict[str, Any]] | None = None) -> None:
        self._store = store
        self._sandbox = sandbox
        self._hosts = hosts
        self._inbox = inbox
        self._clock = clock
        self._started = clock.monotonic()
        self._live_actors = live_actors
        self._credential = credential
        self._matrix = matrix

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Version, uptime, following and the counters."""
        counts = self._store.counts()
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
            "liveActors": self._live_actors(),
            "threads": threading.active_count(),
            "linear": self._credential.state().to_json() if self._credential is not None else
            {"ok": False, "state": "none", "kind": "none",
             "detail": "no Linear credential: the local backend (nothing is written to Linear)"},
        }
        if self._matrix is not None:
            resp.media["matrix"] = self._matrix.status()
        if self._hosts is not None:
            resp.media["hosts"] = hosts_json(self._hosts)
        if self._sandbox is not None:
            resp.media["sandbox"] = self._sandbox()


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


def create_operator_app(
    config: Config,
    store: Store,
    inbox: Inbox,
    tokens: TokenRegistry,
    clock: Clock,
    metrics: Metrics,
    supervisor: Any = None,
    *,
    live_actors: Callable[[], int] = lambda: 0,
    tracker: Any = None,
    settled: Any = None,
    secrets: Secrets | None = None,
    budget: RequestBudget | None = None,
    echo_memory: Any = None,
    journal: JournalStore | None = None,
    credential: Credential | None = None,
    installer: Installer | None = None,
    live_turns: Mapping[str, TurnProgress] | None = None,
    workflow: WorkflowRegistry | None = None,
    matrix: MatrixRoutes | None = None,
    extra_checks: Sequence[Callable[[], list[dict[str, Any]]]] = (),
    hosts: Callable[[], list[HostView]] | None = None,
    sandbox: Callable[[], dict[str, Any]] | None = None,
) -> falcon.App:
    """The operator WSGI app; without a `tracker`, the Linear routes answer 503."""
    app = falcon.App(media_type=falcon.MEDIA_JSON,
                     middleware=[BearerAuth(tokens), ReleaseReadCache(store)])
    errors.install(app)
    app.add_route("/healthz", Health())
    app.add_route("/metrics", MetricsPage(metrics))
    app.add_route("/v1/status", Status(store, inbox, clock, live_actors, credential, matrix, hosts,
                                       sandbox))
    app.add_route("/v1/following", Following(inbox))
    app.add_route("/v1/inbox", InboxPage(inbox))
    app.add_route("/v1/inbox/ack", InboxAck(inbox))
    conversations.add_routes(app, store, supervisor)
    linear.add_routes(app, store, clock, tracker, settled, credential)
    install.add_routes(app, installer)
    progress.add_routes(app, live_turns)
    effects.add_routes(app, store, echo_memory)
    doctor.add_routes(app, config, store, secrets, budget, credential, workflow, extra_checks)
    journal_routes.add_routes(app, journal)
    matrix_routes.add_routes(app, matrix)
    return app

