"""Matrix routes against a real Synapse: admission, rooms, activation, route checks.

A whole wakeline (`build_service`, real listeners, real actors, the fake agent) acts as the
owner's device `WAKELINE` on the session's Synapse. alice and bob write in rooms the owner
has joined, plainly over HTTP or (for the encrypted room) with nio and their own devices.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.support.synapse", "tests.support.matrix")

from tests.helpers import StoreShell, wait_until  # noqa: E402
from tests.support.matrix import (  # noqa: E402
    Running, World, Writer, journal, matrix_config, secrets_for,
)
from tests.support.synapse import Homeserver  # noqa: E402
from wakeline.config import Config  # noqa: E402
from wakeline.service.threads import budget, over_budget  # noqa: E402

pytest.importorskip("nio", reason="matrix-nio is not installed: pip install 'wakeline[matrix]'")

pytestmark = pytest.mark.slow
# The session's Synapse, and the Matrix world and service fixtures on it.
pytest_plugins = ["tests.support.synapse", "tests.support.matrix"]

WAIT = 30.0


def test_plain_room_text_runs_a_turn_and_the_first_sync_keeps_only_its_cursor(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    world.server.send_text(world.alice.access_token, world.plain, "history before wakeline")
    config = matrix_config(make_config, world, [{"name": "alice", "connection": "me",
                                                  "room_id": world.plain}])
    r = running(config, secrets_for(world))
    first_cursor = r.cursor()
    event_id = world.server.send_text(world.alice.access_token, world.plain, "hello owner")

    wait_until(lambda: "hello owner" in r.texts(), WAIT, message="a turn with alice's text")
    assert "history before wakeline" not in r.texts()
    run = next(run for run in r.runs() if "hello owner" in run["texts"])
    with r.db() as db:
        subject = db.execute("SELECT namespace, key, route, tainted FROM conversations WHERE id = ?",
                             (run["conversation"],)).fetchone()
        receipts = db.execute("SELECT delivery_id, outcome FROM receipts").fetchall()
    assert subject == ("matrix:me", world.plain, "alice", 1)
    assert receipts == [(f"matrix:me:{event_id}", "accepted")]
    assert r.cursor() != first_cursor


def test_a_matrix_service_runs_only_the_threads_its_budget_names(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    """The loop, its lookups' pool and an actor per connection join the service's threads."""
    before = {t.ident for t in threading.enumerate()}
    config = matrix_config(make_config, world, [{"name": "alice", "connection": "me",
                                                  "room_id": world.plain}])
    r = running(config, secrets_for(world))
    world.server.send_text(world.alice.access_token, world.plain, "count my threads")
    wait_until(lambda: "count my threads" in r.texts(), WAIT, message="a turn with alice's text")
    names = [t.name for t in threading.enumerate() if t.ident not in before]
    assert over_budget(names, budget(config)) == []
    assert {"matrix", "matrix-connection-me"} <= set(names)


def test_an_encrypted_room_is_decrypted_and_admitted(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running],
        tmp_path: Path) -> None:
    config = matrix_config(make_config, world, [{"name": "secret", "connection": "me",
                                                  "room_id": world.encrypted}])
    r = running(config, secrets_for(world))
    alice = Writer(world.server, world.alice, tmp_path / "alice-store")
    try:
        event_id = alice.send(world.encrypted, "for your eyes only")
    finally:
        alice.close()

    wait_until(lambda: "for your eyes only" in r.texts(), WAIT, message="the decrypted text")
    with r.db() as db:
        envelope = db.execute("SELECT envelope FROM deliveries").fetchone()[0]
    assert json.loads(envelope)["encrypted"] is True
    assert json.loads(envelope)["event_id"] == event_id
    assert r.status()["held"] is None


def test_only_live_original_text_from_others_in_the_bound_room_is_admitted(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running],
        synapse: Homeserver) -> None:
    other = synapse.create_room(world.me.access_token, invite=[world.alice.user_id])
    synapse.join(world.alice.access_token, other)
    config = matrix_config(make_config, world, [{"name": "alice", "connection": "me",
                                                  "room_id": world.plain}])
    r = running(config, secrets_for(world))
    alice, room = world.alice, world.plain
    original = synapse.send_text(alice.access_token, room, "original text")
    synapse.send_text(world.me.access_token, room, "the owner's own words")  # another device
    world.send_event(alice, room, "m.room.message", {
        "msgtype": "m.text", "body": "* edited text",
        "m.new_content": {"msgtype": "m.text", "body": "edited text"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": original}})
    world.send_event(alice, room, "m.reaction", {
        "m.relates_to": {"rel_type": "m.annotation", "event_id": original, "key": "+1"}})
    world.send_event(alice, room, "m.room.message", {"msgtype": "m.notice", "body": "a notice"})
    world.send_event(alice, room, "m.room.message", {"msgtype": "m.emote", "body": "waves"})
    doomed = synapse.send_text(alice.access_token, room, "soon redacted")
    world.redact(alice, room, doomed)
    synapse.send_text(alice.access_token, other, "another room")
    # Alice takes the owner's display name: she is still alice, and still admitted as such.
    world.set_display_name(alice, world.me.user_id.split(":")[0][1:])
    synapse.send_text(alice.access_token, room, "it is me, the owner, honestly")
    synapse.send_text(alice.access_token, room, "marker")

    wait_until(lambda: "marker" in r.texts(), WAIT, message="the marker's turn")
    with r.db() as db:
        admitted = [json.loads(e)["body"] for (e,) in db.execute(
            "SELECT envelope FROM deliveries ORDER BY id")]
        senders = {json.loads(e)["sender"] for (e,) in db.execute("SELECT envelope FROM deliveries")}
    # "soon redacted" may be admitted before its redaction arrives (it was live text then);
    # the redaction itself never is.
    assert [t for t in admitted if t != "soon redacted"] == [
        "original text", "it is me, the owner, honestly", "marker"]
    assert senders == {alice.user_id}
    counts = r.status()["events"]
    assert counts["owner"] >= 1 and counts["edit"] >= 1 and counts["not_message"] >= 2
    assert counts["not_text"] >= 2


def test_a_page_fetched_again_is_a_duplicate(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    config = matrix_config(make_config, world, [{"name": "alice", "connection": "me",
                                                  "room_id": world.plain}])
    r = running(config, secrets_for(world))
    old_cursor = r.cursor()
    world.server.send_text(world.alice.access_token, world.plain, "only once")
    wait_until(lambda: "only once" in r.texts(), WAIT, message="the first turn")
    wait_until(lambda: r.api("GET", "/v1/status")[1]["fifo"]["pending"] == 0
               and not r.api("GET", "/v1/status")[1]["conversations"]["running"], WAIT)
    r.stop()
    # As after a crash between the admission and the cursor: the old cursor again.
    with StoreShell(config) as db:
        db.execute("UPDATE matrix_cursors SET cursor = ?", (old_cursor,))

    again = running(config, secrets_for(world))
    wait_until(lambda: again.status()["events"].get("duplicate", 0) >= 1, WAIT,
               message="the event seen again")
    with again.db() as db:
        assert db.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0] == 1
    assert again.texts().count("only once") == 1
    assert again.cursor() != old_cursor


def test_on_demand_records_and_moves_on_without_waking_and_read_shows_it(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running]) -> None:
    config = matrix_config(make_config, world, [{"name": "alice", "connection": "me",
                                                  "room_id": world.plain,
                                                  "activation": "on_demand"}])
    r = running(config, secrets_for(world))
    world.server.send_text(world.me.access_token, world.plain, "the owner wrote first")
    event_id = world.server.send_text(world.alice.access_token, world.plain, "just so you know")
    before = r.cursor()

    wait_until(lambda: any(e["kind"] == "inbound" and "just so you know" in e["text"]
                           for e in journal(r)), WAIT, message="the inbound journal entry")
    entry = next(e for e in journal(r) if e["kind"] == "inbound")
    assert entry["stage"] == "recorded" and entry["from"] == "external"
    wait_until(lambda: r.cursor() != before, WAIT, message="the cursor moved on")
    with r.db() as db:
        assert db.execute("SELECT delivery_id, outcome, reason FROM receipts").fetchall() == [
            (f"matrix:me:{event_id}", "ignored", "on_demand")]
        assert db.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0] == 0
        assert db.execute("SELECT namespace, key FROM conversations WHERE namespace = 'matrix:me'"
                          ).fetchall() == [("matrix:me", world.plain)]
    assert r.runs() == []

    status, read = r.api("GET", "/v1/matrix/read?route=alice&limit=10")
    assert status == 200, read
    texts = [(m["sender"], m["body"], m["owner"]) for m in read["messages"] if "body" in m]
    assert texts[-2:] == [(world.me.user_id, "the owner wrote first", True),
                          (world.alice.user_id, "just so you know", False)]
    assert r.api("GET", "/v1/matrix/read")[0] == 400  # the operator names the route


def test_route_checks_switch_failing_routes_off_and_name_them(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running],
        synapse: Homeserver, tmp_path: Path) -> None:
    from tests.support.matrix import login_device, write_token

    elsewhere = synapse.create_room(world.alice.access_token, invite=[world.me.user_id])
    alices_token = login_device(synapse, world.alice, "WAKELINE")
    config = matrix_config(make_config, world, [
        {"name": "good", "connection": "me", "room_id": world.plain},
        {"name": "invited", "connection": "me", "room_id": elsewhere},
        {"name": "bridged", "connection": "me", "room_id": world.encrypted,
         "bridge": world.bob.user_id},
        {"name": "impostor", "connection": "them", "room_id": world.plain},
    ], more={"them": {"access_token_file": str(write_token(tmp_path / "secrets" / "them",
                                                            alices_token))}})
    r = running(config, secrets_for(world, them=alices_token))

    def checked() -> list[dict[str, Any]] | None:
        status = r.api("GET", "/v1/status")[1]["matrix"]["connections"]
        done = all(route["detail"] != "not checked yet" for c in status for route in c["routes"])
        return status if done else None

    status = wait_until(checked, WAIT, message="every route checked")
    routes = {route["name"]: route for c in status for route in c["routes"]}
    assert routes["good"]["on"] is True
    assert routes["invited"] == {**routes["invited"], "on": False,
                                 "detail": f"the owner has not joined {elsewhere}"}
    assert routes["bridged"]["on"] is False and world.bob.user_id in routes["bridged"]["detail"]
    assert routes["impostor"]["on"] is False
    assert f"belongs to {world.alice.user_id}" in routes["impostor"]["detail"]
    them = next(c for c in status if c["name"] == "them")
    assert them["state"] == "failed" and f"belongs to {world.alice.user_id}" in them["detail"]
    doctor = {c["name"]: c for c in r.api("GET", "/v1/doctor")[1]["checks"]}
    assert doctor["matrix route good"]["ok"] is True
    for name in ("invited", "bridged", "impostor"):
        assert doctor[f"matrix route {name}"]["ok"] is False
        assert routes[name]["detail"] in doctor[f"matrix route {name}"]["detail"]
    assert doctor["matrix them"]["ok"] is False
    offs = [e["text"] for e in journal(r) if e["stage"] == "matrix_route_off"]
    assert any("invited" in t for t in offs) and any("bridged" in t for t in offs)

    # The good route runs meanwhile; then the owner leaves its room: it goes off too.
    world.server.send_text(world.alice.access_token, world.plain, "still here")
    wait_until(lambda: "still here" in r.texts(), WAIT, message="the good route's turn")
    synapse.api("POST", f"/_matrix/client/v3/rooms/{world.plain}/leave", world.me.access_token, {})
    wait_until(lambda: not next(x for x in r.status()["routes"] if x["name"] == "good")["on"],
               WAIT, message="the route off after the owner left")
    good = next(x for x in r.status()["routes"] if x["name"] == "good")
    assert good["detail"] == f"the owner left {world.plain}"
    assert r.api("GET", "/v1/matrix/read?route=good")[0] == 409


def test_an_undecryptable_event_holds_the_cursor_stalls_visibly_and_goes_in_when_keys_come(
        world: World, make_config: Callable[..., Config], running: Callable[..., Running],
        tmp_path: Path) -> None:
    config = matrix_config(make_config, world, [{"name": "secret", "connection": "me",
                                                  "room_id": world.encrypted}],
                           stall_after_seconds=1.0)
    r = running(config, secrets_for(world))
    alice = Writer(world.server, world.alice, tmp_path / "alice-store")
    try:
        # alice's client keeps the session's key from wakeline's device: its event is held.
        key = alice.withhold(world.encrypted, world.me.user_id, "WAKELINE")
        held_id = alice.send(world.encrypted, "held back")
        cursor = r.cursor()
        wait_until(lambda: (r.status()["held"] or {}).get("eventId") == held_id, WAIT,
                   message="the event held")
        wait_until(lambda: r.status()["state"] == "stalled", WAIT, message="stalled after 1 s")
        assert r.cursor() == cursor and r.texts() == []
        doctor = {c["name"]: c for c in r.api("GET", "/v1/doctor")[1]["checks"]}
        assert doctor["matrix me"]["ok"] is False and held_id in doctor["matrix me"]["detail"]
        wait_until(lambda: any(e["stage"] == "matrix_stalled" for e in journal(r)), WAIT)

        alice.share_key(world.encrypted, world.me.user_id, "WAKELINE", key)
    finally:
        alice.close()

    wait_until(lambda: "held back" in r.texts(), WAIT, message="the held text admitted")
    wait_until(lambda: r.status()["held"] is None and r.status()["state"] == "ok", WAIT)
    assert r.cursor() != cursor
    wait_until(lambda: any(e["stage"] == "matrix_resumed" for e in journal(r)), WAIT)


def test_a_homeserver_down_and_back_loses_nothing(
        synapse_install: Any, make_config: Callable[..., Config], running: Callable[..., Running],
        tmp_path: Path) -> None:
    from tests.support.matrix import make_world, restart_homeserver
    from tests.support.synapse import start_homeserver

    server = start_homeserver(synapse_install.python, tmp_path / "own-synapse")
    try:
        world = make_world(server, tmp_path)
        config = matrix_config(make_config, world, [{"name": "alice", "connection": "me",
                                                      "room_id": world.plain}])
        r = running(config, secrets_for(world))
        server.send_text(world.alice.access_token, world.plain, "before")
        wait_until(lambda: "before" in r.texts(), WAIT, message="the first text")

        server.stop()
        wait_until(lambda: r.status()["state"] == "unreachable", WAIT, message="unreachable")
        assert r.status()["retryInSeconds"] is not None
        restart_homeserver(server)
        server.send_text(world.alice.access_token, world.plain, "while it came back")
        server.send_text(world.alice.access_token, world.plain, "after")
        wait_until(lambda: {"while it came back", "after"} <= set(r.texts()), WAIT * 2,
                   message="both later texts admitted")
        wait_until(lambda: r.status()["state"] == "ok", WAIT)
        assert sorted(r.texts()) == sorted(["before", "while it came back", "after"])
    finally:
        server.stop()
