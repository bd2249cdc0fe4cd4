"""The machinery every scenario shares: the run context, threaded workloads, openers.

A scenario gets a :class:`BenchRun`: where to put its data (a fresh directory under the
run's work dir), a rich progress bar, and the lists its measurements, targets, figures
and notes go to. Workloads run on real threads released together by a barrier; each
operation's latency is taken with ``perf_counter_ns``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from bench.report import Measurement, Target, ratio_target
from sharedesk import Hub, LmdbStore


@dataclass
class BenchRun:
    """The context of one bench run, shared by the scenarios it runs.

    Attributes:
        console: Where progress and the summary go.
        workdir: The directory all data of the run lives under.
        quick: Tiny configuration (``--quick``): correctness of the harness, not speed.
        show_progress: Whether to draw progress bars.
        measurements: Measurements taken so far.
        targets: Targets checked so far.
        figures: Scenario-specific figures (counts, peaks).
        notes: Remarks for the reader (skipped baselines, substitutions).
    """

    console: Console
    workdir: Path
    quick: bool = False
    show_progress: bool = True
    measurements: list[Measurement] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _dirs: int = 0

    def fresh_dir(self, name: str) -> Path:
        """Return a new, empty directory under the work dir, named after ``name``."""
        self._dirs += 1
        path = self.workdir / f"{self._dirs:03d}-{name}"
        path.mkdir(parents=True, exist_ok=False)
        return path

    def note(self, text: str) -> None:
        """Record a note once (repeats are dropped)."""
        if text not in self.notes:
            self.notes.append(text)

    def find(self, label: str) -> Measurement | None:
        """Return the measurement labelled ``label``, if taken."""
        for m in self.measurements:
            if m.label == label:
                return m
        return None

    def rate(self, label: str) -> float | None:
        """Return the ops/s of the measurement labelled ``label``, if taken."""
        m = self.find(label)
        return None if m is None else m.ops_per_s

    def throughput_targets(
        self,
        subject: str,
        rate: float | None,
        baselines: Iterable[tuple[str, str, str, float | None]],
    ) -> None:
        """Add one target per baseline: ``rate`` at least ``bound`` times the baseline's.

        Args:
            subject: What ``rate`` measures (each target's claim).
            rate: Our events/s (``None`` when not measured).
            baselines: ``(target name, baseline's name, baseline's label, bound)``; a
                bound of ``None`` reports the ratio as context.
        """
        for name, baseline, label, bound in baselines:
            self.targets.append(
                ratio_target(
                    name=name,
                    claim=subject,
                    numerator=rate,
                    denominator=self.rate(label),
                    baseline=baseline,
                    bound=bound,
                    at_least=True,
                    what="events/s",
                )
            )

    def median(self, label: str) -> float | None:
        """Return the median µs of the measurement labelled ``label``, if taken."""
        m = self.find(label)
        return None if m is None else m.median_us

    @contextmanager
    def progress(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """Show a progress bar for one long step; yields ``advance(n)`` (thread-safe).

        Args:
            description: What the step does.
            total: Units of work in the step.
        """
        if not self.show_progress:
            yield lambda n: None
            return
        bar = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        with bar:
            task: TaskID = bar.add_task(description, total=total)

            def advance(n: int) -> None:
                bar.advance(task, n)

            yield advance


class ThreadedResult(msgspec.Struct, frozen=True):
    """What :func:`run_threads` measured.

    Attributes:
        ops: Operations completed by all threads.
        seconds: Wall time from the release of the threads to the last one finishing.
        latencies_ns: Every operation's latency.
    """

    ops: int
    seconds: float
    latencies_ns: list[int]


def merge_rounds(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sum the rounds of each label into one record (ops, seconds, latencies, rounds).

    Records keep their first round's other fields; labels keep their first order.
    """
    merged: dict[str, dict[str, Any]] = {}
    for record in records:
        known = merged.get(record["label"])
        if known is None:
            merged[record["label"]] = {
                **record,
                "latencies_ns": list(record.get("latencies_ns", ())),
                "params": {**record["params"], "rounds": 1},
            }
        else:
            known["ops"] += record["ops"]
            known["seconds"] += record["seconds"]
            known["latencies_ns"].extend(record.get("latencies_ns", ()))
            known["params"]["rounds"] += 1
    return list(merged.values())


def run_threads(
    threads: int,
    ops_per_thread: int,
    op: Callable[[int, int], None],
    *,
    max_seconds: float,
    advance: Callable[[int], None] = lambda n: None,
) -> ThreadedResult:
    """Run ``op(thread_index, op_index)`` on ``threads`` threads released together.

    Each thread stops after ``ops_per_thread`` operations or once ``max_seconds`` have
    passed since the release, whichever comes first. The first exception raised by an
    operation is re-raised here after every thread has stopped.

    Args:
        threads: Number of worker threads.
        ops_per_thread: Operations each thread performs at most.
        op: The operation.
        max_seconds: Time budget of the whole step.
        advance: Progress callback, called with completed counts.

    Returns:
        The completed operations, wall time, and per-operation latencies.
    """
    barrier = threading.Barrier(threads + 1)
    latencies: list[list[int]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    stop = threading.Event()
    start_ns = [0]

    def worker(index: int) -> None:
        mine = latencies[index]
        barrier.wait()
        deadline = start_ns[0] + int(max_seconds * 1e9)
        done = 0
        try:
            for j in range(ops_per_thread):
                if stop.is_set():
                    break
                t0 = time.perf_counter_ns()
                op(index, j)
                t1 = time.perf_counter_ns()
                mine.append(t1 - t0)
                done += 1
                if done % 32 == 0:
                    advance(32)
                    if t1 > deadline:
                        break
        except BaseException as exc:
            errors.append(exc)
            stop.set()
        advance(done % 32)

    workers = [
        threading.Thread(target=worker, args=(i,), name=f"bench-worker-{i}", daemon=True)
        for i in range(threads)
    ]
    for w in workers:
        w.start()
    start_ns[0] = time.perf_counter_ns()
    barrier.wait()
    for w in workers:
        w.join()
    seconds = (time.perf_counter_ns() - start_ns[0]) / 1e9
    if errors:
        raise errors[0]
    merged = [ns for per_thread in latencies for ns in per_thread]
    return ThreadedResult(ops=len(merged), seconds=seconds, latencies_ns=merged)


def time_calls(
    calls: int, fn: Callable[[int], object], advance: Callable[[int], None] = lambda n: None
) -> tuple[float, list[int]]:
    """Call ``fn(i)`` ``calls`` times on this thread; return wall seconds and latencies."""
    latencies: list[int] = []
    start = time.perf_counter_ns()
    for i in range(calls):
        t0 = time.perf_counter_ns()
        fn(i)
        latencies.append(time.perf_counter_ns() - t0)
        if i % 16 == 15:
            advance(16)
    advance(calls % 16)
    return (time.perf_counter_ns() - start) / 1e9, latencies


def calling(fn: Callable[..., object], *args: Any) -> Callable[[int], object]:
    """Return ``lambda i: fn(*args)``, binding the arguments now (for :func:`time_calls`)."""
    return lambda _: fn(*args)


def open_store(path: Path, durability: str) -> LmdbStore:
    """Open an ``LmdbStore`` at ``path``.

    Args:
        path: The store directory (created if missing).
        durability: ``"durable"`` or ``"relaxed"``.

    Raises:
        ValueError: Any other durability.
    """
    if durability not in ("durable", "relaxed"):
        raise ValueError(f"durability must be durable or relaxed, got {durability!r}")
    return LmdbStore(path, durability="durable" if durability == "durable" else "relaxed")


def open_hub(path: Path | None, durability: str, **options: Any) -> Hub:
    """Open a ``Hub`` on ``path`` (``None``: in memory).

    Args:
        path: The store directory, or ``None`` for an in-memory Hub.
        durability: ``"durable"`` or ``"relaxed"`` (ignored in memory).
        options: Further ``Hub.open`` options (``max_active``, ...).
    """
    if path is None:
        return Hub.open(None, **options)
    return Hub.open(path, durability=durability, **options)
