"""What a turn's runner thread does before its agent starts (CONTRACT section 14).

In order, off the actor's thread and after the acknowledgement settled: the repository
the conversation works in (its route's `repos`: recorded, chosen, or asked of the person,
when the turn ends with the question and no agent runs), the workspace (a worktree of it),
the issue's files fetched into the workspace, and the prompt that names them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from wakeline.agents.streams import StreamAnswer
from wakeline.config import RouteConfig
from wakeline.errors import WorkspaceFailed
from wakeline.models.fifo import ClaimedTurn
from wakeline.turns.env import TurnEnv
from wakeline.turns.files import FileNote
from wakeline.turns.progress import Option, TurnProgress
from wakeline.turns.prompts import texts_of
from wakeline.turns.repos import Choice
from wakeline.turns.runner import NoAgent


class Preparation:
    """One turn's `prepare` and `compose` (`TurnSpec`), and what they found."""

    def __init__(self, env: TurnEnv, turn: ClaimedTurn, sessions: Sequence[str],
                 progress: TurnProgress,
                 prompt: Callable[[ClaimedTurn, Sequence[FileNote]], str]) -> None:
        self._env = env
        self._sessions = sessions
        self._progress = progress
        self._prompt = prompt
        self.turn = turn  # with the deliveries that waited for a pick, once one chose
        self.repo: Path | None = None  # the repository of the worktree, once it is ready

    def prepare(self) -> Path:
        """Choose the repository, then make the workspace ready in it.

        Raises:
            NoAgent: the person is asked which repository (the turn ends with the question).
            WorkspaceFailed: the workspace cannot be made ready.
        """
        env = self._env
        route = env.route(self.turn.route)
        choice = env.repos.choose(self.turn, route, self._sessions) if env.repos is not None \
            else Choice(None, self.turn)
        if choice.question is not None:
            assert route is not None
            self._progress.offer_options([Option(r.name, r.name) for r in route.repos])
            raise NoAgent(StreamAnswer("elicitation", choice.question))
        self.turn = choice.turn
        self._leave_other_repo(choice, route)
        placement = env.prepare_workspace(choice.turn, choice.entry, choice.workspace_repo)
        if placement.branch is not None:  # a worktree: of the entry, else of the route's repo
            self.repo = env.config.path(choice.entry.path) if choice.entry is not None \
                else env.repo_of(route)
        return placement.path

    def _leave_other_repo(self, choice: Choice, route: RouteConfig | None) -> None:
        """After a reset chose another repository, the worktree of the one chosen before (a
        turn claimed since cancelled its cleanup) is retired first, as a cleanup would.

        Raises:
            WorkspaceFailed: it holds work (kept whole, and the turn says where and why).
        """
        if choice.entry is None or choice.workspace_repo in (None, choice.entry.name):
            return
        old = route.repo_named(choice.workspace_repo) if route is not None else None
        if old is None:
            return  # gone from the config: making the worktree says what is in the way
        retired = self._env.workspaces.retire(self.turn.conversation_id,
                                              repo=self._env.config.path(old.path))
        if not retired.removed:
            raise WorkspaceFailed(f"the worktree of {old.name}, chosen before the reset, is in "
                                  f"the way of {choice.entry.name}: {retired.detail}")

    def compose(self, workspace: Path) -> str:
        """The prompt, once the issue's files are fetched into the ready `workspace`."""
        env, turn = self._env, self.turn
        files: list[FileNote] = []
        if env.files is not None and turn.kind == "issue" and env.route(turn.route) is not None:
            files = env.files.fetch(workspace, texts_of(turn))
        return self._prompt(turn, files)
