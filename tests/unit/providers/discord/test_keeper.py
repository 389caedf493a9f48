"""The keeper's jobs against a stub Discord and a real store: each reconciles the thread
with what the store says when it runs."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from wakeline.clock import SystemClock
from wakeline.config import Config
from wakeline.errors import Conflict, DiscordRejected, ThreadGone
from wakeline.models.store import Store
from wakeline.providers.discord.keeper import Job, Keeper
from wakeline.providers.discord.messages import ThreadMessage
from wakeline.providers.discord.rest import Channel

PARENT = "100"


class StubRest:
    """Threads and messages in memory; `calls` records what was asked."""

    def __init__(self) -> None:
        self.threads: dict[str, dict[str, Any]] = {}
        self.posted: list[tuple[str, str]] = []
        self.calls: list[tuple[str, ...]] = []
        self.pages: list[list[dict[str, Any]]] = []
        self._next = 1000

    def _channel(self, tid: str) -> Channel:
        t = self.threads.get(tid)
        if t is None:
            raise ThreadGone("gone", 404, 10003)
        return Channel(tid, 11, t["name"], PARENT, "1", t["archived"], t["locked"])

    def channel(self, tid: str) -> Channel:
        self.calls.append(("channel", tid))
        return self._channel(tid)

    def create_thread(self, parent: str, name: str) -> Channel:
        self._next += 1
        tid = str(self._next)
        self.calls.append(("create", parent, name))
        self.threads[tid] = {"name": name, "archived": False, "locked": False}
        return self._channel(tid)

    def edit_thread(self, tid: str, **fields: Any) -> Channel:
        self.calls.append(("edit", tid, *sorted(f"{k}={v}" for k, v in fields.items())))
        t = self.threads.get(tid)
        if t is None:
            raise ThreadGone("gone", 404, 10003)
        if t["archived"] and fields.get("archived") is not False:
            raise DiscordRejected("archived", 400, 50083)
        t.update(fields)
        return self._channel(tid)

    def post(self, tid: str, content: str, nonce: str | None = None) -> str:
        t = self.threads.get(tid)
        if t is None:
            raise ThreadGone("gone", 404, 10003)
        if t["locked"]:
            raise DiscordRejected("archived", 400, 50083)
        t["archived"] = False
        self.posted.append((tid, content))
        return "1"

    def messages_after(self, tid: str, after: int, limit: int = 100) -> list[dict[str, Any]]:
        self.calls.append(("after", tid, str(after)))
        return self.pages.pop(0) if self.pages else []


@pytest.fixture
def setup(make_config: Callable[..., Config], store: Store) -> tuple[Keeper, StubRest, Store]:
    config = make_config(routes=[{"name": "ops", "teams": ["OPS"], "mode": "issue",
                                  "discord_channel_id": PARENT},
                                 {"name": "quiet", "teams": ["Q"]}])
    rest = StubRest()
    journal: list[tuple[str, ...]] = []
    keeper = Keeper(rest, store.bindings, config, SystemClock(),  # type: ignore[arg-type]
                    ["s3cret-value"],
                    journal=lambda cid, event, text, source: journal.append((cid, event)))
    keeper.journaled = journal  # type: ignore[attr-defined]
    return keeper, rest, store


def conversation(store: Store, cid: str = "cv_1", *, route: str = "ops",
                 terminal: bool = False) -> str:
    store.db.execute_sql(
        "INSERT INTO conversations (id, namespace, key, kind, title, route, created_at,"
        " updated_at, terminal, issue_id, issue_identifier) VALUES (?, 'n', ?, 'issue',"
        " '[OPS-1] Rotate the logs', ?, 1, 1, ?, 'issue-1', 'OPS-1')",
        (cid, cid, route, int(terminal)))
    return cid


def set_terminal(store: Store, cid: str, terminal: bool) -> None:
    store.db.execute_sql("UPDATE conversations SET terminal = ? WHERE id = ?", (int(terminal), cid))


def test_the_first_ensure_creates_binds_and_opens(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    binding = store.bindings.of("cv_1")
    assert binding is not None and binding.title == "[OPS-1] Rotate the logs"
    assert rest.calls == [("create", PARENT, "[OPS-1] Rotate the logs")]
    assert "OPS-1" in rest.posted[0][1] and keeper.journaled == [("cv_1", "thread_opened")]
    keeper.run(Job("ensure", "cv_1"))  # reused: fetched, never made again
    assert rest.calls[-1] == ("channel", binding.thread_id) and len(rest.threads) == 1


def test_a_route_without_a_channel_never_touches_discord(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store, route="quiet")))
    keeper.run(Job("post", "cv_1", "hello", "answer"))
    assert rest.calls == [] and rest.posted == []


def test_ensure_never_runs_for_terminal_intent(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store, terminal=True)))
    keeper.run(Job("post", "cv_1", "late answer", "answer"))
    assert rest.calls == [] and store.bindings.of("cv_1") is None


def test_an_archived_thread_of_an_open_conversation_is_unarchived(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    tid = store.bindings.of("cv_1").thread_id
    rest.threads[tid].update(archived=True, locked=True)
    keeper.run(Job("ensure", "cv_1"))
    assert rest.threads[tid] == {"name": "[OPS-1] Rotate the logs", "archived": False,
                                 "locked": False}
    assert ("cv_1", "thread_reopened") in keeper.journaled


def test_a_thread_discord_lost_is_replaced_in_place(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    old = store.bindings.of("cv_1")
    del rest.threads[old.thread_id]
    keeper.run(Job("ensure", "cv_1"))
    new = store.bindings.of("cv_1")
    assert new.thread_id != old.thread_id and new.title == old.title
    assert "replaces one that was deleted" in rest.posted[-1][1]
    assert ("cv_1", "thread_replaced") in keeper.journaled


def test_an_answer_to_a_thread_deleted_by_hand_lands_in_its_replacement(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    del rest.threads[store.bindings.of("cv_1").thread_id]
    keeper.run(Job("post", "cv_1", "the answer s3cret-value", "answer"))
    tid = store.bindings.of("cv_1").thread_id
    assert rest.posted[-1] == (tid, "the answer [redacted]")


def test_close_says_so_then_archives_and_locks_once(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    tid = store.bindings.of("cv_1").thread_id
    keeper.run(Job("post", "cv_1", "closing while open", "closing"))  # reopened: not said
    set_terminal(store, "cv_1", True)
    keeper.run(Job("post", "cv_1", "The issue was closed.", "closing"))
    keeper.run(Job("post", "cv_1", "a late answer", "answer"))
    keeper.run(Job("close", "cv_1"))
    keeper.run(Job("close", "cv_1"))  # the sweep again: nothing more
    keeper.run(Job("post", "cv_1", "The issue was closed.", "closing"))  # closed: not said
    assert [c for c in rest.calls if c[0] == "edit"] == [("edit", tid, "archived=True",
                                                          "locked=True")]
    assert [text for _, text in rest.posted[1:]] == ["The issue was closed."]
    binding = store.bindings.of("cv_1")
    assert binding.archived and binding.locked


def test_close_of_a_thread_archived_by_discord_unarchives_to_lock_it(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    tid = store.bindings.of("cv_1").thread_id
    rest.threads[tid]["archived"] = True
    set_terminal(store, "cv_1", True)
    keeper.run(Job("close", "cv_1"))
    assert rest.threads[tid] == {"name": "[OPS-1] Rotate the logs", "archived": True,
                                 "locked": True}


def test_close_after_a_reopen_does_nothing(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    keeper.run(Job("close", "cv_1"))  # the conversation is open again when the job runs
    assert not any(c[0] == "edit" for c in rest.calls)


def test_a_closed_thread_that_was_deleted_counts_as_closed(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    rest.threads.clear()
    set_terminal(store, "cv_1", True)
    keeper.run(Job("close", "cv_1"))
    assert store.bindings.of("cv_1").archived and store.bindings.terminal_unclosed("discord") == []


def test_catch_up_pages_from_the_cursor(setup: Any) -> None:
    keeper, rest, store = setup
    keeper.run(Job("ensure", conversation(store)))
    tid = store.bindings.of("cv_1").thread_id

    def message(n: int) -> dict[str, Any]:
        return {"id": str(n), "channel_id": tid, "type": 0, "content": f"m{n}",
                "author": {"id": "555", "username": "ada"}}

    rest.pages = [[message(2000 + n) for n in range(100)], [message(2100)]]
    found = keeper.run(Job("catch_up", "cv_1"))
    assert [m.message_id for m in found] == [str(2000 + n) for n in range(101)]
    assert [c[2] for c in rest.calls if c[0] == "after"] == [tid, "2099"]
    store.bindings.seen("discord", tid, 2100)
    keeper.run(Job("catch_up", "cv_1"))
    assert rest.calls[-1] == ("after", tid, "2100")


def test_commands_act_and_answer_in_the_thread(setup: Any) -> None:
    keeper, rest, store = setup
    done: list[tuple[str, str]] = []

    def operate(cid: str, op: str) -> dict[str, Any]:
        done.append((cid, op))
        if op == "stop":
            raise Conflict("no turn is running")
        return {}

    keeper.operate = operate
    keeper.status = lambda cid: {"id": cid, "title": "[OPS-1] t", "state": "idle"}
    keeper.run(Job("ensure", conversation(store)))
    tid = store.bindings.of("cv_1").thread_id

    def say(text: str) -> None:
        message = ThreadMessage(tid, "7", "1", "555", "ada", False, False, text)
        keeper.run(Job("command", "cv_1", message=message))

    say("!stop")
    say("!reset")
    say("!status")
    assert done == [("cv_1", "stop"), ("cv_1", "reset")]
    assert [text.split("\n")[0] for _, text in rest.posted[1:]] == [
        "Nothing is running: there is no turn to stop.", "**[OPS-1] t**: idle"]
