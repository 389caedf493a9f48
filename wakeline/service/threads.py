"""Every thread a wakeline process runs, by name, and how many of each its config allows.

The architecture's thread table as code. `budget(config)` lists each kind of thread with
the most a service with that config runs at once; none grows with load or with the number
of conversations (a conversation is a row, not a thread). `bench/soak.py` holds a serve
process to the total; a test counts a running service's threads by name against it
(`over_budget`), so a thread nobody named or budgeted fails it with its name.

Third-party threads are counted too: discord.py's heartbeat, and DBOS's own (those it
leaves with Python's default name are named `dbos-<function>` by `name_new_threads`).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from wakeline.config import Config

# DBOS's executor: a job runs a turn on one of its threads, so one host's jobs need
# `max_concurrent_turns`; these few more run its own short work (each finished workflow's
# outcome is written from its event loop through the same pool).
DBOS_SPARE_EXECUTORS = 4
# The threads DBOS 3.4 starts at launch besides its executor and its queue workers
# (`wakeline/scheduling/dbos.py` names the unnamed ones `dbos-<function>`).
_DBOS_OWN = ("dbos-background-jobs", "dbos-_run_event_loop", "dbos-dynamic_scheduler_loop",
             "dbos-queue_thread", "dbos-run_notification_listener", "dbos-run_notifier")
_DEFAULT_NAME = re.compile(r"Thread-\d+ \((\w+)\)")


@dataclass(frozen=True)
class ThreadKind:
    """Threads whose whole name matches `pattern`: at most `most` of them at a time."""

    pattern: str
    most: int
    job: str


def budget(config: Config, *, discord: bool = False) -> list[ThreadKind]:
    """The threads of a service with `config` (`discord`: a bot token is set)."""
    turns = config.agent.max_concurrent_turns
    kinds = [
        ThreadKind("MainThread", 1, "waits for a signal, then stops the service"),
        ThreadKind("ingress-loop", 1, "the webhook listener's accept and I/O loop"),
        ThreadKind(r"ingress-request-\d+", config.server.ingress_threads,
                   "webhook requests (`server.ingress_threads`)"),
        ThreadKind("operator-loop", 1, "the operator API's accept and I/O loop"),
        ThreadKind(r"operator-request-\d+", config.server.threads,
                   "operator API requests (`server.threads`)"),
        ThreadKind("admission-writer", 1, "commits deliveries in groups"),
        ThreadKind("ticker", 1, "ticks every part (0.5 s)"),
        ThreadKind("supervisor", 1, "binds conversations to turn slots (actor)"),
        ThreadKind(r"turn-slot-\d+(-.+)?", turns,
                   "a conversation's turns, one at a time (actors, `agent.max_concurrent_turns`)"),
        ThreadKind(r"turn-runner_\d+", turns, "runs one turn's agent and waits for it"),
        ThreadKind("tracker", 1, "the outbox: every write to Linear (actor)"),
        ThreadKind(r"linear_\d+", config.linear.max_concurrent_requests,
                   "calls to Linear (`linear.max_concurrent_requests`)"),
        ThreadKind("journal", 1, "appends the journal (actor)"),
        ThreadKind("echo-memory", 1, "resolves deliveries held for our own writes (actor)"),
        ThreadKind(r"workspaces_\d+", 1, "removes retired conversations' worktrees"),
    ]
    allowing = sum(1 for r in config.routes if r.network == "allow")
    if allowing and config.sandbox.mode != "none":
        from wakeline.sandbox.proxy import MAX_CONNECTIONS

        kinds += [
            ThreadKind("sandbox-proxy", 1, "accepts the allow-list proxy's connections"),
            ThreadKind(r"sandbox-proxy-.+", 2 * MAX_CONNECTIONS * turns,
                       "a proxied connection, both ways (at most `MAX_CONNECTIONS` a turn)"),
        ]
    if config.linear.client_id:
        kinds.append(ThreadKind("linear-token-renewal", 1,
                                "renews the app's token, only while a renewal runs"))
    if discord:
        from wakeline.providers.discord.control import CLICK_WORKERS, WORKERS
        from wakeline.providers.discord.gateway import GATEWAY_IO_THREADS

        kinds += [
            ThreadKind("discord-control", 1, "Discord control threads' bindings (actor)"),
            ThreadKind(r"discord_\d+", WORKERS, "Discord REST work, one job per conversation"),
            ThreadKind(r"discord-click_\d+", CLICK_WORKERS, "an approval button's answer"),
            ThreadKind("discord-gateway", 1, "discord.py's Gateway client and its loop"),
            ThreadKind(r"discord-gateway-io_\d+", GATEWAY_IO_THREADS,
                       "the Gateway loop's blocking calls (its address, DNS)"),
            ThreadKind(r"keep-alive-handler:shard-\w+", 1, "discord.py's Gateway heartbeat"),
        ]
    if config.matrix.connections:
        from wakeline.providers.matrix.sync import MATRIX_IO_THREADS

        kinds += [
            ThreadKind("matrix", 1, "nio's loop: every Matrix connection's sync and sends"),
            ThreadKind(r"matrix-io_\d+", MATRIX_IO_THREADS, "the Matrix loop's DNS lookups"),
            ThreadKind(r"matrix-connection-.+", len(config.matrix.connections),
                       "a Matrix connection's pages and sends (actors)"),
        ]
    if config.scale.engine == "dbos":
        kinds += [
            ThreadKind("dbos", 1, "launches DBOS; heartbeat, takeovers, roles"),
            ThreadKind("dbos-waker", 1, "enqueues the wake jobs"),
            ThreadKind(r"dbos-executor-_\d+", turns + DBOS_SPARE_EXECUTORS,
                       "DBOS's executor: the jobs running turns here, its own writes"),
            ThreadKind(r"queue-worker-.+", 2, "DBOS's queue workers (ours, its internal one)"),
            *(ThreadKind(re.escape(name), 1, "DBOS's own") for name in _DBOS_OWN),
        ]
    return kinds


def total(kinds: Sequence[ThreadKind]) -> int:
    """The most threads the process has at once."""
    return sum(kind.most for kind in kinds)


def over_budget(names: Iterable[str], kinds: Sequence[ThreadKind]) -> list[str]:
    """What the threads named `names` break: each name no kind matches, and each kind with
    more threads than its most (naming them). Empty when they fit."""
    counts: Counter[ThreadKind] = Counter()
    matched: dict[ThreadKind, list[str]] = {}
    problems = []
    for name in names:
        kind = next((k for k in kinds if re.fullmatch(k.pattern, name)), None)
        if kind is None:
            problems.append(f"thread {name!r} is in no budget")
            continue
        counts[kind] += 1
        matched.setdefault(kind, []).append(name)
    for kind, count in counts.items():
        if count > kind.most:
            problems.append(f"{count} threads {kind.pattern!r} (at most {kind.most}): "
                            f"{sorted(matched[kind])}")
    return problems


def name_new_threads(before: set[int | None], prefix: str) -> None:
    """Name every thread started since `before` (their idents) that kept Python's default
    `Thread-N (function)`: `<prefix>-<function>`, so a library's threads say whose they are."""
    for thread in threading.enumerate():
        found = _DEFAULT_NAME.fullmatch(thread.name)
        if thread.ident not in before and found:
            thread.name = f"{prefix}-{found.group(1)}"
