"""Without a credential the tracker refuses writes, and still tells its listeners at once.

A turn waits for its conversation's writes to settle before the agent starts;
if the local backend settled silently, every such turn would sit out the
waiter's 0.1 s re-check instead of starting at once.
"""

from __future__ import annotations

import threading

from wakeline.actors.tracker import SettledWrite, Tracker
from wakeline.clock import SystemClock, to_ms
from wakeline.models.outbox import EffectKind, EffectSpec, EffectState
from wakeline.models.store import Store


def test_local_backend_publishes_the_refusal(store: Store, clock: SystemClock) -> None:
    spec = EffectSpec(EffectKind.AGENT_ACTIVITY, "session-1", "Picked up", activity_type="thought")
    with store.db.atomic():
        [effect_id] = store.outbox.prepare([spec], to_ms(clock.now()))
    heard: list[SettledWrite] = []
    told = threading.Event()

    def listener(write: SettledWrite) -> None:
        heard.append(write)
        told.set()

    tracker = Tracker.start(store, None, clock).proxy()
    try:
        tracker.subscribe(listener).get(timeout=5)
        tracker.kick().get(timeout=5)
        assert told.wait(5)
    finally:
        tracker.actor_ref.stop()
    assert [(w.effect_id, w.state) for w in heard] == [(effect_id, EffectState.REJECTED)]
    assert [e["state"] for e in store.outbox.listing()] == ["rejected"]
