"""The control part hears the service's events: each change numbered on the feed, a running
turn's progress scrubbed and kept for a page opened mid-turn, whatever the route; the page's
templates escape what agents and Linear wrote."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.conftest import OPERATOR_TOKEN, comment_event, deliver
from wakeline.agents.streams import (
    PlanStep,
    PlanUpdate,
    SessionStarted,
    Thought,
    ToolFinished,
    ToolStarted,
)
from wakeline.clock import SystemClock, to_ms
from wakeline.config import Config
from wakeline.control.board import Board
from wakeline.control.page import Pages
from wakeline.control.part import ControlPart
from wakeline.models.store import Store
from wakeline.models.schema import INBOX_CONVERSATION_ID
from wakeline.models.views import list_conversations
from wakeline.providers.matrix.approvals import ApprovalsService
from wakeline.service.events import Events
from wakeline.turns.progress import TurnProgress
from wakeline.turns.tokens import TokenRegistry

SECRET = "lin_api_SECRETSECRETSECRETSECRET0123"


@dataclass(frozen=True)
class Turn:
    conversation_id: str
    turn_id: str


def part_of(config: Config, store: Store, events: Events) -> ControlPart:
    return ControlPart(config, store, SystemClock(), TokenRegistry(OPERATOR_TOKEN), [SECRET],
                       events)


def test_progress_reaches_the_page_without_linear_as_on_an_issue_route() -> None:
    shown: list[Any] = []
    turn = TurnProgress("turn-1", "cv-1", [], [], None, remember_session=lambda sid: None,
                        journal=lambda stage, text: None, shown=shown.extend)
    turn.offer([ToolStarted("t1", "Bash", "ls"), Thought("looking")])
    assert shown == [ToolStarted("t1", "Bash", "ls"), Thought("looking")]


def test_each_change_is_numbered_and_progress_is_scrubbed_and_kept(
        config: Config, store: Store, frozen: Any) -> None:
    events = Events()
    part = part_of(config, store, events)
    first = part.feed.newest
    turn = Turn("cv-1", "turn-1")
    events.turn_started(turn, "none")
    events.progress(turn, [SessionStarted("claude-1")])  # nothing the page shows
    events.progress(turn, [ToolStarted("t1", "Bash", f"echo {SECRET}"),
                           PlanUpdate((PlanStep("Reproduce", "in_progress"),))])
    events.progress(turn, [ToolFinished("t1", "Bash", f"echo {SECRET}", "done", False),
                           Thought("<b>bold</b> idea")])
    events.lifecycle("cv-1", "reset", "The operator reset the conversation")
    changes = part.feed.since(first) or []
    assert [(c.kind, json.loads(c.json()).get("change")) for c in changes] == [
        ("conversation", "turn_started"), ("progress", None), ("progress", None),
        ("conversation", "reset")]
    assert all(SECRET not in c.json() for c in changes)
    items = json.loads(changes[2].json())["items"]
    assert items[0]["type"] == "action" and items[0]["result"] == "done"
    assert items[1] == {"type": "thought", "text": "<b>bold</b> idea"}

    view = part._turns.view("cv-1", part.feed.newest)
    assert view is not None and view.turn_id == "turn-1"
    # The tool call's result took the place of its start; the plan is apart.
    assert [(i["type"], i.get("result")) for i in view.items] == [("action", "done"),
                                                                 ("thought", None)]
    assert view.plan == [{"content": "Reproduce", "status": "in_progress"}]
    assert SECRET not in json.dumps(view.items)


def test_the_page_escapes_what_agents_and_linear_wrote() -> None:
    evil = "<script>window.pwned = 1</script>"
    conversation = {"id": "cv-1", "subject": {"key": "issue-1"}, "issue": {"identifier": "ENG-1"},
                    "title": f"[ENG-1] {evil}", "route": "eng", "state": "idle", "outcome": None,
                    "pending": 0, "claimed": 0, "lastTurn": {"result": evil}}
    board = Board(7, [conversation], None, None, [], [])
    html = Pages().page(board)
    assert evil not in html and "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in html
    assert 'src="/control/static/control.js"' in html and "http" not in html.split("<body>")[0]


def test_what_waits_for_the_owner_is_announced_and_listed(config: Config, store: Store,
                                                         ingress: Any, frozen: Any) -> None:
    clock = SystemClock()
    for n in (1, 2):  # two issue-route conversations
        body = comment_event(f"issue-{n}", f"OPS-{n}")
        body["data"]["issue"]["team"] = {"key": "OPS"}
        deliver(ingress, body)
    one, two = sorted(c["id"] for c in list_conversations(store, limit=10)
                      if c["id"] != INBOX_CONVERSATION_ID)
    approvals = ApprovalsService(store, clock, send=lambda approval: None)
    part = ControlPart(config, store, clock, TokenRegistry(OPERATOR_TOKEN), [SECRET], Events(),
                       approvals=approvals)
    first = part.feed.newest
    approval = approvals.propose(connection="me", route="ops", conversation_id=one,
                                 room_id="!room:example.org", body="<i>hello</i>", turn_id=None)
    now = to_ms(clock.now())
    store.gates.request(two, now)
    assert store.gates.posted(two, 1, "1. Reproduce\n2. Fix", "comment-1", now)
    (change,) = part.feed.since(first) or []
    assert change.kind == "waiting" and json.loads(change.json())["approval"] == approval.id

    board = part.board(None)
    assert [a["id"] for a in board.approvals] == [approval.id]
    assert [(p["conversation"], p["rev"], p["plan"]) for p in board.plans] == [
        (two, 1, "1. Reproduce\n2. Fix")]
    html = Pages().page(board)
    assert f'data-post="/v1/approvals/{approval.id}/approve"' in html
    assert "&lt;i&gt;hello&lt;/i&gt;" in html and "approve it in Linear" in html
