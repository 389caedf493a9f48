"""Echo memory through the real service: no write of ours wakes a turn, a person's edit does.

An agent (or the operator) moves an issue with `linear graphql` `issueUpdate`; the
fake Linear answers it, and the test plays Linear's webhook back, signed by the same
account (`app-user-1`, the fake's viewer), during the write or after it.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from tests.conftest import comment_event, issue_event
from tests.fakes.linear import FakeLinear
from tests.helpers import wait_until

ME = "app-user-1"  # the fake Linear's viewer: wakeline's own account
MOVE = 'mutation Move { issueUpdate(id: "issue-7", input: {stateId: "state-doing"}) { success } }'
ROUTES = [{"name": "ops", "teams": ["OPS"], "mode": "issue"}]


def state_move(actor: str = ME, state: str = "state-doing",
               changed: dict[str, Any] | None = None) -> dict[str, Any]:
    """Linear's webhook of issue-7 moved to `state`, by `actor`."""
    body = issue_event("issue-7", "OPS-7", "update")
    body["actor"] = {"id": actor, "name": "Owner", "type": "user"}
    body["data"].update(stateId=state, state={"id": state, "name": "In Progress", "type": "started"})
    body["updatedFrom"] = changed if changed is not None else {
        "stateId": "state-todo", "updatedAt": "2026-11-29T11:59:00.000Z", "startedAt": None}
    return body


def title_edit(actor: str = ME) -> dict[str, Any]:
    """A person sharing the account edits the title of issue-7 (nothing wakeline wrote)."""
    body = issue_event("issue-7", "OPS-7", "update")
    body["actor"] = {"id": actor, "name": "Owner", "type": "user"}
    body["data"]["title"] = "A better title"
    body["updatedFrom"] = {"title": "Rotate the logs", "updatedAt": "2026-11-29T11:59:00.000Z"}
    return body


def ops_comment(text: str) -> dict[str, Any]:
    body = comment_event("issue-7", "OPS-7")
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["data"]["body"] = text
    return body


def start(harness: Callable[..., Any], fake: FakeLinear | None = None, **kw: Any) -> Any:
    """A service with issue-7's conversation, which has run its first turn; account recorded."""
    h = harness("ok", linear=fake or FakeLinear(), routes=ROUTES, **kw)
    assert h.api("POST", "/v1/linear/connect").status_code == 200
    h.deliver(issue_event("issue-7", "OPS-7", "create"))
    wait_until(lambda: len(h.runs()) == 1 and conversation(h)["state"] == "idle",
               message="the first turn ran")
    # Its reply reached Linear too, so a scripted failure meets the write under test.
    wait_until(lambda: h.service.store.outbox.unsettled() == 0, message="the reply was sent")
    return h


def conversation(h: Any) -> dict[str, Any]:
    return h.only_conversation()


def move(h: Any) -> Any:
    return h.api("POST", "/v1/linear/graphql", json={"query": MOVE})


def during_the_write(h: Any, fake: FakeLinear, *bodies: dict[str, Any]) -> list[dict[str, Any]]:
    """Send the state move, deliver `bodies` while Linear has not answered yet; their outcomes."""
    answers: list[Any] = []
    writer = threading.Thread(target=lambda: answers.append(move(h)))
    writer.start()
    wait_until(lambda: fake.updates(), message="the write reached Linear")
    outcomes = [h.deliver(body) for body in bodies]
    writer.join(30)
    assert answers and answers[0].status_code in (200, 504), answers
    return outcomes


def fifo(h: Any) -> list[tuple[str, str | None]]:
    return [(f["state"], f["completion"]) for f in conversation(h)["fifo"]]


