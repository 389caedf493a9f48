"""The MatrixConnection actor on plain pages: what it admits, holds, skips and sends."""

from __future__ import annotations

import json

from concurrent.futures import Future
from typing import Any, Callable

import pytest

from wakeline.clock import SystemClock
from wakeline.config import Config
from wakeline.models.approvals import ApprovalStatus
from wakeline.models.store import Store
from wakeline.providers.matrix.connection import ConnectionHooks, Health, MatrixConnection, SendRefused
from wakeline.providers.matrix.events import RoomTimeline, SyncPage, TimelineEvent
from wakeline.providers.matrix.routes import RouteBook, RouteState

OWNER = "@me:x"


def text(n: int, body: str | None = None, sender: str = "@alice:x") -> TimelineEvent:
    return TimelineEvent({"type": "m.room.message", "event_id": f"$e{n}", "sender": sender,
                          "origin_server_ts": 1_700_000_000_000 + n,
                          "content": {"msgtype": "m.text", "body": body or f"text {n}"}})


def locked(n: int) -> TimelineEvent:
    return TimelineEvent({"type": "m.room.encrypted", "event_id": f"$e{n}", "sender": "@alice:x"},
                         encrypted=True, undecryptable=True)


@pytest.fixture
def cfg(make_config: Callable[..., Config]) -> Config:
    return make_config(matrix={
        "connections": {"me": {"homeserver": "http://127.0.0.1:9", "user_id": OWNER,
                               "access_token_file": "token", "stall_after_seconds": 60.0}},
        "routes": [{"name": "alice", "connection": "me", "room_id": "!a"},
                   {"name": "bob", "connection": "me", "room_id": "!b", "activation": "on_demand"},
                   {"name": "off", "connection": "me", "room_id": "!off"}]})


class Setup:
    def __init__(self, cfg: Config, store: Store) -> None:
        self.store = store
        self.routes = RouteBook(cfg.matrix.routes)
        for route in cfg.matrix.routes:
            self.routes.set(RouteState(route, route.name != "off", "checked"))
        self.woke: list[list[str]] = []
        self.inbound: list[tuple[str, str]] = []
        self.events: list[tuple[str, str]] = []
        self.settled: list[Any] = []
        self.sends: list[tuple[str, Future[str]]] = []
        self.health = Health()
        self.hooks = ConnectionHooks(
            wake=self.woke.append,
            inbound=lambda e, cid: self.inbound.append((e.envelope.body, cid)),
            lifecycle=lambda name, event, text, about: self.events.append((event, text)),
            settled=self.settled.append, send=self._send, ready=lambda: True)
        self.actor = MatrixConnection.start("me", cfg.matrix.connections["me"], self.routes,
                                            store, SystemClock(), self.hooks, self.health).proxy()

    def _send(self, approval: Any) -> Future[str]:
        future: Future[str] = Future()
        self.sends.append((approval.id, future))
        return future

    def page(self, batch: str, rooms: dict[str, list[TimelineEvent]], *, first: bool = False,
             left: frozenset[str] = frozenset(), limited: bool = False) -> Any:
        return self.actor.handle_page(SyncPage(
            batch, {r: RoomTimeline(tuple(e), limited) for r, e in rooms.items()}, left,
            first)).get(timeout=10)

    def bodies(self) -> list[str]:
        return [json.loads(e)["body"] for (e,) in self.store.db.execute_sql(
            "SELECT envelope FROM deliveries ORDER BY id")]


@pytest.fixture
def setup(cfg: Config, store: Store) -> Setup:
    return Setup(cfg, store)


def test_the_first_page_keeps_only_its_cursor(setup: Setup) -> None:
    answer = setup.page("c1", {"!a": [text(1)]}, first=True)
    assert (answer.cursor, answer.held) == ("c1", False)
    assert setup.store.rooms.cursor("me") == "c1" and setup.bodies() == [] and setup.woke == []


def test_a_page_is_admitted_with_its_cursor_and_wakes_its_rooms(setup: Setup) -> None:
    answer = setup.page("c2", {"!a": [text(1), text(2, sender=OWNER), text(3)],
                               "!b": [text(4)], "!off": [text(5)], "!unbound": [text(6)]})

    assert (answer.cursor, answer.held) == ("c2", False)
    assert setup.bodies() == ["text 1", "text 3"]  # on_demand, off and unbound: no FIFO entry
    assert len(setup.woke) == 1 and len(setup.woke[0]) == 1
    assert [b for b, _ in setup.inbound] == ["text 1", "text 3", "text 4"]
    assert setup.health.snapshot()[1] == {"owner": 1, "admitted": 2, "on_demand": 1}


def test_an_undecryptable_event_holds_the_cursor_and_its_room_s_later_events(setup: Setup) -> None:
    setup.page("c1", {}, first=True)
    answer = setup.page("c2", {"!a": [text(1), locked(2), text(3)], "!b": [text(4)]})

    assert (answer.cursor, answer.held) == (None, True)
    assert setup.store.rooms.cursor("me") == "c1"
    assert setup.bodies() == ["text 1"]  # before it, in order; not after it
    held = setup.health.snapshot()[0]
    assert held is not None and (held.room_id, held.event_id, held.stalled) == ("!a", "$e2", False)

    # The keys came: the page again, now whole; what was admitted is a duplicate.
    answer = setup.page("c3", {"!a": [text(1), text(2, "now readable"), text(3)], "!b": [text(4)]})
    assert (answer.cursor, answer.held) == ("c3", False)
    assert setup.bodies() == ["text 1", "now readable", "text 3"]
    assert setup.health.snapshot()[0] is None
    assert setup.health.snapshot()[1]["duplicate"] == 2


