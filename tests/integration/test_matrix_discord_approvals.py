"""Matrix sends approved in the room's Discord control thread: a real Synapse, the fake Discord
and the real discord.py client on its Gateway.

alice writes in a room bound by a route with a `discord_channel_id`; the fake agent proposes
a reply (`matrix-send`); the room's thread gets the post with its buttons; a click through the
fake Gateway (INTERACTION_CREATE, answered at the interaction callback) or `!approve ID` in
the thread decides it, as `discord:<user id>`, and the owner's text reaches the room once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.support.synapse", "tests.support.matrix")

from tests.helpers import StoreShell, wait_until  # noqa: E402
from tests.support.matrix import (  # noqa: E402
    AGENT, WAIT, Running, World, journal, matrix_config, secrets_for,
)
from wakeline.config import Config  # noqa: E402
from wakeline.models.approvals import body_digest  # noqa: E402
from wakeline.secrets import Secrets  # noqa: E402

pytest.importorskip("nio", reason="matrix-nio is not installed: pip install 'wakeline[matrix]'")
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="'audioop' is deprecated",
                            category=DeprecationWarning)
    pytest.importorskip("discord", reason="discord.py is not installed: pip install "
                        "'wakeline[discord]'")

from tests.fakes.discord import FakeDiscord, Interaction  # noqa: E402
from tests.integration.actors.conftest import DISCORD_TOKEN, discord_tuning  # noqa: E402

pytestmark = pytest.mark.slow
pytest_plugins = ["tests.support.synapse", "tests.support.matrix"]

REPLY = "Thanks, I will look at *it* tomorrow."
PERSON = "555000000000000001"  # in discord.allowed_user_ids
STRANGER = "555000000000000002"  # not
NOT_ALLOWED = "You may not decide wakeline's approvals: nothing changed."


# --------------------------------------------------------------------------------- set-up


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    fake = FakeDiscord(token=DISCORD_TOKEN).start()
    yield fake
    fake.stop()


@pytest.fixture
def start(fake: FakeDiscord, running: Callable[..., Running]) -> Callable[..., Running]:
    """A wakeline with the room's route bound to the fake's channel. Set up after `fake`, so
    torn down before it: the services' Gateway clients close first."""

    def go(config: Config, secrets: Secrets) -> Running:
        return running(config, secrets, discord_tuning())

    return go


def config_for(make_config: Callable[..., Config], world: World, fake: FakeDiscord,
               rooms: dict[str, str] | None = None, mode: str = "matrix-send",
               discord: bool = True) -> Config:
    routes = [{"name": name, "connection": "me", "room_id": room,
               **({"discord_channel_id": fake.channel_id} if discord else {})}
              for name, room in (rooms or {"alice": world.plain}).items()]
    return matrix_config(make_config, world, routes, agent=[sys.executable, str(AGENT), mode, REPLY],
                         discord={"api_url": fake.api_url, "allowed_user_ids": [PERSON]})


def with_bot(world: World) -> Secrets:
    from pydantic import SecretStr

    return replace(secrets_for(world), discord_token=SecretStr(DISCORD_TOKEN))


# --------------------------------------------------------------------------------- helpers


def propose(r: Running, world: World, text: str, room: str | None = None) -> dict[str, Any]:
    """alice writes; the turn proposes; the new approval (API shape)."""
    before = {a["id"] for a in approvals(r)}
    world.server.send_text(world.alice.access_token, room or world.plain, text)
    return wait_until(lambda: next((a for a in approvals(r) if a["id"] not in before), None),
                      WAIT, message=f"the proposal after {text!r}")


def approvals(r: Running) -> list[dict[str, Any]]:
    return r.api("GET", "/v1/approvals")[1]["approvals"]


def approval(r: Running, approval_id: str) -> dict[str, Any]:
    return next(a for a in approvals(r) if a["id"] == approval_id)


def settled(r: Running, approval_id: str, status: str) -> dict[str, Any]:
    return wait_until(lambda: (a := approval(r, approval_id))["status"] == status and a, WAIT,
                      message=f"{approval_id} {status}")


def thread_of(r: Running, conversation_id: str) -> str:
    return str(wait_until(
        lambda: (r.api("GET", f"/v1/conversations/{conversation_id}")[1].get("control") or {})
        .get("threadId"), WAIT, message="the room's control thread"))


def button_ids(message: dict[str, Any]) -> list[str]:
    return [b["custom_id"] for row in message["components"] for b in row["components"]]


def posts(fake: FakeDiscord, thread: str, approval_id: str) -> list[dict[str, Any]]:
    """The bot's messages in the thread whose buttons are this approval's."""
    return [m for m in fake.messages(thread) if m["author"]["id"] == fake.bot_id
            and any(f":{approval_id}" in c for c in button_ids(m))]


