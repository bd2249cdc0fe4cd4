"""Results of a bench run: measurements, targets, the summary table, JSON and plots.

Every figure a scenario produces is a :class:`Measurement` (one system doing one
operation under one set of parameters). Headline claims are :class:`Target`s, most of
them a ratio of two measurements of the same run that names its baseline, held to a
bound. A full run prints each as ``PASS`` or ``SHORT``; a ``--quick`` run is too small
to judge one and prints ``not judged (--quick)``; ``N/A`` means one side was not
measured, ``context`` a figure held to no bound. Nothing here asserts: the bench
reports.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
from rich.console import Console
from rich.table import Table

#: Most latency samples kept per measurement in the JSON file (statistics use them all).
MAX_KEPT_SAMPLES = 5000


class Measurement(msgspec.Struct, frozen=True, kw_only=True):
    """One system doing one operation, measured.

    Attributes:
        scenario: The scenario that measured it (``append``, ``read``, ...).
        system: Who did the work: ``sharedesk``, ``lmdb-raw``, ``sqlite``, ...
        operation: What was done: ``append``, ``project``, ``view``, ``turn``, ...
        label: Unique, human-readable name within the run (used by targets).
        ops: Operations completed.
        seconds: Wall time for all of them.
        ops_per_s: ``ops / seconds`` (0 when nothing ran).
        median_us: Median latency of one operation in µs, when sampled.
        p99_us: 99th percentile latency in µs, when sampled.
        params: The parameters (threads, sessions, rows, ...).
        samples_us: Up to :data:`MAX_KEPT_SAMPLES` latency samples (for plots).
        note: Anything a reader of the figure must know.
    """

    scenario: str
    system: str
    operation: str
    label: str
    ops: int
    seconds: float
    ops_per_s: float
    median_us: float | None = None
    p99_us: float | None = None
    params: dict[str, Any] = {}
    samples_us: list[float] = []
    note: str = ""


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile of already sorted values.

    Args:
        sorted_values: Values in ascending order (not empty).
        fraction: 0.5 for the median, 0.99 for p99.

    Returns:
        The smallest value with at least ``fraction`` of the values at or below it.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = max(1, -(-int(fraction * 1_000_000 * len(sorted_values)) // 1_000_000))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def measurement(
    *,
    scenario: str,
    system: str,
    operation: str,
    label: str,
    ops: int,
    seconds: float,
    latencies_ns: Sequence[int] = (),
    params: dict[str, Any] | None = None,
    note: str = "",
) -> Measurement:
    """Build a :class:`Measurement`, deriving rate and percentiles from raw figures.

    Args:
        scenario: See :class:`Measurement`.
        system: See :class:`Measurement`.
        operation: See :class:`Measurement`.
        label: See :class:`Measurement`.
        ops: Operations completed.
        seconds: Wall time.
        latencies_ns: Per-operation latencies in nanoseconds (may be empty).
        params: Parameters of the measurement.
        note: A note for the reader.

    Returns:
        The measurement, with at most :data:`MAX_KEPT_SAMPLES` samples kept (evenly
        strided, so the histogram keeps its shape).
    """
    samples = sorted(ns / 1000.0 for ns in latencies_ns)
    median = percentile(samples, 0.5) if samples else None
    p99 = percentile(samples, 0.99) if samples else None
    stride = max(1, -(-len(samples) // MAX_KEPT_SAMPLES))
    return Measurement(
        scenario=scenario,
        system=system,
        operation=operation,
        label=label,
        ops=ops,
        seconds=seconds,
        ops_per_s=ops / seconds if seconds > 0 else 0.0,
        median_us=median,
        p99_us=p99,
        params=dict(params or {}),
        samples_us=[round(s, 2) for s in samples[::stride]],
        note=note,
    )


def timed_calls(
    *,
    scenario: str,
    operation: str,
    label: str,
    latencies_ns: Sequence[int],
    system: str = "sharedesk",
    params: dict[str, Any] | None = None,
    note: str = "",
) -> Measurement:
    """Build the :class:`Measurement` of calls timed one by one.

    ``ops`` counts the calls and ``seconds`` sums their latencies (the time between
    calls does not count).
    """
    return measurement(
        scenario=scenario,
        system=system,
        operation=operation,
        label=label,
        ops=len(latencies_ns),
        seconds=sum(latencies_ns) / 1e9,
        latencies_ns=latencies_ns,
        params=params,
        note=note,
    )


Status = Literal["PASS", "SHORT", "N/A", "not judged", "context"]


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """A headline claim: ``value`` compared with ``bound`` (a ratio or an absolute figure).

    Attributes:
        name: What the target measures, as a short kebab-case name
            (``"append-store-vs-raw-lmdb"``).
        claim: What was measured, e.g. ``"append via store durable t=16"``.
        value: The measured figure, or ``None`` when it could not be measured.
        bound: The bound the figure is held to; ``None`` for a figure reported as
            context, held to nothing.
        at_least: ``True`` when ``value >= bound`` passes, ``False`` for ``<=``.
        detail: The figures the value was computed from, or why it is missing.
        unit: ``"x"`` for a ratio, else the unit of an absolute figure.
        baseline: What a ratio is a ratio to, e.g. ``"raw py-lmdb (16 events/txn)"``;
            every ratio names one.
        judged: ``False`` for a ``--quick`` run, whose figures are too small to hold
            against a bound.
    """

    name: str
    claim: str
    value: float | None
    bound: float | None
    at_least: bool
    detail: str
    unit: str = "x"
    baseline: str = ""
    judged: bool = True

    def __post_init__(self) -> None:
        if self.unit == "x" and not self.baseline:
            raise ValueError(f"ratio target {self.name!r} does not name its baseline")

    @property
    def status(self) -> Status:
        """``PASS`` or ``SHORT`` against the bound, else why not.

        ``N/A`` when the value is missing, ``context`` when there is no bound, ``not
        judged`` on a ``--quick`` run.
        """
        if self.value is None:
            return "N/A"
        if self.bound is None:
            return "context"
        if not self.judged:
            return "not judged"
        ok = self.value >= self.bound if self.at_least else self.value <= self.bound
        return "PASS" if ok else "SHORT"


def ratio_target(
    *,
    name: str,
    claim: str,
    numerator: float | None,
    denominator: float | None,
    baseline: str,
    bound: float | None,
    at_least: bool,
    what: str,
) -> Target:
    """Build a ratio target ``numerator / denominator`` against ``bound``.

    Args:
        name: What the target measures (see :class:`Target`).
        claim: What the numerator measured.
        numerator: Figure of our side (``None`` when not measured).
        denominator: Figure of the baseline (``None`` when not measured).
        baseline: What the denominator measured (printed after the ratio).
        bound: The bound on the ratio (``None``: reported as context).
        at_least: Whether the ratio must be at least (else at most) ``bound``.
        what: Units of the two figures, for the detail line (e.g. ``"events/s"``).

    Returns:
        The target; ``value`` is ``None`` when either figure is missing or zero.
    """
    if numerator is None or denominator is None or denominator == 0:
        value, detail = None, "not measured in this run"
    else:
        value, detail = numerator / denominator, f"{numerator:,.1f} / {denominator:,.1f} {what}"
    return Target(
        name=name,
        claim=claim,
        value=value,
        bound=bound,
        at_least=at_least,
        detail=detail,
        baseline=baseline,
    )


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one ``python -m bench`` run measured.

    Attributes:
        scenario: The scenario asked for (``all`` for every one).
        started: When the run started (UTC).
        argv: The command line.
        machine: Python version, platform, CPU count.
        measurements: Every measurement, in the order taken.
        targets: Every target checked.
        figures: Scenario-specific counts (crash: acknowledged/lost/duplicated, ...).
        notes: Skipped baselines, substitutions and other remarks.
    """

    scenario: str
    started: datetime
    argv: list[str]
    machine: dict[str, Any]
    measurements: list[Measurement]
    targets: list[Target]
    figures: dict[str, Any]
    notes: list[str]


