"""Discord control threads against the fake Discord, with the real discord.py client.

Each test runs a whole service (`harness(..., discord=True)`): its DiscordControl actor,
its REST client, and discord.py's Gateway client in its own thread, all pointed at
`tests/fakes/discord.py`. Routes `eng` (agent sessions of ENG) and `ops` (Issue and
Comment events of OPS) both name the fake's channel as their parent.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():
    # discord.py (the `discord` extra, which `make test` installs) imports the deprecated
    # `audioop`; without it these tests skip.
    warnings.filterwarnings("ignore", message="'audioop' is deprecated",
                            category=DeprecationWarning)
    pytest.importorskip("discord")

from tests.conftest import comment_event, issue_event, session_event
from tests.fakes.discord import FakeDiscord, RecordedRequest
from tests.helpers import StoreShell, wait_until
from tests.integration.actors.conftest import DISCORD_TOKEN, Harness

pytestmark = pytest.mark.slow

PERSON = "555000000000000001"
OTHER = "555000000000000002"
DONE = {"id": "state-done", "name": "Done", "type": "completed"}
TODO = {"id": "state-todo", "name": "Todo", "type": "unstarted"}


# --------------------------------------------------------------------------------- helpers


def opened(issue: str = "issue-7", key: str = "OPS-7", title: str = "Rotate the logs",
           action: str = "create") -> dict[str, Any]:
    """An Issue event of the ops route in an open state."""
    body = issue_event(issue, key, action)
    body["data"]["title"] = title
    return body


def moved(state: dict[str, Any], issue: str = "issue-7", key: str = "OPS-7") -> dict[str, Any]:
    """An Issue update into `state`."""
    body = issue_event(issue, key, "update")
    body["data"]["state"] = state
    body["updatedFrom"] = {"stateId": "state-before"}
    return body


def comment(text: str, issue: str = "issue-7", key: str = "OPS-7") -> dict[str, Any]:
    """A Comment on an ops issue."""
    body = comment_event(issue, key)
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["data"]["body"] = text
    return body


def thread_of(h: Harness) -> str:
    """The only conversation's control thread, once it has one."""
    return str(wait_until(lambda: (h.only_conversation().get("control") or {}).get("threadId"),
                          message="a control thread"))


def said(fake: FakeDiscord, thread_id: str) -> list[str]:
    """What the bot posted in a thread, oldest first."""
    return [m["content"] for m in fake.messages(thread_id) if m["author"]["id"] == fake.bot_id]


