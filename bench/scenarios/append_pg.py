"""``append --backend postgres``: PostgresStore next to its baselines, on one server.

The server is the one ``--dsn`` names, else a throwaway one started for the run
(:class:`bench.pgserver.ThrowawayPostgres` with ``fsync=True``, so every figure is of
durable commits) and stopped after it. Every system gets an empty database of its own
on that server (:class:`bench.pg.RunDatabases`, dropped at the end). Over ``--sessions``
desks (default 1,000), from ``--threads`` threads (the largest count given; default 16),
one event per call, each thread's ``j``-th call going to desk ``(t + j * threads) % desks``
as in the LMDB run:

- ``append sharedesk store postgres t=N``: ``PostgresStore.append`` (a pool of ``N``
  connections), and ``... hub postgres t=N`` through ``Hub.open("postgresql://...")``;
- ``append eventsourcing aggregate-recorder t=N``: the eventsourcing library's
  ``PostgresAggregateRecorder.insert_events``, one ``StoredEvent`` per call (the
  recorder whose guarantees match ours; see :mod:`bench.pg`);
- ``append eventsourcing application-recorder t=N``: its ``PostgresApplicationRecorder``
  (a total order over all streams under a table lock): context, no target;
- ``append psycopg raw t=N``: raw psycopg, one statement (one transaction) per append
  taking the sequence from the session's stream row (:class:`bench.pg.RawPsycopgAppends`);
- ``append psycopg raw +notify t=N``: the same statement calling ``pg_notify`` too (a
  ``PostgresStore`` append writes and notifies in one transaction): context, no target
  (what an in-transaction ``NOTIFY`` costs).

Each system first writes an untimed warm-up of one event per desk; the timed writes run
in ``--rounds`` rounds (default 3) taking turns, and each figure sums its rounds. Then
the cross-process view latency: this process (A) posts to a desk through its Hub while
a child process (B, :mod:`bench.pg_child`) with its own Hub on the same database waits
for each post, in ``AsyncHub.wait_turn`` and, separately, polling a warm ``hub.view``
every millisecond; from just before A's post call to the moment B has it, median and
p99 over ``--posts`` posts (default 300), one post at a time.

Then one thread alone appends ``min(1000, --events)`` times through the store and through
raw psycopg with ``pg_notify``, and the wall time and this process's CPU time per append
are reported (the client's share of the cost; the pools' threads idle meanwhile).

Targets: the store >= 1.0x eventsourcing's ``PostgresAggregateRecorder`` and >= 0.5x
raw psycopg; cross-process ``wait_turn`` latency median <= 50 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from bench.harness import BenchRun, ThreadedResult, merge_rounds
from bench.options import Option, settle
from bench.report import Measurement, Target, measurement, timed_calls

NAME = "append"

#: The desks' session ids (as in the LMDB run).
SESSION_FORMAT = "bench-{:05d}"

#: Seconds the parent waits for the child's answer to one post.
ANSWER_SECONDS = 60.0

CHECKOUT = Path(__file__).resolve().parents[2]


#: Options the PostgreSQL run shares with the LMDB run of ``append`` (same defaults).
SHARED = (
    Option("--sessions", 1000, "sessions written to", quick=20),
    Option("--events", 12_000, "events per measurement at most", quick=120),
    Option("--max-seconds", 8.0, "time budget per measurement", quick=2.0),
    Option(
        "--rounds",
        3,
        "rounds the headline (largest) thread count is split into, each system in turn, "
        "so the ratios share the machine's drift",
        quick=1,
    ),
    Option("--payload", 120, "message characters per event", quick=40),
    Option("--via", "both", "write path measured", choices=("store", "hub", "both")),
)

#: The options only the PostgreSQL run reads.
OWN = (
    Option(
        "--dsn",
        None,
        "PostgreSQL server to measure on, a postgresql:// URL of a role that may CREATE "
        "DATABASE (each system gets its own, dropped after the run); default: a throwaway "
        "server with fsync on, started and stopped by the bench",
    ),
    Option("--posts", 300, "posts timed for the cross-process view latency", quick=10),
)

#: Every option of the run: its thread count is the largest ``--threads`` given.
OPTIONS = (
    Option("--threads", [16], "writer thread counts, comma-separated", quick=[2]),
    *SHARED,
    *OWN,
)


@contextlib.contextmanager
def server_dsn(run_: BenchRun, given: str | None) -> Iterator[str | None]:
    """Yield the DSN of the server to measure on (``None``, with a note, when none)."""
    if given:
        yield given
        return
    from bench.pgserver import PostgresUnavailable, ThrowawayPostgres

    try:
        server = ThrowawayPostgres(fsync=True).start()
    except PostgresUnavailable as error:
        run_.note(f"PostgreSQL figures skipped: {error}")
        yield None
        return
    run_.note("PostgreSQL: a throwaway server (fsync on) started for the run, stopped after it")
    try:
        yield server.dsn
    finally:
        server.stop()


def postgres_available(given_dsn: str | None) -> bool:
    """Whether ``all`` can measure PostgreSQL: a DSN was given or a server can be started."""
    from bench.pgserver import find_bindir

    return bool(given_dsn) or find_bindir() is not None


class _Child:
    """Process B: ``python -m bench.pg_child``, its answers read by a thread into a queue."""

    def __init__(self, request: dict[str, Any]) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.pg_child", json.dumps(request)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=CHECKOUT,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="bench-pg-child-reader")
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)

    def answer(self) -> str:
        """Return the child's next line; raise ``RuntimeError`` if it exits or stalls."""
        try:
            line = self._lines.get(timeout=ANSWER_SECONDS)
        except queue.Empty:
            raise RuntimeError(f"process B gave no answer in {ANSWER_SECONDS:g} s") from None
        if line is None:
            self._process.wait()
            self._stderr.seek(0)
            tail = (self._stderr.read().strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"process B exited with {self._process.returncode}: {tail}")
        return line

    def close(self) -> None:
        """Wait for the child (killing it if it does not end) and the reader."""
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join()
        self._stderr.close()


