#!/usr/bin/env python3
"""Journal write benchmark: group commit through the actor, single appends, compaction.

    .venv/bin/python bench/journal.py [--notes 5000] [--rounds 3]

Baseline (A) and wakeline (B) alternate, A B A B, for `--rounds` rounds in one temp
directory; the table shows medians and the ratio wakeline time / baseline time.

  (a) `--notes` notes told to the Journal actor as fast as possible, timed until a final
      flush is acknowledged; baseline: one write()+fsync per line of a plain file.
  (b) JournalFile.append of one note at a time (a write+fsync each); the same baseline.
  (c) JournalFile.compact() of 2,500 lines down to the 2,000 kept; baseline: write those
      bytes to a new file, fsync, rename, fsync the directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wakeline.actors.journal import Journal  # noqa: E402
from wakeline.clock import SystemClock, to_ms  # noqa: E402
from wakeline.journal.entries import COMPACT_AT_LINES, Note
from wakeline.journal.file import JournalFile  # noqa: E402

TEXT = ("Fixed the retry loop in the sync worker (ENG-{n}): it now honours Retry-After and caps "
        "the queue per tenant. Commit 3f9a2c{n:04x}; tests pass, the migration is unchanged. ")


class CountingFile(JournalFile):
    """Counts append batches (fsyncs of the actor's group commit)."""

    batches = 0

    def append(self, notes: Sequence[Note]) -> list[dict[str, Any]]:
        self.batches += 1
        return super().append(notes)


def make_notes(n: int, prefix: str) -> list[Note]:
    now = to_ms(SystemClock().now())
    return [Note(id=f"turn_report:{prefix}:{i}", kind="turn_report", at_ms=now, sender="worker",
                 to="lead", text=TEXT.format(n=i) * 2, thread="conv-1", stage="stored")
            for i in range(n)]


def plain_lines(notes: list[Note]) -> list[bytes]:
    return [f'{{"id":"{n.id}","text":"{n.text}"}}\n'.encode() for n in notes]


def baseline_lines(path: Path, notes: list[Note]) -> float:
    lines = plain_lines(notes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    start = time.perf_counter()
    for line in lines:
        os.write(fd, line)
        os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def via_actor(directory: Path, notes: list[Note], batches: list[int]) -> float:
    file = CountingFile(directory, SystemClock())
    ref = Journal.start(file)
    proxy = ref.proxy()
    proxy.flush().get()  # started and opened
    start = time.perf_counter()
    for note in notes:
        proxy.record(note)
    proxy.flush().get()
    elapsed = time.perf_counter() - start
    ref.stop()
    batches.append(file.batches)
    return elapsed


def one_at_a_time(directory: Path, notes: list[Note]) -> float:
    file = JournalFile(directory, SystemClock())
    file.open()
    start = time.perf_counter()
    for note in notes:
        file.append([note])
    elapsed = time.perf_counter() - start
    file.close()
    return elapsed


def compaction(directory: Path, notes: list[Note]) -> float:
    file = JournalFile(directory, SystemClock(), compact_at_lines=10**9)
    file.open()
    for i in range(0, COMPACT_AT_LINES, 500):
        file.append(notes[i:i + 500])
    start = time.perf_counter()
    file.compact()
    elapsed = time.perf_counter() - start
    file.close()
    return elapsed


def baseline_rewrite(directory: Path, notes: list[Note]) -> float:
    directory.mkdir()
    data = b"".join(plain_lines(notes[-2000:]))
    start = time.perf_counter()
    fd = os.open(directory / "new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.replace(directory / "new", directory / "entries.jsonl")
    dir_fd = os.open(directory, os.O_RDONLY)
    os.fsync(dir_fd)
    os.close(dir_fd)
    return time.perf_counter() - start


def alternate(rounds: int, base: Callable[[int], float],
              ours: Callable[[int], float]) -> tuple[float, float]:
    a, b = zip(*((base(r), ours(r)) for r in range(rounds)))  # A B A B ...
    return statistics.median(a), statistics.median(b)


def show(seconds: float, count: int) -> str:
    return f"{seconds * 1000:,.1f} ms" + (f" ({count / seconds:,.0f}/s)" if count else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n, c, batches = args.notes, COMPACT_AT_LINES, []
    with tempfile.TemporaryDirectory(prefix="wakeline-journal-bench-") as tmp:
        root = Path(tmp)
        cases: list[tuple[str, int, Callable[[int], float], Callable[[int], float]]] = [
            (f"(a) actor, {n} told", n,
             lambda r: baseline_lines(root / f"a-base-{r}", make_notes(n, "a")),
             lambda r: via_actor(root / f"a-{r}", make_notes(n, f"a{r}"), batches)),
            (f"(b) append x1, {n}", n,
             lambda r: baseline_lines(root / f"b-base-{r}", make_notes(n, "b")),
             lambda r: one_at_a_time(root / f"b-{r}", make_notes(n, f"b{r}"))),
            (f"(c) compact {c} lines", 0,
             lambda r: baseline_rewrite(root / f"c-base-{r}", make_notes(c, "c")),
             lambda r: compaction(root / f"c-{r}", make_notes(c, f"c{r}"))),
        ]
        rows = [(name, count, *alternate(args.rounds, base, ours))
                for name, count, base, ours in cases]
    print(f"journal bench: {args.rounds} rounds, A B alternating, medians "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs)\n")
    print(f"| {'case':<24} | {'baseline':>20} | {'wakeline':>20} | {'ratio':>6} |")
    print(f"|{'-' * 26}|{'-' * 22}|{'-' * 22}|{'-' * 8}|")
    for name, count, base, ours in rows:
        print(f"| {name:<24} | {show(base, count):>20} | {show(ours, count):>20} "
              f"| {ours / base:>6.3f} |")
    print(f"\n(a) write+fsync batches per round: {batches}")


if __name__ == "__main__":
    main()
