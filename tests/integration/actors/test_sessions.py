"""Linear agent sessions end to end, against a fake Linear on loopback."""

from __future__ import annotations

import time
from typing import Any, Callable

from tests.conftest import LINEAR_KEY, comment_event, issue_event, session_event
from tests.fakes.linear import FakeLinear
from tests.helpers import wait_until


def activity_types(fake: FakeLinear, session: str | None = None) -> list[str]:
    return [r.input["content"]["type"] for r in fake.activities()
            if session is None or r.input["agentSessionId"] == session]


def effects(h: Any, state: str | None = None) -> list[dict[str, Any]]:
    items = h.service.store.outbox.listing(limit=1000)
    return [e for e in items if state is None or e["state"] == state]


def test_created_gets_a_thought_then_the_response(harness: Callable[..., Any]) -> None:
    h = harness("ok")
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: len(effects(h, "confirmed")) == 2, timeout=15)
    thought, response = h.linear.activities()
    assert [thought.input["content"]["type"], response.input["content"]["type"]] == ["thought", "response"]
    assert thought.input["content"]["body"].startswith("Picked up")
    assert response.input["content"]["body"].startswith("done:")
    assert thought.at < h.runs()[0]["at"], "the agent started before the acknowledgement"
    # Every create carries a client-chosen id that was recorded before the request left.
    assert {thought.input["id"], response.input["id"]} == {e["id"] for e in effects(h, "confirmed")}
    assert thought.headers["Authorization"] == LINEAR_KEY  # a personal key goes bare


def test_ack_reaches_linear_while_every_turn_slot_is_busy(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "3600", max_concurrent_turns=1)
    h.deliver(session_event(session_id="busy", issue_id="i-busy", identifier="ENG-1"))
    wait_until(lambda: h.runs())
    sent = time.monotonic()
    h.deliver(session_event(session_id="waiting", issue_id="i-wait", identifier="ENG-2"))
    wait_until(lambda: activity_types(h.linear, "waiting") == ["thought"], timeout=10)
    assert time.monotonic() - sent < 5
    assert len(h.runs()) == 1  # its turn still waits for the slot


def test_unrouted_team_gets_an_error_and_no_turn(harness: Callable[..., Any]) -> None:
    h = harness("ok")
    assert h.deliver(session_event(session_id="s-x", identifier="XYZ-1"))["outcome"] == "ignored"
    wait_until(lambda: activity_types(h.linear, "s-x") == ["error"])
    assert "isn't connected" in h.linear.activities()[0].input["content"]["body"]
    assert h.runs() == []


def test_redundant_prompted_rides_the_first_turn(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "0.5", max_concurrent_turns=1)
    h.deliver(session_event(session_id="blocker", issue_id="i-b", identifier="ENG-9"))
    wait_until(lambda: h.runs())
    h.deliver(session_event(session_id="s-1"))
    h.deliver(session_event("prompted", session_id="s-1"))
    wait_until(lambda: activity_types(h.linear, "s-1") == ["thought", "response"], timeout=15)
    runs = [r for r in h.runs() if r["issue"] == "ENG-1"]
    assert len(runs) == 1 and len(runs[0]["headlines"]) == 2


def test_stop_signal_stops_the_turn_and_answers(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "3600")
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: h.runs())
    stop = session_event("prompted", session_id="s-1")
    stop["agentActivity"] = {"id": "act-stop", "signal": "stop", "content": {"type": "prompt", "body": "stop"}}
    h.deliver(stop)
    conv = wait_until(lambda: (c := h.only_conversation())["turns"] and c, timeout=15)
    assert conv["turns"][0]["result"] == "stopped"
    wait_until(lambda: activity_types(h.linear, "s-1") == ["thought", "response"])
    assert h.linear.activities()[1].input["content"]["body"] == "Stopped as requested."


def test_a_linear_stop_gives_the_other_session_of_its_turn_a_new_turn(harness: Callable[..., Any]) -> None:
    h = harness("sleep-first", "3600", max_concurrent_turns=1)
    h.deliver(session_event(session_id="s-0", issue_id="issue-2", identifier="ENG-2"))
    wait_until(lambda: h.runs())  # ENG-2 holds the only slot, so both ENG-1 sessions ride one turn
    h.deliver(session_event(session_id="s-1"))
    h.deliver(session_event(session_id="s-2"))
    convs = h.api("GET", "/v1/conversations").json()["conversations"]
    [blocker] = [c["id"] for c in convs if c["kind"] == "issue" and c["title"].startswith("[ENG-2]")]
    assert h.api("POST", f"/v1/conversations/{blocker}/stop").status_code == 200
    wait_until(lambda: [r for r in h.runs() if r["issue"] == "ENG-1"], timeout=15)
    stop = session_event("prompted", session_id="s-1")
    stop["agentActivity"] = {"id": "act-stop", "signal": "stop", "content": {"type": "prompt", "body": "stop"}}
    h.deliver(stop)
    wait_until(lambda: activity_types(h.linear, "s-2") == ["thought", "response"], timeout=15)
    assert activity_types(h.linear, "s-1") == ["thought", "response"]
    first, second = [r for r in h.runs() if r["issue"] == "ENG-1"]
    assert len(first["headlines"]) == 2 and len(second["headlines"]) == 1


