"""The composition root: config in, a running service out.

`build_service` wires every collaborator from a `Config`, `Secrets` and a
`Clock`; `serve` is the only place that reads the environment and signals.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pykka

from wakeline.turns.env import TurnEnv
from wakeline.actors.echo_memory import EchoMemory
from wakeline.actors.journal import Journal
from wakeline.actors.supervisor import Supervisor, run_one_turn
from wakeline.actors.tracker import OWNERSHIP_BACKOFF_SECONDS, Tracker
from wakeline.admission.writer import AdmissionWriter
from wakeline.clock import Clock, SystemClock, to_ms
from wakeline.config import Config
from wakeline.turns.cpus import pin_to_one_cpu
from wakeline.errors import ConfigError
from wakeline.service.extras import require_extras
from wakeline.turns.forkserver import ForkServer
from wakeline.http.ingress import create_ingress_app
from wakeline.http.operator import create_operator_app
from wakeline.http.server import Listener
from wakeline.models.inbox import Inbox
from wakeline.journal.entries import JournalStore
from wakeline.journal.file import JournalFile
from wakeline.service.logs import setup_logging
from wakeline.service.memory import limit_malloc_arenas
from wakeline.service.metrics import Metrics
from wakeline.models.envelopes import ControlMessage
from wakeline.journal.table import JournalTable
from wakeline.models.outbox import EffectKind
from wakeline.models.retention import Retention
from wakeline.models.schema import INBOX_CONVERSATION_ID
from wakeline.models.states import Outcome
from wakeline.models.store import Store
from wakeline.models.views import show_conversation
from wakeline.providers.discord.doctor import routes_with_threads
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.providers.linear.client import LinearClient, RequestBudget
from wakeline.providers.linear.credentials import (
    AppCredential, AuthState, Credential, StaticCredential,
)
from wakeline.providers.linear.install import Installed, Installer
from wakeline.providers.linear.oauth import TokenEndpoint
from wakeline.providers.linear.people import Kind, People
from wakeline.providers.linear.progress import ProgressBoard
from wakeline.providers.linear.shared_tokens import SharedTokens
from wakeline.providers.linear.token_file import TokenFile
from wakeline.providers.linear.workflow import WorkflowRegistry
from wakeline.journal.recorder import Recorder
from wakeline.admission.router import Router
from wakeline.sandbox.part import Sandbox, require_sandbox
from wakeline.sandbox.probe import Probe, probe_for
from wakeline.scheduling.base import Scheduler
from wakeline.scheduling.engine import engine_shares, host_id_of, shared_engine, store_target
from wakeline.scheduling.local import LocalScheduler
from wakeline.secrets import Secrets, create_secret_file, load_secrets, new_token
from wakeline.service.ticker import Ticker
from wakeline.turns.tokens import TokenRegistry
from wakeline.turns.workspaces import Workspaces

TICK_SECONDS = 0.5
# The journal shares one fsync among the notes of this long (real seconds): a few per turn
# at hundreds of turns a second would otherwise cost an fsync each.
JOURNAL_GROUP_WINDOW_SECONDS = 0.02
_LIFECYCLE_TEXT = {
    "terminal": "The issue was closed: the conversation ends {}.",
    "reopened": "The issue was reopened{}.",
    "owned": "The issue moved into the route's projects ({}): its events wake the agent again.",
    "not_owned": "The issue moved out of the route's projects ({}): its events no longer wake the agent.",
    "plan_requested": "A person asked for a plan: a planning turn (read-only) runs{}.",
    "plan_revision_requested": "A comment on the waiting plan: the agent plans again{}.",
    "plan_withdrawn": "The issue went back to Ready for Planning: every approval is withdrawn{}.",
    "approved": "The plan was approved ({}): the execution lease is taken and the agent starts.",
    "approval_refused": "An approval was refused: {}.",
    "refused": "Not acted on: {}.",
}
# Ownership lookups wait at least 5 s after a failure: every fourth tick is soon enough.
OWNERSHIP_EVERY_TICKS = 4
# Echo memory resolves on every settled write; its sweep (and a pruning once a minute)
# only catches what a lost message left behind.
ECHO_SWEEP_EVERY_TICKS = 20
# Matrix connections send what waits (approved before a restart, retries) once a second.
MATRIX_EVERY_TICKS = 2
# The store's retention begins a pass once a minute (`[store] keep_days`, decision 0030).
STORE_PRUNE_EVERY_TICKS = 120

log = logging.getLogger(__name__)


def prepare_state(config: Config, environ: Mapping[str, str]) -> Secrets:
    """Create what is missing (state dir, operator token, webhook secret); read every secret."""
    config.state_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    create_secret_file(config.operator_token_path, new_token())
    if not environ.get("WAKELINE_LINEAR_WEBHOOK_SECRET", "").strip():
        create_secret_file(config.path(config.linear.webhook_secret_file), new_token())
    return load_secrets(config, dict(environ))


def token_endpoint(config: Config, secrets: Secrets, clock: Clock) -> TokenEndpoint | None:
    """The OAuth app's token endpoint client; None without a client secret."""
    if secrets.client_secret is None:
        return None
    return TokenEndpoint(config.linear.oauth_url, config.linear.client_id,
                         secrets.client_secret.get_secret_value(), clock)