def test_an_echo_during_the_write_is_held_then_recognised(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(delays={"issueUpdate": 1.0})
    h = start(harness, fake)
    assert during_the_write(h, fake, state_move()) == [{"outcome": "held"}]
    wait_until(lambda: fifo(h)[-1] == ("completed", "self_echo"), message="resolved as ours")
    assert len(h.runs()) == 1  # no turn for our own write
    effect = h.api("GET", "/v1/webhook-effects").json()["effects"][0]
    assert effect["kind"] == "mutation" and effect["state"] == "confirmed"
    assert effect["expects"] == {"account": ME, "kind": "Issue", "action": "update",
                                 "subject": "issue-7", "fields": ["stateId"]}
    assert [d["state"] for d in effect["held"]] == ["echo"]
    assert h.api("GET", "/v1/inbox").json()["unreadCount"] == 1  # the create only, not our echo


def test_an_echo_after_the_write_is_ours_inside_the_window(harness: Callable[..., Any]) -> None:
    h = start(harness)
    assert move(h).status_code == 200
    assert h.deliver(state_move()) == {"outcome": "self_echo", "reason": "own_write"}
    assert len(h.runs()) == 1 and len(conversation(h)["fifo"]) == 1


def test_a_persons_edit_on_the_same_account_is_held_then_released_in_order(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear(delays={"issueUpdate": 1.0})
    h = start(harness, fake)
    outcomes = during_the_write(h, fake, title_edit(), ops_comment("after the edit"))
    assert outcomes == [{"outcome": "held"}, {"outcome": "accepted"}]
    runs = wait_until(lambda: len(h.runs()) >= 2 and h.runs(), message="the released edit ran")
    later = [line for run in runs[1:] for line in run["headlines"]]
    assert later[0].startswith("Issue update · OPS-7") and later[1].startswith("Comment create")
    wait_until(lambda: fifo(h)[1:] == [("completed", "response")] * 2, message="both completed")


def test_someone_elses_edit_is_never_held(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(delays={"issueUpdate": 1.0})
    h = start(harness, fake)
    assert during_the_write(h, fake, state_move(actor="user-9")) == [{"outcome": "accepted"}]
    wait_until(lambda: len(h.runs()) == 2, message="a person's move woke a turn")


def test_a_lost_answer_quarantines_until_the_operator_verifies_it_absent(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear()
    h = start(harness, fake)
    fake.script.append("drop")
    assert move(h).json()["error"] == "possibly_dispatched"
    assert h.deliver(state_move()) == {"outcome": "held"}
    assert h.deliver(ops_comment("behind the quarantine")) == {"outcome": "accepted"}
    [effect] = h.api("GET", "/v1/webhook-effects", params={"state": "outcome_unknown"}).json()["effects"]
    assert [d["state"] for d in effect["held"]] == ["held"]
    assert fifo(h)[1:] == [("held", None), ("pending", None)]
    assert h.api("GET", "/v1/status").json()["fifo"]["held"] == 1
    refused = h.api("POST", f"/v1/webhook-effects/{effect['id']}/reconcile-absent", json={})
    assert refused.status_code == 400
    done = h.api("POST", f"/v1/webhook-effects/{effect['id']}/reconcile-absent",
                 json={"verified_absent": True})
    assert done.status_code == 200 and done.json()["state"] == "released"
    assert done.json()["releasedDeliveries"] == 1
    wait_until(lambda: fifo(h)[1:] == [("completed", "response")] * 2, message="the FIFO moved on")


def test_an_intent_that_never_left_is_released_at_start_up(harness: Callable[..., Any]) -> None:
    from wakeline.providers.linear.intents import write_intents

    h = start(harness)
    store = h.service.store
    # The write was recorded, then the process died before it left.
    store.echoes.record_intents(write_intents(MOVE), ME, int(store.clock.now().timestamp() * 1000))
    assert h.deliver(state_move()) == {"outcome": "held"}
    h.restart()
    wait_until(lambda: len(h.runs()) == 2, message="the released delivery ran")
    [effect] = [e for e in h.api("GET", "/v1/webhook-effects").json()["effects"]
                if e["kind"] == "mutation"]
    assert effect["state"] == "released" and effect["held"][0]["state"] == "released"


def test_an_intent_of_unknown_outcome_stays_quarantined_across_a_restart(
        harness: Callable[..., Any]) -> None:
    from wakeline.providers.linear.intents import write_intents

    h = start(harness)
    store = h.service.store
    now = int(store.clock.now().timestamp() * 1000)
    [intent] = store.echoes.record_intents(write_intents(MOVE), ME, now)
    store.outbox.mark_all_dispatched([intent], now)  # on the wire when the process died
    assert h.deliver(state_move()) == {"outcome": "held"}
    h.restart()
    [effect] = [e for e in h.api("GET", "/v1/webhook-effects").json()["effects"]
                if e["kind"] == "mutation"]
    assert effect["state"] == "outcome_unknown" and effect["held"][0]["state"] == "held"
    assert fifo(h)[-1] == ("held", None) and len(h.runs()) == 1
    h.api("POST", f"/v1/webhook-effects/{intent}/reconcile-absent", json={"verified_absent": True})
    wait_until(lambda: len(h.runs()) == 2, message="released, it ran")


def test_an_edit_after_the_window_is_acted_on(harness: Callable[..., Any]) -> None:
    h = start(harness, linear_config={"echo_window_seconds": 0})
    assert move(h).status_code == 200
    assert h.deliver(state_move()) == {"outcome": "accepted"}
    wait_until(lambda: len(h.runs()) == 2, message="the later edit woke a turn")


def test_a_terminal_state_callback_is_never_held(harness: Callable[..., Any]) -> None:
    fake = FakeLinear(delays={"issueUpdate": 1.0})
    h = start(harness, fake)
    closed = state_move(state="state-done")
    closed["data"]["state"] = {"id": "state-done", "name": "Done", "type": "completed"}
    assert during_the_write(h, fake, closed) == [{"outcome": "accepted"}]
    assert conversation(h)["state"] == "terminal"


def overlapping(h: Any, fake: FakeLinear, first: str, second: str, field: str,
                first_echo: dict[str, Any]) -> dict[str, Any]:
    """Write `first` (answered), then `second`, whose answer Linear holds back until the first
    write's echo is admitted; the echo's outcome."""
    assert h.api("POST", "/v1/linear/graphql", json={"query": first}).status_code == 200
    gate = fake.hold(second.split('"')[-2])  # the second write's distinct value
    answers: list[Any] = []
    writer = threading.Thread(target=lambda: answers.append(
        h.api("POST", "/v1/linear/graphql", json={"query": second})))
    writer.start()
    wait_until(lambda: len(fake.updates(field)) == 2, message="the second write is in flight")
    outcome = h.deliver(first_echo)
    gate.set()
    writer.join(30)
    assert answers and answers[0].status_code == 200, answers
    return outcome


def test_the_first_moves_echo_is_ours_while_the_second_move_is_in_flight(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear()
    h = start(harness, fake)
    review = MOVE.replace("state-doing", "state-review")
    outcome = overlapping(h, fake, MOVE, review, "issueUpdate", state_move())
    assert outcome == {"outcome": "self_echo", "reason": "own_write"}
    second = state_move(state="state-review", changed={"stateId": "state-doing"})
    assert h.deliver(second) == {"outcome": "self_echo", "reason": "own_write"}
    wait_until(lambda: h.api("GET", "/v1/status").json()["fifo"]["held"] == 0, message="none held")
    assert len(h.runs()) == 1 and len(conversation(h)["fifo"]) == 1  # no turn, no FIFO entry
    assert h.api("GET", "/v1/inbox").json()["unreadCount"] == 1  # the create only


def comment_edit(body: str, before: str) -> dict[str, Any]:
    """Linear's webhook of comment-3 on issue-7 edited to `body` by our account."""
    event = ops_comment(body)
    event.update(action="update", actor={"id": ME, "name": "Owner", "type": "user"},
                 updatedFrom={"body": before, "editedAt": None, "updatedAt": "2026-11-29T11:59:00Z"})
    event["data"]["id"] = "comment-3"
    return event


def test_the_first_edits_echo_is_ours_while_the_second_edit_is_in_flight(
        harness: Callable[..., Any]) -> None:
    fake = FakeLinear()
    h = start(harness, fake)
    edit = 'mutation {{ commentUpdate(id: "comment-3", input: {{body: "{}"}}) {{ success }} }}'
    outcome = overlapping(h, fake, edit.format("draft one"), edit.format("draft two"),
                          "commentUpdate", comment_edit("draft one", "draft zero"))
    assert outcome == {"outcome": "self_echo", "reason": "own_write"}
    assert h.deliver(comment_edit("draft two", "draft one")) == {"outcome": "self_echo",
                                                                 "reason": "own_write"}
    # A person's edit on the shared account, to a text we never wrote, is theirs.
    assert h.deliver(comment_edit("by hand", "draft two")) == {"outcome": "accepted"}
    wait_until(lambda: len(h.runs()) == 2, message="only the person's edit woke a turn")
