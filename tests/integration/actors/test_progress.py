"""An agent's work in its Linear session, and its next turn resuming its own session.

The agent is tests/fakes/stream_agent.py, which prints what Claude Code prints
(`output = "claude"`); Linear is the fake on loopback, so the test reads exactly what
wakeline sent it, in order.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

from tests.conftest import LINEAR_KEY, WEBHOOK_SECRET, comment_event, session_event
from tests.fakes.linear import FakeLinear
from tests.helpers import wait_until

STREAM_AGENT = Path(__file__).resolve().parents[2] / "fakes" / "stream_agent.py"
OPS = [{"name": "eng", "teams": ["ENG"]}, {"name": "ops", "teams": ["OPS"], "mode": "issue"}]


def start(harness: Callable[..., Any], scenario: str, arg: str = "", **agent: Any) -> Any:
    agent.setdefault("progress_interval_seconds", 0)
    return harness(scenario, arg, script=STREAM_AGENT, output="claude", **agent)


def writes(fake: FakeLinear) -> list[dict[str, Any]]:
    """What reached Linear, in order, as `{"kind", ...}`."""
    out = []
    for r in list(fake.requests):
        variables = r.body.get("variables") or {}
        if "agentActivityCreate" in r.query:
            data = variables["input"]
            out.append({"kind": data["content"]["type"], "ephemeral": data.get("ephemeral", False),
                        "session": data["agentSessionId"], **data["content"],
                        **({"signal": data["signal"], "options": data["signalMetadata"]["options"]}
                           if data.get("signal") else {})})
        elif "agentSessionUpdate" in r.query:
            out.append({"kind": "update", "session": variables["id"], **variables["input"]})
    return out


def answered(fake: FakeLinear, timeout: float = 10.0) -> list[dict[str, Any]]:
    return wait_until(lambda: (w := writes(fake)) and w[-1]["kind"] in (
        "response", "error", "elicitation") and w, timeout, message="the answer reached Linear")


def test_the_agents_work_shows_in_its_session_and_the_answer_comes_last(
        harness: Callable[..., Any]) -> None:
    h = start(harness, "work")
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    kinds = [(w["kind"], w.get("ephemeral")) for w in sent]
    assert kinds[0] == ("thought", False) and sent[0]["body"].startswith("Picked up")
    assert kinds[-1] == ("response", False) and "pull/42" in sent[-1]["body"]
    assert [w for w in sent if w["kind"] == "response"] == [sent[-1]]  # the answer once
    plans = [w["plan"] for w in sent if w["kind"] == "update" and "plan" in w]
    # One write per session at a time: a plan may be replaced by a newer one while one is out.
    assert plans[0][0]["content"] == "Reproduce"
    assert plans[-1] == [{"content": "Reproduce", "status": "completed"},
                         {"content": "Fix", "status": "pending"}]
    # While a write is out, the newest action or thought replaces the one waiting: which of
    # them reach Linear depends on timing, but each says what it should.
    activities = [w for w in sent[1:-1] if w["kind"] in ("action", "thought")]
    assert activities
    for w in activities:
        assert w == {**w, "action": "Bash", "parameter": "pytest -q tests/test_login.py"} \
            if w["kind"] == "action" else w["body"] in (
                "Looking at the failing test first.",
                "Fixed it; opened https://github.com/acme/app/pull/42 for review.")
        assert w.get("result") in (None, "1 failed, 3 passed")
    links = [w["addedExternalUrls"] for w in sent if "addedExternalUrls" in w]
    assert links == [[{"label": "Pull request", "url": "https://github.com/acme/app/pull/42"}]]
    conv = h.only_conversation()
    assert conv["runnerSession"].startswith("claude-session-1")
    wait_until(lambda: {"thought", "plan", "link", "response"} <= set(
        e["stage"] for e in h.api("GET", "/v1/journal").json()["entries"]
        if e["kind"] == "turn_report"), message="journaled")


def test_the_next_turn_resumes_the_agents_own_session_until_a_reset(
        harness: Callable[..., Any]) -> None:
    h = start(harness, "work")
    h.deliver(session_event(session_id="s-1"))
    answered(h.linear)
    first = h.runs()[0]
    session = h.only_conversation()["runnerSession"]
    assert first["resume"] is None and first["agentSession"] is None
    h.deliver(session_event("prompted", session_id="s-1"))
    wait_until(lambda: len(h.runs()) == 2, message="the follow-up ran")
    second = h.runs()[1]
    assert second["resume"] == session and second["agentSession"] == session
    assert "--output-format" in second["argv"] and "stream-json" in second["argv"]
    cid = h.only_conversation()["id"]
    wait_until(lambda: h.only_conversation()["state"] == "idle", message="idle again")
    assert h.api("POST", f"/v1/conversations/{cid}/reset").status_code == 200
    assert h.only_conversation()["runnerSession"] is None
    h.deliver(session_event("prompted", session_id="s-1"))
    wait_until(lambda: len(h.runs()) == 3, message="a fresh turn after the reset")
    assert h.runs()[2]["resume"] is None


def test_a_session_the_cli_forgot_runs_once_more_without_it(harness: Callable[..., Any]) -> None:
    h = start(harness, "work")
    h.deliver(session_event(session_id="s-1"))
    answered(h.linear)
    h.service.store.fifo.set_runner_session(h.only_conversation()["id"], "forgotten")
    h.deliver(session_event("prompted", session_id="s-1"))
    wait_until(lambda: len(h.runs()) == 3, message="refused, then run again fresh")
    assert [r["resume"] for r in h.runs()[1:]] == ["forgotten", None]
    wait_until(lambda: len([w for w in writes(h.linear) if w["kind"] == "response"]) == 2,
               message="the follow-up answered")
    assert not [w for w in writes(h.linear) if w["kind"] == "error"]
    assert h.only_conversation()["runnerSession"] not in (None, "forgotten")


def test_paced_tool_calls_each_show_under_way_then_with_their_result(
        harness: Callable[..., Any]) -> None:
    h = start(harness, "slow", "5")  # a tool call every 0.1 s, no interval
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    done = [(w["parameter"], w["result"]) for w in sent if w["kind"] == "action" and "result" in w]
    assert done and all(result == param.removeprefix("echo ") for param, result in done)
    assert len(done) >= 3  # each write takes milliseconds: at most the last may be dropped
    under_way = [w for w in sent if w["kind"] == "action" and w["ephemeral"]]
    assert under_way and all("result" not in w for w in under_way)


def test_progress_is_throttled_per_session_and_what_waits_at_the_end_is_dropped(
        harness: Callable[..., Any]) -> None:
    h = start(harness, "slow", "20", progress_interval_seconds=60)
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    progress = [w for w in sent[1:-1]]  # between the acknowledgement and the answer
    assert len(progress) <= 2, progress  # one within the interval, nothing waiting at the end
    skipped = h.api("GET", "/metrics").text
    count = float(re.search(r"^wakeline_progress_skipped_total (\S+)$", skipped, re.M)[1])
    assert count >= 30  # 40 tool events, at most two written


def test_past_80_percent_of_the_budget_progress_is_shed_and_the_answer_still_goes(
        harness: Callable[..., Any]) -> None:
    h = start(harness, "chatty", "50", linear_config={"requests_per_hour": 10})
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    assert len(h.linear.requests) <= 10 and sent[-1]["body"] == "done after 50 steps"


def test_a_question_with_options_is_a_select(harness: Callable[..., Any], tmp_path: Path) -> None:
    agent = tmp_path / "asks.py"
    agent.write_text(textwrap.dedent(f"""
        import subprocess, sys
        sys.stdin.read()
        def run(*args):
            subprocess.run([{sys.executable!r}, "-m", "wakeline", "agent", *args], check=True)
        run("thought", "Two ways to go.")
        run("plan", "Pick a fix", "Apply it", "--active", "1")
        run("link", "Design doc", "https://docs.example.com/fix")
        run("options", "Retry=retry", "Rewrite=rewrite")
        print("Which fix should I take?")
        sys.exit(2)
    """))
    h = harness("", script=agent, progress_interval_seconds=0)
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    assert sent[-1]["kind"] == "elicitation" and sent[-1]["signal"] == "select"
    assert sent[-1]["options"] == [{"label": "Retry", "value": "retry"},
                                   {"label": "Rewrite", "value": "rewrite"}]
    assert {"kind": "thought", "ephemeral": False, "session": "s-1", "type": "thought",
            "body": "Two ways to go."} in sent
    assert any(w.get("plan") == [{"content": "Pick a fix", "status": "inProgress"},
                                 {"content": "Apply it", "status": "pending"}] for w in sent)
    assert any(w.get("addedExternalUrls") == [{"label": "Design doc",
                                              "url": "https://docs.example.com/fix"}] for w in sent)


def test_a_stream_question_is_an_elicitation(harness: Callable[..., Any]) -> None:
    h = start(harness, "question")
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    assert sent[-1]["kind"] == "elicitation" and "signal" not in sent[-1]
    assert sent[-1]["body"].endswith("Which one should I take?")


def test_an_agent_that_ends_in_an_error_answers_with_it_once(harness: Callable[..., Any]) -> None:
    h = start(harness, "fail")  # an error result, then exit 1
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    assert sent[-1]["kind"] == "error" and "the model is down" in sent[-1]["body"]
    assert [w["kind"] for w in sent].count("error") == 1
    assert not [w for w in sent if w["kind"] == "response"]
    wait_until(lambda: h.service.store.outbox.unsettled() == 0, message="settled once")
    turns = h.only_conversation()["turns"]  # an error is an answer: the turn is not retried
    assert [(t["result"], t["exitCode"], t["attempts"]) for t in turns] == [("error", 1, 1)]


def test_garbage_on_stdout_is_skipped_and_counted_never_fatal(harness: Callable[..., Any]) -> None:
    h = start(harness, "garbage")
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    assert sent[-1]["body"] == "survived the garbage"
    metrics = h.api("GET", "/metrics").text
    assert float(re.search(r"^wakeline_stream_lines_skipped_total (\S+)$", metrics, re.M)[1]) >= 4


def test_secrets_in_a_tool_result_never_reach_linear(harness: Callable[..., Any]) -> None:
    h = start(harness, "secret", WEBHOOK_SECRET)
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear)
    [result] = [w["result"] for w in sent if w["kind"] == "action" and "result" in w]
    assert "[redacted]" in result
    assert not [r for r in h.linear.requests
                if WEBHOOK_SECRET in json.dumps(r.body) or "ghp_aaaa" in json.dumps(r.body)]
    assert "must-not-leak" not in json.dumps(h.runs()[0]["envValues"])  # nor in its env
    assert LINEAR_KEY not in json.dumps(h.runs()[0]["envValues"])


def test_an_issue_route_journals_progress_and_writes_none(harness: Callable[..., Any]) -> None:
    h = start(harness, "work", routes=OPS)
    body = comment_event("issue-9", "OPS-9")
    body["data"]["issue"]["team"] = {"key": "OPS"}
    h.deliver(body)
    wait_until(lambda: h.linear.comments(), message="the answer posted as a comment")
    assert not [w for w in writes(h.linear) if w["kind"] != "thought"]
    wait_until(lambda: {"thought", "plan"} <= {e["stage"] for e in h.api(
        "GET", "/v1/journal").json()["entries"]}, message="journaled")


def test_a_progress_write_linear_rate_limits_is_dropped_and_the_answer_waits_for_the_reset(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear(script=["ok", "ratelimited"], ratelimit_reset_seconds=2.0)
    h = start(harness, "slow", "5", linear=fake)
    h.deliver(session_event(session_id="s-1"))
    sent = answered(fake, timeout=20)
    limited = fake.requests[1]  # the first progress write after the acknowledgement
    assert "agentActivityCreate" in limited.query or "agentSessionUpdate" in limited.query
    assert [r.body for r in fake.requests].count(limited.body) == 1  # never sent again
    assert [w["kind"] for w in sent].count("response") == 1 and sent[-1]["body"] == "done slowly"
    # Until the reset, what the agent showed is shed, and the answer waits for it.
    assert fake.requests[-1].at - limited.at >= 1.5
    metrics = h.api("GET", "/metrics").text
    assert float(re.search(r"^wakeline_progress_skipped_total (\S+)$", metrics, re.M)[1]) >= 1
    wait_until(lambda: h.service.store.outbox.unsettled() == 0, message="settled once")


def test_an_answer_that_waits_for_the_rate_limit_survives_a_restart(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear(script=["ok", "ratelimited"], ratelimit_reset_seconds=3600)
    h = start(harness, "slow", "1", linear=fake, progress=False)
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: len(fake.activities()) == 2, message="the answer met the rate limit")
    wait_until(lambda: h.service.store.outbox.unsettled() == 1, message="the answer waits")
    h.restart()  # the limit's reset is an hour away; the answer is on disk
    wait_until(lambda: len(fake.activities()) == 3, message="sent after the restart")
    sent = writes(fake)
    assert [w["kind"] for w in sent] == ["thought", "response", "response"]  # refused, then sent
    assert sent[1]["body"] == sent[2]["body"] == "done slowly"
    assert [r.refused for r in fake.activities()] == [False, False, False]
    wait_until(lambda: h.service.store.outbox.unsettled() == 0, message="settled once")