def machine_info() -> dict[str, Any]:
    """Return what a reader needs to compare runs: Python, platform, CPUs."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def _fmt_us(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:,.1f} ms"
    return f"{value:,.1f} µs"


def print_summary(console: Console, report: Report) -> None:
    """Print the summary table, the targets (one line each), and the notes.

    A target's line starts with its status: ``PASS`` or ``SHORT`` on a full run,
    ``not judged (--quick)`` on a quick one, ``context`` for a figure held to no bound,
    ``N/A`` when it was not measured. A ratio is followed by the name of its baseline.

    Args:
        console: Where to print.
        report: The finished report.
    """
    table = Table(title=f"sharedesk bench: {report.scenario}", show_lines=False)
    for column, justify in (
        ("measurement", "left"),
        ("ops", "right"),
        ("ops/s", "right"),
        ("median", "right"),
        ("p99", "right"),
        ("vs baseline", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    baselines = _baseline_rates(report.measurements)
    for m in report.measurements:
        base = baselines.get((m.scenario, m.operation, _baseline_key(m)))
        versus = ""
        if base is not None and m.system == "sharedesk":
            versus = f"{m.ops_per_s / base[1]:.2f}x {base[0]}"
        table.add_row(
            m.label,
            f"{m.ops:,}",
            f"{m.ops_per_s:,.0f}",
            _fmt_us(m.median_us),
            _fmt_us(m.p99_us),
            versus,
        )
    console.print(table)
    for figure, value in report.figures.items():
        console.print(f"  {figure}: {_fmt_figure(value)}", highlight=False)
    for target in report.targets:
        console.print(target_line(target), highlight=False)
    for note in report.notes:
        console.print(f"[dim]note: {note}[/dim]", highlight=False)


#: How each status is shown at the start of a target's line (rich markup).
_SHOWN: dict[Status, str] = {
    "PASS": "[green]PASS[/green]",
    "SHORT": "[red]SHORT[/red]",
    "N/A": "[yellow]N/A[/yellow]",
    "not judged": "[dim]not judged (--quick)[/dim]",
    "context": "[cyan]context[/cyan]",
}


def target_line(target: Target) -> str:
    """Return the summary line of ``target`` (rich markup): status, claim, value, bound.

    Example: ``PASS async-append-vs-raw-lmdb: append AsyncHub durable c=1000: 1.040x raw
    py-lmdb (16 events/txn) (target >= 1.000x; 41,600.0 / 40,000.0 events/s)``.
    """
    shown = "-" if target.value is None else _fmt_value(target.value, target.unit)
    if target.baseline:
        shown = f"{shown} {target.baseline}"
    if target.bound is None:
        held = target.detail
    else:
        relation = ">=" if target.at_least else "<="
        held = f"target {relation} {_fmt_value(target.bound, target.unit)}; {target.detail}"
    return f"{_SHOWN[target.status]} {target.name}: {target.claim}: {shown} ({held})"


def _fmt_value(value: float, unit: str) -> str:
    """Format a target's figure: a ratio as ``0.397x``, ms as ``4.3 ms``, else whole."""
    if unit == "x":
        return f"{value:.3f}x"
    if unit == "ms":
        return f"{value:,.1f} ms"
    return f"{value:,.0f}{unit}"


