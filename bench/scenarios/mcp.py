"""``mcp``: desks over MCP (stdio), next to a direct ``AsyncHub`` turn and commit.

Every MCP client is the SDK's ``ClientSession`` over stdio, with a ``sharedesk mcp``
server process of its own; all servers share one LMDB path (durable). Measured:

- **turn plus commit round trip.** Pat (one server) posts; Ada (another) calls
  ``turn(wait_s)`` and ``commit(turn_id, reply)``: the two calls are timed. Side by side,
  the same loop on one ``AsyncHub`` in this process (``post``, ``turn``, ``commit``).
- **N agents on one desk** (2, 8, 32): each agent loops ``turn(wait_s)`` then
  ``commit`` with a reply until it took its turns; turns per second over all agents.
- **cross-process wake**: a child process appends to the store (LMDB, and PostgreSQL
  when its binaries are installed) one event at a time, 20 ms apart (on LMDB also 0.5 s
  apart: a quiet desk, its follower at its idle poll); a Hub here listening to the desk
  records when each is pushed to it. Latency: push time minus the time the child's
  ``append`` returned (``CLOCK_MONOTONIC``, shared by the processes of one host).
- **idle cost of following**: a child Hub on LMDB listening to a desk nobody writes:
  its CPU time over the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.harness import BenchRun
from bench.options import Option, settle
from bench.report import Target, measurement, percentile

NAME = "mcp"
HELP = "MCP over stdio: turn+commit round trip, N agents on a desk, cross-process wake"

ROOT = Path(__file__).resolve().parents[2]
CLI = "from sharedesk.cli import main; raise SystemExit(main())"
WAIT_S = 30.0

# A child that appends COUNT events to DESK, one at a time, PAUSE s apart, and prints
# each event's id with the CLOCK_MONOTONIC time its append returned.
APPENDER = """
import json, sys, time
from sharedesk.protocol import Event, Person, Text
store_at, count, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
if store_at.startswith("postgres"):
    from sharedesk.store import PostgresStore as Store
else:
    from sharedesk.store import LmdbStore as Store
bob = Person(id="bob", label="Bob")
with Store(store_at) as store:
    for n in range(count):
        event = Event(bob, Text(f"wake {n}"))
        store.append("wake", [event])
        print(json.dumps([event.id, time.monotonic_ns()]), flush=True)
        time.sleep(pause)
"""

# A child Hub that listens to a desk nobody writes and prints its CPU share.
IDLE = """
import sys, time
from sharedesk import Hub
class Quiet:
    def deliver(self, push):
        pass
with Hub.open(sys.argv[1]) as hub:
    hub.listen("quiet", Quiet())
    time.sleep(0.5)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(float(sys.argv[2]))
    print((time.process_time() - cpu) / (time.monotonic() - wall))
