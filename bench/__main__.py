"""``python -m bench SCENARIO [options]``: load-test sharedesk next to its baselines.

Run from the checkout. Every scenario writes its data under a temporary directory (or
``--dir``), prints a progress bar per long step, a summary table, its named targets
(``PASS``/``SHORT`` on a full run, ``not judged (--quick)`` on a quick one), then writes
a JSON results file and PNG plots to ``bench/results/`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import msgspec
from rich.console import Console

from bench.harness import BenchRun
from bench.options import COMMON, Option, declare, settle
from bench.report import Report, machine_info, print_summary, utc_now, write_json, write_plots
from bench.scenarios import SCENARIOS

EPILOG = """\
examples:
  python -m bench append                      # 1000 sessions, 1/4/16 writer threads
  python -m bench append --threads 16 --durability both --via store
  python -m bench read --sizes 10000,1000000  # turn delta cost flat in history?
  python -m bench scale --sessions 100000 --max-active 1024
  python -m bench append --backend postgres   # PostgresStore vs eventsourcing, psycopg
  python -m bench all --quick                 # every scenario, tiny, in seconds

A full run prints each target as a PASS or SHORT line, its ratio followed by the name of
its baseline; a --quick run is too small to judge and prints "not judged (--quick)".
Nothing is asserted. Figures depend on the machine: compare the ratios, which are
measured against baselines in the same run.
Durations on a 2-core machine: `all` about 10 minutes (scale's 100,000 sessions and
read's 1,000,000-row desk take most of it), each scenario alone 10 s to 4 minutes,
`--quick` a few seconds; `all` adds `append --backend postgres` (about a minute) when
PostgreSQL's binaries are installed or `--dsn` is given. openai-agents' SQLiteSession is
measured too when the `agents` package is importable (pip install openai-agents);
otherwise a note says so.
"""


#: The one option of ``all`` beyond the common ones.
ALL_DSN = Option(
    "--dsn",
    None,
    "PostgreSQL server for the append --backend postgres part (default: a throwaway "
    "server when PostgreSQL's binaries are installed, else skipped)",
)


def build_parser() -> argparse.ArgumentParser:
    """Return the ``python -m bench`` argument parser (one subcommand per scenario)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Load-test sharedesk with baselines measured in the same run.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    for module in SCENARIOS:
        scenario_parser = sub.add_parser(
            module.NAME,
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        declare(scenario_parser, (*module.OPTIONS, *COMMON))
    everything = sub.add_parser(
        "all",
        help="every scenario with its defaults, one report",
        description="Run every scenario with its default (or --quick) options.",
    )
    declare(everything, (ALL_DSN, *COMMON))
    return parser


def _all_postgres(run: BenchRun, args: argparse.Namespace, console: Console) -> None:
    """In ``all``: ``append --backend postgres`` too, when a server is available."""
    from bench.scenarios import append, append_pg

    if not append_pg.postgres_available(args.dsn):
        run.note("PostgreSQL figures skipped: no server binaries found and no --dsn given")
        return
    options = ["append", "--backend", "postgres", *(["--dsn", args.dsn] if args.dsn else [])]
    defaults = build_parser().parse_args(options)
    defaults.quick = args.quick
    console.rule("[bold]append --backend postgres")
    append.run(run, defaults)


def main(argv: list[str] | None = None) -> int:
    """Run the scenario named on the command line; return the exit status."""
    parser = build_parser()
    args = settle(parser.parse_args(argv), COMMON, quick=False)
    from sharedesk import configure_logging

    configure_logging(level=args.log_level)
    console = Console() if sys.stdout.isatty() else Console(width=140)
    started = utc_now()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="sharedesk-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    run = BenchRun(
        console=console,
        workdir=workdir,
        quick=args.quick,
        show_progress=not args.no_progress and console.is_terminal,
    )
    try:
        if args.scenario == "all":
            for module in SCENARIOS:
                defaults = build_parser().parse_args([module.NAME])
                defaults.quick = args.quick
                console.rule(f"[bold]{module.NAME}")
                module.run(run, defaults)
                if module.NAME == "append":
                    _all_postgres(run, args, console)
        else:
            module = next(m for m in SCENARIOS if args.scenario == m.NAME)
            module.run(run, args)
    except KeyboardInterrupt:
        console.print("[red]interrupted[/red]: partial results follow")
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report = Report(
        scenario=args.scenario,
        started=started,
        argv=["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)],
        machine=machine_info(),
        measurements=run.measurements,
        targets=[msgspec.structs.replace(t, judged=not args.quick) for t in run.targets],
        figures=run.figures,
        notes=run.notes,
    )
    if not args.no_plots:
        plots, skipped = write_plots(report, args.out)
        if skipped:
            report.notes.append(skipped)
        for plot in plots:
            report.notes.append(f"plot: {plot}")
    path = write_json(report, args.out)
    print_summary(console, report)
    console.print(f"results: {path}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
