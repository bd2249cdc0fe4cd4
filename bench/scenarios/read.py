"""``read``: cold projection, warm views and turn deltas on desks of growing history.

For each size a desk of that many ``Text`` rows is built (roots in the channel, every
fifth row a reply in a thread) and mirrored into SQLite. Then, on the same data:

- ``project cold``: ``project_session(store.log(desk), channel, window 30)``, no cache
  but the OS page cache: the cost of a projection that starts from nothing;
- ``last30 sqlite``: ``ORDER BY seq DESC LIMIT 30`` plus a JSON decode of each row;
- ``view warm``: ``hub.view(desk, viewer)`` after a first call built the projector;
- ``turn delta``: ``hub.turn`` of an agent after three new posts since its last commit
  (one of them the first reply to a root at the bottom of the desk, which the channel
  delta offers), and its ``commit`` (timed separately), measured last with the desks of
  every size open and their turns interleaved, so that each size sees the same load (the Hubs of all
  sizes stay open until then; a 1,000,000-row desk in memory needs about 1 GB).

Headlines: cold projection at 20,000 rows within 3x SQLite last-30
(``cold-projection-vs-sqlite``), warm view at 100,000 rows no slower than SQLite last-30
(``warm-view-vs-sqlite``), and turn delta cost at 10,000 and 1,000,000 rows within 1.5x of
each other (``turn-delta-flat-in-history``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from bench import baselines
from bench.harness import (
    BenchRun,
    calling,
    open_hub,
    open_store,
    time_calls,
)
from bench.options import Option, settle
from bench.report import measurement, ratio_target, timed_calls
from sharedesk import EventStore, Hub, SessionLog

NAME = "read"
HELP = "cold projection, warm hub.view and hub.turn deltas on 10k/100k/1M-row desks"

DESK = "desk"
BUILD_BATCH = 1000


OPTIONS = (
    Option(
        "--sizes",
        [10_000, 20_000, 100_000, 1_000_000],
        "desk sizes in rows, comma-separated",
        quick=[300, 600],
    ),
    Option("--repeat", 300, "timed calls per measurement", quick=20),
    Option("--turns", 100, "timed turns per desk", quick=5),
    Option("--payload", 120, "message characters per row", quick=40),
    Option("--backend", "lmdb", "store backend under the Hub", choices=("lmdb", "memory", "both")),
)


def _authors() -> list[Any]:
    from sharedesk import Agent, Operator, Person

    return [
        Operator(),
        Person(id="ana", label="Ana"),
        Agent(id="a1", label="Agent One"),
        Agent(id="a2", label="Agent Two"),
    ]


def build_desk(
    run_: BenchRun, store: EventStore, mirror: baselines.SqliteDesk | None, rows: int, payload: str
) -> None:
    """Append ``rows`` Text rows to the desk (and the SQLite mirror, if any), in batches."""
    from sharedesk import Event, Text

    authors = _authors()
    last_root = 0
    with run_.progress(f"build desk of {rows:,} rows", rows) as advance:
        start = store.last_sequence(DESK) + 1
        for first in range(start, start + rows, BUILD_BATCH):
            batch: list[Any] = []
            mirrored: list[dict[str, Any]] = []
            for seq in range(first, min(first + BUILD_BATCH, start + rows)):
                parent = last_root if seq % 5 == 0 and last_root else None
                if parent is None:
                    last_root = seq
                author = authors[seq % len(authors)]
                event = Event(author, Text(f"{seq} {payload}"), parent=parent)
                batch.append(event)
                mirrored.append(
                    {
                        "author": {"type": "person", "id": "ana", "label": "Ana"},
                        "body": {"type": "text", "content": f"{seq} {payload}"},
                        "id": event.id,
                        "parent": parent,
                        "sequence": seq,
                    }
                )
            store.append(DESK, batch)
            if mirror is not None:
                mirror.add(mirrored)
            advance(len(batch))


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)
    payload = "y" * args.payload
    backends = ["lmdb", "memory"] if args.backend == "both" else [args.backend]

    hubs: list[tuple[int, str, Hub]] = []
    try:
        for rows in args.sizes:
            directory = run_.fresh_dir(f"read-{rows}")
            mirror = baselines.SqliteDesk(directory / "mirror.db", DESK)
            try:
                for kind in backends:
                    suffix = "" if kind == "lmdb" else " memory"
                    if kind == "lmdb":
                        store = open_store(directory / "store", "relaxed")
                        try:
                            build_desk(run_, store, mirror, rows, payload)
                            _cold(run_, store.log(DESK), rows, args.repeat, suffix)
                        finally:
                            store.close()
                        hub = open_hub(directory / "store", "durable")
                        hubs.append((rows, suffix, hub))
                    else:
                        hub = open_hub(None, "durable")
                        hubs.append((rows, suffix, hub))
                        build_desk(run_, hub, None, rows, payload)
                        _cold(run_, hub.log(DESK), rows, args.repeat, suffix)
                    _warm(run_, hub, rows, args.repeat, suffix)
                _time_read30(
                    run_,
                    "last30 sqlite",
                    calling(mirror.last30),
                    system="sqlite",
                    rows=rows,
                    repeat=args.repeat,
                    note="ORDER BY seq DESC LIMIT 30 + json.loads per row",
                    baseline=True,
                )
            finally:
                mirror.close()
            _agents_read(run_, directory, rows, args.repeat, payload)
        turn_medians = _turns(run_, hubs, args.turns)
    finally:
        for _, _, hub in hubs:
            hub.close()
    _targets(run_, args.sizes, turn_medians)


def _time_read30(
    run_: BenchRun,
    name: str,
    call: Callable[[int], object],
    *,
    system: str,
    rows: int,
    repeat: int,
    note: str,
    suffix: str = "",
    baseline: bool = False,
) -> None:
    """Time ``call(i)`` ``repeat`` times and record it as a 30-row read of an ``rows`` desk."""
    with run_.progress(f"{name} n={rows:,}{suffix}", repeat) as advance:
        seconds, lat = time_calls(repeat, call, advance)
    params: dict[str, Any] = {"rows": rows, "compare": f"rows={rows}"}
    if baseline:
        params["baseline"] = f"{name} n={rows:,}"
    run_.measurements.append(
        measurement(
            scenario=NAME,
            system=system,
            operation="read30",
            label=f"{name} n={rows}{suffix}",
            ops=repeat,
            seconds=seconds,
            latencies_ns=lat,
            params=params,
            note=note,
        )
    )


def _cold(run_: BenchRun, log: SessionLog, rows: int, repeat: int, suffix: str) -> None:
    """Time ``project_session`` over ``log`` (channel, window 30) ``repeat`` times."""
    from sharedesk import Conversation, SessionQuery, project_session

    query = SessionQuery(Conversation(DESK))
    _time_read30(
        run_,
        "project cold",
        calling(project_session, log, query),
        system="sharedesk",
        rows=rows,
        repeat=repeat,
        note="project_session over the store's log, channel, window 30",
        suffix=suffix,
    )


def _warm(run_: BenchRun, hub: Hub, rows: int, repeat: int, suffix: str) -> None:
    """Time ``hub.view`` of the channel once the viewer's projector is built."""
    from sharedesk import Person

    viewer = Person(id="ana", label="Ana")
    hub.view(DESK, viewer)
    _time_read30(
        run_,
        "view warm",
        calling(hub.view, DESK, viewer),
        system="sharedesk",
        rows=rows,
        repeat=repeat,
        note="hub.view, channel, window 30, projector already built",
        suffix=suffix,
    )


