"""The composition root: config in, a running service out.

`build_service` makes each part of the service from its collaborators and lists them in
start order (`service.parts`); `Service` starts them in that order and stops them in
reverse, and its ticker gives every part its beat. `serve` is the only place that reads
the environment and the signals.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping, Sequence

import pykka

from wakeline.actors.tracker import OWNERSHIP_BACKOFF_SECONDS
from wakeline.admission.echoes import EchoPart
from wakeline.admission.part import AdmissionPart
from wakeline.admission.router import Router
from wakeline.clock import Clock, SystemClock
from wakeline.config import Config, route_repos
from wakeline.control.part import ControlPart
from wakeline.errors import ConfigError
from wakeline.http.ingress import create_ingress_app
from wakeline.http.operator import OperatorParts, create_operator_app
from wakeline.http.server import Listener
from wakeline.journal.part import JournalPart
from wakeline.models.inbox import Inbox
from wakeline.models.store import Store
from wakeline.models.views import show_conversation
from wakeline.providers.discord.doctor import routes_with_threads
from wakeline.providers.linear.part import LinearPart
from wakeline.providers.linear.people import Kind, People
from wakeline.providers.linear.workflow import WorkflowRegistry
from wakeline.sandbox.part import Sandbox, require_sandbox
from wakeline.sandbox.probe import Probe, probe_for
from wakeline.scheduling.engine import engine_shares, host_id_of, store_target
from wakeline.scheduling.part import EnginePart
from wakeline.secrets import Secrets, create_secret_file, load_secrets, new_token
from wakeline.service.checks import service_checks
from wakeline.service.events import Events
from wakeline.service.extras import require_extras
from wakeline.service.logs import setup_logging
from wakeline.service.memory import limit_malloc_arenas
from wakeline.service.metrics import Metrics
from wakeline.service.parts import Check, Part, Parts
from wakeline.service.ticker import Ticker
from wakeline.turns.cpus import pin_to_one_cpu
from wakeline.turns.part import TurnsPart
from wakeline.turns.tokens import TokenRegistry
from wakeline.turns.workspaces import Workspaces

TICK_SECONDS = 0.5
OPERATE_TIMEOUT_SECONDS = 15

log = logging.getLogger(__name__)


def prepare_state(config: Config, environ: Mapping[str, str]) -> Secrets:
    """Create what is missing (state dir, operator token, webhook secret); read every secret."""
    config.state_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    create_secret_file(config.operator_token_path, new_token())
    if not environ.get("WAKELINE_LINEAR_WEBHOOK_SECRET", "").strip():
        create_secret_file(config.path(config.linear.webhook_secret_file), new_token())
    return load_secrets(config, dict(environ))


def check_routes(config: Config) -> None:
    """A route's repository (each of its `repos`) must be a git repository with its base,
    before anything runs.

    Raises:
        ConfigError: naming the key (`routes.N.repo`, `routes.N.repos.M.path`) and what is wrong.
    """
    workspaces = Workspaces(config.workspaces_path)
    for key, path, base in route_repos(config):
        reason = workspaces.check_repo(config.path(path), base)
        if reason is not None:
            raise ConfigError(key, reason)


@dataclass
class Service:
    """One wakeline process: its store and its parts, in start order."""

    config: Config
    clock: Clock
    store: Store
    secrets: Secrets
    metrics: Metrics
    tokens: TokenRegistry
    inbox: Inbox
    parts: Parts
    journal: JournalPart
    linear: LinearPart
    turns: TurnsPart
    admission: AdmissionPart
    ingress: Listener
    operator: Listener
    ticker: Ticker
    matrix: Any = None  # MatrixRoutes, with [matrix.connections.*] (decision 0024)
    discord: Any = None  # DiscordService, with a bot token (decision 0023)
    control: ControlPart | None = None  # the owner's control page (decision 0037)
    stopped: bool = False

    @property
    def turn_env(self) -> Any:
        """What every turn slot shares (tests shorten its waits)."""
        return self.turns.env

    @property
    def tracker(self) -> Any:
        """The tracker actor's proxy."""
        return self.linear.tracker

    @property
    def supervisor(self) -> Any:
        """The supervisor actor's proxy."""
        return self.turns.supervisor

    def checks(self) -> list[Check]:
        """Every doctor item: the service's own, then each part's."""
        return service_checks(self.config, self.store, self.secrets) + self.parts.checks()

    def start(self) -> None:
        """Start every part in order, then the ticker."""
        self.parts.start()
        self.ticker.start()
        log.info("wakeline serving", extra={
            "webhooks": f"{self.ingress.host}:{self.ingress.port}",
            "operator": f"{self.operator.host}:{self.operator.port}"})

    def stop(self) -> None:
        """Stop the ticker, every part in reverse order, then close the store (idempotent)."""
        if self.stopped:
            return
        self.stopped = True
        self.ticker.stop()
        self.parts.stop()
        pykka.ActorRegistry.stop_all()  # anything started meanwhile
        # Every pooled connection closes (on PostgreSQL each holds a server session); a runner
        # still finishing after its grace fails its last write, and recovery re-runs its turn.
        self.store.dispose()
        log.info("wakeline stopped")


