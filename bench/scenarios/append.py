"""``append``: sessions x writer threads x events per call, through the store or the Hub.

Each writer thread appends to the sessions in turn (thread ``t``'s ``j``-th call goes to
session ``(t + j * threads) % sessions``), so the writes are spread as in a busy
deployment. The same writes are done by the baselines of :mod:`bench.baselines`. The
headline (largest) thread count runs in ``--rounds`` rounds, each one raw py-lmdb, then
sharedesk, then sqlite (and openai-agents), and each figure sums its rounds: a shared
machine's disk and CPU drift over minutes, and alternating spreads that drift over every
system instead of handing it to whichever ran last. The rounds are time slices of one
workload: each system keeps its database (and sharedesk its open store or Hub) from one
round to the next, so the figures are those of one run of ``--events`` events. An LMDB
commit costs more as the tree grows (a group's keys land on more distinct pages), so
small fresh databases would flatter the page-bound raw baselines. A note gives the
store-vs-raw-lmdb ratio of each round as well, so one run shows how far the machine
drifted. Headlines, at the largest thread count and durable:

- store >= 0.4x raw py-lmdb at 16 events per durable transaction;
- store >= 1.2x sqlite3 WAL ``synchronous=FULL``, one commit per append;
- via the Hub >= 0.7x the store alone.

Every system, baselines included, first writes an untimed warm-up of one event per
session, so all of them time their writes on the same shape of database, and both
sharedesk figures are steady-state throughput (the first touch of a session through a Hub
starts its actor: ``scale`` measures that).

``--backend postgres`` measures ``PostgresStore`` instead, next to the eventsourcing
library's PostgreSQL recorder and raw psycopg on one server, and the cross-process view
latency (:mod:`bench.scenarios.append_pg`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import baselines
from bench.harness import (
    BenchRun,
    ThreadedResult,
    merge_rounds,
    open_hub,
    open_store,
    run_threads,
)
from bench.options import Option, settle
from bench.report import measurement, ratio_target
from bench.scenarios import append_pg

NAME = "append"
HELP = "append throughput and latency: sessions x writer threads x events per call"

RAW_BATCHES = (1, 16, 1000)

#: The name of the baseline the headline ratios are taken against.
RAW_LMDB_16 = "raw py-lmdb (16 events/txn)"


#: The options of the LMDB and in-memory runs; ``--backend postgres`` reads those of
#: :data:`bench.scenarios.append_pg.OPTIONS` (the same flags, and ``--dsn`` and ``--posts``).
OPTIONS = (
    Option("--threads", [1, 4, 16], "writer thread counts, comma-separated", quick=[1, 2]),
    Option("--per-call", 1, "events per append call"),
    Option(
        "--durability",
        "durable",
        "store durability",
        choices=("durable", "relaxed", "both"),
    ),
    Option(
        "--backend",
        "lmdb",
        "store backend measured (default {default}; memory has no durability to choose; "
        "postgres: PostgresStore next to the eventsourcing library and raw psycopg, and the "
        "cross-process view latency, on one server)",
        choices=("lmdb", "memory", "both", "postgres"),
    ),
    Option("--no-baselines", False, "measure sharedesk only (no ratios)"),
    *append_pg.SHARED,
    *append_pg.OWN,
)


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    if args.backend == "postgres":
        append_pg.run(run_, args)
        return
    args = settle(args, OPTIONS, run_.quick)
    sessions = [f"bench-{i:05d}" for i in range(args.sessions)]
    events: int = args.events
    max_seconds: float = args.max_seconds
    payload = "x" * args.payload
    modes = ["durable", "relaxed"] if args.durability == "both" else [args.durability]
    if args.backend == "memory":
        modes = ["memory"]
    elif args.backend == "both":
        modes.append("memory")
    paths = ["store", "hub"] if args.via == "both" else [args.via]
    headline = max(args.threads)

    records: list[dict[str, Any]] = []

    from sharedesk import Agent, Event, MemoryStore, Text

    # Each system writes one database for the whole run: the headline's rounds are time
    # slices of one workload, not separate small ones (an LMDB commit costs more as the
    # tree grows, so fresh small databases would flatter the page-bound raw baselines).
    # Every system first writes one untimed event per session, so all start timing from
    # the same shape of database (and a Hub has started every session's actor).
    dirs: dict[str, Path] = {}
    targets: dict[str, tuple[Any, Callable[[str, list[Any]], Any]]] = {}

    def place(name: str) -> tuple[Path, bool]:
        """Return the directory of ``name`` and whether it was just created."""
        fresh = name not in dirs
        if fresh:
            dirs[name] = run_.fresh_dir(name)
        return dirs[name], fresh

    def warm_up(threads: int, op: Callable[[int, int], None]) -> None:
        run_threads(threads, -(-len(sessions) // threads), op, max_seconds=60.0)

    def sharedesk_writes(
        path_kind: str, mode: str, threads: int, events: int, max_seconds: float
    ) -> None:
        label = f"append sharedesk {path_kind} {mode} t={threads}"
        authors = [Agent(id=f"w{t}", label=f"writer {t}") for t in range(threads)]
        directory, fresh = place(f"append-{path_kind}-{mode}-t{threads}")
        if fresh:
            target: Any
            if path_kind == "store":
                target = MemoryStore() if mode == "memory" else open_store(directory, mode)
                append = target.append
            else:
                target = open_hub(None if mode == "memory" else directory, mode)

                def append(session_id: str, batch: list[Any]) -> Any:
                    return target.session(session_id).append(batch)

            targets[label] = (target, append)
        append = targets[label][1]

        def op(thread: int, j: int) -> None:
            session_id = sessions[(thread + j * threads) % len(sessions)]
            append(
                session_id,
                [Event(authors[thread], Text(payload)) for _ in range(args.per_call)],
            )

        calls = -(-events // args.per_call)
        if fresh:
            warm_up(threads, op)
        with run_.progress(label, calls) as advance:
            result = run_threads(
                threads, -(-calls // threads), op, max_seconds=max_seconds, advance=advance
            )
        records.append(
            dict(
                scenario=NAME,
                system="sharedesk",
                operation="append",
                label=label,
                ops=result.ops * args.per_call,
                seconds=result.seconds,
                latencies_ns=result.latencies_ns,
                params={
                    "threads": threads,
                    "sessions": len(sessions),
                    "per_call": args.per_call,
                    "durability": mode,
                    "via": path_kind,
                    "series": f"sharedesk {path_kind} {mode}",
                },
                note="ops and ops/s count events; latency is per append call",
            )
        )

    def raw_baselines(events: int, max_seconds: float, cap_1: int) -> None:
        for per_txn in RAW_BATCHES:
            label = f"append lmdb-raw {per_txn}/txn"
            # At 1 event per fsync'd commit, a full budget would only measure the disk.
            budget = events if per_txn > 1 else min(events, cap_1)
            path, fresh = place(f"append-raw-{per_txn}")
            if fresh:  # the warm-up: one event per session, as every system writes first
                baselines.raw_lmdb_appends(
                    path,
                    sessions,
                    events=len(sessions),
                    per_txn=16,
                    payload=payload,
                    max_seconds=60.0,
                )
            with run_.progress(label, budget) as advance:
                written, seconds = baselines.raw_lmdb_appends(
                    path,
                    sessions,
                    events=budget,
                    per_txn=per_txn,
                    payload=payload,
                    max_seconds=max_seconds,
                    advance=advance,
                )
            records.append(
                dict(
                    scenario=NAME,
                    system="lmdb-raw",
                    operation="append",
                    label=label,
                    ops=written,
                    seconds=seconds,
                    params={
                        "per_txn": per_txn,
                        "sessions": len(sessions),
                        **({"baseline": RAW_LMDB_16} if per_txn == 16 else {}),
                    },
                    note="one writer thread, sync=True, one idempotency row per event",
                )
            )

    def threaded_baseline(
        write: Callable[..., ThreadedResult],
        name: str,
        *,
        label: str,
        system: str,
        series: str,
        note: str,
        threads: int,
        events: int,
        max_seconds: float,
        file: str | None = None,
    ) -> None:
        """Run one threaded baseline (same sessions, threads and payload) and record it.

        ``name`` names its directory, and ``file`` the database file in it for a
        baseline that writes one file (``None``: the directory itself); the first call
        writes the warm-up there first.
        """
        directory, fresh = place(name)
        path = directory if file is None else directory / file
        if fresh:
            write(
                path,
                sessions,
                threads=threads,
                events=len(sessions),
                payload=payload,
                max_seconds=60.0,
            )
        with run_.progress(label, events) as advance:
            result = write(
                path,
                sessions,
                threads=threads,
                events=events,
                payload=payload,
                max_seconds=max_seconds,
                advance=advance,
            )
        records.append(
            dict(
                scenario=NAME,
                system=system,
                operation="append",
                label=label,
                ops=result.ops,
                seconds=result.seconds,
                latencies_ns=result.latencies_ns,
                params={"threads": threads, "sessions": len(sessions), "series": series},
                note=note,
            )
        )

    def raw_group_commit(threads: int, events: int, max_seconds: float) -> None:
        threaded_baseline(
            baselines.raw_lmdb_group_commit,
            f"append-raw-group-t{threads}",
            label=f"append lmdb-raw group-commit t={threads}",
            system="lmdb-raw",
            series="lmdb-raw gc",
            note="bare writer thread, one durable commit per group, no validation",
            threads=threads,
            events=events,
            max_seconds=max_seconds,
        )

    def sqlite_and_agents(threads: int, events: int, max_seconds: float) -> None:
        threaded_baseline(
            baselines.sqlite_appends,
            f"append-sqlite-t{threads}",
            file="events.db",
            label=f"append sqlite WAL FULL t={threads}",
            system="sqlite",
            series="sqlite",
            note="one commit per append, synchronous=FULL",
            threads=threads,
            events=events,
            max_seconds=max_seconds,
        )
        if not baselines.agents_available():
            run_.note("openai-agents not installed: its SQLiteSession baseline skipped")
        else:
            label = f"append openai-agents SQLiteSession t={threads}"
            directory, fresh = place(f"append-agents-t{threads}")
            request = {
                "kind": "append",
                "path": str(directory / "agents.db"),
                "sessions": sessions,
                "threads": threads,
                "events": len(sessions),
                "payload": payload,
                "max_seconds": 60.0,
            }
            with run_.progress(label + " (child process)", 1) as advance:
                if fresh:
                    baselines.run_agents_child(request)  # the warm-up
                agents = baselines.run_agents_child(
                    {**request, "events": events, "max_seconds": max_seconds}
                )
                advance(1)
            records.append(
                dict(
                    scenario=NAME,
                    system="openai-agents",
                    operation="append",
                    label=label,
                    ops=agents.ops,
                    seconds=agents.seconds,
                    latencies_ns=agents.latencies_ns,
                    params={"threads": threads, "series": "openai-agents SQLiteSession"},
                    note="add_items, one item per call, in a child process",
                )
            )

    try:
        for threads in args.threads:
            # The headline thread count runs in rounds that alternate every system, so
            # slow drifts of the shared disk and CPU reach all of them alike.
            here = args.rounds if threads == headline else 1
            events_r, seconds_r = max(1, events // here), max_seconds / here
            for _ in range(here):
                if threads == headline and not args.no_baselines:
                    raw_baselines(events_r, seconds_r, max(1, 2000 // here))
                    raw_group_commit(threads, events_r, seconds_r)
                for mode in modes:
                    for path_kind in paths:
                        sharedesk_writes(path_kind, mode, threads, events_r, seconds_r)
                if not args.no_baselines:
                    sqlite_and_agents(threads, events_r, seconds_r)
    finally:
        for target, _ in targets.values():
            target.close()

    def per_round(label: str) -> list[float]:
        return [r["ops"] / r["seconds"] for r in records if r["label"] == label and r["seconds"]]

    ours_rounds = per_round(f"append sharedesk store durable t={headline}")
    raw_rounds = per_round("append lmdb-raw 16/txn")
    if len(ours_rounds) > 1 and len(ours_rounds) == len(raw_rounds):
        ratios = ", ".join(
            f"{o / r:.2f}x ({o:,.0f} / {r:,.0f})"
            for o, r in zip(ours_rounds, raw_rounds, strict=True)
        )
        run_.note(f"LmdbStore durable t={headline} over {RAW_LMDB_16}, round by round: {ratios}")

    for record in merge_rounds(records):
        run_.measurements.append(measurement(**record))

    if "durable" in modes and "store" in paths:
        ours = run_.rate(f"append sharedesk store durable t={headline}")
        run_.targets.append(
            ratio_target(
                name="append-store-vs-raw-lmdb",
                claim=f"append LmdbStore durable t={headline}",
                numerator=ours,
                denominator=run_.rate("append lmdb-raw 16/txn"),
                baseline=RAW_LMDB_16,
                bound=0.4,
                at_least=True,
                what="events/s",
            )
        )
        run_.targets.append(
            ratio_target(
                name="append-store-vs-sqlite",
                claim=f"append LmdbStore durable t={headline}",
                numerator=ours,
                denominator=run_.rate(f"append sqlite WAL FULL t={headline}"),
                baseline=f"sqlite3 WAL synchronous=FULL t={headline}",
                bound=1.2,
                at_least=True,
                what="events/s",
            )
        )
        bare = run_.rate(f"append lmdb-raw group-commit t={headline}")
        raw16 = run_.rate("append lmdb-raw 16/txn")
        if bare and raw16 and ours:
            run_.note(
                f"context: a bare py-lmdb group commit from {headline} threads (no library "
                f"code) reaches {bare / raw16:.2f}x {RAW_LMDB_16}; the store reaches "
                f"{ours / bare:.2f}x of that bare design"
            )
        if "hub" in paths:
            run_.targets.append(
                ratio_target(
                    name="append-hub-vs-store",
                    claim=f"append via Hub durable t={headline}",
                    numerator=run_.rate(f"append sharedesk hub durable t={headline}"),
                    denominator=ours,
                    baseline=f"LmdbStore alone durable t={headline}",
                    bound=0.7,
                    at_least=True,
                    what="events/s",
                )
            )
