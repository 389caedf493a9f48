"""Which of its route's `repos` an issue conversation works in (CONTRACT section 14).

Chosen once, on the runner thread before the conversation's first turn, and kept until a
reset (decision 0038): the entry one of whose `labels` the issue carries (label names from
the payload, else one lookup on the tracker's pool, cached like ownership lookups), else
the entry whose `projects` hold the issue's project. Exactly one match is the one. None or
several: a turn with an agent session asks the person (an `elicitation` with `signal:
"select"`, one option per repository) and no agent runs; the pick (a `prompted` naming one)
chooses, and the deliveries that waited for it ride the turn it starts. A turn with no
session to ask in (an issue route's) works in the route's first repository, and the
journal says so. A reply that names no repository asks again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from wakeline.config import RepoConfig, RouteConfig
from wakeline.errors import WakelineError
from wakeline.models.envelopes import AgentSession
from wakeline.models.fifo import ClaimedTurn, FifoEntry
from wakeline.models.store import Store
from wakeline.providers.linear.lookups import IssueLabels

log = logging.getLogger(__name__)

QUESTION = "Which repository should I work in for {issue}? {why} Pick one and I'll start there."
PICK_MAX_CHARS = 100  # a reply quoted back, at most


@dataclass(frozen=True)
class Choice:
    """Where a turn works, or the question it ends with instead."""

    entry: RepoConfig | None  # None: the route has no `repos`, or the person is asked
    turn: ClaimedTurn  # with the deliveries that waited for the pick, when one chose
    question: str | None = None  # asked: the turn ends with it and no agent runs
    workspace_repo: str | None = None  # the entry the conversation's worktree was made in


@dataclass(frozen=True)
class IssueFacts:
    """What the turn's deliveries say of the issue: its labels and project, when they do."""

    labels: tuple[str, ...] | None = None
    project_id: str | None = None
    project_known: bool = False


def facts_of(entries: Sequence[FifoEntry]) -> IssueFacts:
    """The newest labels and project the deliveries' payloads state."""
    labels, project, known = None, None, False
    for entry in reversed(entries):
        issue = getattr(entry.envelope, "issue", None)
        if issue is None:
            continue
        if labels is None and issue.labels is not None:
            labels = issue.labels
        if not known and issue.project_known:
            project, known = issue.project_id, True
    return IssueFacts(labels, project, known)


def matching(repos: Sequence[RepoConfig], labels: Sequence[str], project_id: str | None
             ) -> tuple[list[RepoConfig], str]:
    """The entries the issue's labels choose (compared without case), else those its project
    does; and which of the two chose ("label" or "project")."""
    carried = {label.casefold() for label in labels}
    by_label = [r for r in repos if carried & {label.casefold() for label in r.labels}]
    if by_label:
        return by_label, "label"
    return [r for r in repos if project_id and project_id in r.projects], "project"


def picked(repos: Sequence[RepoConfig], entries: Sequence[FifoEntry]) -> tuple[RepoConfig | None,
                                                                               str | None]:
    """The repository the newest reply names (exactly its name, without case or the space
    around it), and that reply's text (None when the turn carries no reply)."""
    for entry in reversed(entries):
        env = entry.envelope
        if isinstance(env, AgentSession) and env.action == "prompted" and not env.is_stop:
            text = (env.prompt or "").strip()
            found = next((r for r in repos if r.name.casefold() == text.casefold()), None)
            return found, text
    return None, None


