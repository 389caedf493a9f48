"""Matrix routes, wired: each connection's routes, actor and sync loop; the start-up checks,
sends, status and doctor (a route's tools are in `tools.py`).

Built by the composition root only when `[matrix.connections.*]` exist; nio is imported
here, lazily, only then. A connection that cannot run (no token, no matrix-nio, a token of
someone else) switches its routes off with the reason, and the service runs on.
"""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from wakeline.clock import Clock, iso
from wakeline.config import Config, MatrixConnectionConfig
from wakeline.models.approvals import Approval, ApprovalStatus
from wakeline.models.store import Store
from wakeline.providers.matrix.approvals import ApprovalsService
from wakeline.providers.matrix.connection import (
    ConnectionHooks,
    Health,
    MatrixConnection,
    SendRefused,
)
from wakeline.providers.matrix.routes import (
    UNCHECKED,
    RouteBook,
    RouteState,
    check_route,
    identity_problem,
)
from wakeline.providers.matrix.sync import HANDLE_TIMEOUT_SECONDS, LoopThread, SyncLoop
from wakeline.providers.matrix.tools import RouteTools
from wakeline.scheduling.roles import Roles
from wakeline.secrets import Secrets
from wakeline.service.parts import Check, every

log = logging.getLogger(__name__)

DOCTOR_TIMEOUT_SECONDS = 10.0


def txn_id(approval_id: str) -> str:
    """The Matrix transaction id of an approval's send: the same for every attempt, so the
    homeserver answers a retry with the first attempt's event instead of a second one."""
    return f"wakeline.{approval_id}"


@dataclass
class Connection:
    """One configured connection and its running parts (none when it cannot run)."""

    name: str
    config: MatrixConnectionConfig
    routes: RouteBook
    health: Health
    actor: Any = None
    loop: SyncLoop | None = None
    failure: str | None = None
    fingerprint: str | None = None


MATRIX_ROLE = "matrix"
SEND_EVERY_TICKS = 2  # what waits goes out once a second
SWEEP_EVERY_TICKS = 20


