"""Echo memory as a part of the service: our own writes coming back, and the store's upkeep.

The `EchoMemory` actor keeps the suppression windows: it hears from the tracker of every
intent going out and every mutation settled, resolves the deliveries admission held while
a write was in flight (releasing or completing them, and waking their conversations), and
prunes what its windows no longer need. The store's retention (`[store] keep_days`) runs
on its thread too, a step per message, never on the admission path.
"""

from __future__ import annotations

from typing import Any

from wakeline.actors.echo_memory import EchoMemory
from wakeline.clock import Clock
from wakeline.config import Config
from wakeline.models.outbox import EffectKind
from wakeline.models.retention import Retention
from wakeline.models.store import Store
from wakeline.service.events import Events
from wakeline.service.metrics import Metrics
from wakeline.service.parts import BasePart, Check, every

# Echo memory resolves on every settled write; its sweep only catches what a lost message
# left behind.
SWEEP_EVERY_TICKS = 20
# A retention pass begins once a minute (decision 0030).
PRUNE_EVERY_TICKS = 120


class EchoPart(BasePart):
    """Echo memory and the store's retention of one service."""

    name = "echo_memory"

    def __init__(self, config: Config, store: Store, clock: Clock, metrics: Metrics,
                 events: Events, tracker: Any) -> None:
        self.retention = Retention.of(store.db, config.store.keep_days,
                                      config.store.dedupe_hours, metrics.pruned)
        self.actor = EchoMemory.start(store, clock, events.woke,
                                      config.linear.echo_window_seconds * 1000,
                                      self.retention).proxy()
        tracker.subscribe_intents(self.actor.intents.defer)
        tracker.subscribe(self._settled)

    def _settled(self, write: Any) -> None:
        # Only a mutation can hold deliveries: activities and comments need not wake it.
        if write.kind in (EffectKind.MUTATION, EffectKind.UPDATE):
            self.actor.settled.defer(write)

    def tick(self, count: int) -> None:
        """Now and then the sweep; once a minute a retention pass."""
        if every(count, SWEEP_EVERY_TICKS):
            self.actor.sweep.defer()
        if every(count, PRUNE_EVERY_TICKS):
            self.actor.prune_store.defer()

    def stop(self) -> None:
        """Stop the actor (what it holds is durable: held deliveries wait in the store)."""
        self.actor.actor_ref.stop()

    def checks(self) -> list[Check]:
        """The store's retention: its windows and its last pass."""
        return self.retention.checks()
