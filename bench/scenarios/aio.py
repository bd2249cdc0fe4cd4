"""``async``: many coroutines appending through ``AsyncHub``, next to its baselines.

Durable LMDB, ``--sessions`` desks (default 1,000), one event per call. In each of
``--rounds`` rounds, side by side:

- ``async sharedesk AsyncHub c=N``: ``N`` coroutines (default 1,000) on one event loop,
  coroutine ``c``'s ``j``-th append going to desk ``(c + j * N) % desks``; a 1 ms
  heartbeat on the same loop records its stalls (and alone on an idle loop, just
  before, what the machine's other load adds);
- ``async lmdb-raw 16/txn``: raw py-lmdb, 16 events per fsync'd transaction, one id
  entry each (:func:`bench.baselines.raw_lmdb_appends`, the bench's baseline);
- ``async sharedesk store t=16``: the threaded ``LmdbStore`` from 16 threads;
- ``async openai-agents SQLiteSession c=N``: ``SQLiteSession.add_items`` from ``N``
  coroutines on one loop, in a child process (skipped, with a note, when openai-agents
  is not installed).

Each system writes one database for the whole run after an untimed warm-up of one
event per desk; figures sum the rounds. Then ``wait_turn`` wake-up latency: one task
waits in ``wait_turn`` while another posts to the desk; the time from the post call to
the waiter's return (which includes the post's durable commit and a turn plan), median
and p99. Targets: AsyncHub >= 1.0x raw py-lmdb (16 events/txn), >= 2x the threaded
store, >= 10x SQLiteSession; longest stall <= 50 ms and p99 <= 10 ms. The threaded
store's own ratio to raw py-lmdb (16 events/txn) is reported as context.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import time
from pathlib import Path
from typing import Any

from bench import baselines
from bench.harness import BenchRun, merge_rounds, open_store, run_threads
from bench.options import Option, settle
from bench.report import Target, measurement, percentile, timed_calls

NAME = "async"
HELP = "AsyncHub: 1,000 coroutines appending, loop stalls, wait_turn wake-up latency"

#: The heartbeat's sleep, in seconds.
BEAT = 0.001
#: The p99 loop stall target, in seconds.
P99_BOUND = 0.010

#: The name of the baseline the throughput ratios are taken against.
RAW_LMDB_16 = "raw py-lmdb (16 events/txn)"


OPTIONS = (
    Option("--sessions", 1000, "desks written to", quick=20),
    Option("--coroutines", 1000, "appending coroutines", quick=20),
    Option("--threads", 16, "threads of the store baseline", quick=2),
    Option("--events", 30_000, "events per system at most", quick=200),
    Option("--max-seconds", 12.0, "time budget per system", quick=2.0),
    Option("--rounds", 3, "rounds alternating the systems", quick=1),
    Option("--payload", 120, "message characters per event", quick=40),
    Option("--wakeups", 300, "wait_turn wake-ups timed", quick=10),
)


class _GcPauses:
    """Records the collector's pauses while active (``gc.callbacks``), by generation."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, int]] = []
        self._started = 0.0
        self._active = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if not self._active:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((time.perf_counter() - self._started, int(info["generation"])))

    def __enter__(self) -> _GcPauses:
        gc.callbacks.append(self._callback)
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._active = False
        gc.callbacks.remove(self._callback)


class _Heartbeat:
    """A task that sleeps ``BEAT`` in a loop and records how late each wake-up came.

    Per interval: ``late`` (wall time less ``BEAT``), ``busy`` (the loop thread's CPU)
    and ``process`` (every thread's CPU), which tell a loop running from one waiting for
    the GIL and from a process off the CPUs.
    """

    def __init__(self) -> None:
        self.late: list[float] = []
        self.busy: list[float] = []
        self.process: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        last = time.perf_counter()
        last_cpu = time.thread_time()
        last_process = time.process_time()
        while True:
            await asyncio.sleep(BEAT)
            now = time.perf_counter()
            cpu = time.thread_time()
            process = time.process_time()
            self.late.append(max(0.0, now - last - BEAT))
            self.busy.append(cpu - last_cpu)
            self.process.append(process - last_process)
            last, last_cpu, last_process = now, cpu, process

    def start(self) -> None:
        self._task = asyncio.create_task(self._beat())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def _idle(seconds: float) -> list[float]:
    """Run the heartbeat alone for ``seconds``: the stalls the machine adds by itself."""
    heartbeat = _Heartbeat()
    heartbeat.start()
    await asyncio.sleep(seconds)
    await heartbeat.stop()
    return heartbeat.late


