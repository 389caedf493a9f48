"""The turns as a part of the service: the slots, the runners, the fork server.

Everything a turn needs (`turns.env.TurnEnv`): the fork server that starts every agent on
the CPUs the service was given, the runner threads (one per slot), the workspaces, the
repository chooser and the issue's files, and what a turn tells Linear through the Linear
part. The `Supervisor` actor binds the turn slots to conversations; the engine
(`scheduling`) decides where turns run. At start the store's FIFO is recovered before
anything is admitted; at stop every slot waits out its agent's grace before the fork
server ends what is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pykka

from wakeline.actors.conversation import ConversationActor
from wakeline.actors.supervisor import Supervisor, run_one_turn
from wakeline.clock import Clock
from wakeline.config import Config
from wakeline.journal.recorder import Recorder
from wakeline.models.store import Store
from wakeline.providers.linear.part import LinearPart
from wakeline.providers.linear.workflow import WorkflowRegistry
from wakeline.sandbox.part import Sandbox
from wakeline.scheduling.base import Scheduler
from wakeline.scheduling.engine import shared_engine
from wakeline.scheduling.local import LocalScheduler
from wakeline.service.events import Events
from wakeline.service.metrics import Metrics
from wakeline.service.parts import BasePart
from wakeline.turns.env import TurnEnv
from wakeline.turns.files import IssueFiles
from wakeline.turns.forkserver import ForkServer
from wakeline.turns.repos import RepoChooser
from wakeline.turns.tokens import TokenRegistry
from wakeline.turns.workspaces import Workspaces

REPAIR_TIMEOUT_SECONDS = 60
OPERATE_TIMEOUT_SECONDS = 15


class TurnsPart(BasePart):
    """The turn slots of one service, and what they run with."""

    name = "turns"

    def __init__(self, config: Config, store: Store, clock: Clock, *, tokens: TokenRegistry,
                 secret_values: list[str], events: Events, sandbox: Sandbox, linear: LinearPart,
                 recorder: Recorder, metrics: Metrics, workflow: WorkflowRegistry,
                 api_url: str, base_env: Mapping[str, str],
                 agent_cpus: frozenset[int] | None, host_id: str, shared_database: str) -> None:
        self.env = TurnEnv(
            store=store, clock=clock, config=config, tokens=tokens, secret_values=secret_values,
            api_url=api_url, base_env=dict(base_env),
            workspaces=Workspaces(config.workspaces_path),
            # Agents start in the fork server, which keeps every CPU the service was given.
            forkserver=ForkServer(agent_cpus), workflow=workflow, sandbox=sandbox, events=events,
            # One runner per turn slot: a slot is freed only once its runner has finished.
            runners=ThreadPoolExecutor(config.agent.max_concurrent_turns,
                                       thread_name_prefix="turn-runner"),
            kick_tracker=linear.kick, linear_usable=linear.usable,
            progress_to_linear=linear.progress, progress_ended=linear.progress_ended,
            journal_progress=recorder.progress, lines_skipped=metrics.stream_lines_were_skipped,
            # The repository per issue and the issue's files (CONTRACT section 14).
            repos=RepoChooser(store, linear.issue_labels, events.lifecycle)
            if any(r.repos for r in config.routes) else None,
            files=IssueFiles(linear.uploads, max_bytes=config.agent.max_file_bytes,
                             max_files=config.agent.max_files_per_turn))
        linear.tracker.subscribe(self.env.settled.notify)
        # Hosts sharing the database: the engine hands this supervisor the turns it runs here.
        engine = shared_engine(config, shared_database, store, run_turn=self._run_one,
                               repair_host=self._repair_host, running=self.running)
        self.supervisor: Any = Supervisor.start(self.env, config.agent.max_concurrent_turns,
                                                engine).proxy()
        self.scheduler: Scheduler = engine or LocalScheduler(host_id, self.running)
        events.admitted.subscribe(self._admitted)
        events.woke.subscribe(self.wake)
        events.joined.subscribe(self.wake)

    def wake(self, conversation_ids: list[str]) -> None:
        """These conversations have new work (or a lifecycle change) to act on."""
        self.supervisor.wake.defer(conversation_ids)

    def running(self) -> int:
        """How many turns run here now."""
        return len(self.env.live)

    def _admitted(self, admitted: list[tuple[Any, Any]]) -> None:
        woke = [cid for _, result in admitted for cid in result.wake_ids]
        if woke:
            self.wake(woke)

    def operate(self, conversation_id: str, operation: str) -> dict[str, Any]:
        """An operator command (stop, reset, retry, abandon) on a conversation, and its
        answer (Discord's `!stop`, `!reset`)."""
        return self.supervisor.operate(conversation_id, operation).get(  # type: ignore[no-any-return]
            timeout=OPERATE_TIMEOUT_SECONDS)

    def _run_one(self, conversation_id: str) -> bool:
        return run_one_turn(self.supervisor, conversation_id)

    def _repair_host(self, host: str) -> list[str]:
        return self.supervisor.repair_host(host).get(timeout=REPAIR_TIMEOUT_SECONDS)  # type: ignore[no-any-return]

    # --- the part ----------------------------------------------------------------------------

    def start(self) -> None:
        """The fork server, then the FIFO's recovery (before anything is admitted)."""
        self.env.forkserver.start()
        self.supervisor.recover().get()

    def tick(self, count: int) -> None:
        """Every beat: due retries and idle slots."""
        self.supervisor.tick.defer()

    def stop(self) -> None:
        """Every slot stops (running agents get SIGTERM and their grace), then the fork
        server ends what is left; a turn still finishing is recovered by the next start."""
        self.supervisor.actor_ref.stop()
        for ref in pykka.ActorRegistry.get_by_class(ConversationActor):
            ref.stop()
        self.env.forkserver.stop()
        if self.env.runners is not None:
            self.env.runners.shutdown(wait=False, cancel_futures=True)