def the_post(fake: FakeDiscord, thread: str, approval_id: str) -> dict[str, Any]:
    found = wait_until(lambda: posts(fake, thread, approval_id), WAIT,
                       message=f"the post of {approval_id}")
    assert len(found) == 1, found
    return found[0]


def said(fake: FakeDiscord, thread: str) -> list[str]:
    """The bot's plain lines in the thread (not the posts with buttons), oldest first."""
    return [m["content"] for m in fake.messages(thread)
            if m["author"]["id"] == fake.bot_id and not m["components"]]


def saying(fake: FakeDiscord, thread: str, text: str) -> str:
    return wait_until(lambda: next((s for s in said(fake, thread) if text in s), None), WAIT,
                      message=f"a line with {text!r}")


def answered(fake: FakeDiscord, clicked: Interaction) -> dict[str, Any]:
    """The callback Discord took for the click."""
    return wait_until(lambda: next((i.answered for i in fake.interactions
                                    if i.id == clicked.id and i.answered), None), WAIT,
                      message="the interaction's answer")


def click(fake: FakeDiscord, thread: str, post: dict[str, Any], action: str,
          user: str = PERSON, **kw: Any) -> Interaction:
    custom = next(c for c in button_ids(post) if c.startswith(f"wl:{action}:"))
    return fake.click(thread, post["id"], custom, user, **kw)


# --------------------------------------------------------------------------------- the flow


def test_a_click_in_the_thread_approves_and_the_text_reaches_the_room_once(
        world: World, make_config: Callable[..., Config], fake: FakeDiscord,
        start: Callable[..., Running]) -> None:
    r = start(config_for(make_config, world, fake), with_bot(world))
    proposed = propose(r, world, "are you there?")
    thread = thread_of(r, proposed["conversation"])

    channel = fake.channel(thread)
    assert channel is not None and channel["name"] == "[matrix] alice" and channel["type"] == 11
    post = the_post(fake, thread, proposed["id"])
    # The whole body, its Markdown escaped; the id; two buttons bound to the body's hash.
    assert "Thanks, I will look at \\*it\\* tomorrow." in post["content"]
    assert proposed["id"] in post["content"] and world.plain in post["content"]
    assert button_ids(post) == [f"wl:approve:{proposed['id']}:{body_digest(REPLY)}",
                                f"wl:deny:{proposed['id']}"]
    sent_post = next(q for q in fake.requests_to("POST", f"/channels/{thread}/messages")
                     if q.json.get("components"))
    assert sent_post.json["allowed_mentions"] == {"parse": []} and sent_post.json["nonce"]
    assert world.owner_texts(world.plain) == []

    clicked = click(fake, thread, post, "approve")
    answer = answered(fake, clicked)
    assert answer["type"] == 7 and answer["status"] == 204
    done = settled(r, proposed["id"], "sent")
    assert world.owner_texts(world.plain) == [(done["eventId"], REPLY)]
    assert done["decidedBy"] == f"discord:{PERSON}"
    # The post's buttons say the outcome; the thread says who approved and that it was sent.
    updated = fake.message(thread, post["id"])
    assert [b.get("disabled") for row in updated["components"] for b in row["components"]] \
        == [True]
    assert f"Approved by <@{PERSON}>" in saying(fake, thread, "Approved by")
    assert done["eventId"] in saying(fake, thread, "Sent (")

    # A second click (a client still showing the buttons) changes nothing and says so.
    again = click(fake, thread, post, "approve", stale=True)
    reply = answered(fake, again)
    assert reply["type"] == 4 and reply["data"]["flags"] == 64
    assert "already sent" in reply["data"]["content"]
    assert world.owner_texts(world.plain) == [(done["eventId"], REPLY)]
    entries = journal(r)
    decided = [e for e in entries if e["stage"] == "approval_approved"]
    assert [e["from"] for e in decided] == [f"discord:{PERSON}"]


