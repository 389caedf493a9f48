"""Admission as a part of the service: the one writer of deliveries, and what it announces.

Every delivery, whatever its provider (Linear's ingress, a Discord thread, a held entry
decided again), is committed by the `AdmissionWriter`; once a group is durable the writer
announces it (`Events.admitted`), and the parts that act on admissions listen: the turns
wake their conversations, Linear sends what was prepared, the journal records, Discord
reconciles its threads.
"""

from __future__ import annotations

from wakeline.admission.router import Router
from wakeline.admission.writer import AdmissionWriter
from wakeline.clock import Clock, to_ms
from wakeline.config import Config
from wakeline.models.admissions import AdmissionResult
from wakeline.models.plans import AdmissionPlan
from wakeline.models.store import Store
from wakeline.service.events import Events
from wakeline.service.parts import BasePart


class AdmissionPart(BasePart):
    """The admission writer of one service."""

    name = "admission"

    def __init__(self, config: Config, store: Store, clock: Clock, router: Router,
                 events: Events) -> None:
        self.router = router
        self._store = store
        self._clock = clock
        self._wait_seconds = config.server.admission_wait_seconds
        self.writer = AdmissionWriter(store, batch_max=config.server.admission_batch_max,
                                      on_admitted=events.admitted)

    def submit(self, plan: AdmissionPlan) -> AdmissionResult:
        """Commit one plan and wait until it is durable (a provider's thread, never an actor).

        Raises:
            Unavailable: the store failed, the writer stopped, or the wait timed out.
        """
        return self.writer.submit(plan, self._wait_seconds)

    def person_known(self, actor_id: str) -> None:
        """Linear has said who `actor_id` is: each entry held for it is decided again, in
        FIFO order, one transaction each (the tracker's worker that asked)."""
        for held in self._store.people.waiting(actor_id):
            self.submit(self.router.recheck_plan(held, to_ms(self._clock.now())))

    def start(self) -> None:
        """Take admissions (after recovery: a wake then finds the FIFO repaired)."""
        self.writer.start()

    def stop(self) -> None:
        """Commit what is queued, then take no more."""
        self.writer.stop()