"""


OPTIONS = (
    Option("--rounds", 200, "timed turn+commit round trips", quick=10),
    Option("--agents", [2, 8, 32], "agent counts on one desk", quick=[2, 3]),
    Option("--turns", 20, "turns per agent", quick=3),
    Option("--wakes", 200, "cross-process wakes per backend", quick=10),
    Option("--idle-s", 10.0, "seconds of idle following", quick=1.0),
    Option("--dsn", None, "PostgreSQL server for the wake (default: a throwaway one)"),
)


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)

    mcp_ns = asyncio.run(_mcp_round_trips(str(run_.fresh_dir("mcp-rt") / "store"), args.rounds))
    hub_ns = asyncio.run(_hub_round_trips(run_.fresh_dir("hub-rt") / "store", args.rounds))
    for system, samples in (("sharedesk mcp", mcp_ns), ("AsyncHub", hub_ns)):
        run_.measurements.append(
            measurement(
                scenario=NAME,
                system=system,
                operation="turn+commit",
                label=f"{system} turn+commit",
                ops=len(samples),
                seconds=sum(samples) / 1e9,
                latencies_ns=samples,
                params={"rounds": args.rounds, "durability": "durable"},
                note="one new message per turn, a reply per commit",
            )
        )
    median_ms = percentile(sorted(mcp_ns), 0.5) / 1e6
    run_.targets.append(
        Target(
            name="mcp-turn-commit-median",
            claim="MCP turn+commit round trip over stdio, durable LMDB",
            value=median_ms,
            bound=10.0,
            at_least=False,
            detail=f"{args.rounds} rounds; AsyncHub alone "
            f"{percentile(sorted(hub_ns), 0.5) / 1e6:.1f} ms",
            unit="ms",
        )
    )

    rates: dict[str, float] = {}
    for count in args.agents:
        path = str(run_.fresh_dir(f"mcp-agents-{count}") / "store")
        total, seconds = asyncio.run(_agents(path, count, args.turns))
        rates[str(count)] = total / seconds
        run_.measurements.append(
            measurement(
                scenario=NAME,
                system="sharedesk mcp",
                operation="agent turns",
                label=f"mcp {count} agents",
                ops=total,
                seconds=seconds,
                params={"agents": count, "turns_per_agent": args.turns},
                note="turn(wait_s) + commit(reply) per turn, one server process per agent",
            )
        )
    first = rates[str(args.agents[0])]
    run_.figures["mcp turns/s by agents"] = rates
    run_.figures["mcp turns/s relative to the fewest agents"] = {
        n: rate / first for n, rate in rates.items()
    }

    _wake(run_, "lmdb", str(run_.fresh_dir("mcp-wake") / "store"), args.wakes)
    quiet = max(2, args.wakes // 4)
    _wake(run_, "lmdb", str(run_.fresh_dir("mcp-wake-quiet") / "store"), quiet, pause=0.5)
    with _postgres(run_, args.dsn) as dsn:
        if dsn is not None:
            _wake(run_, "postgres", dsn, args.wakes)
    _idle(run_, str(run_.fresh_dir("mcp-idle") / "store"), args.idle_s)


# -- MCP clients ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _client(store: str, who: str) -> AsyncIterator[Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = StdioServerParameters(
        command=sys.executable, args=["-c", CLI, "mcp", store, "--as", who], cwd=ROOT
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def _call(session: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")
    structured: dict[str, Any] = result.structured_content
    return structured


async def _mcp_round_trips(store: str, rounds: int) -> list[int]:
    samples: list[int] = []
    async with _client(store, "agent:ada:Ada") as ada, _client(store, "person:pat:Pat") as pat:
        await _call(pat, "post", desk="desk", content="start")
        first = await _call(ada, "turn", desk="desk")
        await _call(ada, "commit", turn_id=first["turn_id"])
        for n in range(rounds):
            await _call(pat, "post", desk="desk", content=f"question {n}")
            t0 = time.perf_counter_ns()
            turn = await _call(ada, "turn", desk="desk", wait_s=WAIT_S)
            await _call(ada, "commit", turn_id=turn["turn_id"], reply=f"answer {n}")
            samples.append(time.perf_counter_ns() - t0)
    return samples


async def _hub_round_trips(path: Path, rounds: int) -> list[int]:
    from sharedesk import Agent, AsyncHub, Person

    ada, pat = Agent(id="ada", label="Ada"), Person(id="pat", label="Pat")
    samples: list[int] = []
    async with AsyncHub.open(path) as hub:
        await hub.post("desk", pat, "start")
        await (await hub.turn("desk", ada)).commit()
        for n in range(rounds):
            await hub.post("desk", pat, f"question {n}")
            t0 = time.perf_counter_ns()
            turn = await hub.wait_turn("desk", ada, timeout=WAIT_S)
            await turn.commit(f"answer {n}")
            samples.append(time.perf_counter_ns() - t0)
    return samples


async def _agents(store: str, count: int, turns: int) -> tuple[int, float]:
    """Each agent's task opens its own client (anyio wants one task per client)."""
    ready = asyncio.Semaphore(0)
    go = asyncio.Event()
    taken = [0]

    async def agent(k: int) -> None:
        async with _client(store, f"agent:a{k}") as session:
            if k == 0:
                await _call(session, "post", desk="desk", content="let us begin")
            ready.release()
            await go.wait()
            for n in range(turns):
                turn = await _call(session, "turn", desk="desk", wait_s=WAIT_S)
                await _call(session, "commit", turn_id=turn["turn_id"], reply=f"a{k} turn {n}")
                taken[0] += 1

    tasks = [asyncio.create_task(agent(k)) for k in range(count)]
    for _ in range(count):
        await ready.acquire()
    start = time.perf_counter()
    go.set()
    await asyncio.gather(*tasks)
    return taken[0], time.perf_counter() - start