def build_service(
    config: Config,
    secrets: Secrets,
    clock: Clock | None = None,
    *,
    base_env: Mapping[str, str] | None = None,
    tick_seconds: float = TICK_SECONDS,
    agent_cpus: frozenset[int] | None = None,
    ownership_backoff_seconds: Sequence[float] = OWNERSHIP_BACKOFF_SECONDS,
    discord_tuning: Any = None,
    sandbox_probe: Probe | None = None,
) -> Service:
    """Make every part of a service. The actors start with their parts (recovery work such
    as the outbox's begins here); threads that take work from outside start with `start`.
    `agent_cpus`: the CPUs
    agents may use when the service's own threads were confined to one
    (`cpus.pin_to_one_cpu`); `discord_tuning`: shorter waits (tests); `sandbox_probe`: what
    `serve` found of bubblewrap (probed here when not given).

    Raises:
        ConfigError: `sandbox.mode = "required"` and bubblewrap cannot run here.
    """
    clock = clock or SystemClock()
    if secrets.operator_token is None:
        raise ValueError("an operator token is required (prepare_state creates one)")
    probe = sandbox_probe or probe_for(config)
    require_sandbox(config, probe)  # before anything is opened
    config.state_path.mkdir(parents=True, exist_ok=True, mode=0o700)  # secrets, the journal
    host_id = host_id_of(config)
    target = store_target(config, secrets)
    shared = str(target) if engine_shares(config) else ""
    store = Store.open(target, clock, config.inbox.following, host=host_id)
    events = Events()
    metrics = Metrics(store.depths)
    metrics.watch_turns(events)
    tokens = TokenRegistry(secrets.operator_token.get_secret_value())
    workflow = WorkflowRegistry({r.name: r.teams for r in config.routes if r.planning})
    # Who is a person (invariant 14): Linear's answers so far; the tracker asks for more.
    people = People((user_id, Kind(kind)) for user_id, kind in store.people.known())
    router = Router(config, workflow, people)

    journal = JournalPart(config, store, clock, secrets.values(), metrics, people, events, host_id)
    recorder = journal.recorder
    sandbox = Sandbox(config, probe, on_refused=recorder.proxy_refused)
    # Bound now, so the parts that name the operator API (a turn's API URL, the app's install
    # redirect) know its address; each serves once its app is mounted.
    server = config.server
    ingress = Listener(None, host=server.webhook_host, port=server.webhook_port,
                       threads=server.ingress_threads, max_body_bytes=server.max_body_bytes,
                       name="ingress")
    operator = Listener(None, host=server.operator_host, port=server.operator_port,
                        threads=server.threads, max_body_bytes=server.max_body_bytes,
                        name="operator", unix_socket=str(sandbox.api_socket)
                        if sandbox.api_socket is not None else None, watch_clients=True)
    admission = AdmissionPart(config, store, clock, router, events)
    linear = LinearPart(config, secrets, clock, store, shared_database=shared, metrics=metrics,
                        recorder=recorder, router=router, workflow=workflow, people=people,
                        events=events, person_known=admission.person_known,
                        operator_url=operator.url,
                        ownership_backoff_seconds=ownership_backoff_seconds)
    echo = EchoPart(config, store, clock, metrics, events, linear.tracker)
    turns = TurnsPart(config, store, clock, tokens=tokens, secret_values=secrets.values(),
                      events=events, sandbox=sandbox, linear=linear, recorder=recorder,
                      metrics=metrics, workflow=workflow, api_url=operator.url,
                      base_env=os.environ if base_env is None else base_env,
                      agent_cpus=agent_cpus, host_id=host_id, shared_database=shared)
    engine = EnginePart(turns.scheduler)
    matrix = matrix_part(config, store, clock, secrets, recorder, events, metrics, engine)
    discord = discord_part(config, secrets, clock, store, admission, turns, recorder, events,
                           engine, discord_tuning, matrix.approvals if matrix else None)

    # After the operator listener, so it stops first: its open feeds end before the listener
    # waits out its requests.
    control = ControlPart(config, store, clock, tokens, secrets.values(), events,
                          approvals=matrix.approvals if matrix else None)
    ingress.mount(create_ingress_app(config, linear.webhooks, admission.writer, clock, metrics,
                                     router))
    parts = Parts(p for p in (journal, sandbox, linear, echo, turns, admission, engine, matrix,
                              discord, ingress, operator, control) if p is not None)
    service = Service(config, clock, store, secrets, metrics, tokens, Inbox(store), parts,
                      journal, linear, turns, admission, ingress, operator,
                      Ticker(parts.tick, tick_seconds), matrix=matrix, discord=discord,
                      control=control)
    operator.mount(create_operator_app(
        config, store, service.inbox, tokens, clock, metrics, OperatorParts(
            supervisor=turns.supervisor, live_turns=turns.env.live, settled=turns.env.settled,
            linear=linear, echo_memory=echo.actor, journal=journal.entries, matrix=matrix,
            hosts=engine.hosts, sandbox=sandbox, checks=service.checks, control=control),
        secrets))
    return service


