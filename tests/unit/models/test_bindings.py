"""Control bindings: one thread per conversation, a thread to at most one, rebind atomic."""

from __future__ import annotations

import pytest

from wakeline.errors import BindingConflict
from wakeline.models.bindings import Binding
from wakeline.models.store import Store


def conversation(store: Store, cid: str, *, terminal: bool = False) -> str:
    store.db.execute_sql(
        "INSERT INTO conversations (id, namespace, key, kind, title, route, created_at,"
        " updated_at, terminal, issue_id, issue_identifier) VALUES (?, 'linear:o:issue', ?,"
        " 'issue', ?, 'ops', 1, 1, ?, ?, ?)",
        (cid, f"key-{cid}", f"[OPS-{cid}] Title", int(terminal), f"issue-{cid}", f"OPS-{cid}"))
    return cid


def bound(cid: str, thread: str, parent: str = "100") -> Binding:
    return Binding(cid, "discord", thread, parent, f"[OPS-{cid}] Title", False, False)


def test_a_binding_is_the_lookup_from_a_thread_to_its_conversation(store: Store) -> None:
    store.bindings.bind(bound(conversation(store, "a"), "9001"), now=5)
    found = store.bindings.by_thread("discord", "9001")
    assert found == bound("a", "9001") and store.bindings.of("a") == found
    assert store.bindings.by_thread("discord", "9002") is None
    assert store.bindings.by_thread("matrix", "9001") is None
    target = store.bindings.target("a")
    assert target is not None and (target.namespace, target.key, target.route) == \
        ("linear:o:issue", "key-a", "ops")


def test_a_thread_belongs_to_one_conversation_and_a_conversation_has_one_thread(
        store: Store) -> None:
    store.bindings.bind(bound(conversation(store, "a"), "9001"), now=5)
    conversation(store, "b")
    with pytest.raises(BindingConflict):
        store.bindings.bind(bound("b", "9001"), now=6)
    with pytest.raises(BindingConflict):
        store.bindings.bind(bound("a", "9002"), now=6)
    assert store.bindings.of("b") is None and store.bindings.of("a") == bound("a", "9001")


def test_rebind_moves_the_binding_and_resets_its_state(store: Store) -> None:
    store.bindings.bind(bound(conversation(store, "a"), "9001"), now=5)
    store.bindings.mirror("a", "9001", archived=True, locked=True, now=6)
    store.bindings.seen("discord", "9001", 9100)
    store.bindings.rebind("a", "9001", "9500", "101", now=7)
    moved = store.bindings.of("a")
    assert moved == Binding("a", "discord", "9500", "101", "[OPS-a] Title", False, False, None)
    assert store.bindings.by_thread("discord", "9001") is None


def test_a_rebind_from_a_thread_no_longer_bound_changes_nothing(store: Store) -> None:
    store.bindings.bind(bound(conversation(store, "a"), "9001"), now=5)
    store.bindings.rebind("a", "9001", "9500", "100", now=6)
    with pytest.raises(BindingConflict):
        store.bindings.rebind("a", "9001", "9600", "100", now=7)  # a stale read lost the race
    assert store.bindings.of("a").thread_id == "9500"  # type: ignore[union-attr]


def test_a_rebind_onto_another_conversations_thread_is_refused_whole(store: Store) -> None:
    store.bindings.bind(bound(conversation(store, "a"), "9001"), now=5)
    store.bindings.bind(bound(conversation(store, "b"), "9002"), now=5)
    store.bindings.seen("discord", "9001", 9050)
    with pytest.raises(BindingConflict):
        store.bindings.rebind("a", "9001", "9002", "100", now=6)
    assert store.bindings.of("a") == Binding("a", "discord", "9001", "100", "[OPS-a] Title",
                                             False, False, 9050)
    assert store.bindings.of("b").thread_id == "9002"  # type: ignore[union-attr]


def test_the_cursor_only_moves_forward(store: Store) -> None:
    store.bindings.bind(bound(conversation(store, "a"), "9001"), now=5)
    for seen in (9010, 9030, 9020):
        store.bindings.seen("discord", "9001", seen)
    assert store.bindings.of("a").last_message_id == 9030  # type: ignore[union-attr]


def test_terminal_intent_is_read_from_the_conversation(store: Store) -> None:
    store.bindings.bind(bound(conversation(store, "open"), "1"), now=5)
    store.bindings.bind(bound(conversation(store, "shut", terminal=True), "2"), now=5)
    store.bindings.bind(bound(conversation(store, "done", terminal=True), "3"), now=5)
    store.bindings.mirror("done", "3", archived=True, locked=True, now=6)
    conversation(store, "first", terminal=True)  # terminal-first: no binding at all
    assert store.bindings.terminal_unclosed("discord") == ["shut"]
    assert [b.conversation_id for b in store.bindings.open_bindings("discord")] == ["open"]
    store.bindings.mirror("shut", "2", archived=True, locked=False, now=7)
    assert store.bindings.terminal_unclosed("discord") == ["shut"]  # archived, not locked