def _fmt_figure(value: Any) -> str:
    """Format a scenario's figure: floats with two decimals, dicts as ``key value``."""
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, dict):
        return ", ".join(f"{key} {_fmt_figure(item)}" for key, item in value.items())
    return str(value)


def _baseline_key(m: Measurement) -> str:
    return str(m.params.get("compare", ""))


def _baseline_rates(
    measurements: Sequence[Measurement],
) -> dict[tuple[str, str, str], tuple[str, float]]:
    """Index the baseline measurements by (scenario, operation, compare key).

    A baseline measurement names itself in ``params["baseline"]``; the value is that
    name and its ops/s.
    """
    rates: dict[tuple[str, str, str], tuple[str, float]] = {}
    for m in measurements:
        name = m.params.get("baseline")
        if isinstance(name, str) and name and m.ops_per_s > 0:
            rates.setdefault((m.scenario, m.operation, _baseline_key(m)), (name, m.ops_per_s))
    return rates


def write_json(report: Report, directory: Path) -> Path:
    """Write ``report`` as ``<directory>/<scenario>-<timestamp>.json``.

    Returns:
        The path written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    stamp = report.started.strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{report.scenario}-{stamp}.json"
    path.write_bytes(msgspec.json.format(msgspec.json.encode(report)))
    return path


def write_plots(report: Report, directory: Path) -> tuple[list[Path], str | None]:
    """Draw throughput-vs-threads and latency PNGs (small multiples), when matplotlib is installed.

    Returns:
        The files written, and a note when plotting was skipped.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib not installed: plots skipped (pip install 'sharedesk[bench]')"
    directory.mkdir(parents=True, exist_ok=True)
    stamp = report.started.strftime("%Y%m%dT%H%M%SZ")
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = directory / f"{report.scenario}-{stamp}-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    series: dict[str, list[tuple[int, float]]] = {}
    for m in report.measurements:
        threads = m.params.get("threads")
        if m.scenario == "append" and m.operation == "append" and isinstance(threads, int):
            series.setdefault(m.params.get("series", m.system), []).append((threads, m.ops_per_s))
    if any(len(points) > 1 for points in series.values()):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, points in sorted(series.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        for m in report.measurements:
            per_txn = m.params.get("per_txn")
            if m.system == "lmdb-raw" and per_txn is not None and m.ops_per_s > 0:
                ax.axhline(m.ops_per_s, linestyle="--", linewidth=0.8, color="grey")
                ax.annotate(
                    f"raw lmdb {per_txn}/txn",
                    (1, m.ops_per_s),
                    fontsize="x-small",
                    color="grey",
                )
        ax.set_xlabel("writer threads")
        ax.set_ylabel("events/s")
        ax.set_xscale("log", base=2)
        ax.set_title("append throughput against writer threads")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        save(fig, "throughput")

    by_operation: dict[str, list[Measurement]] = {}
    for m in report.measurements:
        if m.samples_us:
            by_operation.setdefault(f"{m.scenario}-{m.operation}", []).append(m)
    for name, group in sorted(by_operation.items()):
        pages = [group[k : k + PANELS_PER_PLOT] for k in range(0, len(group), PANELS_PER_PLOT)]
        for page, panels in enumerate(pages, start=1):
            scenario, operation = name.split("-", 1)
            fig = _latency_panels(plt, panels, f"{scenario}: {operation} latency")
            save(fig, f"{name}-latency" if len(pages) == 1 else f"{name}-latency-{page}")
    return written, None


#: Most series in one latency plot (one panel each); more go to further plots.
PANELS_PER_PLOT = 12


def _latency_panels(plt: Any, group: Sequence[Measurement], title: str) -> Any:
    """Draw one latency histogram per measurement, in a grid sharing one log x axis.

    Small multiples: each series keeps its own panel, titled with its label and marked
    at its median and p99, however many series the operation has.
    """
    columns = min(3, len(group))
    rows = -(-len(group) // columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(4.2 * columns, 2.6 * rows + 0.6),
        sharex=True,
        squeeze=False,
    )
    low = max(min(min(m.samples_us) for m in group), 0.1)
    high = max(max(m.samples_us) for m in group) * 1.01
    bins = [low * (high / low) ** (k / 60) for k in range(61)] if high > low else 10
    for ax, m in zip(axes.flat, group, strict=False):
        ax.hist(m.samples_us, bins=bins, color="tab:blue")
        for value, style in ((m.median_us, "-"), (m.p99_us, "--")):
            if value is not None:
                ax.axvline(value, color="black", linestyle=style, linewidth=0.8)
        ax.set_title(
            f"{m.label}\nmedian {_fmt_us(m.median_us)}, p99 {_fmt_us(m.p99_us)}",
            fontsize="small",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(group) :]:
        ax.set_visible(False)
    for column in range(columns):  # the lowest panel of each column shows the x axis
        lowest = axes[(len(group) - 1 - column) // columns, column]
        lowest.xaxis.set_tick_params(labelbottom=True)
        lowest.set_xlabel("latency (µs, log scale)")
    for ax in axes[:, 0]:
        ax.set_ylabel("operations")
    fig.suptitle(title)
    return fig


def utc_now() -> datetime:
    """Return the current time in UTC (a report's ``started``)."""
    return datetime.now(UTC)