def ok(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    """The requests Discord answered with success."""
    return [r for r in requests if 200 <= r.status < 300]


def creates(fake: FakeDiscord) -> list[RecordedRequest]:
    """Successful thread creations."""
    return ok(fake.requests_to("POST", "/channels/*/threads"))


def archives(fake: FakeDiscord) -> list[RecordedRequest]:
    """Successful edits that archived a thread."""
    return [r for r in ok(fake.requests_to("PATCH", "/channels/*"))
            if (r.json or {}).get("archived") is True]


def deliveries(h: Harness, delivery_prefix: str = "discord:") -> list[tuple[Any, ...]]:
    """The store's FIFO entries of thread messages (receipt id, state, completion)."""
    return StoreShell(h.service.config).execute(
        "SELECT r.delivery_id, d.state, d.completion FROM receipts r JOIN deliveries d"
        " ON d.receipt_id = r.id WHERE r.delivery_id LIKE ?", (delivery_prefix + "%",))


def cursor(h: Harness) -> int | None:
    """The only binding's catch-up cursor."""
    return StoreShell(h.service.config).execute(
        "SELECT last_message_id FROM control_bindings").fetchone()[0]


def forget_cursor(h: Harness) -> None:
    """As if no message of the thread had been seen: a catch-up starts at the thread's start."""
    StoreShell(h.service.config).execute("UPDATE control_bindings SET last_message_id = NULL")


# ----------------------------------------------------------------------- threads and answers


def test_the_first_delivery_creates_one_titled_thread_and_answers_go_there(
        harness: Any) -> None:
    h = harness("lines", "60", discord=True)  # an answer of 4,200 characters
    fake = h.discord
    long_title = "Rotate the logs " + "and keep them for ninety days " * 5
    h.deliver(opened(title=long_title))
    thread_id = thread_of(h)
    wait_until(lambda: len(said(fake, thread_id)) >= 4, message="the opened line and the answer")

    [create] = creates(fake)
    name = create.json["name"]
    assert name.startswith("[OPS-7] Rotate the logs and keep") and len(name) == 100
    assert name.endswith("…") and create.json["type"] == 11
    opening, *answer = said(fake, thread_id)
    assert "OPS-7" in opening and "!stop" in opening
    assert all(len(part) <= 2000 for part in answer) and len(answer) == 3
    lines = "\n".join(answer).splitlines()
    assert lines == [f"{n:05d} " + "x" * 64 for n in range(60)]  # cut on line boundaries
    control = h.only_conversation()["control"]
    assert control == {"provider": "discord", "threadId": thread_id, "title": name,
                       "archived": False, "locked": False, "parentId": fake.channel_id}

    # A later delivery reuses the thread: it is fetched, never made again.
    h.deliver(comment("one more thing"))
    wait_until(lambda: len(h.runs()) == 2, message="the comment's turn")
    wait_until(lambda: len(said(fake, thread_id)) >= 7, message="the second answer")
    assert len(creates(fake)) == 1
    assert ok(fake.requests_to("GET", f"/channels/{thread_id}"))


def test_an_agent_session_posts_its_answer_error_and_question(harness: Any) -> None:
    h = harness("exit", "2", discord=True)
    fake = h.discord
    h.deliver(session_event("created", session_id="s1"))
    thread_id = thread_of(h)
    [question] = wait_until(lambda: said(fake, thread_id)[1:], message="the question")
    assert question.startswith("**Question**") and "exiting with 2" in question
    h.api("POST", f"/v1/conversations/{h.only_conversation()['id']}/reset")
    wait_until(lambda: any("Context reset" in m for m in said(fake, thread_id)),
               message="the reset line")


# ------------------------------------------------------------------------- thread messages in


def test_a_persons_message_runs_a_turn_and_a_resend_is_a_duplicate(harness: Any) -> None:
    h = harness("prompt", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(h.runs()) == 1, message="the first turn")
    sent = fake.post_user_message(thread_id, PERSON, "please also cover the tests " + "y" * 3970,
                                  username="Ada")
    wait_until(lambda: len(h.runs()) == 2, message="the message's turn")
    run = h.runs()[1]
    assert run["headlines"] == ["Discord message · OPS-7 · Ada"]
    assert run["conversation"] == h.only_conversation()["id"]
    [(delivery_id, state, completion)] = wait_until(
        lambda: [d for d in deliveries(h) if d[1] == "completed"], message="completed")
    assert delivery_id == f"discord:{sent['id']}" and completion == "response"

    # The Gateway sends it again, and a catch-up from the thread's start finds it: the
    # receipt keyed by its id makes each a duplicate.
    from wakeline.providers.discord.messages import ThreadMessage

    control = h.service.discord.control
    control.gateway_message(ThreadMessage.from_rest({**sent, "guild_id": fake.guild_id})) \
        .get(timeout=10)
    forget_cursor(h)
    gets = len(fake.requests_to("GET", f"/channels/{thread_id}/messages"))
    control.gateway_ready().get(timeout=10)
    wait_until(lambda: len(fake.requests_to("GET", f"/channels/{thread_id}/messages")) > gets,
               message="the catch-up")
    wait_until(lambda: cursor(h) is not None, message="caught up to the last message")
    assert len(deliveries(h)) == 1 and len(h.runs()) == 2
    entries = h.api("GET", "/v1/journal?limit=100").json()["entries"]
    inbound = [e for e in entries if e["kind"] == "inbound" and e["id"].startswith("inbound:disc")]
    assert [e["id"] for e in inbound] == [f"inbound:discord:{sent['id']}"]
    assert inbound[0]["thread"].startswith("https://discord.com/channels/")


def test_bots_others_and_system_messages_are_ignored(harness: Any) -> None:
    h = harness("prompt", discord=True, discord_config={"allowed_user_ids": [PERSON]})
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(h.runs()) == 1, message="the first turn")
    fake.post_user_message(thread_id, OTHER, "I am not on the list")
    fake.post_user_message(thread_id, PERSON, "", attachments=["trace.log", "screen.png"])
    wait_until(lambda: len(h.runs()) == 2, message="the allowed person's turn")
    prompt = h.runs()[1]
    assert prompt["headlines"] == [f"Discord message · OPS-7 · user{PERSON}"]
    turns = wait_until(lambda: len(h.only_conversation()["turns"]) == 2
                       and h.only_conversation()["turns"], message="its turn recorded")
    assert turns[0]["deliveries"] == 1
    # Only the allowed person's message became a delivery: the bot's own answers and the
    # other user's message did not; its prompt says it has attachments and no text.
    assert len(deliveries(h)) == 1
    output = turns[0]["output"]
    assert "(no text: attachments only)" in output and "trace.log" in output


