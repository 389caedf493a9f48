"""What every turn slot shares, and what a turn's agent is started with.

`TurnEnv` is built once by the turns part (`turns.part`) and handed to every
`ConversationActor`; `agent_environment` and `agent_path` make a turn's environment
(never a secret of wakeline's, its own `bin` on PATH), `route_command` its argv.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from wakeline.clock import Clock
from wakeline.config import Config, RepoConfig, RouteConfig
from wakeline.models.fifo import ClaimedTurn
from wakeline.models.states import TurnResultKind
from wakeline.models.store import Store
from wakeline.providers.linear.progress import Item
from wakeline.providers.linear.workflow import WorkflowRegistry
from wakeline.sandbox.part import Sandbox
from wakeline.service.events import Events
from wakeline.turns.files import IssueFiles
from wakeline.turns.forkserver import ForkServer
from wakeline.turns.progress import TurnProgress
from wakeline.turns.repos import RepoChooser
from wakeline.turns.tokens import TokenRegistry
from wakeline.turns.workspaces import Placement, Workspaces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinishedTurn:
    """A finalised turn, as listeners (Linear replies, the journal) see it."""

    turn: ClaimedTurn
    result: TurnResultKind
    output: str
    exit_code: int | None


class SettledSignal:
    """Wakes waiters whenever a write to Linear settles."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._settled = 0  # how many notifications so far: a wake between check and wait counts

    def notify(self, *_: Any) -> None:
        """Something settled: waiters re-check."""
        with self._cond:
            self._settled += 1
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate` holds or `timeout` (real seconds) passes; re-check every 0.1 s.

        A notification that comes while `predicate` runs is not lost: the wait after it
        returns at once instead of sleeping out the re-check interval.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                seen = self._settled
            if predicate():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._cond:
                if self._settled == seen:
                    self._cond.wait(min(left, 0.1))


@dataclass
class TurnEnv:
    """What every ConversationActor needs; built once by the composition root."""

    store: Store
    clock: Clock
    config: Config
    tokens: TokenRegistry
    secret_values: list[str]
    api_url: str  # the operator API, as a turn's agent reaches it
    base_env: Mapping[str, str]
    workspaces: Workspaces
    forkserver: ForkServer  # starts every agent: the service never forks itself
    backoff_seconds: Sequence[int] = (5, 30, 120, 600)
    kill_grace_seconds: float = 10.0
    # What the turns tell the rest: started, finished, failed, and their lifecycle events.
    events: Events = field(default_factory=Events)
    kick_tracker: Callable[[], None] = lambda: None
    settled: SettledSignal = field(default_factory=SettledSignal)
    ack_wait_seconds: float = 10.0
    runners: Executor | None = None  # the runner threads' pool (one per turn slot)
    # False while no Linear token works: writes wait for one, so the agent need not.
    linear_usable: Callable[[], bool] = lambda: True
    # Progress: to the turn's Linear sessions (the tracker, throttled), the end of a turn's
    # progress before its answer, the journal, and the stream lines nobody understood.
    progress_to_linear: Callable[[list[str], list[Item]], None] | None = None
    progress_ended: Callable[[list[str]], None] = lambda sessions: None
    journal_progress: Callable[[ClaimedTurn, int, str, str], None] = \
        lambda turn, seq, stage, text: None
    lines_skipped: Callable[[int], None] = lambda count: None
    live: dict[str, TurnProgress] = field(default_factory=dict)  # turn id -> its progress
    workflow: WorkflowRegistry | None = None  # planning routes' managed states and account
    sandbox: Sandbox | None = None  # confines every turn (CONTRACT section 12); None: never
    # The repository per issue of routes with `repos`, and the issue's files (section 14).
    repos: RepoChooser | None = None
    files: IssueFiles | None = None

    def await_replies(self, conversation_id: str) -> None:
        """Block (a runner thread, never an actor) until the conversation's earlier writes
        reached Linear, so the acknowledgement lands before the agent starts; give up after
        Linear's own 10 s window."""
        outbox = self.store.outbox
        self.settled.wait_for(
            lambda: outbox.unsettled(conversation_id) == 0 or not self.linear_usable(),
            self.ack_wait_seconds)
        if self.runners is None:
            self.store.close()  # a thread of its own: its connection goes with it

    def route(self, name: str | None) -> RouteConfig | None:
        """The configured route of this name."""
        return next((r for r in self.config.routes if r.name == name), None)

    def repo_of(self, route: RouteConfig | None, name: str | None = None) -> Path | None:
        """The route's git repository (the entry `name` of its `repos`), resolved against the
        config file, or None."""
        if route is not None and route.repos:
            entry = route.repo_named(name)
            return self.config.path(entry.path) if entry is not None else None
        return self.config.path(route.repo) if route is not None and route.repo else None

    def prepare_workspace(self, turn: ClaimedTurn, entry: RepoConfig | None = None,
                          recorded_repo: str | None = None) -> Placement:
        """The turn's workspace, made ready on the runner thread (a worktree of `entry`, the
        `repos` entry chosen for it, when its route has them); a new branch is recorded
        before the agent works on it, so a later turn (or a cleanup) finds it."""
        route = self.route(turn.route)
        base = route.default_branch if route else ""
        repo = self.repo_of(route)
        if entry is not None:
            repo, base = self.config.path(entry.path), entry.default_branch or base
        placement = self.workspaces.prepare(
            turn.conversation_id, repo=repo, base=base, identifier=turn.issue_identifier,
            title=issue_title(turn), branch=turn.workspace_branch)
        name = entry.name if entry is not None else None
        if placement.branch is not None and \
                (placement.branch != turn.workspace_branch or name != recorded_repo):
            self.store.conversations.record_workspace(turn.conversation_id, placement.branch,
                                                      name)
        return placement

    @property
    def prompts(self) -> Path:
        """Where a prompt's file goes on a platform without memfd (see `prompt_stdin`)."""
        return self.config.state_path / "turns"


def issue_title(turn: ClaimedTurn) -> str | None:
    """The issue's own title: the conversation's title without its `[ENG-123] ` prefix."""
    prefix = f"[{turn.issue_identifier}] "
    if turn.issue_identifier and turn.title.startswith(prefix):
        return turn.title[len(prefix):]
    return turn.title or None


def route_command(config: Config, route_name: str | None) -> list[str]:
    """The route's command, else `agent.command`."""
    route = config.route(route_name)
    return list((route.command if route and route.command else None) or config.agent.command)


def agent_path(base: Mapping[str, str]) -> str:
    """The agent's PATH: the inherited one, with wakeline's own `bin` first, so `wakeline
    agent ...` and `wakeline linear ...` work inside a turn however wakeline was installed."""
    path = base.get("PATH", os.defpath)
    tools = str(Path(sys.executable).parent)
    return path if tools in path.split(os.pathsep) else f"{tools}{os.pathsep}{path}"


def agent_environment(base: Mapping[str, str], secret_values: Sequence[str],
                      extra: Mapping[str, str]) -> dict[str, str]:
    """The inherited environment without wakeline's own variables or any secret, plus `extra`."""
    held = set(secret_values)
    env = {k: v for k, v in base.items() if not k.startswith("WAKELINE_") and v not in held}
    env.update({k: v for k, v in extra.items() if v})
    return env