def linear_credential(config: Config, secrets: Secrets, clock: Clock,
                      store: Store | None = None, database_url: str = "") -> Credential | None:
    """The app's own token when `linear.client_id` is set, else the API key, else none.
    Hosts that share a database (`database_url`) share the app's tokens there."""
    if config.linear.client_id:
        own = TokenFile(config.oauth_token_path)
        tokens = SharedTokens(store, database_url, legacy=own) \
            if store is not None and database_url else own
        return AppCredential(config.linear.grant, config.linear.client_id, tokens,
                             token_endpoint(config, secrets, clock), clock, secrets.remember)
    if secrets.linear_api_key is not None:
        return StaticCredential(secrets.linear_api_key.get_secret_value())
    return None


def workspaces_of(config: Config) -> Workspaces:
    """The conversations' workspaces, under `<state_dir>/workspaces`."""
    return Workspaces(config.workspaces_path)


def check_routes(config: Config, workspaces: Workspaces) -> None:
    """A route's repository must be a git repository with its base, before anything runs.

    Raises:
        ConfigError: naming the route's `repo` key and what is wrong.
    """
    for index, route in enumerate(config.routes):
        if route.repo:
            reason = workspaces.check_repo(config.path(route.repo), route.default_branch)
            if reason is not None:
                raise ConfigError(f"routes.{index}.repo", reason)


