"""The journal through the real service: what arrived, the briefs, the answers, the writes."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from tests.conftest import (LINEAR_KEY, OPERATOR_TOKEN, WEBHOOK_SECRET, comment_event, issue_event,
                            on_postgres)
from tests.fakes.linear import FakeLinear
from tests.helpers import kept_journal, wait_until
from wakeline.cli import cli
from wakeline.turns.tokens import Lane

ROUTES = [{"name": "ops", "teams": ["OPS"], "mode": "issue", "done_state_id": "state-done"}]


def ops_comment(text: str = "Please rotate the logs", actor: str = "user-9") -> dict[str, Any]:
    body = comment_event("issue-7", "OPS-7")
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["data"]["body"] = text
    body["actor"] = {"id": actor, "name": "Someone", "email": f"{actor}@example.com"}
    return body


def journal(h: Any, **params: Any) -> dict[str, Any]:
    resp = h.api("GET", "/v1/journal", params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()


def kinds(h: Any) -> list[str]:
    return [e["kind"] for e in journal(h)["entries"]]


def entries(h: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in journal(h)["entries"] if e["kind"] == kind]


def test_one_turn_reads_in_order_from_arrival_to_the_write(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ROUTES)
    h.deliver(ops_comment(), delivery="d-1")
    wait_until(lambda: "outbound" in kinds(h), message="the reply was written")
    page = journal(h)
    assert [e["kind"] for e in page["entries"]] == ["inbound", "turn_brief", "turn_report", "outbound"]
    inbound, brief, report, outbound = page["entries"]
    assert set(inbound) == {"seq", "id", "kind", "at", "from", "to", "text", "issueKeys", "commits",
                            "thread", "stage"}
    cid = h.only_conversation()["id"]
    assert (inbound["id"], inbound["from"], inbound["to"]) == ("inbound:linear:d-1", "external", cid)
    assert inbound["text"] == "Please rotate the logs" and inbound["issueKeys"] == ["OPS-7"]
    assert inbound["thread"].startswith("https://")
    assert "Please rotate the logs" in brief["text"] and brief["thread"] == cid
    assert report["stage"] == "response" and report["text"].startswith("done:")
    assert outbound["stage"] == "confirmed" and outbound["text"] == "comment on issue-7: confirmed"
    assert [e["seq"] for e in page["entries"]] == sorted(e["seq"] for e in page["entries"])
    assert (page["oldest"], page["newest"]) == (inbound["seq"], outbound["seq"])
    assert page["recordingSince"].endswith("Z")


def test_the_owner_is_told_apart_and_a_replay_lands_once(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ROUTES, linear_config={"owner_user_ids": ["user-owner"]})
    h.deliver(ops_comment(actor="user-owner"), delivery="d-1")
    h.deliver(ops_comment(actor="user-owner"), delivery="d-1")  # Linear retries
    wait_until(lambda: "turn_report" in kinds(h))
    [inbound] = entries(h, "inbound")
    assert inbound["from"] == "owner"


def test_a_question_and_its_answer_whose_text_is_never_copied(harness: Callable[..., Any]) -> None:
    h = harness("exit", "2", routes=ROUTES)
    h.deliver(ops_comment())
    wait_until(lambda: entries(h, "owner_question"), message="the agent asked")
    [question] = entries(h, "owner_question")
    assert (question["from"], question["to"], question["text"]) == ("agent", "owner", "exiting with 2")
    h.deliver(ops_comment("my secret answer is blue"))
    [answer] = wait_until(lambda: entries(h, "owner_answer"), message="the owner answered")
    assert answer["stage"] == "answered" and "blue" not in answer["text"]
    assert answer["id"] == "owner_answer:" + question["id"].split(":", 1)[1]


def test_lifecycle_and_an_uncertain_write(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(script=["drop"])
    h = harness("ok", linear=fake, routes=ROUTES)
    h.deliver(ops_comment())
    [outbound] = wait_until(lambda: entries(h, "outbound"), message="the write was recorded")
    assert outbound["stage"] == "uncertain"  # its answer was lost: never recorded as done
    closed = issue_event("issue-7", "OPS-7", "update")
    closed["data"]["state"] = {"id": "state-done", "name": "Done", "type": "completed"}
    h.deliver(closed)
    [terminal] = wait_until(lambda: entries(h, "lifecycle"))
    assert terminal["stage"] == "terminal" and "completed" in terminal["text"]
    assert terminal["issueKeys"] == ["OPS-7"]
    cid = h.only_conversation()["id"]
    h.api("POST", f"/v1/conversations/{cid}/reset")
    wait_until(lambda: [e["stage"] for e in entries(h, "lifecycle")] == ["terminal", "reset"],
               message="the reset was recorded")


def test_credentials_never_reach_the_journal(harness: Callable[..., Any]) -> None:
    h = harness("prompt", routes=ROUTES)
    h.deliver(ops_comment(f"key {LINEAR_KEY} secret {WEBHOOK_SECRET} token=wlt_abcdef0123456789 "
                          "and ghp_0123456789abcdefghij0123456789"))
    wait_until(lambda: "turn_report" in kinds(h))
    raw = kept_journal(h.service)
    for secret in (LINEAR_KEY, WEBHOOK_SECRET, "wlt_abcdef0123456789", "ghp_0123456789abcdefghij0123456789"):
        assert secret not in raw
    assert "[redacted]" in raw


def test_only_the_operator_reads_it(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ROUTES)
    for lane in (Lane.WORKER, Lane.ROOM):
        token = h.service.tokens.issue_turn_token(lane, "cv_x", "turn_x")
        resp = h.api("GET", "/v1/journal", headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 403 and resp.json() == {"error": "lane_refused"}
    assert h.api("GET", "/v1/journal", headers={"Authorization": "Bearer nope"}).status_code == 401
    for bad in ({"wait": "21", "newer": "0"}, {"wait": "5"}, {"older": "3", "newer": "1"},
                {"limit": "0"}, {"wait": "soon", "newer": "0"}):
        resp = h.api("GET", "/v1/journal", params=bad)
        assert resp.status_code == 400 and resp.json()["error"] == "bad_request", bad


def test_a_follower_wakes_as_soon_as_an_entry_lands(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ROUTES)
    newest = journal(h)["newest"] or 0
    got: list[Any] = []
    follower = threading.Thread(target=lambda: got.append(
        (h.http.get(h.service.operator.url + "/v1/journal", params={"newer": newest, "wait": 20},
                    timeout=30), time.monotonic())))
    sent = time.monotonic()
    follower.start()  # whether it waits before the entry lands or not, it must get it at once
    h.deliver(ops_comment())
    follower.join(30)
    resp, answered = got[0]
    assert resp.json()["entries"][0]["kind"] == "inbound"
    assert answered - sent < 10  # woken by the entry, not by the 20 s timeout


@pytest.mark.skipif(on_postgres(), reason="the journal is a table of the shared database there")
def test_a_journal_that_cannot_be_written_blocks_nothing(make_config: Callable[..., Any],
                                                         harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ROUTES)
    h.service.stop()
    journal_dir = h.service.config.journal_path
    for child in journal_dir.iterdir():
        child.unlink()
    journal_dir.rmdir()
    journal_dir.write_text("not a directory")  # nothing can be opened or written there
    h.restart()
    h.deliver(ops_comment())
    wait_until(lambda: h.runs(), message="the turn ran all the same")
    metrics = h.api("GET", "/metrics").text
    failures = [line for line in metrics.splitlines() if line.startswith("wakeline_journal_failures_total")]
    assert failures and float(failures[0].split()[-1]) >= 1
    assert h.api("GET", "/v1/journal").json() == {"error": "unavailable",
                                                  "detail": "the journal is not open"}


def test_the_cli_prints_lines_and_json(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=ROUTES)
    h.deliver(ops_comment())
    wait_until(lambda: "outbound" in kinds(h))
    env = {"WAKELINE_API_URL": h.service.operator.url, "WAKELINE_TOKEN": OPERATOR_TOKEN,
           "WAKELINE_CONFIG": None}
    runner = CliRunner()
    text = runner.invoke(cli, ["journal", "--limit", "2"], env=env)
    assert text.exit_code == 0, text.output
    lines = [line for line in text.stdout.splitlines() if line[:6].strip().isdigit()]
    assert len(lines) == 2 and "turn_report    agent → wakeline  OPS-7 [response]" in lines[0]
    assert "outbound       wakeline → linear [confirmed]  comment on issue-7" in lines[1]
    data = json.loads(runner.invoke(cli, ["journal", "--json"], env=env).stdout)
    first = data["entries"][0]["seq"]
    older = json.loads(runner.invoke(cli, ["journal", "--json", "--older", str(first + 1)],
                                     env=env).stdout)
    assert [e["seq"] for e in older["entries"]] == [first]
    assert runner.invoke(cli, ["journal", "--older", "1", "--newer", "2"], env=env).exit_code == 2
