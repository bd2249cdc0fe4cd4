"""``web``: open pages following a desk while agents post, and telemetry's cost on turns.

Part 1, side by side in one run: one Hub on LMDB (durable) served by
``sharedesk.servers.web`` (uvicorn on 127.0.0.1, in this process), with no page open,
then with ``--pages`` pages following the desk's event stream (server-sent events, from
a child process: ``bench.web_child``), each on a fresh store, in ``--rounds``
alternating rounds (each setting's rate: its median round). The agents post from
a process of their own (as they do next to ``sharedesk serve``: the target, with pages
at least 0.8x without), then from threads of the server's own process (reported as
context: there the page traffic and the posts share one interpreter lock). Reported:
the post rates and the post-to-page latency over every row on every page (median,
p99). Rows of another process reach the server's feeds through the LMDB store's
follower, as the Hub's own commits do.

Part 2 (alone: ``--telemetry-only``): ``hub.turn`` + ``turn.commit`` with
``opentelemetry-api`` installed but no tracer provider ("off"), and with an SDK provider
recording every span into a batch processor whose exporter drops them ("on"), in
``--pairs`` pairs of rounds, each round on a fresh Hub, each pair's order the reverse of
the last one's: on a durable LMDB Hub (the target: on at most 1.1x off) and on an
in-memory Hub (context: no fsync, so the spans' own cost shows in full). The figure is
the median of the pairs' ratios (each: on's median turn over off's, in the same pair),
printed with their spread, so that a spell of load elsewhere on the machine skews one
pair, not the figure; as context, the same of the process's CPU per turn, which the
machine's other work does not lengthen.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from bench.harness import BenchRun, open_hub
from bench.options import Option, settle
from bench.report import Target, measurement, percentile, ratio_target

NAME = "web"
HELP = "pages following a desk while agents post; telemetry on vs off per turn"

DESK = "desk"


OPTIONS = (
    Option("--pages", 200, "pages following the desk", quick=3),
    Option("--agents", 4, "agents posting", quick=2),
    Option("--rows", 100, "rows each agent posts", quick=5),
    Option("--turns", 2000, "turns timed per telemetry setting", quick=20),
    Option("--rounds", 3, "alternating rounds without and with pages", quick=1),
    Option("--pairs", 40, "pairs of rounds, telemetry off and on", quick=1),
    Option("--telemetry-only", False, "only part 2: telemetry on vs off"),
)


#: The agents of an ``elsewhere`` run: their own process and Hub on the served store.
AGENTS = """\
import sys, threading, time
from sharedesk import Agent, Hub