def test_exit_codes_become_error_and_elicitation(harness: Callable[..., Any]) -> None:
    for code, kind in ((1, "error"), (2, "elicitation")):
        h = harness("exit", str(code))
        h.deliver(session_event(session_id=f"s-{code}"))
        wait_until(lambda: activity_types(h.linear, f"s-{code}") == ["thought", kind], timeout=15)


def test_long_turn_gets_a_heartbeat(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "3", heartbeat_seconds=1)
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: "response" in activity_types(h.linear, "s-1"), timeout=20)
    types = activity_types(h.linear, "s-1")
    assert types[0] == "thought" and types[-1] == "response"
    assert any(r.input["content"]["body"] == "Still working on it." for r in h.linear.activities())


def test_stalled_turn_posts_an_error(harness: Callable[..., Any]) -> None:
    h = harness("ok")
    h.service.turn_env.backoff_seconds = ()
    object.__setattr__(h.service.config.agent, "command", ["/nonexistent/agent"])
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: activity_types(h.linear, "s-1") == ["thought", "error"], timeout=15)
    assert "could not finish" in h.linear.activities()[-1].input["content"]["body"]


def test_issue_route_replies_with_a_comment_after_finalising(harness: Callable[..., Any]) -> None:
    h = harness("ok")
    h.deliver(issue_event())
    wait_until(lambda: h.linear.comments(), timeout=15)
    comment = h.linear.comments()[0].input
    assert comment["issueId"] == "issue-2" and comment["body"].startswith("done:")
    assert h.only_conversation()["turns"][0]["result"] == "response"


def test_issue_route_with_reply_none_posts_nothing(harness: Callable[..., Any]) -> None:
    h = harness("ok", routes=[{"name": "ops", "teams": ["OPS"], "mode": "issue", "reply": "none"}])
    h.deliver(issue_event())
    wait_until(lambda: h.only_conversation()["turns"])
    assert h.linear.requests == []


def test_prompted_for_an_unknown_session_is_picked_up(harness: Callable[..., Any]) -> None:
    h = harness("ok")
    h.deliver(session_event("prompted", session_id="never-seen"))
    wait_until(lambda: activity_types(h.linear, "never-seen") == ["thought", "response"], timeout=15)


