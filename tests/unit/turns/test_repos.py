"""Which of a route's `repos` an issue's facts choose, and which reply picks one."""

from __future__ import annotations

from wakeline.config import RepoConfig
from wakeline.models.envelopes import AgentSession, DataChange, IssueInfo
from wakeline.models.fifo import FifoEntry
from wakeline.turns.repos import facts_of, matching, picked

API = RepoConfig(name="api", path="api", labels=["Backend"])
WEB = RepoConfig(name="web", path="web", labels=["frontend"], projects=["p-web"])
BOTH = RepoConfig(name="both", path="both", labels=["backend"], projects=["p-web"])


def names(found: tuple[list[RepoConfig], str]) -> tuple[list[str], str]:
    return [r.name for r in found[0]], found[1]


def test_labels_choose_without_case_before_the_project() -> None:
    assert names(matching([API, WEB], ["BACKEND", "bug"], "p-web")) == (["api"], "label")
    assert names(matching([API, WEB], ["bug"], "p-web")) == (["web"], "project")
    assert names(matching([API, WEB, BOTH], ["backend"], None)) == (["api", "both"], "label")
    assert names(matching([API, WEB], [], None)) == ([], "project")


def entry(seq: int, envelope: object) -> FifoEntry:
    return FifoEntry(seq, "headline", 0, envelope)  # type: ignore[arg-type]


def change(labels: tuple[str, ...] | None, project: str | None, known: bool) -> DataChange:
    return DataChange(event_type="Issue", action="update", object_id="issue-1", issue=IssueInfo(
        id="issue-1", labels=labels, project_id=project, project_known=known))


def test_the_newest_payload_that_states_a_fact_wins() -> None:
    facts = facts_of([entry(1, change(("old",), "p-1", True)),
                      entry(2, change(("new",), None, False))])
    assert (facts.labels, facts.project_id, facts.project_known) == (("new",), "p-1", True)
    assert facts_of([entry(1, change(None, None, False))]).labels is None


def reply(text: str) -> AgentSession:
    return AgentSession(action="prompted", session_id="s-1", prompt=text)


def test_a_reply_picks_a_repository_by_its_exact_name() -> None:
    assert picked([API, WEB], [entry(1, reply(" Web "))]) == (WEB, "Web")
    assert picked([API, WEB], [entry(1, reply("web")), entry(2, reply("the api"))]) == \
        (None, "the api")
    assert picked([API, WEB], []) == (None, None)