path, n_agents, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with Hub.open(path) as hub:
    hub.session("desk").last_sequence()

    def agent(index):
        author = Agent(id=f"agent{index}", label=f"Agent {index}")
        session = hub.session("desk")
        for i in range(rows):
            session.post(author, f"t={time.perf_counter_ns()} row {i}")

    workers = [threading.Thread(target=agent, args=(k,)) for k in range(n_agents)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(time.perf_counter() - start, flush=True)
"""


def _post_agents_here(hub: Any, n_agents: int, rows: int) -> float:
    """Post from ``n_agents`` threads of this process; return the seconds it took."""
    from sharedesk import Agent

    def agent(index: int) -> None:
        author = Agent(id=f"agent{index}", label=f"Agent {index}")
        session = hub.session(DESK)
        for i in range(rows):
            session.post(author, f"t={time.perf_counter_ns()} row {i}")

    workers = [threading.Thread(target=agent, args=(k,)) for k in range(n_agents)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def _post_rate(
    run_: BenchRun, n_agents: int, rows: int, pages: int, *, elsewhere: bool
) -> tuple[float, float, list[int]]:
    """Serve a fresh store, open ``pages`` pages, post; return (rows/s, seconds, latencies).

    ``elsewhere``: the agents post from a process of their own (as next to
    ``sharedesk serve``), else from threads of the server's process, through its Hub.
    """
    from sharedesk import Agent
    from sharedesk.servers.web import create_app

    path = run_.fresh_dir("web") / "store"
    hub = open_hub(path, "durable")
    server = RunningServer(create_app(hub))
    child = None
    try:
        hub.session(DESK).post(Agent(id="setup", label="setup"), "the desk opens")
        total = n_agents * rows
        if pages:
            url = f"{server.url}/api/desks/{DESK}/events"
            child = subprocess.Popen(
                [sys.executable, "-m", "bench.web_child", url, str(pages), str(total)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("the pages did not open")
        if elsewhere:
            done = subprocess.run(
                [sys.executable, "-c", AGENTS, str(path), str(n_agents), str(rows)],
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            )
            seconds = float(done.stdout.strip().splitlines()[-1])
        else:
            seconds = _post_agents_here(hub, n_agents, rows)
        latencies: list[int] = []
        if child is not None:
            out, _ = child.communicate(timeout=600)
            latencies = json.loads(out.strip().splitlines()[-1])
            if child.returncode != 0:
                raise RuntimeError(f"bench.web_child exited with {child.returncode}")
        return total / seconds, seconds, latencies
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        server.stop()
        hub.close()


class RunningServer:
    """An ASGI app served by uvicorn on a thread, on a port of 127.0.0.1 the OS picked.

    The socket listens before uvicorn starts, so a client may connect at once: its
    connection waits in the backlog until uvicorn accepts it. The tests serve their apps
    with it too (``tests/servers/webserver.py``).
    """

    def __init__(self, app: Any) -> None:
        import uvicorn

        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(1024)
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop uvicorn and wait for its thread (at most 10 s)."""
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()
        assert not self._thread.is_alive(), "uvicorn did not stop"


def _turns(n_turns: int, path: Any) -> tuple[list[int], int]:
    """Time ``n_turns`` turn-and-commit pairs on a fresh Hub: ns each, and CPU ns in all.

    The CPU is the process's, every thread's, while the turns ran: unlike their
    durations, it does not grow when the machine's other work takes the cores away.

    ``path``: an LMDB directory (durable), or ``None`` for an in-memory Hub.
    """
    from sharedesk import Agent, Person

    ana, bot = Person(id="ana", label="Ana"), Agent(id="bot", label="Bot")
    samples: list[int] = []
    cpu = 0
    with open_hub(path, "durable") as hub:
        session = hub.session(DESK)
        for i in range(n_turns + 20):
            session.post(ana, f"row {i}")
            t0, c0 = time.perf_counter_ns(), time.process_time_ns()
            hub.turn(DESK, bot).commit(f"reply {i}")
            if i >= 20:  # the first turns warm the actors
                samples.append(time.perf_counter_ns() - t0)
                cpu += time.process_time_ns() - c0
    return samples, cpu


def _telemetry_cost(run_: BenchRun, n_turns: int, pairs: int, store: str) -> None:
    """Time turn+commit with telemetry off and on in ``pairs`` pairs of rounds, on ``store``.

    The target is the median of the pairs' ratios of medians (see the module).
    """
    samples: dict[str, list[int]] = {"off": [], "on": []}
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    for pair in range(pairs):
        medians: dict[str, float] = {}
        cpu: dict[str, int] = {}
        # Each pair's order reverses the last one's: the first round of a pair is not
        # always the same setting's.
        for setting in ("off", "on") if pair % 2 == 0 else ("on", "off"):
            path = None if store == "memory" else run_.fresh_dir("web-otel") / "store"
            provider = _with_provider() if setting == "on" else None
            try:
                taken, cpu[setting] = _turns(max(1, n_turns // pairs), path)
            finally:
                if provider is not None:
                    provider.shutdown()
                    _unset_provider()
            samples[setting] += taken
            medians[setting] = statistics.median(taken)
        ratios.append(medians["on"] / medians["off"])
        cpu_ratios.append(cpu["on"] / max(1, cpu["off"]))
    where = "in-memory Hub" if store == "memory" else "LMDB Hub (durable)"
    for setting, taken in samples.items():
        run_.measurements.append(
            measurement(
                scenario=NAME,
                system="sharedesk",
                operation="turn+commit",
                label=f"turn+commit, telemetry {setting}, {store}",
                ops=len(taken),
                seconds=sum(taken) / 1e9,
                latencies_ns=taken,
                params={"turns": n_turns, "pairs": pairs, "store": store},
                note=f"{where}; off: opentelemetry-api without a provider",
            )
        )
    pooled = " / ".join(f"{statistics.median(taken) / 1e3:,.1f}" for taken in samples.values())
    suffix = "" if store == "lmdb" else "-in-memory"
    for name, claim, figures, bound, baseline in (
        (
            "web-telemetry-turn-cost" + suffix,
            f"turn+commit median with telemetry recording, {where}",
            ratios,
            1.1 if store == "lmdb" else None,
            f"turn+commit with no tracer provider, same pair (all turns' medians, off / on:"
            f" {pooled} µs)",
        ),
        (
            "web-telemetry-turn-cpu" + suffix,
            f"process CPU per turn+commit with telemetry recording, {where}",
            cpu_ratios,
            None,
            "the same with no tracer provider, same pair",
        ),
    ):
        ordered, n = sorted(figures), len(figures)
        spread = (
            f"middle half {ordered[n // 4]:.3f}-{ordered[(3 * n) // 4]:.3f},"
            f" all {ordered[0]:.3f}-{ordered[-1]:.3f}"
        )
        run_.targets.append(
            Target(
                name=name,
                claim=claim,
                value=statistics.median(figures),
                bound=bound,
                at_least=False,
                detail=f"median of {pairs} pairs' ratios, {spread}",
                baseline=baseline,
            )
        )


def _with_provider() -> Any:
    """Set a recording SDK tracer provider whose batch exporter drops every span."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    trace.set_tracer_provider(provider)
    return provider


def _unset_provider() -> None:
    """Unset the global tracer provider, as opentelemetry's own test helpers do.

    OpenTelemetry sets it once per process; scenarios run after this one (and the
    bench's tests, which run scenarios in-process) must not record spans.
    """
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


def _pages_cost(
    run_: BenchRun, n_agents: int, rows: int, n_pages: int, rounds: int, elsewhere: bool, where: str
) -> None:
    """Post with no page open and with ``n_pages`` open, in alternating rounds.

    The rate of each setting is its median over the rounds, so that a spell of load
    from elsewhere on the machine skews one round, not the ratio.
    """
    rates: dict[int, list[float]] = {0: [], n_pages: []}
    seconds: dict[int, float] = {0: 0.0, n_pages: 0.0}
    latencies: list[int] = []
    for _ in range(rounds):
        for pages in (0, n_pages):
            rate, took, samples = _post_rate(run_, n_agents, rows, pages, elsewhere=elsewhere)
            rates[pages].append(rate)
            seconds[pages] += took
            latencies += samples
    note = "session.post on LMDB (durable); latencies: post to page, every page"
    params = {"agents": n_agents, "rows": rows, "rounds": rounds}
    run_.measurements += [
        measurement(
            scenario=NAME,
            system="sharedesk",
            operation="post",
            note=note,
            label=f"web post, {f'{pages} pages' if pages else 'no page'} open, {where}",
            ops=n_agents * rows * rounds,
            seconds=seconds[pages],
            latencies_ns=latencies if pages else [],
            params={**params, "pages": pages},
        )
        for pages in (0, n_pages)
    ]
    run_.targets.append(
        ratio_target(
            name="web-post-rate-with-pages" + ("" if elsewhere else "-same-process"),
            claim=f"post rate with {n_pages} pages following the desk, {where}",
            numerator=statistics.median(rates[n_pages]),
            denominator=statistics.median(rates[0]),
            baseline=f"the same posts with no page open (medians of {rounds} rounds)",
            bound=0.8 if elsewhere else None,
            at_least=True,
            what="rows/s",
        )
    )
    ordered = sorted(latencies)
    expected = n_pages * n_agents * rows * rounds
    run_.figures[f"web post-to-page latency median/p99 (ms), {where}"] = (
        f"{percentile(ordered, 0.5) / 1e6:.2f}/{percentile(ordered, 0.99) / 1e6:.2f}"
        if ordered
        else "-"
    )
    run_.figures[f"web rows delivered to pages / expected, {where} (must be equal)"] = (
        f"{len(ordered)}/{expected}"
    )


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)
    q = run_.quick
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        run_.note("web scenario skipped: the web extra (starlette, uvicorn) is not installed")
        return

    for elsewhere, where in (
        (True, "agents in their own process"),
        (False, "agents in the server"),
    ):
        if not args.telemetry_only:
            _pages_cost(
                run_, args.agents, args.rows, args.pages, 1 if q else args.rounds, elsewhere, where
            )

    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        run_.note("web telemetry part skipped: opentelemetry-sdk is not installed")
        return
    for store in ("lmdb", "memory"):
        _telemetry_cost(run_, args.turns, args.pairs, store)