# -- following ---------------------------------------------------------------------


def _wake(run_: BenchRun, backend: str, store: str, wakes: int, *, pause: float = 0.02) -> None:
    """Measure ``wakes`` pushes of another process's appends, ``pause`` s apart.

    A pause of 0.02 s keeps LMDB's follower at its fastest poll (a busy desk); 0.5 s lets
    it slow to its idle poll first (a quiet desk).
    """
    from sharedesk import Hub

    what = backend if pause < 0.1 else f"{backend} quiet"

    arrived: dict[str, int] = {}
    changed = threading.Condition()

    class Arrivals:
        def deliver(self, push: Any) -> None:
            now = time.monotonic_ns()
            with changed:
                for event in push.events:
                    arrived.setdefault(event.id, now)
                changed.notify_all()

    with Hub.open(store) as hub:
        hub.listen("wake", Arrivals())
        child = subprocess.run(
            [sys.executable, "-c", APPENDER, store, str(wakes), str(pause)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            timeout=600,
        )
        committed = dict(json.loads(line) for line in child.stdout.splitlines())
        with changed:
            changed.wait_for(lambda: committed.keys() <= arrived.keys(), timeout=60)
    latencies = sorted(arrived[i] - t for i, t in committed.items() if i in arrived)
    lost = len(committed) - len(latencies)
    run_.measurements.append(
        measurement(
            scenario=NAME,
            system=f"sharedesk {what}",
            operation="cross-process wake",
            label=f"wake {what}",
            ops=len(latencies),
            seconds=sum(latencies) / 1e9 or 1e-9,
            latencies_ns=latencies,
            params={"backend": backend, "wakes": wakes, "pause_s": pause},
            note="another process's append returned -> this Hub's listener pushed",
        )
    )
    if latencies:
        run_.targets.append(
            Target(
                name=f"wake-{what.replace(' ', '-')}-median",
                claim=f"cross-process wake on {what}, median",
                value=percentile(latencies, 0.5) / 1e6,
                bound=50.0,
                at_least=False,
                detail=f"{len(latencies)} wakes, p99 {percentile(latencies, 0.99) / 1e6:.1f} ms,"
                f" {lost} never pushed",
                unit="ms",
            )
        )


@contextlib.contextmanager
def _postgres(run_: BenchRun, dsn: str | None) -> Any:
    import uuid

    from bench.pg import create_database
    from bench.pgserver import ThrowawayPostgres, find_bindir

    if dsn is not None:
        yield create_database(dsn, f"mcp_{uuid.uuid4().hex}")
        return
    if find_bindir() is None:
        run_.note("mcp: PostgreSQL wake skipped: no server binaries found and no --dsn given")
        yield None
        return
    with ThrowawayPostgres() as server:
        yield create_database(server.dsn, f"mcp_{uuid.uuid4().hex}")


def _idle(run_: BenchRun, store: str, seconds: float) -> None:
    child = subprocess.run(
        [sys.executable, "-c", IDLE, store, str(seconds)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=600,
    )
    share = float(child.stdout.strip())
    run_.figures["mcp idle LMDB Hub CPU, % of one core"] = share * 100
    run_.targets.append(
        Target(
            name="lmdb-follow-idle-cpu",
            claim="idle LMDB Hub following other processes: CPU ms per second (10 = 1%)",
            value=share * 1000,
            bound=10.0,
            at_least=False,
            detail=f"{seconds:g} s idle, one listener",
            unit="ms",
        )
    )
