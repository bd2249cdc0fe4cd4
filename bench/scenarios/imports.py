"""``imports``: the time ``import sharedesk`` takes, as a ratio to its core dependencies.

Each round starts two fresh interpreters, alternately: one runs ``import sharedesk``,
the other ``import msgspec, lmdb, pykka, structlog`` (the baseline: what sharedesk
cannot avoid importing). The medians of their wall times are compared; the target
(``import-vs-core-deps``) is a ratio of at most 1.5x. A bare ``python -c pass`` is timed
as well, so the interpreter's own start-up can be read off the figures.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import BenchRun
from bench.options import Option, settle
from bench.report import ratio_target, timed_calls

NAME = "imports"
HELP = "import sharedesk vs import msgspec, lmdb, pykka, structlog (fresh interpreters)"

CHECKOUT = Path(__file__).resolve().parents[2]

#: The three programs timed, by label.
PROGRAMS = {
    "import sharedesk": "import sharedesk",
    "import msgspec, lmdb, pykka, structlog": "import msgspec, lmdb, pykka, structlog",
    "python -c pass": "pass",
}


OPTIONS = (Option("--rounds", 30, "interpreters started per program", quick=3),)


def _time_once(code: str) -> int:
    start = time.perf_counter_ns()
    subprocess.run([sys.executable, "-c", code], cwd=CHECKOUT, check=True)
    return time.perf_counter_ns() - start


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)
    samples: dict[str, list[int]] = {label: [] for label in PROGRAMS}
    for code in PROGRAMS.values():  # warm the file cache; not counted
        _time_once(code)
    with run_.progress("fresh interpreters", args.rounds) as advance:
        for _ in range(args.rounds):
            for label, code in PROGRAMS.items():
                samples[label].append(_time_once(code))
            advance(1)
    medians: dict[str, float] = {}
    for label, latencies in samples.items():
        system = "sharedesk" if label == "import sharedesk" else "baseline"
        run_.measurements.append(
            timed_calls(
                scenario=NAME,
                system=system,
                operation="import",
                label=label,
                latencies_ns=latencies,
                params={"rounds": args.rounds},
                note="wall time of a fresh interpreter running the import",
            )
        )
        medians[label] = statistics.median(latencies) / 1e6
    run_.figures["import sharedesk / core deps / bare python (median ms)"] = " / ".join(
        f"{medians[label]:.1f}" for label in PROGRAMS
    )
    run_.targets.append(
        ratio_target(
            name="import-vs-core-deps",
            claim="import sharedesk, median",
            numerator=medians["import sharedesk"],
            denominator=medians["import msgspec, lmdb, pykka, structlog"],
            baseline="import msgspec, lmdb, pykka, structlog",
            bound=1.5,
            at_least=False,
            what="ms (median wall time of a fresh interpreter)",
        )
    )