def matrix_part(config: Config, store: Store, clock: Clock, secrets: Secrets, recorder: Any,
                events: Events, metrics: Metrics, engine: EnginePart) -> Any:
    """Matrix routes (`MatrixRoutes`), or None without a connection (matrix-nio is then never
    imported: it is an optional extra)."""
    if not config.matrix.connections:
        return None
    from wakeline.providers.matrix.part import MatrixRoutes

    return MatrixRoutes(config, store, clock, secrets, recorder, events.joined, metrics.registry,
                        roles=engine.roles)


def discord_part(config: Config, secrets: Secrets, clock: Clock, store: Store,
                 admission: AdmissionPart, turns: TurnsPart, recorder: Any, events: Events,
                 engine: EnginePart, tuning: Any = None, approvals: Any = None) -> Part | None:
    """Discord control threads (`DiscordService`), or None without a bot token (Discord off:
    nothing of it, discord.py included, is imported). `approvals`: the Matrix approvals
    decided in threads."""
    if secrets.discord_token is None:
        keys = [key for key, _ in routes_with_threads(config)]
        if keys:  # Discord off (CONTRACT section 8), said here and by `doctor`
            log.warning("routes name a Discord channel but no bot token is set: Discord is off",
                        extra={"keys": keys, "fix": "put the bot token in discord.token_file "
                               "or $WAKELINE_DISCORD_TOKEN, then restart"})
        return None
    from wakeline.providers.discord.part import DiscordService  # only with a token

    return DiscordService(
        config, secrets.discord_token.get_secret_value(), secrets.values(), store, clock,
        admit=admission.submit, operate=turns.operate, status=partial(show_conversation, store),
        journal=recorder.lifecycle, tuning=tuning, approvals=approvals, roles=engine.roles,
        events=events)


def serve(config: Config, environ: Mapping[str, str] | None = None) -> int:
    """Run until SIGINT or SIGTERM; returns the process exit code."""
    environ = os.environ if environ is None else environ
    # Everything wakeline writes (database, WAL, journal, prompts) is the owner's alone.
    os.umask(0o077)
    require_extras(config, environ)  # before anything is created or started (decision 0032)
    check_routes(config)
    probe = probe_for(config)  # once: the service and its doctor go by what it found
    require_sandbox(config, probe)
    secrets = prepare_state(config, environ)
    setup_logging(config.log_level, secrets.values())
    # Before any thread starts: every thread of the service inherits the one CPU, and they
    # share two malloc arenas (wakeline/service/memory.py).
    agent_cpus = pin_to_one_cpu() if config.server.single_cpu else None
    limit_malloc_arenas(environ)
    service = build_service(config, secrets, agent_cpus=agent_cpus, sandbox_probe=probe)
    # What start-up built (modules, config, actors) lives as long as the process: kept out of
    # the collector's sight, a full collection no longer walks it. Without this, one came
    # every few hundred turns and stalled every thread for 40-100 ms (bench/discord.py p99).
    gc.collect()
    gc.freeze()
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    service.start()
    print(f"wakeline: webhooks on http://{service.ingress.host}:{service.ingress.port}, "
          f"operator API on http://{service.operator.host}:{service.operator.port}",
          flush=True)
    while not stop.wait(1.0):
        pass
    service.stop()
    return 0