def _turns(run_: BenchRun, hubs: list[tuple[int, str, Hub]], turns: int) -> dict[int, float]:
    """Time delta turns (and their commits) of one agent on every desk, interleaved.

    Round ``i`` gives each desk three new posts by others (the second the first reply to
    root ``5i + 1``, at the bottom of the desk), then times the agent's turn and commit
    there, desk after desk, so every size is measured under the same load.

    Returns:
        The median turn latency in µs of each LMDB desk, by size.
    """
    from sharedesk import Agent, Person, SessionAuthor

    agent = Agent(id="a1", label="Agent One")
    others: list[SessionAuthor] = [Person(id="ana", label="Ana"), Agent(id="a2", label="Agent Two")]
    turn_ns: list[list[int]] = [[] for _ in hubs]
    commit_ns: list[list[int]] = [[] for _ in hubs]
    sizes: list[list[int]] = [[] for _ in hubs]
    reasons: list[dict[str, int]] = [{} for _ in hubs]
    for _, _, hub in hubs:
        hub.turn(DESK, agent).commit(None)
    with run_.progress("turn delta, desks interleaved", turns * len(hubs)) as advance:
        for i in range(turns):
            for h, (rows, _, hub) in enumerate(hubs):
                session = hub.session(DESK)
                for k in range(3):
                    # The middle post is the first reply to a root at the bottom of the
                    # desk (roots 5i+1 have none yet): the delta offers it without a
                    # walk down to its root.
                    parent = 5 * i + 1 if k == 1 and 5 * i + 1 <= rows else None
                    session.post(others[k % 2], f"news {i}.{k}", parent=parent)
                t0 = time.perf_counter_ns()
                turn = hub.turn(DESK, agent)
                t1 = time.perf_counter_ns()
                turn.commit(f"reply {i}")
                t2 = time.perf_counter_ns()
                turn_ns[h].append(t1 - t0)
                commit_ns[h].append(t2 - t1)
                sizes[h].append(len(turn.messages))
                key = "delta" if turn.reason is None else str(turn.reason)
                reasons[h][key] = reasons[h].get(key, 0) + 1
                advance(1)
    medians: dict[int, float] = {}
    for h, (rows, suffix, _) in enumerate(hubs):
        turn_m = timed_calls(
            scenario=NAME,
            operation="turn",
            label=f"turn delta n={rows}{suffix}",
            latencies_ns=turn_ns[h],
            params={"rows": rows},
            note=(
                "hub.turn with 3 new rows (one a first reply to an old root) since the "
                "last commit; desks interleaved"
            ),
        )
        run_.measurements.append(turn_m)
        run_.measurements.append(
            timed_calls(
                scenario=NAME,
                operation="commit",
                label=f"turn commit n={rows}{suffix}",
                latencies_ns=commit_ns[h],
                params={"rows": rows},
                note="turn.commit(reply): reply and sharing state in one durable step",
            )
        )
        run_.figures[f"read n={rows}{suffix} turn reasons"] = reasons[h]
        run_.figures[f"read n={rows}{suffix} delta sizes (min/max)"] = (
            f"{min(sizes[h])}/{max(sizes[h])}" if sizes[h] else "-"
        )
        if not suffix and turn_m.median_us is not None:
            medians[rows] = turn_m.median_us
    return medians