def cross_process_latency(dsn: str, follow: str, posts: int) -> tuple[list[int], list[int]]:
    """Post ``posts`` times from this process while a child follows; return latencies.

    Args:
        dsn: The sharedesk database both Hubs open.
        follow: ``"wait_turn"`` or ``"view"`` (see :mod:`bench.pg_child`).
        posts: Posts timed, one at a time (the next once the child has seen the last).

    Returns:
        Per post: ns from just before the post call (A) to the child having it (B), and
        the post call's own ns.

    Raises:
        RuntimeError: The child failed or stalled (its last stderr line is the message).
    """
    from sharedesk import Hub, Person

    ann = Person(id="ann", label="Ann")
    desk = f"cross-process-{follow}"
    seen: list[int] = []
    calls: list[int] = []
    with Hub.open(dsn) as hub:
        child = _Child({"dsn": dsn, "desk": desk, "count": posts, "follow": follow})
        try:
            if child.answer() != "ready":
                raise RuntimeError("process B did not start as expected")
            for k in range(posts):
                t0 = time.monotonic_ns()
                hub.session(desk).post(ann, f"ping {k}")
                calls.append(time.monotonic_ns() - t0)
                word, index, at = child.answer().split()
                if (word, int(index)) != ("seen", k):
                    raise RuntimeError(f"process B answered {word} {index} to post {k}")
                seen.append(int(at) - t0)
        finally:
            child.close()
    return seen, calls


def _client_cpu(calls: int, op: Callable[[int], object]) -> tuple[float, float]:
    """Call ``op(i)`` ``calls`` times on this thread; return µs of wall and of CPU per call.

    The CPU is the whole process's (``time.process_time``), so run it with no other
    work in the process: it is what the client spends per call, the server excluded.
    """
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    for i in range(calls):
        op(i)
    return (
        (time.perf_counter_ns() - wall) / calls / 1000,
        (time.process_time_ns() - cpu) / calls / 1000,
    )


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    """Measure PostgresStore and its baselines on one server (see the module header)."""
    args = settle(args, OPTIONS, run_.quick)
    run_.note(RECORDER_NOTE)
    with server_dsn(run_, args.dsn) as dsn:
        if dsn is not None:
            _run_on(run_, args, dsn)
    _targets(run_, max(args.threads))