def test_a_hold_past_its_bound_is_a_stall_that_says_so(setup: Setup, frozen: Any) -> None:
    setup.page("c1", {}, first=True)
    setup.page("c2", {"!a": [locked(1)]})
    frozen.tick(59)
    setup.page("c2", {"!a": [locked(1)]})
    assert not setup.health.snapshot()[0].stalled
    frozen.tick(2)
    setup.page("c2", {"!a": [locked(1)]})
    assert setup.health.snapshot()[0].stalled
    assert [e for e, _ in setup.events] == ["stalled"] and "$e1" in setup.events[0][1]
    setup.page("c3", {"!a": [text(1)]})
    assert [e for e, _ in setup.events] == ["stalled", "resumed"]


def test_huge_and_malformed_events_are_skipped_and_counted_the_page_moves_on(setup: Setup) -> None:
    huge = text(1, "x" * (10 * 1024 * 1024))
    broken = TimelineEvent({"type": "m.room.message", "event_id": "$b", "sender": "@a:x",
                            "content": ["not", "a", "mapping"]})
    answer = setup.page("c2", {"!a": [huge, broken, text(3)]})

    assert answer.cursor == "c2" and setup.bodies() == ["text 3"]
    counts = setup.health.snapshot()[1]
    assert counts["too_large"] == 1 and counts["malformed"] == 1


def test_a_gap_is_logged_never_filled_and_a_left_room_turns_its_route_off(setup: Setup) -> None:
    setup.page("c2", {"!a": [text(1)]}, limited=True)
    assert setup.health.snapshot()[2] == 1 and setup.events[0][0] == "limited"
    setup.page("c3", {}, left=frozenset({"!a"}))
    assert setup.routes.get("alice").on is False
    assert setup.routes.get("alice").detail == "the owner left !a"
    setup.page("c4", {"!a": [text(2)]})
    assert setup.bodies() == ["text 1"]


def approved(setup: Setup, body: str = "reply", room: str = "!a", route: str = "alice") -> Any:
    setup.page("cx", {room: [text(99)]})  # the room's conversation
    conversation = setup.store.db.execute_sql(
        "SELECT id FROM conversations WHERE key = ?", (room,)).fetchone()[0]
    a = setup.store.approvals.create(connection="me", route=route, conversation_id=conversation,
                                     room_id=room, body=body, turn_id=None, now=1)
    setup.store.approvals.decide(a.id, ApprovalStatus.APPROVED, "operator", 2)
    return a


def test_an_approved_send_goes_once_and_settles(setup: Setup) -> None:
    a = approved(setup)
    setup.actor.send_approved(a.id).get(timeout=10)
    setup.actor.send_approved(a.id).get(timeout=10)  # in flight: not twice
    assert [i for i, _ in setup.sends] == [a.id]
    setup.sends[0][1].set_result("$sent")
    setup.actor.tick().get(timeout=10)  # let the callback's message land first
    got = setup.store.approvals.get(a.id)
    assert (got.status, got.event_id, got.attempts) == (ApprovalStatus.SENT, "$sent", 1)
    assert [s.id for s in setup.settled] == [a.id]


def test_a_send_that_did_not_reach_the_homeserver_goes_again_with_the_same_approval(
        setup: Setup, frozen: Any) -> None:
    a = approved(setup)
    setup.actor.send_approved(a.id).get(timeout=10)
    setup.sends[0][1].set_exception(ConnectionError("homeserver down"))
    setup.actor.tick().get(timeout=10)
    assert setup.store.approvals.get(a.id).status is ApprovalStatus.APPROVED
    frozen.tick(2)
    setup.actor.tick().get(timeout=10)
    assert [i for i, _ in setup.sends] == [a.id, a.id]


def test_a_refused_send_fails_and_turns_its_route_off(setup: Setup) -> None:
    a = approved(setup)
    setup.actor.send_approved(a.id).get(timeout=10)
    setup.sends[0][1].set_exception(SendRefused("the owner is no longer in !a", route_off=True))
    setup.actor.tick().get(timeout=10)
    got = setup.store.approvals.get(a.id)
    assert (got.status, got.error) == (ApprovalStatus.FAILED, "the owner is no longer in !a")
    assert setup.routes.get("alice").on is False


@pytest.mark.parametrize("change,error", [
    ("UPDATE approvals SET body = 'other'", "hash differs"),
    ("UPDATE approvals SET room_id = '!b'", "now binds another room"),
    ("UPDATE approvals SET route = 'gone'", "no longer configured"),
])
def test_an_approval_that_does_not_match_its_binding_is_never_sent(setup: Setup, change: str,
                                                                    error: str) -> None:
    a = approved(setup)
    setup.store.db.execute_sql(change)
    setup.actor.send_approved(a.id).get(timeout=10)
    assert setup.sends == []
    got = setup.store.approvals.get(a.id)
    assert got.status is ApprovalStatus.FAILED and error in got.error


def test_an_approval_of_a_route_that_is_off_is_not_sent(setup: Setup) -> None:
    a = approved(setup)
    setup.routes.switch_off("alice", "checked again: gone")
    setup.actor.send_approved(a.id).get(timeout=10)
    assert setup.sends == [] and setup.store.approvals.get(a.id).status is ApprovalStatus.FAILED