async def _async_appends(
    hub: Any,
    sessions: list[str],
    *,
    coroutines: int,
    events: int,
    payload: str,
    max_seconds: float,
    heartbeat: _Heartbeat | None,
) -> tuple[int, float, list[int]]:
    from sharedesk import Agent, Event, Text

    authors = [Agent(id=f"c{c}", label=f"coroutine {c}") for c in range(coroutines)]
    per = -(-events // coroutines)
    latencies: list[int] = []

    async def writer(c: int, deadline: float) -> None:
        author = authors[c]
        for j in range(per):
            t0 = time.perf_counter_ns()
            await hub.append(
                sessions[(c + j * coroutines) % len(sessions)], [Event(author, Text(payload))]
            )
            latencies.append(time.perf_counter_ns() - t0)
            if time.perf_counter() > deadline:
                return

    if heartbeat is not None:
        heartbeat.start()
    start = time.perf_counter()
    await asyncio.gather(*(writer(c, start + max_seconds) for c in range(coroutines)))
    seconds = time.perf_counter() - start
    if heartbeat is not None:
        await heartbeat.stop()
    return len(latencies), seconds, latencies


async def _wakeups(hub: Any, count: int) -> tuple[list[int], list[int]]:
    """Time ``count`` wait_turn wake-ups; return (wake-up, post) latencies in ns."""
    from sharedesk import Agent, Person

    ann, bot = Person(id="ann", label="Ann"), Agent(id="bot", label="Bot")
    desk = "wait-turn-desk"
    await hub.post(desk, ann, "warm")
    await (await hub.turn(desk, bot)).commit()
    wake: list[int] = []
    posts: list[int] = []
    for i in range(count):
        waiter = asyncio.create_task(hub.wait_turn(desk, bot, timeout=30))
        await asyncio.sleep(0.001)  # let it plan and go to sleep
        t0 = time.perf_counter_ns()
        await hub.post(desk, ann, f"ping {i}")
        posts.append(time.perf_counter_ns() - t0)
        turn = await waiter
        wake.append(time.perf_counter_ns() - t0)
        await turn.commit()
    return wake, posts


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)
    from sharedesk import Agent, AsyncHub, Event, Text

    sessions = [f"bench-{i:05d}" for i in range(args.sessions)]
    payload = "x" * args.payload
    events_r, seconds_r = max(1, args.events // args.rounds), args.max_seconds / args.rounds
    records: list[dict[str, Any]] = []
    late: list[float] = []
    busy: list[float] = []
    process: list[float] = []
    idle_late: list[float] = []
    collector = _GcPauses()
    async_label = f"async sharedesk AsyncHub c={args.coroutines}"
    store_label = f"async sharedesk store t={args.threads}"
    raw_label = "async lmdb-raw 16/txn"
    agents_label = f"async openai-agents SQLiteSession c={args.coroutines}"

    raw_dir = run_.fresh_dir("async-raw-16")
    baselines.raw_lmdb_appends(
        raw_dir, sessions, events=len(sessions), per_txn=16, payload=payload, max_seconds=60.0
    )
    store = open_store(run_.fresh_dir("async-store") / "store", "durable")
    writers = [Agent(id=f"w{t}", label=f"writer {t}") for t in range(args.threads)]

    def store_op(thread: int, j: int) -> None:
        store.append(
            sessions[(thread + j * args.threads) % len(sessions)],
            [Event(writers[thread], Text(payload))],
        )

    agents_dir = run_.fresh_dir("async-agents")
    agents_request: dict[str, Any] = {
        "kind": "async_append",
        "path": str(agents_dir / "agents.db"),
        "sessions": sessions,
        "coroutines": args.coroutines,
        "events": len(sessions),
        "payload": payload,
        "max_seconds": 60.0,
    }
    agents = baselines.agents_available()
    if not agents:
        run_.note("openai-agents not installed: its SQLiteSession baseline skipped")

    runner = asyncio.Runner()
    hub: Any = None
    try:
        hub = runner.run(_open(AsyncHub, run_.fresh_dir("async-hub") / "store"))
        runner.run(
            _async_appends(
                hub,
                sessions,
                coroutines=min(args.coroutines, len(sessions)),
                events=len(sessions),
                payload=payload,
                max_seconds=60.0,
                heartbeat=None,
            )
        )
        run_threads(args.threads, -(-len(sessions) // args.threads), store_op, max_seconds=60.0)

        def timed_round(heartbeat: _Heartbeat) -> tuple[int, float, list[int]]:
            """One timed round of AsyncHub appends, watched by ``heartbeat``."""
            return runner.run(
                _async_appends(
                    hub,
                    sessions,
                    coroutines=args.coroutines,
                    events=events_r,
                    payload=payload,
                    max_seconds=seconds_r,
                    heartbeat=heartbeat,
                )
            )

        if agents:
            baselines.run_agents_child(agents_request)  # the warm-up
        for _ in range(args.rounds):
            with run_.progress(raw_label, events_r) as advance:
                written, seconds = baselines.raw_lmdb_appends(
                    raw_dir,
                    sessions,
                    events=events_r,
                    per_txn=16,
                    payload=payload,
                    max_seconds=seconds_r,
                    advance=advance,
                )
            records.append(
                dict(
                    system="lmdb-raw",
                    label=raw_label,
                    ops=written,
                    seconds=seconds,
                    params={"per_txn": 16, "sessions": len(sessions), "baseline": RAW_LMDB_16},
                    note="one writer thread, sync=True, one idempotency row per event",
                )
            )
            idle_late.extend(runner.run(_idle(min(1.0, seconds_r / 4))))
            heartbeat = _Heartbeat()
            with run_.progress(async_label, 1) as advance, collector:
                ops, seconds, latencies = timed_round(heartbeat)
                advance(1)
            late.extend(heartbeat.late)
            busy.extend(heartbeat.busy)
            process.extend(heartbeat.process)
            records.append(
                dict(
                    system="sharedesk",
                    label=async_label,
                    ops=ops,
                    seconds=seconds,
                    latencies_ns=latencies,
                    params={"coroutines": args.coroutines, "sessions": len(sessions)},
                    note="durable; latency per append call",
                )
            )
            with run_.progress(store_label, events_r) as advance:
                result = run_threads(
                    args.threads,
                    -(-events_r // args.threads),
                    store_op,
                    max_seconds=seconds_r,
                    advance=advance,
                )
            records.append(
                dict(
                    system="sharedesk",
                    label=store_label,
                    ops=result.ops,
                    seconds=result.seconds,
                    latencies_ns=result.latencies_ns,
                    params={"threads": args.threads, "sessions": len(sessions)},
                    note="LmdbStore.append from threads, durable",
                )
            )
            if agents:
                with run_.progress(agents_label + " (child process)", 1) as advance:
                    figures = baselines.run_agents_child(
                        {**agents_request, "events": events_r, "max_seconds": seconds_r}
                    )
                    advance(1)
                records.append(
                    dict(
                        system="openai-agents",
                        label=agents_label,
                        ops=figures.ops,
                        seconds=figures.seconds,
                        latencies_ns=figures.latencies_ns,
                        params={"coroutines": args.coroutines},
                        note="add_items, one item per call, in a child process",
                    )
                )
        # An extra round, not a target: what an application that freezes its heap after
        # start-up (gc.freeze(), the application's call; sharedesk never changes the
        # collector's settings) gets. Frozen objects are no longer scanned by the
        # collector's passes, which then cost what the objects made since cost.
        frozen = _Heartbeat()
        gc.collect()
        gc.freeze()
        try:
            with run_.progress(async_label + " (extra round, gc.freeze)", 1) as advance:
                timed_round(frozen)
                advance(1)
        finally:
            gc.unfreeze()
        with run_.progress("async wait_turn wake-ups", 1) as advance:
            wake, posts = runner.run(_wakeups(hub, args.wakeups))
            advance(1)
    finally:
        if hub is not None:
            runner.run(hub.close())
        runner.close()
        store.close()

    for record in merge_rounds(records):
        run_.measurements.append(measurement(scenario=NAME, operation="append", **record))
    for operation, label, timed, note in (
        (
            "wait_turn",
            "async wait_turn wake-up",
            wake,
            "from the post call in another task to wait_turn's return",
        ),
        ("post", "async post (beside wait_turn)", posts, "the post whose wake-up was timed"),
    ):
        run_.measurements.append(
            timed_calls(
                scenario=NAME,
                operation=operation,
                label=label,
                latencies_ns=timed,
                params={"durability": "durable"},
                note=note,
            )
        )

    ordered = sorted(late)
    stalls = _stalls_ms(ordered)
    stall_max, stall_p99 = stalls["max"], stalls["p99"]
    # What the loop did in the stalls over the p99 bound: its own thread on a CPU for at
    # least half the interval (its tasks, the collector), else another thread of the
    # process (the GIL held elsewhere), else the whole process off the CPUs.
    over = [
        (wait + BEAT, cpu, all_cpu)
        for wait, cpu, all_cpu in zip(late, busy, process, strict=True)
        if wait > P99_BOUND
    ]
    running = sum(1 for gap, cpu, _ in over if cpu >= gap / 2)
    elsewhere = sum(1 for gap, cpu, all_cpu in over if cpu < gap / 2 <= all_cpu - cpu)
    run_.figures["async_loop_stall_ms"] = {
        **stalls,
        "over_p99_bound": len(over),
        "over_p99_bound_loop_running": running,
        "over_p99_bound_other_thread_running": elsewhere,
    }
    if ordered:
        run_.note(
            f"context: {len(over)} of {len(ordered):,} heartbeats came more than "
            f"{P99_BOUND * 1000:g} ms late (the p99 target allows "
            f"{len(ordered) - -(-99 * len(ordered) // 100)}); in {running} of them the loop's "
            f"thread ran for at least half the interval (tasks, the collector), in "
            f"{elsewhere} another thread of the process did (the GIL held elsewhere), in "
            f"the other {len(over) - running - elsewhere} the process was mostly off the "
            f"CPUs (the machine's other load)"
        )
    frozen_stalls = _stalls_ms(sorted(frozen.late))
    if frozen_stalls["heartbeats"]:
        run_.figures["async_loop_stall_ms_gc_frozen_extra"] = frozen_stalls
        run_.note(
            f"extra, not a target: one more AsyncHub round after the application called "
            f"gc.freeze() (sharedesk never does): loop stall p99 "
            f"{frozen_stalls['p99']:.1f} ms, longest {frozen_stalls['max']:.1f} ms, "
            f"{frozen_stalls['heartbeats']:,} heartbeats"
        )
    idle = _stalls_ms(sorted(idle_late))
    if idle["heartbeats"]:
        run_.figures["async_idle_loop_stall_ms"] = idle
        run_.note(
            f"context: the same heartbeat on an idle loop, in the same run, was late by "
            f"{idle['max']:.1f} ms at most and {idle['p99']:.1f} ms at p99 (what the "
            f"machine's other load costs the loop by itself)"
        )
    if collector.pauses:
        longest, generation = max(collector.pauses)
        full = [p for p, g in collector.pauses if g == 2]
        run_.figures["async_gc_pauses"] = {
            "count": len(collector.pauses),
            "longest_ms": longest * 1000,
            "longest_generation": generation,
            "total_ms": sum(p for p, _ in collector.pauses) * 1000,
            "generation_2": len(full),
        }
        run_.note(
            f"context: the garbage collector paused the loop {len(collector.pauses)} times "
            f"during the AsyncHub rounds, longest {longest * 1000:.1f} ms (generation "
            f"{generation}); {len(full)} full (generation 2) passes"
        )
    wake_sorted = sorted(wake)
    run_.figures["async_wait_turn_wakeup_us"] = {
        "median": percentile(wake_sorted, 0.5) / 1000 if wake_sorted else None,
        "p99": percentile(wake_sorted, 0.99) / 1000 if wake_sorted else None,
    }

    run_.throughput_targets(
        f"append AsyncHub durable c={args.coroutines}",
        run_.rate(async_label),
        (
            ("async-append-vs-raw-lmdb", RAW_LMDB_16, raw_label, 1.0),
            (
                "async-append-vs-threaded-store",
                f"threaded LmdbStore t={args.threads}",
                store_label,
                2.0,
            ),
            (
                "async-append-vs-sqlite-session",
                f"openai-agents SQLiteSession c={args.coroutines}",
                agents_label,
                10.0,
            ),
        ),
    )
    run_.throughput_targets(
        f"append threaded LmdbStore durable t={args.threads}",
        run_.rate(store_label),
        (("async-threaded-store-vs-raw-lmdb", RAW_LMDB_16, raw_label, None),),
    )
    for name, claim, value, bound in (
        ("async-loop-stall-max", "longest loop stall during the AsyncHub appends", stall_max, 50.0),
        (
            "async-loop-stall-p99",
            "p99 loop stall during the AsyncHub appends",
            stall_p99,
            P99_BOUND * 1000,
        ),
    ):
        run_.targets.append(
            Target(
                name=name,
                claim=claim,
                value=value,
                bound=bound,
                at_least=False,
                detail=f"{len(ordered):,} heartbeats of {BEAT * 1000:g} ms",
                unit="ms",
            )
        )


def _stalls_ms(ordered: list[float]) -> dict[str, Any]:
    """Longest, p99 and median of sorted stalls (in seconds) in ms, and their count."""
    if not ordered:
        return {"max": None, "p99": None, "median": None, "heartbeats": 0}
    return {
        "max": ordered[-1] * 1000,
        "p99": percentile(ordered, 0.99) * 1000,
        "median": percentile(ordered, 0.5) * 1000,
        "heartbeats": len(ordered),
    }


async def _open(cls: Any, path: Path) -> Any:
    return await cls.open(path, durability="durable")