def test_a_message_in_a_thread_without_a_binding_is_ignored_and_logged_once(
        harness: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="wakeline.providers.discord.control")
    h = harness("ok", discord=True)
    fake = h.discord
    stranger = fake.add_thread(fake.channel_id, "somebody else's thread")
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(h.runs()) == 1, message="the first turn")
    for text in ("hello?", "anyone?"):
        fake.post_user_message(stranger["id"], PERSON, text)
    fake.post_user_message(thread_id, PERSON, "the bound one")  # comes after both
    wait_until(lambda: len(h.runs()) == 2, message="the bound thread's turn")
    assert len(deliveries(h)) == 1
    unbound = [r for r in caplog.records if "no binding" in r.getMessage()
               and getattr(r, "channel_id", None) == stranger["id"]]
    assert len(unbound) == 1


# ---------------------------------------------------------------------------------- commands


def test_status_stop_and_reset_act_on_the_conversation(harness: Any) -> None:
    h = harness("sleep-first", "30", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: h.only_conversation()["state"] == "running", message="a running turn")
    wait_until(lambda: len(h.runs()) == 1, message="the agent started")  # before !STOP kills it
    session = h.only_conversation()["session"]

    fake.post_user_message(thread_id, PERSON, "!status")
    status = wait_until(lambda: [m for m in said(fake, thread_id) if "pending" in m],
                        message="the status")
    assert "[OPS-7] Rotate the logs" in status[0] and "running" in status[0]
    fake.post_user_message(thread_id, PERSON, "  !STOP ")
    wait_until(lambda: "Stopped." in said(fake, thread_id), message="stopped")
    assert h.only_conversation()["turns"][0]["result"] == "stopped"
    fake.post_user_message(thread_id, PERSON, "!stop")
    wait_until(lambda: any("Nothing is running" in m for m in said(fake, thread_id)),
               message="nothing to stop")
    fake.post_user_message(thread_id, PERSON, "!reset")
    wait_until(lambda: any("Context reset" in m for m in said(fake, thread_id)),
               message="the reset line")
    assert h.only_conversation()["session"] != session
    # No command ever started a turn, and each was admitted once (no FIFO entry).
    assert len(h.runs()) == 1 and deliveries(h) == []


# ---------------------------------------------------------------------------------- lifecycle


def test_terminal_archives_and_locks_and_only_an_open_state_reopens(harness: Any) -> None:
    h = harness("ok", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(said(fake, thread_id)) == 2, message="the answer")
    h.deliver(moved(DONE))
    wait_until(lambda: (fake.channel(thread_id) or {}).get("thread_metadata", {}).get("locked"),
               message="archived and locked")
    assert said(fake, thread_id)[-1].startswith("The issue was completed or canceled")
    assert len(archives(fake)) == 1
    control = wait_until(lambda: h.only_conversation()["control"]["locked"] and
                         h.only_conversation()["control"], message="the binding mirrored")
    assert control["archived"] is True

    # An Issue event with an open state is the one thing that reopens it.
    h.deliver(moved(TODO))
    wait_until(lambda: h.only_conversation()["state"] != "terminal", message="reopened")
    wait_until(lambda: not (fake.channel(thread_id) or {})["thread_metadata"]["locked"],
               message="unarchived and unlocked")
    wait_until(lambda: any("reopened" in m for m in said(fake, thread_id)),
               message="the reopened line")
    assert len(creates(fake)) == 1 and not h.only_conversation()["control"]["archived"]
    fake.post_user_message(thread_id, PERSON, "welcome back")
    wait_until(lambda: len(h.runs()) == 2, message="a turn again")

    def stages() -> set[str]:
        entries = h.api("GET", "/v1/journal?limit=200").json()["entries"]
        return {e["stage"] for e in entries if e["kind"] == "lifecycle"}

    wait_until(lambda: {"thread_opened", "thread_closed", "thread_reopened"} <= stages(),
               message="the thread's lifecycle in the journal")