@dataclass
class Service:
    """Every running part of one wakeline process."""

    config: Config
    clock: Clock
    store: Store
    writer: AdmissionWriter
    metrics: Metrics
    tokens: TokenRegistry
    inbox: Inbox
    ingress: Listener
    operator: Listener
    supervisor: Any
    tracker: Any
    echo_memory: Any
    journal: Any
    journal_file: JournalStore
    ticker: Ticker
    turn_env: TurnEnv
    scheduler: Scheduler
    stopped: bool = False
    matrix: Any = None  # MatrixRoutes, when [matrix.connections.*] exist (decision 0024)
    discord: Any = None  # DiscordService when a bot token is configured
    sandbox: Sandbox | None = None  # confines the turns (decision 0034)

    def start(self) -> None:
        """Start the sandbox's proxy and the fork server, recover the FIFO, then the writer, the
        listeners, the ticker."""
        if self.sandbox is not None:
            self.sandbox.start()
        self.turn_env.forkserver.start()
        self.supervisor.recover().get()
        self.writer.start()
        # After recovery: a shared engine's first jobs resume this host's turns. After the
        # writer: the roles it starts here (Matrix sync, Discord's Gateway) admit through it.
        self.scheduler.start()
        self.ingress.start()
        self.operator.start()
        self.ticker.start()
        log.info(
            "wakeline serving",
            extra={"webhooks": f"{self.ingress.host}:{self.ingress.port}",
                   "operator": f"{self.operator.host}:{self.operator.port}"},
        )

    def stop(self) -> None:
        """Stop accepting, drain admissions, stop actors, close the store (idempotent)."""
        if self.stopped:
            return
        self.stopped = True
        if self.discord is not None:
            self.discord.stop()  # first: no thread message arrives once the writer stops
        self.ingress.stop()
        self.writer.stop()
        if self.matrix is not None:
            self.matrix.stop()  # no page is admitted after this; the cursor stays committed
        self.ticker.stop()
        self.operator.stop()
        self.scheduler.stop()  # no job starts a turn here once the slots stop
        self.supervisor.actor_ref.stop()
        self.tracker.actor_ref.stop()
        self.echo_memory.actor_ref.stop()
        # Every actor but the journal (the conversation actors wait out their kill grace),
        # then the journal, so it writes what the others told it on their way out.
        for ref in pykka.ActorRegistry.get_all():
            if ref.actor_urn != self.journal.actor_ref.actor_urn:
                ref.stop()
        self.journal.actor_ref.stop()
        pykka.ActorRegistry.stop_all()  # anything started meanwhile
        self.turn_env.forkserver.stop()  # after the slots: their agents had their grace period
        if self.sandbox is not None:
            self.sandbox.stop()
        if self.turn_env.runners is not None:
            self.turn_env.runners.shutdown(wait=False, cancel_futures=True)
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
    """Wire a service; nothing runs until `start`. `agent_cpus`: the CPUs agents may use
    when the service's own threads were confined to one (`cpus.pin_to_one_cpu`);
    `discord_tuning`: a `DiscordTuning` with shorter waits (tests); `sandbox_probe`: what
    `serve` found of bubblewrap (probed here when not given).

    Raises:
        ConfigError: `sandbox.mode = "required"` and bubblewrap cannot run here.
    """
    clock = clock or SystemClock()
    if secrets.operator_token is None:
        raise ValueError("an operator token is required (prepare_state creates one)")
    sandbox_probe = sandbox_probe or probe_for(config)
    require_sandbox(config, sandbox_probe)  # before anything is opened
    # The state dir holds secrets and the journal whichever backend holds the store.
    config.state_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    host_id = host_id_of(config)
    target = store_target(config, secrets)
    store = Store.open(target, clock, config.inbox.following, host=host_id)

    def depths() -> dict[str, int]:
        counts = store.counts()
        return {"fifo_pending": counts.fifo_pending, "fifo_claimed": counts.fifo_claimed,
                "inbox_unread": counts.inbox_unread}

    metrics = Metrics(depths)
    tokens = TokenRegistry(secrets.operator_token.get_secret_value())
    inbox = Inbox(store)
    workflow = WorkflowRegistry({r.name: r.teams for r in config.routes if r.planning})
    # Who is a person (invariant 14): Linear's answers so far; the tracker asks for more.
    people = People((user_id, Kind(kind)) for user_id, kind in store.people.known())
    router = Router(config, workflow, people)
    # One journal for every host that shares the database; a file on one host.
    journal_file: JournalStore = JournalTable(store.db, clock, secrets.values(), host=host_id) \
        if engine_shares(config) else JournalFile(config.journal_path, clock, secrets.values())
    journal = Journal.start(journal_file, metrics.journal_failed,
                            group_window=JOURNAL_GROUP_WINDOW_SECONDS).proxy()
    recorder = Recorder(journal, lambda: to_ms(clock.now()), owner_user_ids=config.linear.owner_user_ids,
                        owner_emails=config.linear.owner_emails, people=people)
    operator_url: list[str] = []
    sandbox = Sandbox(config, sandbox_probe, on_refused=lambda cid, key, text,
                      source: recorder.lifecycle(cid, "proxy_refused", text, source=source,
                                                 issue_key=key))
    turn_env = TurnEnv(
        store=store,
        clock=clock,
        config=config,
        tokens=tokens,
        secret_values=secrets.values(),
        api_url=lambda: operator_url[0],
        base_env=dict(os.environ if base_env is None else base_env),
        workspaces=workspaces_of(config),
        # Agents start in the fork server, which keeps every CPU the service was given.
        forkserver=ForkServer(agent_cpus),
        workflow=workflow,
        sandbox=sandbox,
        # One runner per turn slot: a slot is freed only once its runner has finished.
        runners=ThreadPoolExecutor(config.agent.max_concurrent_turns,
                                   thread_name_prefix="turn-runner"),
    )
    turn_env.events.turn_finished.subscribe(lambda finished: metrics.turn(finished.result.value))
    turn_env.events.turn_failed.subscribe(lambda turn, error, stalled: metrics.turn("failed"))
    turn_env.events.turn_started.subscribe(recorder.turn_started)
    turn_env.events.turn_finished.subscribe(recorder.turn_finished)
    turn_env.events.turn_failed.subscribe(recorder.turn_failed)
    turn_env.events.lifecycle.subscribe(
        lambda cid, event, text: recorder.lifecycle(cid, event, text, source=f"{cid}:{to_ms(clock.now())}"))
    client: LinearClient | None = None
    budget: RequestBudget | None = None
    credential = linear_credential(config, secrets, clock, store,
                                   str(target) if engine_shares(config) else "")
    if credential is not None:
        budget = RequestBudget(config.linear.requests_per_hour, clock)
        client = LinearClient(config.linear.api_url, credential, budget, secrets.values())
        turn_env.linear_usable = credential.usable
        metrics.watch_linear_auth(lambda: credential.state().ok)
    board = ProgressBoard(int(config.agent.progress_interval_seconds * 1000))

    def owner_of(team_key: str | None, project_id: str | None) -> tuple[str, bool] | None:
        route = router.owner(team_key, project_id)
        return (route.name, route.trust == "public") if route is not None else None

    tracker = Tracker.start(store, client, clock, config.linear.max_concurrent_requests,
                            owner_of=owner_of,
                            ownership_backoff_seconds=ownership_backoff_seconds,
                            progress=board, progress_skipped=metrics.progress_was_skipped,
                            workflow=workflow if workflow.routes() else None,
                            people=people).proxy()
    turn_env.kick_tracker = lambda: tracker.kick.defer()

    def person_known(actor_id: str) -> None:
        # On the tracker's worker that asked: the entries held for this user are decided
        # again through admission, one transaction each, in FIFO order.
        for held in store.people.waiting(actor_id):
            writer.submit(router.recheck_plan(held, to_ms(clock.now())),
                          config.server.admission_wait_seconds)

    tracker.subscribe_people(person_known)

    def progress_to_linear(sessions: list[str], items: list[Any]) -> None:
        # On the runner thread: a lock, and a message only when a session wakes up.
        if credential is None or not credential.usable():
            metrics.progress_was_skipped(len(items) * len(sessions))  # no token: dropped
        elif board.offer(sessions, items):
            tracker.progress_waiting.defer()

    def progress_ended(sessions: list[str]) -> None:
        if board.close(sessions):  # most turns showed nothing: no message for the tracker
            tracker.progress_waiting.defer()

    turn_env.progress_to_linear = progress_to_linear
    turn_env.progress_ended = progress_ended
    turn_env.journal_progress = recorder.progress
    turn_env.lines_skipped = metrics.stream_lines_were_skipped
    tracker.subscribe(turn_env.settled.notify)
    # Hosts sharing the database: the engine hands this supervisor the turns it runs here.
    here: list[Any] = []
    engine = shared_engine(
        config, str(target), store, run_turn=lambda cid: run_one_turn(here[0], cid),
        repair_host=lambda host: here[0].repair_host(host).get(timeout=60),
        running=lambda: len(turn_env.live))
    supervisor = Supervisor.start(turn_env, config.agent.max_concurrent_turns, engine).proxy()
    here.append(supervisor)
    scheduler: Scheduler = engine or LocalScheduler(host_id, lambda: len(turn_env.live))
    def ownership_settled(conversation_id: str, owned: bool) -> None:
        supervisor.wake.defer([conversation_id])
        recorder.lifecycle(conversation_id, "owned" if owned else "not_owned",
                           "Linear says the route owns this issue." if owned else
                           "Linear says this issue is not in the route's projects: no turn.",
                           source=f"{conversation_id}:lookup")

    tracker.subscribe_ownership(ownership_settled)

    def matrix_woke(ids: list[str]) -> None:
        supervisor.wake.defer(ids)
        if discord is not None:
            discord.joined(ids)  # a room's thread, reconciled as after an admission

    matrix = None
    if config.matrix.connections:
        # Only now is matrix-nio imported (an optional extra): a Matrix-free wakeline never is.
        from wakeline.providers.matrix.part import MatrixRoutes

        matrix = MatrixRoutes(config, store, clock, secrets, recorder, matrix_woke,
                              metrics.registry)
        scheduler.roles.add("matrix", matrix.start, matrix.stop_sync)
    retention = Retention.of(store.db, config.store.keep_days, config.store.dedupe_hours,
                             metrics.pruned)
    echo_memory = EchoMemory.start(store, clock, lambda ids: supervisor.wake.defer(ids),
                                   config.linear.echo_window_seconds * 1000, retention).proxy()
    tracker.subscribe_intents(lambda ids: echo_memory.intents.defer(ids))

    def mutation_settled(write: Any) -> None:
        # Only a mutation can hold deliveries: activities and comments need not wake echo memory.
        if write.kind in (EffectKind.MUTATION, EffectKind.UPDATE):
            echo_memory.settled.defer(write)

    tracker.subscribe(mutation_settled)
    tracker.subscribe(lambda w: recorder.outbound(w.effect_id, w.kind.value, w.target, w.state.value))

    def admitted(admitted: list[tuple[Any, Any]]) -> None:
        results = [r for _, r in admitted]
        woke = [cid for r in results for cid in r.wake_ids]
        if woke:
            supervisor.wake.defer(woke)
        if any(r.effects or r.wake_ids for r in results):
            tracker.kick.defer()  # lifecycle changes (a closure, a stop) may have prepared answers
        if any(r.lookup_ids for r in results):
            tracker.check_ownership.defer()  # off the ingress path: the tracker asks Linear
        if any(r.person_ids for r in results):
            tracker.check_people.defer()  # a person or an app? held until Linear says
        for plan, r in admitted:
            record_admission(plan, r)
        if discord is not None:
            discord.admitted(results)  # threads to ensure, close or reopen

    def record_admission(plan: Any, result: Any) -> None:
        delivery = plan.delivery
        if result.joined:
            recorder.inbound(delivery, result.joined, plan.received_ms)
        elif arrived_in_thread(delivery, result):  # a command, or a message of a closed issue
            recorder.inbound(delivery, delivery.envelope.conversation_id, plan.received_ms)
        elif result.note:  # a planning route's delivery outside its workflow: recorded only
            recorder.inbound(delivery, result.conversation_id or INBOX_CONVERSATION_ID,
                             plan.received_ms, stage="recorded", note=result.note)
        key = delivery.envelope.issue.identifier if delivery.envelope and delivery.envelope.issue else None
        for event, detail in result.events:
            recorder.lifecycle(result.conversation_id, event, _LIFECYCLE_TEXT[event].format(detail),
                               source=delivery.delivery_id, issue_key=key)

    writer = AdmissionWriter(store, batch_max=config.server.admission_batch_max, on_admitted=admitted)
    discord = discord_service(config, secrets, clock, store, writer, supervisor, recorder,
                              discord_tuning, matrix.approvals if matrix is not None else None)
    if discord is not None and matrix is not None:
        matrix.approvals.watch(discord.approval_changed)  # Matrix sends, shown and decided
    if discord is not None:
        scheduler.roles.add("discord-gateway", discord.start, discord.stop_gateway)
        turn_env.events.turn_finished.subscribe(discord.turn_finished)
        turn_env.events.turn_failed.subscribe(discord.turn_failed)
        turn_env.events.lifecycle.subscribe(discord.lifecycle)
    webhooks = None
    if secrets.webhook_secret is not None:
        installed_org = credential.tokens.organization_id \
            if isinstance(credential, AppCredential) and credential.tokens else None
        webhooks = LinearWebhooks(
            secrets.webhook_secret.get_secret_value(),
            freshness_seconds=config.linear.freshness_seconds,
            # The installed app's organization, unless the config names one.
            organization_id=config.linear.organization_id or installed_org or "",
        )
    else:
        log.warning("no webhook secret: every delivery will be refused")

    def auth_changed(state: AuthState) -> None:
        recorder.linear_auth(state.condition, f"Linear: {state.detail}"
                             + (f" (fix: {state.fix})" if state.fix else ""))
        if state.ok:
            tracker.kick.defer()  # the answers that waited for a token go out now
        else:
            log.warning("no working Linear token", extra={"state": state.condition,
                                                          "detail": state.detail})

    installer = None
    if credential is not None:
        credential.subscribe(auth_changed)
    if isinstance(credential, AppCredential) and client is not None:
        def installed(done: Installed) -> None:
            if webhooks is not None and not config.linear.organization_id and done.organization_id:
                webhooks.restrict_to(done.organization_id)

        installer = Installer(
            credential, token_endpoint(config, secrets, clock), client, store, clock,
            config.linear.client_id, default_redirect_uri=lambda: f"{operator_url[0]}/oauth/callback",
            on_installed=installed)
    server = config.server
    ingress = Listener(
        create_ingress_app(config, webhooks, writer, clock, metrics, router),
        host=server.webhook_host,
        port=server.webhook_port,
        threads=server.ingress_threads,
        max_body_bytes=server.max_body_bytes,
        name="ingress",
    )
    operator = Listener(
        create_operator_app(
            config, store, inbox, tokens, clock, metrics, supervisor,
            live_actors=lambda: len(pykka.ActorRegistry.get_all()),
            tracker=tracker, settled=turn_env.settled, secrets=secrets, budget=budget,
            echo_memory=echo_memory, journal=journal_file, credential=credential,
            installer=installer, live_turns=turn_env.live, matrix=matrix,
            workflow=workflow if workflow.routes() else None,
            extra_checks=[check for check in (retention.checks,
                                              discord.checks if discord is not None else None,
                                              matrix.doctor if matrix is not None else None,
                                              engine.checks if engine is not None else None,
                                              sandbox.checks)
                          if check is not None],
            hosts=scheduler.hosts,
            sandbox=sandbox.status,
        ),
        host=server.operator_host,
        port=server.operator_port,
        threads=server.threads,
        max_body_bytes=server.max_body_bytes,
        name="operator",
        unix_socket=str(sandbox.api_socket) if sandbox.api_socket is not None else None,
    )
    operator_url.append(operator.url)
    ticks = [0]

    def tick() -> None:
        supervisor.tick.defer()
        tracker.kick.defer()
        if isinstance(credential, AppCredential):
            credential.tick()  # a due renewal starts on a thread of its own (decision 0031)
        ticks[0] += 1
        if ticks[0] % OWNERSHIP_EVERY_TICKS == 0:
            tracker.check_ownership.defer()
            tracker.check_people.defer()
            tracker.set_up_planning.defer()  # nothing to do once the planning routes are set
        if ticks[0] % ECHO_SWEEP_EVERY_TICKS == 0:
            echo_memory.sweep.defer()
            journal.maintain.defer()
        if ticks[0] % STORE_PRUNE_EVERY_TICKS == 0:
            echo_memory.prune_store.defer()
        # Matrix sends and Discord's sweeps (terminal intent, answers owed) run where the
        # connection's role is, so two hosts never do them twice.
        if matrix is not None and ticks[0] % MATRIX_EVERY_TICKS == 0 \
                and scheduler.roles.held("matrix"):
            matrix.tick(sweep=ticks[0] % ECHO_SWEEP_EVERY_TICKS == 0)
        if discord is not None and scheduler.roles.held("discord-gateway"):
            discord.tick()

    ticker = Ticker(tick, tick_seconds)
    return Service(config, clock, store, writer, metrics, tokens, inbox, ingress, operator,
                   supervisor, tracker, echo_memory, journal, journal_file, ticker, turn_env,
                   scheduler, matrix=matrix, discord=discord, sandbox=sandbox)