def _run_on(run_: BenchRun, args: argparse.Namespace, dsn: str) -> None:
    from bench.pg import EventsourcingAppends, RawPsycopgAppends, RunDatabases, spread

    sessions = [SESSION_FORMAT.format(i) for i in range(args.sessions)]
    threads: int = max(args.threads)
    payload = "x" * args.payload
    events_r, seconds_r = max(1, args.events // args.rounds), args.max_seconds / args.rounds
    records: list[dict[str, Any]] = []
    latencies: list[Measurement] = []
    closers: list[Callable[[], None]] = []

    from sharedesk import Agent, Event, Hub, PostgresStore, Text

    authors = [Agent(id=f"w{t}", label=f"writer {t}") for t in range(threads)]
    recorder_label = f"append eventsourcing aggregate-recorder t={threads}"
    recorder = f"eventsourcing PostgresAggregateRecorder t={threads}"
    systems: list[tuple[str, str, str, Callable[[int, float], ThreadedResult]]] = []

    def ours(kind: str, append: Callable[[str, list[Any]], object]) -> None:
        def write(session: int, thread: int) -> None:
            append(sessions[session], [Event(authors[thread], Text(payload))])

        def run(count: int, budget: float) -> ThreadedResult:
            return spread(sessions, threads, count, write, max_seconds=budget)

        note = f"{kind}; one event per call, durable commit"
        systems.append((f"append sharedesk {kind} postgres t={threads}", "sharedesk", note, run))

    def baseline(label: str, system: str, note: str, made: Any) -> None:
        def run(count: int, budget: float) -> ThreadedResult:
            return cast(ThreadedResult, made.run(threads, count, payload, max_seconds=budget))

        closers.append(made.close)
        systems.append((label, system, note, run))

    with contextlib.closing(RunDatabases(dsn)) as databases:
        try:
            ours_dsn = databases.create("sharedesk")
            store = PostgresStore(ours_dsn, min_connections=threads, max_connections=threads)
            closers.append(store.close)
            ours("store", store.append)
            if args.via in ("hub", "both"):
                hub = Hub.open(
                    databases.create("sharedesk_hub"),
                    min_connections=threads,
                    max_connections=threads,
                )
                closers.append(hub.close)
                ours("hub", lambda session_id, batch: hub.session(session_id).append(batch))
            baseline(
                recorder_label,
                "eventsourcing",
                "PostgresAggregateRecorder.insert_events, one StoredEvent per call",
                EventsourcingAppends(databases.create("es_aggregate"), sessions, pool_size=threads),
            )
            baseline(
                f"append eventsourcing application-recorder t={threads}",
                "eventsourcing",
                "PostgresApplicationRecorder (table lock, total order): context only",
                EventsourcingAppends(
                    databases.create("es_application"),
                    sessions,
                    pool_size=threads,
                    application=True,
                ),
            )
            baseline(
                f"append psycopg raw t={threads}",
                "psycopg-raw",
                "one statement per append: stream row UPDATE ... RETURNING + INSERT",
                RawPsycopgAppends(databases.create("psycopg_raw"), sessions, pool_size=threads),
            )
            raw_notify = RawPsycopgAppends(
                databases.create("psycopg_notify"), sessions, pool_size=threads, statements="notify"
            )
            baseline(
                f"append psycopg raw +notify t={threads}",
                "psycopg-raw",
                "the same statement calling pg_notify too (PostgresStore's protocol)",
                raw_notify,
            )
            acknowledged: dict[str, int] = {}
            for label, _system, _note, write in systems:  # the untimed warm-up
                with run_.progress(f"{label} warm-up", 1):
                    acknowledged[label] = write(len(sessions), 60.0).ops
            for _ in range(args.rounds):
                for label, system, note, write in systems:
                    with run_.progress(label, 1) as advance:
                        result = write(events_r, seconds_r)
                        advance(1)
                    acknowledged[label] += result.ops
                    records.append(
                        dict(
                            system=system,
                            label=label,
                            ops=result.ops,
                            seconds=result.seconds,
                            latencies_ns=result.latencies_ns,
                            params={
                                "threads": threads,
                                "sessions": len(sessions),
                                "backend": "postgres",
                                "series": label.rsplit(" t=", 1)[0],
                                "compare": "postgres",
                                **({"baseline": recorder} if label == recorder_label else {}),
                            },
                            note=note,
                        )
                    )
            store_label = f"append sharedesk store postgres t={threads}"
            infos = store.session_infos()
            run_.figures["postgres store events acknowledged / stored / sessions"] = (
                f"{acknowledged[store_label]} / {sum(i.last_sequence for i in infos)} / "
                f"{len(infos)}"
            )
            cpu_calls = min(1000, args.events)
            with run_.progress(f"client CPU per append, one thread ({cpu_calls} calls)", 1):
                ours_cpu = _client_cpu(
                    cpu_calls,
                    lambda i: store.append(
                        sessions[i % len(sessions)], [Event(authors[0], Text(payload))]
                    ),
                )
                raw_notify.payload = payload
                raw_cpu = _client_cpu(cpu_calls, lambda i: raw_notify.append(i % len(sessions)))
            run_.figures["postgres one thread, µs per append (wall / this process's CPU)"] = {
                "store": f"{ours_cpu[0]:.0f} / {ours_cpu[1]:.0f}",
                "raw psycopg +notify": f"{raw_cpu[0]:.0f} / {raw_cpu[1]:.0f}",
            }
            for follow in ("wait_turn", "view"):
                label = f"cross-process {follow} postgres"
                with run_.progress(f"{label} ({args.posts} posts)", 1) as advance:
                    seen, calls = cross_process_latency(ours_dsn, follow, args.posts)
                    advance(1)
                latencies.append(
                    timed_calls(
                        scenario=NAME,
                        operation="cross-process",
                        label=label,
                        latencies_ns=seen,
                        params={"backend": "postgres", "follow": follow},
                        note="from process A's post call to process B having it",
                    )
                )
                if follow == "wait_turn":
                    latencies.append(
                        timed_calls(
                            scenario=NAME,
                            operation="post",
                            label="cross-process post postgres (process A)",
                            latencies_ns=calls,
                            params={"backend": "postgres"},
                            note="the post call whose arrival in process B was timed",
                        )
                    )
        finally:
            for close in reversed(closers):
                close()
    for record in merge_rounds(records):
        run_.measurements.append(measurement(scenario=NAME, operation="append", **record))
    run_.measurements.extend(latencies)


#: Why the eventsourcing baseline is the aggregate recorder (printed with every run).
RECORDER_NOTE = (
    "eventsourcing baseline: PostgresAggregateRecorder, whose guarantees match "
    "PostgresStore's (one stream per originator, versions unique per stream by its primary "
    "key, no order across streams); its PostgresApplicationRecorder adds a total order "
    "over all streams under LOCK TABLE ... IN EXCLUSIVE MODE, which sharedesk does not "
    "promise (measured as context only)"
)


def _targets(run_: BenchRun, threads: int) -> None:
    ours = run_.rate(f"append sharedesk store postgres t={threads}")
    raw = run_.rate(f"append psycopg raw t={threads}")
    notify = run_.rate(f"append psycopg raw +notify t={threads}")
    run_.throughput_targets(
        f"append PostgresStore t={threads}",
        ours,
        (
            (
                "append-postgres-vs-eventsourcing",
                f"eventsourcing PostgresAggregateRecorder t={threads}",
                f"append eventsourcing aggregate-recorder t={threads}",
                1.0,
            ),
            (
                "append-postgres-vs-raw-psycopg",
                f"raw psycopg, one transaction per append t={threads}",
                f"append psycopg raw t={threads}",
                0.5,
            ),
        ),
    )
    run_.throughput_targets(
        f"append via Hub postgres t={threads}",
        run_.rate(f"append sharedesk hub postgres t={threads}"),
        (
            (
                "append-postgres-hub-vs-store",
                f"PostgresStore alone t={threads}",
                f"append sharedesk store postgres t={threads}",
                None,
            ),
        ),
    )
    if ours and raw and notify:
        run_.note(
            f"context: raw psycopg calling pg_notify in its statement runs at {notify / raw:.2f}x "
            f"raw psycopg without it; the store runs at {ours / notify:.2f}x the former"
        )
    latency = run_.find("cross-process wait_turn postgres")
    median_ms = None if latency is None or latency.median_us is None else latency.median_us / 1000
    run_.targets.append(
        Target(
            name="cross-process-view-latency-median",
            claim="post in process A until process B's AsyncHub.wait_turn has it, median",
            value=median_ms,
            bound=50.0,
            at_least=False,
            detail="not measured in this run"
            if latency is None
            else f"{latency.ops} posts, median {(latency.median_us or 0) / 1000:.2f} ms, "
            f"p99 {(latency.p99_us or 0) / 1000:.1f} ms",
            unit="ms",
        )
    )
    for figure, label in (
        ("cross_process_wait_turn_ms", "cross-process wait_turn postgres"),
        ("cross_process_view_polled_ms", "cross-process view postgres"),
    ):
        taken = run_.find(label)
        if taken is not None and taken.median_us is not None and taken.p99_us is not None:
            run_.figures[figure] = {
                "median": taken.median_us / 1000,
                "p99": taken.p99_us / 1000,
                "posts": taken.ops,
            }