def test_bang_approve_in_the_thread_approves_and_bang_deny_denies(
        world: World, make_config: Callable[..., Config], fake: FakeDiscord,
        start: Callable[..., Running]) -> None:
    r = start(config_for(make_config, world, fake), with_bot(world))
    first = propose(r, world, "one")
    second = propose(r, world, "two")
    thread = thread_of(r, first["conversation"])
    the_post(fake, thread, first["id"])
    the_post(fake, thread, second["id"])

    fake.post_user_message(thread, PERSON, f"!approve {first['id']}", username="ada")
    sent = settled(r, first["id"], "sent")
    fake.post_user_message(thread, PERSON, f"!deny {second['id']}", username="ada")
    settled(r, second["id"], "denied")

    assert world.owner_texts(world.plain) == [(sent["eventId"], REPLY)]
    assert f"Denied by <@{PERSON}>" in saying(fake, thread, "Denied by")
    fake.post_user_message(thread, PERSON, f"!approve {second['id']}", username="ada")
    assert "cannot be approved" in saying(fake, thread, "cannot be approved")
    fake.post_user_message(thread, PERSON, "!approve apr_0123456789abcdef", username="ada")
    assert "no approval" in saying(fake, thread, "There is no approval")
    fake.post_user_message(thread, PERSON, "!approve", username="ada")
    saying(fake, thread, "Say which approval")
    # Commands are not turns: only alice's two messages woke the agent.
    assert len(r.runs()) == 2
    assert world.owner_texts(world.plain) == [(sent["eventId"], REPLY)]
    # Any other message in the room's thread reaches its agent, as a comment reaches an issue's.
    fake.post_user_message(thread, PERSON, "keep it short", username="ada")
    run = wait_until(lambda: r.runs()[2:], WAIT, message="a turn woken by the thread")[0]
    assert run["conversation"] == first["conversation"]
    assert run["headlines"] == ["Discord message · - · ada"]


def test_a_deny_button_denies_and_the_operator_s_decision_shows_in_the_thread(
        world: World, make_config: Callable[..., Config], fake: FakeDiscord,
        start: Callable[..., Running]) -> None:
    r = start(config_for(make_config, world, fake), with_bot(world))
    denied = propose(r, world, "one")
    by_operator = propose(r, world, "two")
    thread = thread_of(r, denied["conversation"])

    clicked = click(fake, thread, the_post(fake, thread, denied["id"]), "deny")
    assert answered(fake, clicked)["type"] == 7
    settled(r, denied["id"], "denied")
    saying(fake, thread, "Denied by")

    post = the_post(fake, thread, by_operator["id"])
    status, answer = r.api("POST", f"/v1/approvals/{by_operator['id']}/approve", json={})
    assert status == 200 and answer["approval"]["status"] == "sent"
    assert "the operator" in saying(fake, thread, "Approved by the operator")
    wait_until(lambda: [b["label"] for row in fake.message(thread, post["id"])["components"]
                        for b in row["components"]][0].startswith("Sent"), WAIT,
               message="the post's button says it was sent")
    assert world.owner_texts(world.plain) == [(answer["approval"]["eventId"], REPLY)]
    # The operator's decision came first: a click now changes nothing.
    late = click(fake, thread, post, "deny", stale=True)
    assert "is sent: it cannot be denied" in answered(fake, late)["data"]["content"]
    assert approval(r, by_operator["id"])["status"] == "sent"

    # A day passes for a third: the sweep expires it, and the thread and the post say so.
    expiring = propose(r, world, "three")
    expiring_post = the_post(fake, thread, expiring["id"])
    with StoreShell(r.config) as db:
        db.execute("UPDATE approvals SET expires_at = 0 WHERE id = ?", (expiring["id"],))
    r.service.matrix.approvals.sweep()
    assert expiring["id"] in saying(fake, thread, "expired: nobody decided")
    wait_until(lambda: [b["label"] for row in fake.message(thread, expiring_post["id"])
                        ["components"] for b in row["components"]] == ["Expired: not sent"],
               WAIT, message="the expired post's button")


# --------------------------------------------------------------------------------- bad input