def test_comments_after_terminal_never_post_or_unarchive(harness: Any) -> None:
    h = harness("ok", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(said(fake, thread_id)) == 2, message="the answer")
    h.deliver(moved(DONE))
    wait_until(lambda: h.only_conversation()["control"]["locked"], message="closed")
    before = list(fake.requests)
    for n in range(3):
        assert h.deliver(comment(f"late {n}"))["reason"] == "terminal"
    h.deliver(session_event("created", session_id="s9", issue_id="issue-7", identifier="OPS-7"))
    # The tick sweeps and retries run meanwhile; give them time to do anything they would.
    wait_until(lambda: h.service.discord.control.tick().get(timeout=5) is None
               and h.api("GET", "/v1/status").ok)
    after = fake.requests[len(before):]
    assert [r for r in after if r.method != "GET"] == []
    assert (fake.channel(thread_id) or {})["thread_metadata"]["archived"] is True


def test_a_terminal_first_issue_gets_no_thread(harness: Any) -> None:
    h = harness("ok", discord=True)
    fake = h.discord
    assert h.deliver(moved(DONE))["outcome"] == "accepted"
    assert h.deliver(comment("too late"))["reason"] == "terminal"
    conv = h.only_conversation()
    assert conv["state"] == "terminal" and conv["control"] is None
    assert creates(fake) == [] and h.runs() == []
    # Only an explicit open state brings it back, and with it the first thread.
    h.deliver(moved(TODO))
    thread_id = thread_of(h)
    assert len(creates(fake)) == 1 and thread_id


# ----------------------------------------------------------------------- a thread's identity


def test_a_thread_deleted_mid_turn_is_replaced_keeping_the_conversation(harness: Any) -> None:
    h = harness("sleep-first", "1.5", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    conv = wait_until(lambda: h.only_conversation()["state"] == "running"
                      and h.only_conversation(), message="the turn running")
    fake.delete_channel(thread_id)  # by hand, while the agent works
    new_id = wait_until(lambda: (h.only_conversation()["control"]["threadId"] != thread_id
                                 and h.only_conversation()["control"]["threadId"]),
                        message="a replacement thread", timeout=15)
    wait_until(lambda: "done" in said(fake, new_id), message="the answer in the new thread")
    after = h.only_conversation()
    assert (after["id"], after["session"]) == (conv["id"], conv["session"])
    assert creates(fake)[-1].json["name"] == "[OPS-7] Rotate the logs"
    assert any("replaces one that was deleted" in m for m in said(fake, new_id))
    assert len(creates(fake)) == 2

    # Deleted again between turns: the next reconciliation replaces it, same conversation.
    fake.delete_channel(new_id)
    h.deliver(comment("still there?"))
    third = wait_until(lambda: (h.only_conversation()["control"]["threadId"] not in
                                (thread_id, new_id) and h.only_conversation()["control"]
                                ["threadId"]), message="a second replacement")
    wait_until(lambda: "done" in said(fake, third), message="the answer there")
    assert h.only_conversation()["id"] == conv["id"] and len(creates(fake)) == 3


def test_a_renamed_thread_keeps_its_identity(harness: Any) -> None:
    h = harness("ok", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(said(fake, thread_id)) == 2, message="the answer")
    fake.update_thread(thread_id, name="renamed by a person")
    fake.post_user_message(thread_id, PERSON, "after the rename")
    wait_until(lambda: len(h.runs()) == 2, message="the message's turn")
    h.deliver(comment("and a comment"))
    wait_until(lambda: len(said(fake, thread_id)) == 4, message="both answers, same thread")
    control = h.only_conversation()["control"]
    assert control["threadId"] == thread_id and control["title"] == "[OPS-7] Rotate the logs"
    assert fake.channel(thread_id)["name"] == "renamed by a person"  # never renamed back
    assert len(creates(fake)) == 1


# -------------------------------------------------------------------------------- rate limits


@pytest.mark.parametrize("bucket", [{"rate_limit": 2, "rate_window_s": 0.4}])
def test_a_429_storm_is_waited_out_without_a_storm_of_requests(
        harness: Any, bucket: dict[str, Any]) -> None:
    fake = FakeDiscord(token=DISCORD_TOKEN, **bucket)
    h = harness("lines", "150", discord=fake)  # 10,500 characters: six messages
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(said(fake, thread_id)) == 7, message="all six parts")
    posts = fake.requests_to("POST", f"/channels/{thread_id}/messages")
    # The bucket's headers said when it was empty: the client waited instead of hitting it.
    assert [r.status for r in posts] == [200] * 7

    # Scripted 429s: each waited out by its retry_after, then retried; never a burst.
    fake.rate_limit_next("POST", "/channels/*/messages", retry_after=0.3, times=4)
    h.deliver(comment("again"))
    wait_until(lambda: len(said(fake, thread_id)) == 13, message="the second answer",
               timeout=20)
    tries = fake.requests_to("POST", f"/channels/{thread_id}/messages")[7:]
    limited = [r for r in tries if r.status == 429]
    assert len(limited) == 4
    for refused, following in zip(tries, tries[1:]):
        if refused.status == 429:
            assert following.at - refused.at >= 0.29
    # The text reached Discord once, in order.
    assert "\n".join(said(fake, thread_id)[7:]).splitlines() == \
        [f"{n:05d} " + "x" * 64 for n in range(150)]


