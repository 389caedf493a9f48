"""Approved sends against a real Synapse: a turn proposes, only a human approves, it goes once.

The agent of a route's turn is the fake agent in `matrix-api` mode: with its turn's token it
reads the room, proposes a reply, and tries what it may not (list approvals, approve, deny).
The owner's messages in the room are read back from Synapse as alice sees them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

pytest.register_assert_rewrite("tests.support.synapse", "tests.support.matrix")

from tests.helpers import StoreShell, wait_until  # noqa: E402
from tests.support.matrix import (  # noqa: E402
    AGENT, WAIT, Running, World, journal, matrix_config, secrets_for,
)
from wakeline.config import Config  # noqa: E402
from wakeline.models.approvals import ApprovalStatus, body_digest  # noqa: E402

pytest.importorskip("nio", reason="matrix-nio is not installed: pip install 'wakeline[matrix]'")

pytestmark = pytest.mark.slow
pytest_plugins = ["tests.support.synapse", "tests.support.matrix"]

REPLY = "Thanks, I will look at it tomorrow."


def proposing(make_config: Callable[..., Config], world: World, room: str | None = None) -> Config:
    return matrix_config(make_config, world, [
        {"name": "alice", "connection": "me", "room_id": room or world.plain}],
        agent=[sys.executable, str(AGENT), "matrix-api", REPLY])


def ask(r: Running, world: World, text: str) -> dict[str, Any]:
    """alice writes; the turn proposes; the agent's report (what its token could do)."""
    before = len(r.runs())
    world.server.send_text(world.alice.access_token, world.plain, text)
    wait_until(lambda: len(r.runs()) > before and _reports(r), WAIT, message="the turn's report")

    def report() -> dict[str, Any] | None:
        found = [x for x in _reports(r) if x["read"] and any(
            m.get("body") == text for m in x["read"].get("messages", []))]
        return found[-1] if found else None

    return wait_until(report, WAIT, message=f"the report of the turn that saw {text!r}")


def _reports(r: Running) -> list[dict[str, Any]]:
    with r.db() as db:
        rows = db.execute("SELECT output FROM turn_results ORDER BY id").fetchall()
    return [json.loads(o) for (o,) in rows if o.strip().startswith("{")]


