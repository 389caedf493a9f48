"""The single admission writer: one thread, one queue, group commits.

Request threads verify and parse in parallel, then hand their typed plan to
this writer and wait. The writer drains whatever is queued (up to a bound),
commits it in one transaction, and wakes each waiter once its delivery is
durable. Eight threads each committing alone fight over SQLite's write lock;
one writer committing groups does not. It is a plain thread, not an actor, so
the ingress never depends on the actor system.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from wakeline.errors import Unavailable
from wakeline.models.plans import AdmissionPlan
from wakeline.models.store import AdmissionResult, Store

log = logging.getLogger(__name__)

_STOP = object()


class _Ticket:
    """One plan and its answer. `done` is a bare lock held until the answer is set: a
    waiter blocks on acquiring it, which costs far less than an Event's condition."""

    __slots__ = ("plan", "done", "result")

    def __init__(self, plan: AdmissionPlan) -> None:
        self.plan = plan
        self.done = threading.Lock()
        self.done.acquire()
        self.result: AdmissionResult | Unavailable | None = None

    def settle(self, result: AdmissionResult | Unavailable) -> None:
        """Set the answer and wake the waiter (writer thread)."""
        self.result = result
        self.done.release()

    def wait(self, timeout: float) -> bool:
        """Block until answered (request thread); False after `timeout` seconds."""
        return self.done.acquire(timeout=timeout)


class AdmissionWriter:
    """Commits admission plans in groups on one thread.

    Args:
        store: the store to commit into.
        batch_max: the most plans one transaction carries.
        on_admitted: called on the writer thread after each commit with the
            group's plans and their results; must not block (a tell, not an ask).
    """

    def __init__(
        self,
        store: Store,
        *,
        batch_max: int = 64,
        on_admitted: Callable[[list[tuple[AdmissionPlan, AdmissionResult]]], None] | None = None,
    ) -> None:
        self._store = store
        self._batch_max = batch_max
        self._on_admitted = on_admitted
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="admission-writer", daemon=True)
        self._stopped = threading.Event()

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Commit what is queued, then stop."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def submit(self, plan: AdmissionPlan, timeout: float) -> AdmissionResult:
        """Queue one plan and wait until it is durable.

        Raises:
            Unavailable: the store failed, the writer stopped, or the wait timed out.
        """
        if self._stopped.is_set():
            raise Unavailable("shutting down")
        ticket = _Ticket(plan)
        self._queue.put(ticket)
        if not ticket.wait(timeout):
            raise Unavailable("admission timed out")
        if isinstance(ticket.result, AdmissionResult):
            return ticket.result
        raise ticket.result or Unavailable()

    def _run(self) -> None:
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    break
                batch = [first]
                stop_after = False
                while len(batch) < self._batch_max:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop_after = True
                        break
                    batch.append(item)
                self._commit(batch)  # type: ignore[arg-type]
                if stop_after:
                    break
        finally:
            self._stopped.set()
            self._fail_queued()
            self._store.close()

    def _commit(self, batch: list[_Ticket]) -> None:
        try:
            results = self._store.admit([t.plan for t in batch])
        except Exception:  # a bug must not leave requests hanging or kill the writer
            log.exception("admission writer failed")
            results = [Unavailable() for _ in batch]
        for ticket, result in zip(batch, results, strict=True):
            ticket.settle(result)
        done = [(t.plan, r) for t, r in zip(batch, results) if isinstance(r, AdmissionResult)]
        if done and self._on_admitted is not None:
            try:
                self._on_admitted(done)
            except Exception:
                log.exception("wake after admission failed")

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Ticket):
                item.settle(Unavailable("shutting down"))