# ------------------------------------------------------------------------------------- faults


def test_discord_down_at_start_up_delays_only_discord(harness: Any) -> None:
    fake = FakeDiscord(token=DISCORD_TOKEN).start()
    fake.fail_next(None, "*", 503, times=12)  # the Gateway address, the thread, the posts
    h = harness("ok", discord=fake)
    h.deliver(opened())
    wait_until(lambda: len(h.runs()) == 1, message="the turn ran anyway")
    wait_until(lambda: h.linear.comments(), message="the answer reached Linear")
    thread_id = thread_of(h)
    wait_until(lambda: len(said(fake, thread_id)) == 2, message="the thread caught up",
               timeout=20)
    assert said(fake, thread_id)[1].startswith("done")
    assert sum(r.status == 503 for r in fake.requests) == 12
    assert len(creates(fake)) == 1
    fake.post_user_message(thread_id, PERSON, "the Gateway works too")
    wait_until(lambda: len(h.runs()) == 2, message="a thread message's turn")


def test_an_answer_discord_refused_until_a_restart_is_posted_after_it_once(
        harness: Any) -> None:
    h = harness("ok", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(said(fake, thread_id)) == 2, message="the opened line and the answer")
    fake.fail_next("POST", f"/channels/{thread_id}/messages", 503, times=10_000)
    h.deliver(comment("one more thing"))
    wait_until(lambda: len(h.linear.comments()) == 2, message="the second answer reached Linear")
    wait_until(lambda: sum(r.status == 503 for r in fake.requests) >= 2,
               message="Discord refused the post, twice")
    h.restart()  # the retries in memory are gone; the answer owed is in the store
    fake.clear_scripts()
    wait_until(lambda: len(said(fake, thread_id)) == 3, message="the owed answer, after the restart")
    h.deliver(comment("and another"))
    wait_until(lambda: len(said(fake, thread_id)) == 4, message="the third answer")
    opening, *answers = said(fake, thread_id)
    assert [a.startswith("done") for a in answers] == [True, True, True]
    assert len(set(answers)) == 3  # each turn's answer once, in order


def test_a_dropped_gateway_resumes_and_nothing_is_lost_or_doubled(harness: Any) -> None:
    h = harness("prompt", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(h.runs()) == 1, message="the first turn")
    gate = fake.hold_gateway()
    fake.drop_gateway(resumable=True)
    wait_until(lambda: len(fake.gateway_connections) == 2, message="reconnecting")
    missed = fake.post_user_message(thread_id, PERSON, "while the Gateway was away")
    gate.release()
    wait_until(lambda: len(h.runs()) == 2, message="the missed message's turn")
    assert len(fake.resumes) == 1 and len(fake.identifies) == 1
    assert [d[0] for d in deliveries(h)] == [f"discord:{missed['id']}"]


def test_an_invalid_session_catches_up_over_rest(harness: Any) -> None:
    h = harness("prompt", discord=True)
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(h.runs()) == 1, message="the first turn")  # or the message rides it
    first = fake.post_user_message(thread_id, PERSON, "seen live")
    wait_until(lambda: len(h.runs()) == 2, message="the live message's turn")
    gate = fake.hold_gateway()
    fake.drop_gateway(resumable=False)
    wait_until(lambda: len(fake.gateway_connections) == 2, message="reconnecting")
    lost = [fake.post_user_message(thread_id, PERSON, f"lost {n}") for n in range(3)]
    gate.release()
    wait_until(lambda: len(fake.identifies) == 2, message="a new session")
    wait_until(lambda: len(deliveries(h)) == 4, message="the catch-up admitted them")
    wait_until(lambda: all(d[1] == "completed" for d in deliveries(h)), message="their turns")
    ids = [d[0] for d in deliveries(h)]
    assert ids == [f"discord:{m['id']}" for m in [first, *lost]]  # in order, each once
    # Fetched after the last message seen before the gap: the first one or a later answer.
    caught = fake.requests_to("GET", f"/channels/{thread_id}/messages")[-1]
    assert int(first["id"]) <= int(caught.query["after"]) < int(lost[0]["id"])
    fake.post_user_message(thread_id, PERSON, "and live again")
    wait_until(lambda: len(deliveries(h)) == 5, message="the new session's messages")