class MatrixRoutes:
    """Every Matrix connection of one service: a part (`service.parts`).

    Sync runs where the `matrix` role is held (one host at a time, `scheduling.roles`), so
    two hosts never admit a page twice; so do the sends that wait and the sweep. `wake`
    hears the conversations a page gave work to.
    """

    name = "matrix"

    def __init__(self, config: Config, store: Store, clock: Clock, secrets: Secrets,
                 recorder: Any, wake: Callable[[list[str]], None],
                 registry: CollectorRegistry | None = None, roles: Roles | None = None) -> None:
        self._config = config
        self._roles = roles
        if roles is not None:
            roles.add(MATRIX_ROLE, self.start_sync, self.stop_sync)
        self._store = store
        self._clock = clock
        self._recorder = recorder
        self._wake = wake
        self.connections: dict[str, Connection] = {}
        self._thread = LoopThread()  # every connection's nio runs here (see sync.py)
        self.approvals = ApprovalsService(store, clock, self._send_approved, recorder)
        self.tools = RouteTools(self)  # what a route's turn (and the operator) may ask
        registry = registry or CollectorRegistry()
        self._events = Counter("wakeline_matrix_events", "Matrix timeline events of bound rooms, "
                               "by what became of them (admitted, on_demand, duplicate, or why "
                               "skipped).", ["connection", "outcome"], registry=registry)
        up = Gauge("wakeline_matrix_connection_up", "1 while a Matrix connection syncs (0: "
                   "starting, unreachable, failed, stalled).", ["connection"], registry=registry)
        for name, conn in config.matrix.connections.items():
            routes = [r for r in config.matrix.routes if r.connection == name]
            connection = Connection(name, conn, RouteBook(routes), Health())
            self.connections[name] = connection
            connection.failure = self._build(connection, secrets)
            if connection.failure is not None:
                # Said where the operator looks first too, not only in status and doctor.
                log.error("matrix connection off", extra={"connection": name,
                                                          "reason": connection.failure})
                for route in routes:
                    connection.routes.set(RouteState(route, False, connection.failure))
            up.labels(connection=name).set_function(
                lambda c=connection: 1.0 if self._up(c) else 0.0)

    # --- life ---------------------------------------------------------------------------------

    def _build(self, c: Connection, secrets: Secrets) -> str | None:
        """Start the connection's actor and make its loop; why it cannot run, or None."""
        token_path = self._config.path(c.config.access_token_file)
        token = secrets.matrix_tokens.get(c.name)
        if token is None:
            return (f"no access token in {token_path} "
                    f"(matrix.connections.{c.name}.access_token_file)")
        try:
            from wakeline.providers.matrix import client as nio_client
        except ImportError as exc:
            return f"matrix-nio is not installed ({exc.name}): pip install 'wakeline[matrix]'"
        hooks = ConnectionHooks(
            wake=self._wake,
            inbound=lambda event, cid: self._recorder.matrix_inbound(
                event.envelope, cid, event.received_ms, woke=event.wakes),
            lifecycle=self._recorder.matrix_connection,
            settled=self._settled,
            counted=lambda verdict, n: self._events.labels(connection=c.name,
                                                           outcome=verdict).inc(n),
            send=lambda approval: self._send(c, approval, nio_client.MatrixRefused),
            ready=lambda: c.loop is not None and c.loop.ready,
            sweep=lambda: self.approvals.sweep())
        c.actor = MatrixConnection.start(c.name, c.config, c.routes, self._store, self._clock,
                                         hooks, c.health).proxy()
        store_path = self._config.matrix_store_path(c.name)
        secret = token.get_secret_value()

        def open_client() -> Any:
            client = nio_client.NioClient(c.name, c.config, secret, store_path)
            c.fingerprint = client.fingerprint
            return client

        actor = c.actor
        c.loop = SyncLoop(c.name, self._thread, open_client,
                          lambda client: self._prepare(c, client),
                          lambda page: actor.handle_page(page).get(timeout=HANDLE_TIMEOUT_SECONDS),
                          self._store.rooms.cursor(c.name),
                          poll_ms=int(c.config.sync_timeout_seconds * 1000),
                          retry_max_seconds=c.config.retry_max_seconds)
        return None

    def start(self) -> None:
        """Sync starts with the `matrix` role (the engine's start takes it); without roles,
        at once."""
        if self._roles is None:
            self.start_sync()

    def start_sync(self) -> None:
        """Start every connection's sync loop."""
        for c in self.connections.values():
            if c.loop is not None:
                c.loop.start()

    def stop_sync(self) -> None:
        """Stop the loops (a long poll in flight too): another host took the role over."""
        for c in self.connections.values():
            if c.loop is not None:
                c.loop.stop()

    def stop(self) -> None:
        """Stop the loops (a long poll in flight too), then the actors."""
        self.stop_sync()
        self._thread.stop()
        for c in self.connections.values():
            if c.actor is not None:
                c.actor.actor_ref.stop()
        self._store.close()

    def tick(self, count: int) -> None:
        """Every other beat, where the role is held: each connection sends what waits; now
        and then one of them expires the approvals whose day is over. Only tells."""
        if every(count, SEND_EVERY_TICKS) and (self._roles is None
                                               or self._roles.held(MATRIX_ROLE)):
            self.send_waiting(sweep=every(count, SWEEP_EVERY_TICKS))

    def send_waiting(self, sweep: bool = False) -> None:
        """Each connection sends what waits (approved before a restart, retries); with
        `sweep`, one of them expires the approvals whose day is over."""
        actors = [c.actor for c in self.connections.values() if c.actor is not None]
        for actor in actors:
            actor.tick.defer()
        if sweep and actors:
            actors[0].sweep.defer()

    @property
    def store(self) -> Store:
        """The store (the tools read conversations through it)."""
        return self._store

    @property
    def recorder(self) -> Any:
        """The journal's recorder."""
        return self._recorder

    # --- start-up checks ------------------------------------------------------------------------

    async def _prepare(self, c: Connection, client: Any) -> bool:
        """On the loop: whoami, then each route (joined room, bridge); False stops the
        connection (the token is someone else's). A network error raises: the loop retries."""
        identity = await client.whoami()
        problem = identity_problem(c.config, identity)
        if problem is not None:
            c.failure = problem
            for state in c.routes.all():
                c.routes.set(RouteState(state.route, False, problem))
            log.error("matrix connection refused", extra={"connection": c.name, "reason": problem})
            self._recorder.matrix_connection(c.name, "refused", f"Connection {c.name} is off: "
                                             f"{problem}. Its routes are off.")
            return False
        for state in await self.check(c, client):
            before = c.routes.set(state)
            if not state.on:
                log.error("matrix route switched off", extra={"route": state.route.name,
                                                              "reason": state.detail})
                if before.on or before.detail != state.detail:
                    self._recorder.matrix_connection(c.name, "route_off", f"Route "
                                                     f"{state.route.name} is off: {state.detail}.",
                                                     state.route.name)
            else:
                log.info("matrix route on", extra={"route": state.route.name,
                                                   "detail": state.detail})
        return True

    @staticmethod
    async def check(c: Connection, client: Any) -> list[RouteState]:
        """Every route of the connection against the homeserver now (on its loop)."""
        joined = await client.joined_rooms()
        members = {}
        for state in c.routes.all():
            if state.route.bridge and state.route.room_id in joined:
                members[state.route.room_id] = await client.members(state.route.room_id)
        return [check_route(s.route, joined, members) for s in c.routes.all()]

    # --- sends ----------------------------------------------------------------------------------

    def _settled(self, approval: Approval) -> None:
        """A send settled (sent or failed): journaled, and told to the approvals' watchers."""
        self._recorder.matrix_outbound(approval)
        self.approvals.changed(approval)

    def can_send(self, connection: str) -> bool:
        """True when the connection is up to send now (an approve may wait for its event id)."""
        c = self.connections.get(connection)
        return c is not None and c.actor is not None and c.loop is not None and c.loop.ready

    def _send_approved(self, approval: Approval) -> None:
        c = self.connections.get(approval.connection)
        if c is not None and c.actor is not None:
            c.actor.send_approved.defer(approval.id)

    @staticmethod
    def _send(c: Connection, approval: Approval, refused: type[Exception]) -> Any:
        """On the loop: recheck the room, then send once with the approval's transaction id."""
        assert c.loop is not None
        state = c.routes.get(approval.route)
        bridge = state.route.bridge if state is not None else ""

        async def work(client: Any) -> str:
            joined = await client.joined_rooms()
            if approval.room_id not in joined:
                raise SendRefused(f"the owner is no longer in {approval.room_id}", route_off=True)
            if bridge and bridge not in await client.members(approval.room_id):
                raise SendRefused(f"the bridge {bridge} is not in {approval.room_id}",
                                  route_off=True)
            try:
                return str(await client.send_text(approval.room_id, approval.body,
                                                  txn_id(approval.id)))
            except refused as exc:
                raise SendRefused(str(exc)) from None

        return c.loop.schedule(work)

    # --- status and doctor ------------------------------------------------------------------

    def _up(self, c: Connection) -> bool:
        held = c.health.snapshot()[0]
        return c.loop is not None and c.loop.state().state == "ok" and not (held and held.stalled)

    def status(self) -> dict[str, Any]:
        """What `GET /v1/status` shows of Matrix."""
        out = []
        for c in self.connections.values():
            held, counts, limited = c.health.snapshot()
            loop = c.loop.state() if c.loop is not None else None
            state = "failed" if c.failure or loop is None else (
                "stalled" if held and held.stalled else loop.state)
            out.append({
                "name": c.name, "userId": c.config.user_id, "deviceId": c.config.device_id,
                "state": state, "detail": c.failure or (loop.detail if loop else ""),
                "retryInSeconds": loop.retry_in_seconds if loop else None,
                "held": {"roomId": held.room_id, "eventId": held.event_id,
                         "since": iso(held.since_ms), "stalled": held.stalled} if held else None,
                "events": counts, "limited": limited,
                "routes": [s.to_json() for s in c.routes.all()],
            })
        pending = len(self.approvals.recent(ApprovalStatus.PENDING, limit=1000))
        return {"connections": out, "approvals": {"pending": pending}}

    def checks(self) -> list[Check]:
        """Doctor items: each connection (its device, its sync), its token file, and each
        route, checked again now when the homeserver answers within a few seconds."""
        items: list[Check] = []
        for c in self.connections.values():
            items.append(self._token_item(c))
            status = next(s for s in self.status()["connections"] if s["name"] == c.name)
            device = f"device {c.config.device_id}" + (f" (ed25519 {c.fingerprint})"
                                                       if c.fingerprint else "")
            if status["state"] == "stalled":
                held = status["held"]
                items.append(_item(f"matrix {c.name}", False, f"{device}: stalled since "
                                   f"{held['since']}: event {held['eventId']} in {held['roomId']} "
                                   "cannot be decrypted", "the sender's client must share its "
                                   "keys with this device: verify it (docs/operations.md)"))
            else:
                ok = status["state"] == "ok"
                items.append(_item(f"matrix {c.name}", ok, f"{device}: {status['state']}"
                                   + (f": {status['detail']}" if status["detail"] else ""),
                                   None if ok else "see docs/operations.md, Matrix routes"))
            live = self._recheck_all(c)
            for state in c.routes.all():
                now = live.get(state.route.name)
                if state.on and now is not None and not now.on:
                    if c.routes.switch_off(state.route.name, now.detail):
                        self._recorder.matrix_connection(
                            c.name, "route_off", f"Route {state.route.name} is off: {now.detail}.",
                            state.route.name)
                    state = c.routes.get(state.route.name) or state
                detail = state.detail if state.on else f"off: {state.detail}"
                waiting = state.detail == UNCHECKED
                items.append(_item(f"matrix route {state.route.name}", state.on,
                                   f"{state.route.room_id} via {c.name}, {state.route.activation}: "
                                   f"{detail}", None if state.on else
                                   f"it is checked as soon as the homeserver answers (matrix "
                                   f"{c.name})" if waiting else
                                   "fix what the detail names, then restart wakeline"))
        return items

    def _recheck_all(self, c: Connection) -> dict[str, RouteState]:
        if c.loop is None or not c.loop.ready:
            return {}
        try:
            states = c.loop.submit(lambda client: self.check(c, client), DOCTOR_TIMEOUT_SECONDS)
        except Exception as exc:  # the homeserver is slow or down: the last states stand
            log.warning("matrix doctor recheck failed", extra={"connection": c.name,
                                                               "error": exc.__class__.__name__})
            return {}
        return {s.route.name: s for s in states}

    def _token_item(self, c: Connection) -> Check:
        path = self._config.path(c.config.access_token_file)
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            return _item(f"matrix {c.name} token", False, f"{path}: missing",
                         f"put the access token in {path} (chmod 600), then restart")
        if mode & 0o077:
            return _item(f"matrix {c.name} token", False,
                         f"{path}: mode {mode:04o}, should be 0600", f"chmod 600 {path}")
        return _item(f"matrix {c.name} token", True, f"{path} (mode {mode:04o})")


def _item(name: str, ok: bool, detail: str, fix: str | None = None) -> Check:
    return Check(name, ok, detail, fix if not ok else None)