def test_clicks_that_may_not_decide_change_nothing(
        world: World, make_config: Callable[..., Config], fake: FakeDiscord,
        start: Callable[..., Running], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="wakeline")
    second_room = world.server.create_room(world.me.access_token, invite=[world.alice.user_id],
                                           name="second")
    world.server.join(world.alice.access_token, second_room)
    r = start(config_for(make_config, world, fake, rooms={"alice": world.plain,
                                                           "second": second_room}),
              with_bot(world))
    mine = propose(r, world, "here")
    other = propose(r, world, "there", room=second_room)
    thread, other_thread = thread_of(r, mine["conversation"]), thread_of(r, other["conversation"])
    assert thread != other_thread and fake.channel(other_thread)["name"] == "[matrix] second"
    post = the_post(fake, thread, mine["id"])
    other_post = the_post(fake, other_thread, other["id"])

    def refused(interaction: Interaction) -> str:
        answer = answered(fake, interaction)
        assert answer["type"] == 4 and answer["data"]["flags"] == 64, answer
        return str(answer["data"]["content"])

    assert refused(click(fake, thread, post, "approve", user=STRANGER)) == NOT_ALLOWED
    assert refused(click(fake, thread, post, "approve", user="555000000000000003",
                         bot=True)) == NOT_ALLOWED
    sha = body_digest(REPLY)
    forged = [f"wl:approve:{mine['id']}:{body_digest('send money to mallory')}",
              f"wl:approve:{mine['id']}", f"wl:approve:{mine['id']}:{sha}:x",
              "wl:deny:apr_0123456789abcdef", f"wl:approve:{other['id']}:{sha}"]
    answers = [refused(fake.click(thread, post["id"], c, PERSON, stale=True)) for c in forged]
    assert "is not the one shown here" in answers[0]
    assert "not a button wakeline made" in answers[1] and "not a button" in answers[2]
    assert "no approval" in answers[3]
    assert "another conversation's thread" in answers[4]
    # Another room's approval by name in this thread is refused too.
    fake.post_user_message(thread, PERSON, f"!approve {other['id']}", username="ada")
    saying(fake, thread, "another conversation's thread")
    assert [a["status"] for a in approvals(r) if a["id"] in (mine["id"], other["id"])] \
        == ["pending", "pending"]

    # The body changed after it was posted (the store written behind wakeline's back): the
    # click names the hash shown, so nothing is approved.
    with StoreShell(r.config) as db:
        db.execute("UPDATE approvals SET body = 'send money to mallory', body_sha256 = ?"
                   " WHERE id = ?", (body_digest("send money to mallory"), mine["id"]))
    assert "is not the one shown here" in refused(click(fake, thread, post, "approve"))
    # Only the body changed, not its hash: approved, but the sender sees the hash differ.
    with StoreShell(r.config) as db:
        db.execute("UPDATE approvals SET body = 'send money to eve' WHERE id = ?",
                   (other["id"],))
    assert answered(fake, click(fake, other_thread, other_post, "approve"))["type"] == 7
    failed = settled(r, other["id"], "failed")
    assert "hash differs" in failed["error"]
    assert "Not sent" in saying(fake, other_thread, "Not sent")
    assert approval(r, mine["id"])["status"] == "pending"
    assert world.owner_texts(world.plain) == [] and world.owner_texts(second_room) == []

    # No token in a log, the journal, an answer or what Discord was sent.
    seen = [caplog.text, json.dumps(journal(r)), json.dumps(approvals(r)),
            json.dumps(r.api("GET", "/v1/doctor")[1]),
            json.dumps([m["content"] for m in fake.messages(thread)])]
    for secret in (DISCORD_TOKEN, world.token):
        assert not [s for s in seen if secret in s]


# --------------------------------------------------------------------------------- restarts


def test_a_restart_between_the_click_and_the_send_sends_once(
        world: World, make_config: Callable[..., Config], fake: FakeDiscord,
        start: Callable[..., Running]) -> None:
    config = config_for(make_config, world, fake)
    r = start(config, with_bot(world))
    proposed = propose(r, world, "are you there?")
    thread = thread_of(r, proposed["conversation"])
    post = the_post(fake, thread, proposed["id"])

    # The homeserver stops answering: the approval commits, its send cannot get through.
    synapse = world.server.process
    os.kill(synapse.pid, signal.SIGSTOP)
    try:
        clicked = click(fake, thread, post, "approve")
        assert answered(fake, clicked)["type"] == 7
        assert settled(r, proposed["id"], "approved")["decidedBy"] == f"discord:{PERSON}"
        r.stop()
    finally:
        os.kill(synapse.pid, signal.SIGCONT)

    again = start(config, with_bot(world))
    done = settled(again, proposed["id"], "sent")
    assert world.owner_texts(world.plain) == [(done["eventId"], REPLY)]
    saying(fake, thread, "Sent (")
    # The post was found again, not made twice; its buttons say it was sent.
    assert len(posts(fake, thread, proposed["id"])) == 1
    assert fake.channel(thread) is not None and len([
        c for c in fake.requests_to("POST", "/channels/*/threads") if c.status == 201]) == 1


def test_a_proposal_made_while_discord_was_off_is_posted_at_start_once(
        world: World, make_config: Callable[..., Config], fake: FakeDiscord,
        start: Callable[..., Running]) -> None:
    config = config_for(make_config, world, fake)
    quiet = start(config, secrets_for(world))  # no bot token: Discord is off
    proposed = propose(quiet, world, "are you there?")
    quiet.stop()
    assert fake.requests_to("POST", "/channels/*/messages") == []

    r = start(config, with_bot(world))
    thread = thread_of(r, proposed["conversation"])
    post = the_post(fake, thread, proposed["id"])
    r.stop()
    again = start(config, with_bot(world))
    # Started again: the post is found in the thread (not made twice) and still decides.
    clicked = click(fake, thread, post, "approve")
    assert answered(fake, clicked)["type"] == 7
    done = settled(again, proposed["id"], "sent")
    assert world.owner_texts(world.plain) == [(done["eventId"], REPLY)]
    assert len(posts(fake, thread, proposed["id"])) == 1
