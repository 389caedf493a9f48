"""A turn slot tells the supervisor what comes next, as read when its turn was finalised;
a wake since then means the supervisor reads the store again instead."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.unit.models.test_fifo_rules import admit
from wakeline.actors.supervisor import Supervisor
from wakeline.clock import SystemClock, to_ms
from wakeline.models.store import Store


class _Slot:
    """A turn slot's proxy as the supervisor uses it: it records the messages it is told."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return SimpleNamespace(defer=lambda *args: self.told.append(name))


def supervisor(store: Store, clock: SystemClock, cid: str) -> tuple[Supervisor, _Slot]:
    """A supervisor (its messages called directly, on this thread) with `cid` bound to a slot."""
    sup = Supervisor(SimpleNamespace(store=store, clock=clock), 1)  # type: ignore[arg-type]
    slot = _Slot()
    sup._live[cid] = slot
    return sup, slot


def test_the_step_read_at_the_turns_end_decides_without_a_store_read(
        store: Store, clock: SystemClock) -> None:
    cid = admit(store, "i-1", to_ms(clock.now()))  # pending work: a fresh read says runnable
    sup, slot = supervisor(store, clock, cid)
    sup.turn_ended(cid, (False, False))
    assert slot.told == [] and sup._free == [slot] and cid not in sup._live


def test_a_wake_after_the_step_was_read_sends_the_supervisor_to_the_store(
        store: Store, clock: SystemClock) -> None:
    cid = admit(store, "i-1", to_ms(clock.now()))  # admitted after the slot's read...
    sup, slot = supervisor(store, clock, cid)
    sup.wake([cid])  # ...and woken while the slot was still bound
    sup.turn_ended(cid, (False, False))
    assert slot.told == ["wake", "run_next"]  # the same slot runs the new work at once
    assert sup._live == {cid: slot} and not sup._woken
