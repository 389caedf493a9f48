"""The journal as a part of the service: where entries are kept, the actor, the recorder.

On one host the entries are a file (`journal.file`); hosts that share a database keep them
in a table of it (`journal.table`). The `Journal` actor appends what the `Recorder` tells
it; the recorder listens to the service's events (admissions, turns) and the other parts
call it for what only they see. The journal starts first and stops last, so it writes what
every other part said on its way out.
"""

from __future__ import annotations

from wakeline.actors.journal import Journal
from wakeline.clock import Clock, to_ms
from wakeline.config import Config
from wakeline.journal.entries import JournalStore
from wakeline.journal.file import JournalFile
from wakeline.journal.recorder import Recorder
from wakeline.journal.table import JournalTable
from wakeline.models.store import Store
from wakeline.providers.linear.people import People
from wakeline.scheduling.engine import engine_shares
from wakeline.service.events import Events
from wakeline.service.metrics import Metrics
from wakeline.service.parts import BasePart, every

# One fsync shared among the notes of this long (real seconds): a few per turn at hundreds
# of turns a second would otherwise cost an fsync each.
GROUP_WINDOW_SECONDS = 0.02
# Compaction is due at most hourly; asking every ten seconds is soon enough.
MAINTAIN_EVERY_TICKS = 20


class JournalPart(BasePart):
    """The owner's journal of one service."""

    name = "journal"

    def __init__(self, config: Config, store: Store, clock: Clock, secret_values: list[str],
                 metrics: Metrics, people: People, events: Events, host_id: str) -> None:
        self.entries: JournalStore = (
            JournalTable(store.db, clock, secret_values, host=host_id)
            if engine_shares(config) else JournalFile(config.journal_path, clock, secret_values))
        self.actor = Journal.start(self.entries, metrics.journal_failed,
                                   group_window=GROUP_WINDOW_SECONDS).proxy()
        self.recorder = Recorder(self.actor, lambda: to_ms(clock.now()),
                                 owner_user_ids=config.linear.owner_user_ids,
                                 owner_emails=config.linear.owner_emails, people=people)
        events.admitted.subscribe(self.recorder.admitted)
        events.turn_started.subscribe(self.recorder.turn_started)
        events.turn_finished.subscribe(self.recorder.turn_finished)
        events.turn_failed.subscribe(self.recorder.turn_failed)
        events.lifecycle.subscribe(self.recorder.turn_lifecycle)

    def tick(self, count: int) -> None:
        """Now and then: compaction, when it is due."""
        if every(count, MAINTAIN_EVERY_TICKS):
            self.actor.maintain.defer()

    def stop(self) -> None:
        """The last part to stop: what the others told it is written first."""
        self.actor.actor_ref.stop()
