"""EchoMemory: what wakeline remembers of its own writes, and the deliveries it holds meanwhile.

The tracker tells it of every intent going on the wire and every settled
write; it keeps the durable tables current (`models/echoes.py`): when a write
answers it resolves the deliveries held for it (our own echo, or released into
their FIFO position), releases at start-up the intents that never left, lets the
operator release one of unknown outcome, and forgets evidence past its window.
Admission reads those tables in its own transaction and never waits on this
mailbox.

The windows it owns: an update of ours counts as an echo inside
`linear.echo_window_seconds` of its answer; a delivery is a candidate echo of a
write attempted at most 24 hours before it; answered intents are kept 7 days;
an intent of unknown outcome, and what it holds, until an operator decides.

Its thread also runs the store's retention (`models/retention.py`, `[store] keep_days`),
off the ingress and the turns: a pass is a chain of short steps, each a message of its
own, so resolving held deliveries never waits behind a whole pass.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import pykka

from wakeline.actors.tracker import SettledWrite
from wakeline.clock import Clock, to_ms
from wakeline.errors import Conflict, NotFound
from wakeline.models.echoes import ECHO_WINDOW_MS, Resolution
from wakeline.models.outbox import EffectState
from wakeline.models.retention import Retention
from wakeline.models.store import Store

log = logging.getLogger(__name__)

PRUNE_EVERY_SECONDS = 60.0


class EchoMemory(pykka.ThreadingActor):
    """Resolves held deliveries as writes answer, and prunes what is remembered."""

    def __init__(self, store: Store, clock: Clock, wake: Callable[[list[str]], None],
                 echo_window_ms: int = ECHO_WINDOW_MS, retention: Retention | None = None) -> None:
        super().__init__()
        self._store = store
        self._echo_window_ms = echo_window_ms
        self._clock = clock
        self._wake = wake
        self._last_prune: float | None = None
        self._retention = retention
        self._myself: Any = None  # this actor's proxy, for the next step of a pass

    def on_start(self) -> None:
        """Name the thread; release the intents a crash left unsent, resolve what they held."""
        threading.current_thread().name = "echo-memory"
        released = self._store.echoes.release_unsent(to_ms(self._clock.now()))
        if released:
            log.info("intents that never left released", extra={"count": released})
        self.resolve()

    def on_stop(self) -> None:
        """Close this thread's connection."""
        self._store.close()

    # --- messages ----------------------------------------------------------------------------

    def intents(self, effect_ids: list[str]) -> None:
        """A write carrying these intents is going on the wire (recorded durably already:
        admission holds its candidates from the tables, so there is nothing to keep here)."""
        log.debug("intents on the wire", extra={"effects": effect_ids})

    def settled(self, write: SettledWrite) -> None:
        """A mutation answered (the service tells only those: only intents hold deliveries)."""
        self.resolve()

    def resolve(self) -> Resolution:
        """Complete held deliveries proved ours; release the rest whose writes all answered."""
        try:
            result = self._store.echoes.resolve(to_ms(self._clock.now()), self._echo_window_ms)
        except Exception:
            log.exception("resolving held deliveries failed")  # the next sweep tries again
            return Resolution()
        if result.echoes or result.released:
            log.info("held deliveries resolved", extra={"echoes": result.echoes,
                                                        "released": result.released})
        if result.wake_ids:
            self._wake(list(dict.fromkeys(result.wake_ids)))
        return result

    def reconcile_absent(self, effect_id: str) -> dict[str, Any]:
        """The operator verified that a write of unknown outcome is absent in Linear: release
        it, and with it the deliveries it quarantined (their FIFOs advance).

        Raises:
            NotFound: no such effect.
            Conflict: the effect is not `outcome_unknown`.
        """
        outbox = self._store.outbox
        effect = outbox.get(effect_id)
        if effect is None:
            raise NotFound(f"no effect {effect_id}")
        if effect["state"] != EffectState.OUTCOME_UNKNOWN.value \
                or not outbox.release(effect_id, to_ms(self._clock.now())):
            current = outbox.get(effect_id) or effect
            raise Conflict(f"effect {effect_id} is {current['state']}, not outcome_unknown",
                           state=current["state"])
        log.info("effect released by the operator", extra={"effect_id": effect_id})
        result = self.resolve()
        return {**(outbox.get(effect_id) or effect), "releasedDeliveries": result.released}

    def sweep(self) -> None:
        """Periodic: resolve anything a lost message left held; prune once a minute."""
        self.resolve()
        now = self._clock.monotonic()
        if self._last_prune is None or now - self._last_prune >= PRUNE_EVERY_SECONDS:
            self._last_prune = now
            try:
                gone = self._store.echoes.prune(to_ms(self._clock.now()))
            except Exception:
                log.exception("pruning echo memory failed")
                return
            if gone:
                log.info("echo memory pruned", extra={"rows": gone})

    def prune_store(self) -> None:
        """Begin a retention pass of the store, unless one is under way (its steps go on)."""
        if self._retention is not None and self._retention.begin(to_ms(self._clock.now())):
            self.prune_step()

    def prune_step(self) -> None:
        """One step of the pass; the next one is a message behind whatever waits already."""
        if self._retention is not None and self._retention.step(to_ms(self._clock.now())):
            if self._myself is None:
                self._myself = self.actor_ref.proxy()
            self._myself.prune_step.defer()
