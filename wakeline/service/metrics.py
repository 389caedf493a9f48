"""Prometheus metrics, in a registry owned by one service instance."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger(__name__)

ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """Every metric wakeline exports; recording never raises into the caller."""

    def __init__(self, depths: Callable[[], Mapping[str, int]] | None = None) -> None:
        self._depths = depths
        self._by_outcome: dict[str, Counter] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.deliveries = Counter(
            "wakeline_deliveries",
            "Webhook deliveries answered, by outcome (rejections by error code).",
            ["outcome"],
            registry=self.registry,
        )
        self.ack_latency = Histogram(
            "wakeline_ack_latency_seconds",
            "Time from a webhook request's arrival to its answer.",
            buckets=ACK_BUCKETS,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "wakeline_queue_depth",
            "Work waiting, as of the scrape: FIFO deliveries pending and claimed, inbox unread.",
            ["queue"],
            registry=self.registry,
        )
        self.turns = Counter(
            "wakeline_turns",
            "Agent turns by result; `failed` counts attempts that will be retried or stall.",
            ["result"],
            registry=self.registry,
        )

        self.progress_skipped = Counter(
            "wakeline_progress_skipped",
            "Agent progress not written to Linear: replaced by newer progress within the interval, "
            "dropped when the turn ended, or shed (budget, rate limit, no working token).",
            registry=self.registry,
        )
        self.stream_lines_skipped = Counter(
            "wakeline_stream_lines_skipped",
            "Lines of a stream agent's output (claude, codex) that were not understood.",
            registry=self.registry,
        )
        self.journal_failures = Counter(
            "wakeline_journal_failures",
            "Journal writes (or opens, or compactions) that failed; what they recorded went ahead.",
            registry=self.registry,
        )
        self.store_pruned = Counter(
            "wakeline_store_pruned_rows",
            "Rows the store's retention deleted, by table (`[store] keep_days`).",
            ["table"],
            registry=self.registry,
        )

    def watch_linear_auth(self, ok: Callable[[], bool]) -> None:
        """Export `wakeline_linear_auth_ok`: 1 while a Linear token works, 0 when none does
        (only when a credential is configured: the local backend has nothing to watch)."""
        gauge = Gauge("wakeline_linear_auth_ok",
                      "1 while a Linear token works; 0 when none does (see `wakeline doctor`).",
                      registry=self.registry)
        gauge.set_function(lambda: 1.0 if ok() else 0.0)

    def journal_failed(self) -> None:
        """Count one failed journal write."""
        self.journal_failures.inc()

    def pruned(self, table: str, rows: int) -> None:
        """Count rows retention deleted from `table`."""
        self.store_pruned.labels(table=table).inc(rows)

    def progress_was_skipped(self, count: int) -> None:
        """Count progress that did not reach Linear."""
        self.progress_skipped.inc(count)

    def stream_lines_were_skipped(self, count: int) -> None:
        """Count stream lines no reader understood."""
        self.stream_lines_skipped.inc(count)

    def delivery(self, outcome: str, seconds: float) -> None:
        """Record one answered webhook (the labelled child is looked up once per outcome)."""
        child = self._by_outcome.get(outcome)
        if child is None:
            child = self._by_outcome[outcome] = self.deliveries.labels(outcome=outcome)
        child.inc()
        self.ack_latency.observe(seconds)

    def turn(self, result: str) -> None:
        """Record one ended turn or failed attempt."""
        self.turns.labels(result=result).inc()

    def watch_turns(self, events: Any) -> None:
        """Count every ended turn by its result, and every failed attempt (`Events`)."""
        events.turn_finished.subscribe(lambda finished: self.turn(finished.result.value))
        events.turn_failed.subscribe(lambda turn, error, stalled: self.turn("failed"))

    def render(self) -> bytes:
        """The Prometheus text exposition (queue depths read now)."""
        if self._depths is not None:
            try:
                for queue, depth in self._depths().items():
                    self.queue_depth.labels(queue=queue).set(depth)
            except Exception:  # a busy store must not take the scrape down: keep the last values
                log.warning("queue depths unavailable for this scrape", exc_info=True)
        return generate_latest(self.registry)
