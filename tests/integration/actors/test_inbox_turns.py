"""Inbox turns: opt-in following, coalesced wakes, headline-only prompts, the room lane."""

from __future__ import annotations

from typing import Any, Callable

from tests.conftest import comment_event, session_event
from tests.helpers import wait_until

INBOX = "linear-inbox"


def follow(h: Any, value: bool) -> None:
    resp = h.api("PUT", "/v1/following", json={"following": value})
    assert resp.status_code == 200 and resp.json() == {"following": value}


def inbox_runs(h: Any) -> list[dict[str, Any]]:
    return [r for r in h.runs() if r["conversation"] == INBOX]


def inbox_turns(h: Any) -> list[dict[str, Any]]:
    return h.conversation(INBOX)["turns"]


def test_following_off_means_no_inbox_turns_and_messages_stay_unread(harness: Callable[..., Any]) -> None:
    h = harness("ok")
    for _ in range(3):
        assert h.deliver(comment_event())["outcome"] == "accepted"
    h.deliver(session_event())  # an issue turn runs meanwhile: the system is live
    wait_until(lambda: h.only_conversation()["turns"])
    assert inbox_runs(h) == []
    status = h.api("GET", "/v1/status").json()
    assert status["following"] is False and status["inbox"]["unread"] == 3


def test_following_on_wakes_one_turn_with_only_new_headlines(harness: Callable[..., Any]) -> None:
    h = harness("prompt")
    h.deliver(comment_event(identifier="ENG-7"))  # arrives while off: never scheduled
    follow(h, True)
    h.deliver(comment_event(identifier="ENG-8"))
    turns = wait_until(lambda: inbox_turns(h))
    assert turns[0]["output"] == "- Comment create · ENG-8 · Jane Doe\n"
    assert len(inbox_runs(h)) == 1
    assert h.api("GET", "/v1/status").json()["inbox"]["unread"] == 2  # a turn consumes nothing


def test_burst_during_an_inbox_turn_costs_exactly_one_more_turn(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "3")  # long enough for the whole burst to land during it
    follow(h, True)
    h.deliver(comment_event(identifier="ENG-1"))
    wait_until(lambda: inbox_runs(h))
    for n in range(50):
        h.deliver(comment_event(identifier=f"ENG-{100 + n}"))
    wait_until(lambda: len(inbox_turns(h)) >= 2, timeout=30)
    runs = inbox_runs(h)
    assert len(runs) == 2
    assert len(runs[1]["headlines"]) == 50


def test_switching_off_skips_a_queued_inbox_turn(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "3600", max_concurrent_turns=1)
    h.deliver(session_event())  # holds the only slot
    wait_until(lambda: h.runs())
    follow(h, True)
    h.deliver(comment_event())  # its inbox turn queues behind the slot
    follow(h, False)
    issue = [c for c in h.api("GET", "/v1/conversations").json()["conversations"] if c["kind"] == "issue"][0]
    assert h.api("POST", f"/v1/conversations/{issue['id']}/stop").status_code == 200
    wait_until(lambda: h.conversation(issue["id"])["turns"])
    # The supervisor's sweep runs every 20 ticks (1 s here); let two pass.
    tick = h.service.supervisor
    for _ in range(45):
        tick.tick().get()
    assert inbox_runs(h) == []
    assert h.api("GET", "/v1/status").json()["inbox"]["unread"] == 1


def test_a_running_inbox_turn_finishes_when_following_goes_off(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "0.5")
    follow(h, True)
    h.deliver(comment_event())
    wait_until(lambda: inbox_runs(h))
    follow(h, False)
    turns = wait_until(lambda: inbox_turns(h), timeout=15)
    assert turns[0]["result"] == "response"


def test_inbox_turns_get_a_room_token(harness: Callable[..., Any]) -> None:
    import json

    h = harness("api")
    follow(h, True)
    h.deliver(comment_event())
    codes = json.loads(wait_until(lambda: inbox_turns(h))[0]["output"])
    assert codes == {"GET /v1/inbox?view=headlines": 200, "GET /v1/status": 403, "PUT /v1/following": 403}


def test_issue_turns_get_a_worker_token(harness: Callable[..., Any]) -> None:
    import json

    h = harness("api")
    h.deliver(session_event())
    codes = json.loads(wait_until(lambda: h.only_conversation()["turns"])[0]["output"])
    assert codes["GET /v1/status"] == 403 and codes["PUT /v1/following"] == 403
    assert codes["GET /v1/inbox?view=headlines"] == 403  # the inbox is the reading room's


def test_cli_follow_shows_and_sets_the_switch(harness: Callable[..., Any]) -> None:
    from click.testing import CliRunner

    from tests.conftest import OPERATOR_TOKEN
    from wakeline.cli import cli

    h = harness("ok")
    env = {"WAKELINE_API_URL": h.service.operator.url, "WAKELINE_TOKEN": OPERATOR_TOKEN}
    runner = CliRunner()
    assert runner.invoke(cli, ["follow"], env=env).output.strip() == "following: off"
    assert runner.invoke(cli, ["follow", "on"], env=env).output.strip() == "following: on"
    assert h.api("GET", "/v1/following").json() == {"following": True}
    shown = runner.invoke(cli, ["follow", "off", "--json"], env=env)
    assert shown.exit_code == 0 and '"following": false' in shown.output
    assert runner.invoke(cli, ["follow", "maybe"], env=env).exit_code == 2