def discord_service(config: Config, secrets: Secrets, clock: Clock, store: Store,
                    writer: AdmissionWriter, supervisor: Any, recorder: Recorder,
                    tuning: Any = None, approvals: Any = None) -> Any:
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
        admit=lambda plan: writer.submit(plan, config.server.admission_wait_seconds),
        operate=lambda cid, op: supervisor.operate(cid, op).get(timeout=15),
        status=lambda cid: show_conversation(store, cid),
        journal=lambda cid, event, text, source: recorder.lifecycle(cid, event, text,
                                                                    source=source),
        tuning=tuning, approvals=approvals)


def arrived_in_thread(delivery: Any, result: Any) -> bool:
    """A control-thread message admitted without joining a FIFO (a command, or a message
    of a closed issue): it is still an arrival for the journal."""
    return isinstance(delivery.envelope, ControlMessage) and result.outcome in (
        Outcome.ACCEPTED, Outcome.IGNORED)


def serve(config: Config, environ: Mapping[str, str] | None = None) -> int:
    """Run until SIGINT or SIGTERM; returns the process exit code."""
    environ = os.environ if environ is None else environ
    # Everything wakeline writes (database, WAL, journal, prompts) is the owner's alone.
    os.umask(0o077)
    require_extras(config, environ)  # before anything is created or started (decision 0032)
    check_routes(config, workspaces_of(config))
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