# ---------------------------------------------------------------------------------- secrets


def test_the_token_never_reaches_a_log_the_journal_a_thread_or_an_agent(
        harness: Any, caplog: pytest.LogCaptureFixture) -> None:
    from wakeline.service.logs import RedactingFormatter

    caplog.set_level(logging.DEBUG)
    h = harness("env", discord=True, env={"WAKELINE_DISCORD_TOKEN": DISCORD_TOKEN,
                                          "BOT_TOKEN_COPY": DISCORD_TOKEN})
    fake = h.discord
    h.deliver(opened())
    thread_id = thread_of(h)
    wait_until(lambda: len(said(fake, thread_id)) >= 2, message="the answer")
    fake.post_user_message(thread_id, PERSON, f"here is a token: {DISCORD_TOKEN}")
    wait_until(lambda: len(h.runs()) == 2, message="the message's turn")
    wait_until(lambda: len(said(fake, thread_id)) >= 3, message="its answer")
    run = h.runs()[0]
    assert "WAKELINE_DISCORD_TOKEN" not in run["env"] and "BOT_TOKEN_COPY" not in run["env"]
    journal = h.api("GET", "/v1/journal?limit=500").text
    assert DISCORD_TOKEN not in journal
    assert all(DISCORD_TOKEN not in m["content"] for m in fake.messages(thread_id)
               if m["author"]["id"] == fake.bot_id)
    formatter = RedactingFormatter(h.service.turn_env.secret_values)
    assert all(DISCORD_TOKEN not in formatter.format(r) for r in caplog.records)
    assert all(DISCORD_TOKEN not in r.getMessage() for r in caplog.records
               if r.name.startswith("wakeline"))


# --------------------------------------------------------------------------------- the doctor


def test_the_doctor_checks_the_token_and_each_parent_channel(harness: Any) -> None:
    h = harness("ok", discord=True)
    fake = h.discord
    linear_calls = len(h.linear.requests)
    checks = {c["name"]: c for c in h.api("GET", "/v1/doctor").json()["checks"]}
    assert checks["discord_token"]["ok"] is True
    assert checks["discord_gateway"]["ok"] is True
    for route in ("eng", "ops"):
        assert checks[f"route {route} discord channel"]["ok"], checks
    fake.set_role_permissions("bot", 1 << 10)  # View Channel only
    checks = {c["name"]: c for c in h.api("GET", "/v1/doctor").json()["checks"]}
    item = checks["route ops discord channel"]
    assert item["ok"] is False and "Manage Threads" in item["detail"]
    assert "Manage Threads" in item["fix"] and "Edit Channel" in item["fix"]
    assert len(h.linear.requests) == linear_calls  # the doctor never calls Linear


def test_a_route_without_a_channel_never_touches_discord(harness: Any) -> None:
    from tests.fakes.discord import FakeDiscord as Fake

    fake = Fake(token=DISCORD_TOKEN)
    h = harness("ok", discord=fake, routes=[
        {"name": "eng", "teams": ["ENG"]},
        {"name": "ops", "teams": ["OPS"], "mode": "issue", "discord_channel_id": fake.channel_id}])
    h.deliver(session_event("created", session_id="s1"))
    wait_until(lambda: h.only_conversation()["turns"], message="the session's turn")
    h.api("POST", f"/v1/conversations/{h.only_conversation()['id']}/reset")
    h.deliver(opened())  # the ops issue does get its thread
    wait_until(lambda: creates(fake), message="the ops thread")
    eng = [c for c in h.api("GET", "/v1/conversations").json()["conversations"]
           if c["route"] == "eng"][0]
    assert h.conversation(eng["id"])["control"] is None
    assert len(creates(fake)) == 1 and all(
        "OPS-7" in r.json["content"] or r.json["content"].startswith("done")
        for r in fake.requests_to("POST", "/channels/*/messages"))