def _agents_read(run_: BenchRun, directory: Path, rows: int, repeat: int, payload: str) -> None:
    """Time openai-agents ``get_items(limit=30)`` on a session of ``rows`` items."""
    if not baselines.agents_available():
        run_.note("openai-agents not installed: its SQLiteSession baseline skipped")
        return
    label = f"get_items(30) openai-agents n={rows}"
    with run_.progress(label + " (child process)", 1) as advance:
        result = baselines.run_agents_child(
            {
                "kind": "read",
                "path": str(directory / "agents.db"),
                "rows": rows,
                "repeat": repeat,
                "payload": payload,
            }
        )
        advance(1)
    run_.measurements.append(
        measurement(
            scenario=NAME,
            system="openai-agents",
            operation="read30",
            label=label,
            ops=result.ops,
            seconds=result.seconds,
            latencies_ns=result.latencies_ns,
            params={"rows": rows},
            note="SQLiteSession.get_items(limit=30), in a child process",
        )
    )


def _targets(run_: BenchRun, sizes: list[int], turn_medians: dict[int, float]) -> None:
    cold = run_.median("project cold n=20000")
    run_.targets.append(
        ratio_target(
            name="cold-projection-vs-sqlite",
            claim="cold channel projection, 20,000 rows, median",
            numerator=cold,
            denominator=run_.median("last30 sqlite n=20000"),
            baseline="sqlite last-30 + JSON, 20,000 rows",
            bound=3.0,
            at_least=False,
            what="µs",
        )
    )
    run_.targets.append(
        ratio_target(
            name="warm-view-vs-sqlite",
            claim="warm hub.view(30), 100,000 rows, median",
            numerator=run_.median("view warm n=100000"),
            denominator=run_.median("last30 sqlite n=100000"),
            baseline="sqlite last-30 + JSON, 100,000 rows",
            bound=1.0,
            at_least=False,
            what="µs",
        )
    )
    small, large = turn_medians.get(10_000), turn_medians.get(1_000_000)
    both = [small, large] if small and large else []
    flat = ratio_target(
        name="turn-delta-flat-in-history",
        claim="hub.turn delta median, the slower of 1,000,000 and 10,000 rows",
        numerator=max(both, default=None),
        denominator=min(both, default=None),
        baseline="the faster of the two",
        bound=1.5,
        at_least=False,
        what="µs",
    )
    if not both:
        flat = msgspec.structs.replace(flat, detail="needs --sizes with 10000 and 1000000")
    run_.targets.append(flat)