def test_a_turn_proposes_a_human_approves_and_it_is_sent_once(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    r = running(proposing(make_config, world), secrets_for(world))
    report = ask(r, world, "are you there?")

    # The turn read its room, proposed, and could do nothing else.
    assert report["codes"] == {"read": 200, "send": 201, "list": 403, "approve": 403, "deny": 403}
    pending = r.api("GET", "/v1/approvals")[1]["approvals"]
    assert [(a["id"], a["status"], a["body"], a["room"], a["route"], a["eventId"])
            for a in pending] == [(report["approval"], "pending", REPLY, world.plain, "alice", None)]
    assert set(pending[0]) >= {"id", "route", "conversation", "room", "body", "status", "eventId",
                               "createdAt"}
    assert world.owner_texts(world.plain) == []  # proposing sends nothing

    status, answer = r.api("POST", f"/v1/approvals/{report['approval']}/approve", json={})
    assert status == 200, answer
    sent = answer["approval"]
    assert sent["status"] == "sent" and sent["eventId"].startswith("$")
    assert world.owner_texts(world.plain) == [(sent["eventId"], REPLY)]

    again = r.api("POST", f"/v1/approvals/{report['approval']}/approve", json={})
    assert again[0] == 200 and again[1]["approval"]["eventId"] == sent["eventId"]
    assert r.api("POST", f"/v1/approvals/{report['approval']}/deny", json={})[0] == 409
    assert world.owner_texts(world.plain) == [(sent["eventId"], REPLY)]
    wait_until(lambda: [e["stage"] for e in journal(r) if report["approval"] in e["id"]]
               == ["approval_pending", "approval_approved", "sent"], WAIT,
               message="the proposal, the approval and the send journaled")


def test_deny_a_changed_body_and_an_expired_approval_never_send(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    r = running(proposing(make_config, world), secrets_for(world))
    denied = ask(r, world, "one")["approval"]
    changed = ask(r, world, "two")["approval"]
    shown = ask(r, world, "three")["approval"]
    expired = ask(r, world, "four")["approval"]

    assert r.api("POST", f"/v1/approvals/{denied}/deny", json={})[1]["approval"]["status"] == "denied"
    assert r.api("POST", f"/v1/approvals/{denied}/deny", json={})[0] == 200  # twice is once
    assert r.api("POST", f"/v1/approvals/{denied}/approve", json={})[0] == 409

    # What the approver saw is not what is stored: the hash catches it, nothing is sent.
    with StoreShell(r.config) as db:
        db.execute("UPDATE approvals SET body = 'send money to mallory' WHERE id = ?", (changed,))
        db.execute("UPDATE approvals SET expires_at = 0 WHERE id = ?", (expired,))
    status, answer = r.api("POST", f"/v1/approvals/{changed}/approve", json={})
    assert status == 200 and answer["approval"]["status"] == "failed"
    assert "hash differs" in answer["approval"]["error"]
    # An approver who names the hash of the body they were shown approves only that body.
    status, answer = r.api("POST", f"/v1/approvals/{shown}/approve",
                           json={"bodySha256": body_digest("something else")})
    assert status == 409 and answer["status"] == "pending"
    assert r.api("POST", f"/v1/approvals/{expired}/approve", json={})[1] == {
        "error": "conflict", "detail": "the approval is expired: it cannot be approved",
        "status": "expired"}

    assert world.owner_texts(world.plain) == []
    # The journal writes behind what it records: wait for the three decisions to land.
    wait_until(lambda: {"approval_denied", "approval_expired", "failed"}
               <= {e["stage"] for e in journal(r)}, WAIT, message="every decision journaled")


def test_an_approval_for_another_room_is_not_sent(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    r = running(proposing(make_config, world), secrets_for(world))
    approval = ask(r, world, "hello")["approval"]
    r.stop()
    # The route now binds another room: the approval stays bound to the room it was made for.
    moved = running(proposing(make_config, world, room=world.encrypted), secrets_for(world))
    status, answer = moved.api("POST", f"/v1/approvals/{approval}/approve", json={})

    assert status == 200 and answer["approval"]["status"] == "failed"
    assert "now binds another room" in answer["approval"]["error"]
    assert world.owner_texts(world.plain) == []


def test_a_restart_between_approve_and_send_sends_exactly_once(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    config = proposing(make_config, world)
    r = running(config, secrets_for(world))
    quiet = ask(r, world, "first")["approval"]
    lost = ask(r, world, "second")["approval"]
    r.stop()
    # As if the process died after each approval committed, and, for `lost`, after its send
    # reached the homeserver but before the answer was recorded.
    with StoreShell(config) as store_db:
        store_db.execute("UPDATE approvals SET status = 'approved', decided_by = 'operator',"
                         " decided_at = created_at WHERE id IN (?, ?)", (quiet, lost))
    path = (f"/_matrix/client/v3/rooms/{quote(world.plain)}/send/m.room.message/"
            f"wakeline.{lost}")
    first_try = world.server.api("PUT", path, world.token, {"msgtype": "m.text", "body": REPLY})

    again = running(config, secrets_for(world))
    wait_until(lambda: all(a["status"] == "sent" for a in
                           again.api("GET", "/v1/approvals")[1]["approvals"]), WAIT,
               message="both sent after the restart")
    approvals = {a["id"]: a for a in again.api("GET", "/v1/approvals")[1]["approvals"]}
    assert approvals[lost]["eventId"] == first_try["event_id"]  # the same event, not a second
    texts = world.owner_texts(world.plain)
    assert sorted(e for e, _ in texts) == sorted({approvals[quiet]["eventId"], first_try["event_id"]})
    assert [b for _, b in texts] == [REPLY, REPLY]
    assert len(texts) == 2


def test_the_token_is_in_no_log_journal_answer_or_agent_environment(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    config = matrix_config(make_config, world, [
        {"name": "alice", "connection": "me", "room_id": world.plain}],
        agent=[sys.executable, str(AGENT), "env"])
    r = running(config, secrets_for(world))
    world.server.send_text(world.alice.access_token, world.plain, "what is in your env?")
    wait_until(lambda: _outputs(r), WAIT, message="the env agent's answer")

    env = json.loads(_outputs(r)[0])
    assert world.token not in json.dumps(env)
    assert not any(k.startswith("WAKELINE_") and k not in (
        "WAKELINE_CONVERSATION_ID", "WAKELINE_SESSION_ID", "WAKELINE_TURN_ID", "WAKELINE_API_URL",
        "WAKELINE_TOKEN") for k in env)
    seen = [json.dumps(journal(r)), json.dumps(r.api("GET", "/v1/status")[1]),
            json.dumps(r.api("GET", "/v1/doctor")[1]), caplog.text,
            *(str(rec.args) for rec in caplog.records)]
    assert not [s for s in seen if world.token in s]
    assert ApprovalStatus.PENDING.value == "pending"


def _outputs(r: Running) -> list[str]:
    with r.db() as db:
        return [o for (o,) in db.execute("SELECT output FROM turn_results ORDER BY id") if o]


def test_the_commands_inside_a_turn_and_the_operator_s(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    from click.testing import CliRunner

    from tests.conftest import OPERATOR_TOKEN
    from wakeline.cli import cli

    script = ("wakeline matrix read --limit 5 --json > read.json"
              " && wakeline matrix send 'hi from the cli'")
    config = matrix_config(make_config, world, [
        {"name": "alice", "connection": "me", "room_id": world.plain}],
        agent=["/bin/sh", "-c", script])
    r = running(config, secrets_for(world))
    world.server.send_text(world.alice.access_token, world.plain, "ping")
    wait_until(lambda: r.api("GET", "/v1/approvals")[1]["approvals"], WAIT,
               message="the turn's proposal")

    read = json.loads(next(r.config.workspaces_path.glob("*/read.json")).read_text())
    assert [m["body"] for m in read["messages"]][-1:] == ["ping"]
    env = {"WAKELINE_API_URL": r.service.operator.url, "WAKELINE_TOKEN": OPERATOR_TOKEN,
           "WAKELINE_CONFIG": None}
    listed = CliRunner().invoke(cli, ["approvals"], env=env)
    assert listed.exit_code == 0 and "hi from the cli" in listed.output and "pending" in listed.output
    approval = r.api("GET", "/v1/approvals")[1]["approvals"][0]["id"]
    approved = CliRunner().invoke(cli, ["approvals", "approve", approval], env=env)
    assert approved.exit_code == 0, approved.output
    (event_id, body), = world.owner_texts(world.plain)
    assert body == "hi from the cli" and f"as {event_id}" in approved.output
    refused = CliRunner().invoke(cli, ["matrix", "send", "from the operator"], env=env)
    assert refused.exit_code == 1 and "lane_refused" in refused.output


def test_an_approved_reply_in_an_encrypted_room_reaches_the_people_there(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running],
        tmp_path: Any) -> None:
    from tests.support.matrix import Writer

    config = matrix_config(make_config, world, [
        {"name": "secret", "connection": "me", "room_id": world.encrypted}],
        agent=[sys.executable, str(AGENT), "matrix-send", REPLY])
    r = running(config, secrets_for(world))
    alice = Writer(world.server, world.alice, tmp_path / "alice-store")
    try:
        alice.send(world.encrypted, "anyone there?")
        approval = wait_until(lambda: r.api("GET", "/v1/approvals")[1]["approvals"], WAIT,
                              message="the proposal")[0]
        status, answer = r.api("POST", f"/v1/approvals/{approval['id']}/approve", json={})
        assert status == 200 and answer["approval"]["status"] == "sent", answer

        def owner_said() -> list[str | None]:
            return [body for sender, body in alice.read(world.encrypted)
                    if sender == world.me.user_id]

        assert wait_until(owner_said, WAIT, message="alice sees the owner's reply") == [REPLY]
    finally:
        alice.close()
