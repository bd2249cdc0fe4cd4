"""``long``: long and crowded desks: runs, transcripts and posts cost the answer, not the history.

Four parts, each a ratio measured in this run:

- ``history``: one Hub on LMDB (relaxed: this measures reads, not fsync) holds a small
  desk (2,000 events) and a large one (200,000), both written with batched appends of
  1,000 events (posts by four participants). On each, timed one after another:
  ``SessionManager.run_once`` with ``continuation="replay"`` and ``max_messages=200``;
  ``SessionManager.get_session``; ``hub.transcript(desk, viewer, limit=500)`` with one
  post (not timed) before each call, so the transcript is always recomputed. The two
  desks take turns call by call, so both see the same load. Target: large / small
  median at most 1.5x for each.
- ``crowd``: posts per second (at the median post) from one thread to a desk whose
  channel view is held warm by 1 viewer, and to one held warm by 200 viewers (each asked
  for its view once), on two in-memory Hubs, the two taking turns post by post; at least
  0.7x. Peak threads while posting: at most ``max_active`` + 16.
- ``stream``: on a durable Hub, ``run_once`` with an adapter that streams 300
  ``TextDelta`` chunks then the closing ``Text``, against ``run_once`` with an adapter
  that posts the final text alone (taking turns); median wall time at most 2x.
- ``rss``: resident memory after touching 100,000 desks with ``max_active=1024`` (the
  ``scale`` scenario's loop); under 500 MiB. Run first, so the other parts' data does
  not count.
- ``retained``: on LMDB (relaxed), a desk of 1,000,000 events (batched appends of
  10,000), compacted and retained down to ``keep_last=1000`` with an archive, against a
  fresh desk of 1,000 events: ``hub.view``, a ``hub.turn`` committed, ``hub.transcript``
  and ``run_once`` (replay), one post (not timed) before each call, the desks in turn;
  each median at most 1.2x. Retention's rows per second (archived and removed) is
  reported against the append rate of the build.
- ``reuse``: on LMDB, a desk of 200,000 events retained down to 1,000, then 200,000
  more appended: the data file grows by at most 1.3x its size right after retention.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from bench.harness import BenchRun, open_hub
from bench.options import Option, settle
from bench.report import Target, ratio_target, timed_calls
from bench.scenarios.scale import THREAD_SLACK, touch_sessions

NAME = "long"
HELP = (
    "runs, get_session and transcripts on 2k vs 200k-event desks; posts with 200 viewers; "
    "a 1M-event desk retained to 1k vs a fresh 1k desk"
)

BATCH = 1000


OPTIONS = (
    Option("--small", 2_000, "events of the small desk", quick=200),
    Option("--large", 200_000, "events of the large desk", quick=2_000),
    Option("--repeat", 50, "timed calls per measurement", quick=5),
    Option("--viewers", 200, "warm viewers of the crowd", quick=5),
    Option("--posts", 2_000, "timed posts per crowd", quick=50),
    Option("--chunks", 300, "chunks of the streamed reply", quick=30),
    Option("--sessions", 100_000, "desks touched for RSS", quick=300),
    Option("--max-active", 1024, "Hub max_active", quick=16),
    Option("--retained", 1_000_000, "events of the retained desk", quick=5_000),
    Option("--keep", 1_000, "rows retention keeps", quick=100),
    Option("--reuse", 200_000, "events of the page-reuse desk", quick=5_000),
)


class _Streamer:
    """An adapter that streams ``chunks`` deltas, then the whole reply as one ``Text``."""

    native_continuation = False

    def __init__(self, name: str, author: Any, chunks: int) -> None:
        self.name = name
        self.author = author
        self.chunks = chunks

    def execute(self, run: Any, session: Any, emit: Any, opts: Mapping[str, Any]) -> Any:
        from sharedesk import Event, Text, TextDelta

        parts = [f"word{i} " for i in range(self.chunks)]
        for part in parts:
            emit(Event(self.author, TextDelta(part)))
        emit(Event(self.author, Text("".join(parts))))
        return None


def _in_turn(items: list[Any], round_: int) -> list[Any]:
    """Return ``items`` in order on even rounds and reversed on odd ones (no first-mover bias)."""
    return items if round_ % 2 == 0 else items[::-1]


def _build(hub: Any, desk: str, events: int, authors: list[Any]) -> None:
    from sharedesk import SessionManager

    SessionManager.start_session(hub, session_id=desk, metadata={"bench": "long"})
    _fill(hub, desk, events - 1, authors, BATCH)


def _history(run_: BenchRun, small: int, large: int, repeat: int) -> None:
    from sharedesk import Agent, Operator, Person, ScriptedAdapter, SessionManager

    ada = Agent(id="ada", label="Ada")
    authors: list[Any] = [
        Operator(),
        Person(id="pat", label="Pat"),
        ada,
        Agent(id="bob", label="Bob"),
    ]
    hub = open_hub(run_.fresh_dir("long-history") / "store", "relaxed")
    try:
        sizes = {"small": small, "large": large}
        with run_.progress(f"build desks of {small:,} and {large:,} events", small + large) as adv:
            for name, events in sizes.items():
                _build(hub, name, events, authors)
                adv(events)
        adapters = {
            name: ScriptedAdapter(["ok"] * (repeat + 1), name="scripted", author=ada)
            for name in sizes
        }

        def replay(desk: str) -> None:
            SessionManager.run_once(
                hub,
                adapters[desk],
                "next?",
                session_id=desk,
                continuation="replay",
                continuation_opts={"max_messages": 200},
            )

        def session(desk: str) -> None:
            SessionManager.get_session(hub, desk)

        def transcript(desk: str) -> None:
            hub.transcript(desk, ada, limit=500)

        def poke(desk: str) -> None:
            hub.session(desk).post(authors[1], "poke")  # so the transcript is recomputed

        medians: dict[tuple[str, str], float] = {}
        for operation, fn, before in (
            ("run_once replay", replay, None),
            ("get_session", session, None),
            ("transcript limit=500", transcript, poke),
        ):
            latencies = _desks_in_turn(run_, operation, list(sizes), repeat, fn, before)
            for name, events in sizes.items():
                medians[(operation, name)] = _timed(
                    run_,
                    operation,
                    f"long {operation} desk={events}",
                    latencies[name],
                    {"events": events},
                )
        for operation, target in (
            ("run_once replay", "long-run-once-flat-in-history"),
            ("get_session", "long-get-session-flat-in-history"),
            ("transcript limit=500", "long-transcript-flat-in-history"),
        ):
            run_.targets.append(
                _at_most(
                    target,
                    f"{operation} on the {large:,}-event desk, median",
                    (medians[(operation, "large")], medians[(operation, "small")]),
                    f"the {small:,}-event desk",
                    1.5,
                )
            )
    finally:
        hub.close()


def _desks_in_turn(
    run_: BenchRun,
    operation: str,
    desks: list[str],
    repeat: int,
    fn: Callable[[str], object],
    before: Callable[[str], object] | None,
) -> dict[str, list[int]]:
    """Time ``fn(desk)`` ``repeat`` times per desk, the desks taking turns call by call.

    Who goes first alternates, so every desk sees the same load; ``before(desk)`` runs
    untimed before each call. Returns each desk's latencies (ns).
    """
    latencies: dict[str, list[int]] = {desk: [] for desk in desks}
    with run_.progress(f"{operation}, the desks in turn", len(desks) * repeat) as adv:
        for i in range(repeat):
            for desk in _in_turn(desks, i):
                if before is not None:
                    before(desk)
                t0 = time.perf_counter_ns()
                fn(desk)
                latencies[desk].append(time.perf_counter_ns() - t0)
            adv(len(desks))
    return latencies


def _at_most(
    name: str,
    claim: str,
    pair: tuple[float, float],
    baseline: str,
    bound: float,
    what: str = "median µs",
) -> Target:
    """Return the target: the first figure over the second, at most ``bound``."""
    return ratio_target(
        name=name,
        claim=claim,
        numerator=pair[0],
        denominator=pair[1],
        baseline=baseline,
        bound=bound,
        at_least=False,
        what=what,
    )


def _timed(
    run_: BenchRun, operation: str, label: str, latencies: list[int], params: dict[str, Any]
) -> float:
    """Record calls timed one by one as ``label``; return their median µs (0 if none)."""
    taken = timed_calls(
        scenario=NAME, operation=operation, label=label, latencies_ns=latencies, params=params
    )
    run_.measurements.append(taken)
    return taken.median_us or 0.0


def _crowd(run_: BenchRun, viewers: int, posts: int, max_active: int) -> None:
    from sharedesk import Agent, Person

    poster = Person(id="pat", label="Pat")
    crowds = (1, viewers)
    threads_before = threading.active_count()
    peak = threads_before
    # In-memory Hubs: no writer thread whose scheduling could favour one of them; every
    # post runs on this thread, so what a post costs the poster is all that is timed.
    hubs = {crowd: open_hub(None, "relaxed", max_active=max_active) for crowd in crowds}
    latencies: dict[int, list[int]] = {crowd: [] for crowd in crowds}
    try:
        for crowd, hub in hubs.items():
            hub.session("desk").post(poster, "hello")
            for n in range(crowd):
                hub.view("desk", Agent(id=f"v{n}", label=f"V{n}"))
        desks = {crowd: hub.session("desk") for crowd, hub in hubs.items()}
        with run_.progress(f"{posts:,} posts to each desk, in turn", 2 * posts) as adv:
            for i in range(posts):  # the desks take turns post by post
                for crowd in _in_turn(list(crowds), i):
                    t0 = time.perf_counter_ns()
                    desks[crowd].post(poster, f"post {i}")
                    latencies[crowd].append(time.perf_counter_ns() - t0)
                if i % 64 == 0:
                    peak = max(peak, threading.active_count())
                    adv(128)
    finally:
        for hub in hubs.values():
            hub.close()
    rates: dict[int, float] = {}
    for crowd in crowds:
        median = _timed(
            run_, "post", f"long post viewers={crowd}", latencies[crowd], {"viewers": crowd}
        )
        # Posts/s at the median post: a stall of the machine (other processes) that
        # lands on one side's few posts cannot decide the ratio.
        rates[crowd] = 1e6 / median if median > 0 else 0.0
    run_.targets.append(
        ratio_target(
            name="long-posts-with-warm-viewers",
            claim=f"posts/s with {viewers} warm viewers",
            numerator=rates[viewers],
            denominator=rates[1],
            baseline="posts/s with 1 warm viewer",
            bound=0.7,
            at_least=True,
            what="posts/s at the median post",
        )
    )
    run_.targets.append(
        Target(
            name="long-posting-peak-threads",
            claim=f"{viewers} warm viewers (and 1 on another Hub) posting: peak threads",
            value=float(peak - threads_before),
            bound=float(max_active + THREAD_SLACK),
            at_least=False,
            detail=f"peak {peak} - {threads_before} before; bound max_active + {THREAD_SLACK}",
            unit=" threads",
        )
    )


def _stream(run_: BenchRun, chunks: int, repeat: int) -> None:
    from sharedesk import Agent, ScriptedAdapter, SessionManager

    ada = Agent(id="ada", label="Ada")
    hub = open_hub(run_.fresh_dir("long-stream") / "store", "durable")
    medians: dict[str, float] = {}
    try:
        reply = "".join(f"word{i} " for i in range(chunks))
        plain = ScriptedAdapter([reply] * repeat, name="plain", author=ada)
        streamer = _Streamer("streamer", ada, chunks)
        kinds: dict[str, Any] = {"final text alone": plain, f"{chunks} chunks": streamer}
        latencies: dict[str, list[int]] = {label: [] for label in kinds}
        with run_.progress("run_once, the two replies in turn", 2 * repeat) as adv:
            for i in range(repeat):  # in turn, so both see the same load
                for label in _in_turn(list(kinds), i):
                    adapter = kinds[label]
                    t0 = time.perf_counter_ns()
                    SessionManager.run_once(hub, adapter, "go", session_id="desk")
                    latencies[label].append(time.perf_counter_ns() - t0)
                adv(2)
        for label, adapter in kinds.items():
            medians[label] = _timed(
                run_,
                "run_once",
                f"long run_once durable {label}",
                latencies[label],
                {"chunks": chunks if adapter is streamer else 0},
            )
    finally:
        hub.close()
    run_.targets.append(
        ratio_target(
            name="long-streamed-reply-vs-final-text",
            claim=f"run_once with a streamed {chunks}-chunk reply, median",
            numerator=medians[f"{chunks} chunks"],
            denominator=medians["final text alone"],
            baseline="run_once with the final text alone",
            bound=2.0,
            at_least=False,
            what="median µs per run_once (durable)",
        )
    )


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)

    touched = touch_sessions(run_, NAME, args.sessions, args.max_active, "write", "relaxed")
    run_.figures["long RSS before / peak (MiB)"] = (
        f"{touched.rss_before:,.0f} / {touched.peak_rss:,.0f}"
    )
    run_.targets.append(
        Target(
            name="long-rss-after-many-desks",
            claim=f"{args.sessions:,} desks touched, max_active={args.max_active}: resident memory",
            value=touched.peak_rss,
            bound=500.0,
            at_least=False,
            detail=f"peak sampled every 500 touches; {touched.rss_before:,.0f} MiB before",
            unit=" MiB",
        )
    )
    _history(run_, args.small, args.large, args.repeat)
    _crowd(run_, args.viewers, args.posts, args.max_active)
    _stream(run_, args.chunks, args.repeat)
    _retained(run_, args.retained, args.keep, args.repeat)
    _reuse(run_, args.reuse, args.keep)


# -- retention -----------------------------------------------------------------------------

RETAIN_BATCH = 10_000


def _fill(hub: Any, desk: str, events: int, authors: list[Any], batch: int) -> float:
    """Append ``events`` posts to ``desk`` in batches; return the events appended per second."""
    from sharedesk import Event, Text

    payload = "x" * 100
    start = time.perf_counter()
    written = hub.last_sequence(desk)
    goal = written + events
    while written < goal:
        size = min(batch, goal - written)
        rows = [
            Event(authors[(written + i) % len(authors)], Text(f"{written + i} {payload}"))
            for i in range(size)
        ]
        hub.append(desk, rows)
        written += size
    return events / (time.perf_counter() - start)


def _retain(hub: Any, desk: str, keep: int, archive: Any) -> tuple[int, float]:
    """Compact ``desk`` but its newest ``keep`` rows, retain it to ``keep``; (rows, rows/s)."""
    from sharedesk import Agent, RetentionPolicy

    last = hub.last_sequence(desk)
    hub.compact(desk, "the story so far", through=last - keep, author=Agent(id="c", label="C"))
    start = time.perf_counter()
    report = hub.apply_retention(RetentionPolicy(keep_last=keep, archive=archive), desk)
    return report.total, report.total / (time.perf_counter() - start)


def _retained(run_: BenchRun, events: int, keep: int, repeat: int) -> None:
    from sharedesk import Agent, Person, ScriptedAdapter, SessionManager

    ada, pat = Agent(id="ada", label="Ada"), Person(id="pat", label="Pat")
    authors: list[Any] = [pat, ada, Agent(id="bob", label="Bob")]
    work = run_.fresh_dir("long-retained")
    hub = open_hub(work / "store", "relaxed")
    try:
        with run_.progress(f"build a desk of {events:,} events and one of {keep:,}", 2) as adv:
            append_rate = _fill(hub, "retained", events, authors, RETAIN_BATCH)
            _fill(hub, "fresh", keep, authors, RETAIN_BATCH)
            adv(1)
            removed, retain_rate = _retain(hub, "retained", keep, work / "archive")
            adv(1)
        run_.figures["long retention rows/s / append rows/s"] = (
            f"{retain_rate:,.0f} / {append_rate:,.0f} = {retain_rate / append_rate:.2f}x "
            f"({removed:,} rows archived and removed; appends in batches of {RETAIN_BATCH:,})"
        )
        desks = ["retained", "fresh"]
        adapters = {d: ScriptedAdapter(["ok"] * (repeat + 1), name="s", author=ada) for d in desks}

        def turn(desk: str) -> None:
            hub.turn(desk, ada).commit()

        def replay(desk: str) -> None:
            SessionManager.run_once(
                hub, adapters[desk], "next?", session_id=desk, continuation="replay"
            )

        def poke(desk: str) -> None:
            hub.session(desk).post(pat, "poke")  # so the answer is recomputed

        calls: dict[str, Any] = {
            "view": lambda desk: hub.view(desk, ada),
            "turn": turn,
            "transcript": lambda desk: hub.transcript(desk, ada),
            "run_once replay": replay,
        }
        for operation, fn in calls.items():
            latencies = _desks_in_turn(run_, f"retained {operation}", desks, repeat, fn, poke)
            medians = {
                desk: _timed(
                    run_, operation, f"long retained {operation} desk={desk}", latencies[desk], {}
                )
                for desk in desks
            }
            run_.targets.append(
                _at_most(
                    f"long-retained-{operation.split()[0].replace('_', '-')}",
                    f"{operation} on the {events:,}-event desk retained to {keep:,}",
                    (medians["retained"], medians["fresh"]),
                    f"a fresh {keep:,}-event desk",
                    1.2,
                )
            )
    finally:
        hub.close()


def _reuse(run_: BenchRun, events: int, keep: int) -> None:
    from sharedesk import Person

    work = run_.fresh_dir("long-reuse")
    data = work / "store" / "data.mdb"
    hub = open_hub(work / "store", "relaxed")
    try:
        with run_.progress(f"{events:,} events, retained, then {events:,} more", 3) as adv:
            _fill(hub, "desk", events, [Person(id="pat", label="Pat")], RETAIN_BATCH)
            adv(1)
            _retain(hub, "desk", keep, None)
            after = data.stat().st_size
            adv(1)
            _fill(hub, "desk", events, [Person(id="pat", label="Pat")], RETAIN_BATCH)
            grown = data.stat().st_size
            adv(1)
    finally:
        hub.close()
    run_.targets.append(
        _at_most(
            "long-lmdb-reuses-freed-pages",
            f"data file after {events:,} more appends",
            (float(grown), float(after)),
            f"its size right after retaining {events:,} events to {keep:,}",
            1.3,
            "bytes",
        )
    )