class RepoChooser:
    """Chooses (or asks for) the repository of a route with `repos`, on a turn's runner thread."""

    def __init__(self, store: Store, lookup: Callable[[str], IssueLabels],
                 lifecycle: Callable[[str, str, str], None]) -> None:
        self._store = store
        self._lookup = lookup
        self._lifecycle = lifecycle

    def choose(self, turn: ClaimedTurn, route: RouteConfig | None,
               sessions: Sequence[str]) -> Choice:
        """Where `turn` works: the recorded choice, a pick, the labels' or the project's match,
        the question (when the turn has a session to ask in), or the route's first entry."""
        if route is None or not route.repos or not turn.entries:
            return Choice(None, turn)
        cid = turn.conversation_id
        state = self._store.conversations.repo_state(cid)
        chosen = route.repo_named(state.repo)
        if chosen is not None:
            return Choice(chosen, turn, workspace_repo=state.workspace_repo)
        first = min(e.seq for e in turn.entries)
        if state.asked is not None:
            pick, text = picked(route.repos, turn.entries)
            if pick is None:
                said = f"“{text[:PICK_MAX_CHARS]}” names none of them." if text else \
                    "No reply has picked one yet."
                return self._undecided(turn, route, sessions, first, said, state.workspace_repo)
            entries = self._store.conversations.pick_repo(cid, pick.name, turn.session_id,
                                                          turn.turn_id, first)
            self._lifecycle(cid, "repo_chosen", f"The person picked {pick.name}: the issue's "
                                                "work happens in that repository.")
            return Choice(pick, replace(turn, entries=entries) if entries else turn,
                          workspace_repo=state.workspace_repo)
        found, how, why = self._match(turn, route)
        if len(found) == 1:
            self._store.conversations.choose_repo(cid, found[0].name, turn.session_id)
            self._lifecycle(cid, "repo_chosen", f"The issue's {how} chose {found[0].name}: its "
                                                "work happens in that repository.")
            return Choice(found[0], turn, workspace_repo=state.workspace_repo)
        return self._undecided(turn, route, sessions, first, why, state.workspace_repo)

    def _match(self, turn: ClaimedTurn, route: RouteConfig
               ) -> tuple[list[RepoConfig], str, str]:
        """The matching entries, which fact chose them ("labels" or "project") and, when not
        exactly one, why not. Linear is asked only for what the payloads left open."""
        facts = facts_of(turn.entries)
        labels, project, known = facts.labels, facts.project_id, facts.project_known
        found, how = matching(route.repos, labels or (), project)
        unasked = ""
        if how == "project" and turn.issue_id and (labels is None or not known):
            try:
                looked = self._lookup(turn.issue_id)
            except WakelineError as exc:
                unasked = f" (Linear could not be asked for its labels: {exc.code})"
                log.warning("issue labels not looked up", extra={
                    "conversation_id": turn.conversation_id, "error": exc.code})
            else:
                found, how = matching(route.repos, looked.labels if labels is None else labels,
                                      project if known else looked.project_id)
        names = ", ".join(r.name for r in found)
        if len(found) > 1:
            why = f"Its {'labels choose' if how == 'label' else 'project chooses'} more than " \
                  f"one: {names}."
        else:
            why = "None of its labels or its project chooses one of this route's repositories."
        return found, "labels" if how == "label" else "project", why + unasked

    def _undecided(self, turn: ClaimedTurn, route: RouteConfig, sessions: Sequence[str],
                   first: int, why: str, workspace_repo: str | None) -> Choice:
        """Ask the person in the turn's session; with none to ask in, the route's first."""
        cid = turn.conversation_id
        names = ", ".join(r.name for r in route.repos)
        if sessions:
            self._store.conversations.ask_repo(cid, turn.session_id, first)
            self._lifecycle(cid, "repo_asked", f"Asked the person which repository to work in "
                                               f"({names}): {why}")
            issue = turn.issue_identifier or "this issue"
            return Choice(None, turn, question=QUESTION.format(issue=issue, why=why))
        entry = route.repos[0]
        self._store.conversations.choose_repo(cid, entry.name, turn.session_id)
        self._lifecycle(cid, "repo_chosen", f"{why} With no agent session to ask in, the issue's "
                                            f"work happens in {entry.name}, the route's first "
                                            "repository.")
        return Choice(entry, turn, workspace_repo=workspace_repo)
