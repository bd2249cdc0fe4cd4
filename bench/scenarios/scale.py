"""``scale``: touch many sessions through a Hub with ``max_active``; peak threads and RSS.

Sessions are touched one after another (an append of one event, or ``--touch read`` for
the operator's ``hub.view``), so every touch past ``max_active`` passivates the least recently
used actor. Sampled during the run: Python threads (every touch), the Hub's live actors and
resident memory (every 500 touches and at the end). The targets hold the peak thread
count to ``max_active`` plus a small constant (:data:`THREAD_SLACK` here) above the
threads alive before the Hub opened (``scale-peak-threads``), and resident memory under
1 GiB (``scale-peak-memory``).
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time
from typing import TYPE_CHECKING

import msgspec

from bench.harness import BenchRun, open_hub
from bench.options import Option, settle
from bench.report import Target, measurement

if TYPE_CHECKING:
    from sharedesk import Hub

NAME = "scale"
HELP = "touch N sessions through a Hub with max_active: peak actors, threads, RSS"

#: Threads allowed above ``max_active`` (store writer, supervisor, timers...).
THREAD_SLACK = 16
SAMPLE_EVERY = 500


OPTIONS = (
    Option("--sessions", 100_000, "sessions touched", quick=300),
    Option("--max-active", 1024, "Hub max_active", quick=16),
    Option(
        "--touch",
        "write",
        "append one event, or read the operator's view",
        choices=("write", "read"),
    ),
    Option(
        "--durability",
        "relaxed",
        "store durability (default {default}: this measures actors, not fsync)",
        choices=("durable", "relaxed"),
    ),
)


def rss_mib() -> float:
    """Return this process's resident memory in MiB (from /proc, else peak rusage)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def live_actors(hub: Hub) -> int:
    """Return how many actors the Hub holds (running or ready to run)."""
    return hub.stats().active


class Touched(msgspec.Struct, frozen=True):
    """What touching many sessions cost: threads, actors and memory before and at peak."""

    sessions: int
    max_active: int
    threads_before: int
    peak_threads: int
    threads_after: int
    peak_actors: int
    rss_before: float
    peak_rss: float


def touch_sessions(
    run_: BenchRun, scenario: str, sessions: int, max_active: int, touch: str, durability: str
) -> Touched:
    """Touch ``sessions`` sessions one after another through a fresh Hub; record the run.

    Adds one ``touch`` measurement (scenario ``scenario``) and returns the samples.
    """
    from sharedesk import Event, Operator, Text

    threads_before = threading.active_count()
    rss_before = rss_mib()
    hub = open_hub(run_.fresh_dir(scenario) / "store", durability, max_active=max_active)
    peak_threads = threading.active_count()
    peak_actors = live_actors(hub)
    peak_rss = rss_mib()
    latencies: list[int] = []
    author = Operator()
    try:
        with run_.progress(f"touch {sessions:,} sessions", sessions) as advance:
            start = time.perf_counter()
            for i in range(sessions):
                session_id = f"s{i:07d}"
                t0 = time.perf_counter_ns()
                if touch == "write":
                    hub.session(session_id).append([Event(author, Text("hello"))])
                else:
                    hub.view(session_id, author)
                latencies.append(time.perf_counter_ns() - t0)
                peak_threads = max(peak_threads, threading.active_count())
                if i % SAMPLE_EVERY == SAMPLE_EVERY - 1:
                    peak_actors = max(peak_actors, live_actors(hub))
                    peak_rss = max(peak_rss, rss_mib())
                    advance(SAMPLE_EVERY)
            seconds = time.perf_counter() - start
            advance(sessions % SAMPLE_EVERY)
        peak_actors = max(peak_actors, live_actors(hub))
        peak_rss = max(peak_rss, rss_mib())
    finally:
        hub.close()
    threads_after = threading.active_count()

    run_.measurements.append(
        measurement(
            scenario=scenario,
            system="sharedesk",
            operation="touch",
            label=f"{scenario} touch ({touch}) max_active={max_active}",
            ops=sessions,
            seconds=seconds,
            latencies_ns=latencies,
            params={"sessions": sessions, "max_active": max_active, "durability": durability},
            note="one append (write) or hub.view (read) per session, one after another",
        )
    )
    return Touched(
        sessions=sessions,
        max_active=max_active,
        threads_before=threads_before,
        peak_threads=peak_threads,
        threads_after=threads_after,
        peak_actors=peak_actors,
        rss_before=rss_before,
        peak_rss=peak_rss,
    )


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)
    touched = touch_sessions(
        run_, NAME, args.sessions, args.max_active, args.touch, args.durability
    )
    threads_before, peak_threads = touched.threads_before, touched.peak_threads
    rss_before, peak_rss = touched.rss_before, touched.peak_rss
    run_.figures["scale threads before Hub / peak / after close"] = (
        f"{threads_before} / {peak_threads} / {touched.threads_after}"
    )
    run_.figures["scale peak live actors"] = touched.peak_actors
    run_.figures["scale RSS before / peak (MiB)"] = f"{rss_before:,.0f} / {peak_rss:,.0f}"
    run_.targets.append(
        Target(
            name="scale-peak-threads",
            claim=f"{args.sessions:,} sessions, max_active={args.max_active}: peak threads",
            value=float(peak_threads - threads_before),
            bound=float(args.max_active + THREAD_SLACK),
            at_least=False,
            detail=(
                f"peak {peak_threads} - {threads_before} before; bound max_active + {THREAD_SLACK}"
            ),
            unit=" threads",
        )
    )
    run_.targets.append(
        Target(
            name="scale-peak-memory",
            claim=f"{args.sessions:,} sessions, max_active={args.max_active}: peak resident memory",
            value=peak_rss,
            bound=1024.0,
            at_least=False,
            detail=f"sampled every {SAMPLE_EVERY} touches; {rss_before:,.0f} MiB before",
            unit=" MiB",
        )
    )