def test_provider_failures_are_never_retried(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(script=["500", "drop", "error"])
    h = harness("exit", "1", linear=fake)
    h.service.turn_env.kick_tracker = lambda: None  # only the ack effects, one per session
    for n in range(3):
        h.deliver(session_event(session_id=f"s-{n}", issue_id=f"i-{n}", identifier=f"ENG-{n}"))
    wait_until(lambda: len([e for e in effects(h) if e["summary"].startswith("thought")
                            and e["state"] != "prepared" and e["state"] != "dispatched"]) == 3, timeout=15)
    states = sorted(e["state"] for e in effects(h) if e["summary"].startswith("thought"))
    assert states == ["outcome_unknown", "outcome_unknown", "rejected"]
    rejected = [e for e in effects(h) if e["state"] == "rejected"][0]
    assert rejected["error"] == "Entity not found: AgentSession"
    assert len([r for r in fake.activities() if r.input["content"]["type"] == "thought"]) == 3


def test_ratelimited_answers_wait_for_the_reset_and_go_out_once(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(script=["ratelimited"], ratelimit_reset_seconds=2.0)
    h = harness("sleep", "3600", linear=fake)
    h.deliver(session_event(session_id="s-0", issue_id="i-0", identifier="ENG-0"))
    wait_until(lambda: len(fake.requests) == 1, message="the first write met the rate limit")
    h.deliver(session_event(session_id="s-1", issue_id="i-1", identifier="ENG-1"))
    wait_until(lambda: len(effects(h, "prepared")) == 2, message="both wait, Linear ran neither")
    for _ in range(3):  # kicks send whatever may be sent: nothing before the reset
        h.service.tracker.kick().get()
    assert len(fake.requests) == 1 and not effects(h, "rejected")
    wait_until(lambda: len(effects(h, "confirmed")) == 2, timeout=15, message="sent after it")
    assert sorted(r.input["agentSessionId"] for r in fake.activities()[1:]) == ["s-0", "s-1"]


def test_provider_messages_are_redacted(harness: Callable[..., Any]) -> None:
    fake = FakeLinear()
    fake.handler = lambda body: {"errors": [{"message": f"bad key {LINEAR_KEY} for you"}]}
    h = harness("sleep", "3600", linear=fake)
    h.deliver(session_event(session_id="s-1"))
    [rejected] = wait_until(lambda: effects(h, "rejected"))
    assert LINEAR_KEY not in rejected["error"] and "[redacted]" in rejected["error"]


def test_without_a_credential_turns_run_and_writes_are_refused(harness: Callable[..., Any]) -> None:
    h = harness("ok", credential=False)
    h.deliver(session_event(session_id="s-1"))
    conv = wait_until(lambda: (c := h.only_conversation())["turns"] and c)
    assert conv["turns"][0]["result"] == "response"
    wait_until(lambda: len(effects(h, "rejected")) == 2)
    assert {e["error"] for e in effects(h)} == {"requires_connected_linear"}
    assert h.linear.requests == []


def test_one_slow_call_does_not_hold_up_another(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(delays={'"agentSessionId": "slow"': 5.0})
    h = harness("sleep", "3600", linear=fake)
    h.deliver(session_event(session_id="slow", issue_id="i-slow", identifier="ENG-1"))
    wait_until(lambda: fake.activities())  # the slow call is on the wire
    sent = time.monotonic()
    h.deliver(session_event(session_id="fast", issue_id="i-fast", identifier="ENG-2"))
    wait_until(lambda: [e for e in effects(h, "confirmed") if e["target"] == "fast"], timeout=10)
    assert time.monotonic() - sent < 4.0
    assert not [e for e in effects(h, "confirmed") if e["target"] == "slow"]


def test_a_turn_rerun_after_a_restart_says_so(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "3600")
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: h.runs())
    h.restart()  # the turn record survives: it runs again
    wait_until(lambda: len(h.runs()) == 2, timeout=15)
    rerun = [r.input["content"]["body"] for r in h.linear.activities()]
    assert rerun[0].startswith("Picked up") and "restarted" in rerun[-1]


def test_our_own_comment_coming_back_is_a_self_echo_and_wakes_nothing(harness: Callable[..., Any]) -> None:
    h = harness("ok")
    h.deliver(issue_event())
    wait_until(lambda: h.linear.comments(), timeout=15)
    ours = h.linear.comments()[0].input
    echo = comment_event(issue_id="issue-2", identifier="OPS-2")
    echo["data"]["id"] = ours["id"]
    echo["data"]["body"] = ours["body"]
    assert h.deliver(echo) == {"outcome": "self_echo", "reason": "own_write"}
    human = comment_event(issue_id="issue-2", identifier="OPS-2")
    assert h.deliver(human)["outcome"] == "accepted"
    conv = wait_until(lambda: (c := h.only_conversation())["turns"] and len(c["turns"]) == 2 and c, timeout=15)
    assert conv["pending"] == 0 and len(h.runs()) == 2  # the human's comment ran; the echo did not


def test_reset_answers_the_sessions_whose_work_it_drops(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "3600")
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: h.runs())
    cid = h.runs()[0]["conversation"]
    assert h.api("POST", f"/v1/conversations/{cid}/reset").status_code == 200
    wait_until(lambda: activity_types(h.linear, "s-1") == ["thought", "response"], timeout=10)
    assert "reset" in h.linear.activities()[-1].input["content"]["body"]


def test_closing_the_issue_stops_the_turn_and_answers(harness: Callable[..., Any]) -> None:
    h = harness("sleep", "3600")
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: h.runs())
    done = issue_event(issue_id="issue-1", identifier="ENG-1")
    done["data"]["state"] = {"id": "state-done", "name": "Done", "type": "completed"}
    h.deliver(done)
    conv = wait_until(lambda: (c := h.only_conversation())["state"] == "terminal" and c["turns"] and c,
                      timeout=15)
    assert conv["turns"][0]["result"] == "retired"
    wait_until(lambda: activity_types(h.linear, "s-1") == ["thought", "response"])
    assert h.deliver(session_event("prompted", session_id="s-1"))["outcome"] == "ignored"


def test_stop_before_the_agent_started_cancels_it(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(delays={'"type": "thought"': 4.0})  # the ack gate holds the start
    h = harness("ok", linear=fake)
    h.deliver(session_event(session_id="s-1"))
    wait_until(lambda: fake.activities())
    cid = h.api("GET", "/v1/conversations").json()["conversations"][0]["id"]
    wait_until(lambda: h.conversation(cid)["state"] == "running", message="claimed")
    sent = time.monotonic()
    assert h.api("POST", f"/v1/conversations/{cid}/stop").status_code == 200
    assert time.monotonic() - sent < 3.0  # the actor did not wait for the gate
    assert wait_until(lambda: h.conversation(cid)["turns"])[0]["result"] == "stopped"
    assert h.runs() == []
