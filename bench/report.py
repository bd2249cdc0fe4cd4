"""Results of a bench run: measurements, targets, the summary table, JSON and plots.

Every figure a scenario produces is a :class:`Measurement` (one system doing one
operation under one set of parameters). Headline claims are :class:`Target`s: a ratio
of two measurements of the same run against a bound, printed as ``PASS`` or ``SHORT``
(``N/A`` when one side was not measured). Nothing here asserts: the bench reports.
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

Status = Literal["PASS", "SHORT", "N/A"]


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


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """A headline claim: ``value`` compared with ``bound`` (a ratio or an absolute figure).

    Attributes:
        name: What the target measures, as a short kebab-case name
            (``"append-store-vs-raw-lmdb"``).
        claim: The claim in words, e.g. ``"append via store >= 0.4x raw lmdb@16/txn"``.
        value: The measured figure, or ``None`` when it could not be measured.
        bound: The bound the figure is held to.
        at_least: ``True`` when ``value >= bound`` passes, ``False`` for ``<=``.
        detail: The figures the value was computed from, or why it is missing.
        unit: ``"x"`` for a ratio, else the unit of an absolute figure.
    """

    name: str
    claim: str
    value: float | None
    bound: float
    at_least: bool
    detail: str
    unit: str = "x"

    @property
    def status(self) -> Status:
        """``PASS``, ``SHORT``, or ``N/A`` when the value is missing."""
        if self.value is None:
            return "N/A"
        ok = self.value >= self.bound if self.at_least else self.value <= self.bound
        return "PASS" if ok else "SHORT"


def ratio_target(
    *,
    name: str,
    claim: str,
    numerator: float | None,
    denominator: float | None,
    bound: float,
    at_least: bool,
    what: str,
) -> Target:
    """Build a ratio target ``numerator / denominator`` against ``bound``.

    Args:
        name: What the target measures (see :class:`Target`).
        claim: The claim in words.
        numerator: Figure of our side (``None`` when not measured).
        denominator: Figure of the baseline (``None`` when not measured).
        bound: The bound on the ratio.
        at_least: Whether the ratio must be at least (else at most) ``bound``.
        what: Units of the two figures, for the detail line (e.g. ``"events/s"``).

    Returns:
        The target; ``value`` is ``None`` when either figure is missing or zero.
    """
    if numerator is None or denominator is None or denominator == 0:
        return Target(
            name=name,
            claim=claim,
            value=None,
            bound=bound,
            at_least=at_least,
            detail="not measured in this run",
        )
    return Target(
        name=name,
        claim=claim,
        value=numerator / denominator,
        bound=bound,
        at_least=at_least,
        detail=f"{numerator:,.1f} / {denominator:,.1f} {what}",
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
    """Print the summary table, the targets as PASS/SHORT lines, and the notes.

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
        ("vs baseline", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    baselines = _baseline_rates(report.measurements)
    for m in report.measurements:
        base = baselines.get((m.scenario, m.operation, _baseline_key(m)))
        versus = f"{m.ops_per_s / base:.2f}x" if base and m.system == "sharedesk" else ""
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
        console.print(f"  {figure}: {value}")
    for target in report.targets:
        style = {"PASS": "green", "SHORT": "red", "N/A": "yellow"}[target.status]
        shown = "-" if target.value is None else _fmt_value(target.value, target.unit)
        relation = ">=" if target.at_least else "<="
        bound = _fmt_value(target.bound, target.unit)
        console.print(
            f"[{style}]{target.status}[/{style}] {target.name}: {target.claim}: "
            f"{shown} ({relation} {bound}; {target.detail})",
            highlight=False,
        )
    for note in report.notes:
        console.print(f"[dim]note: {note}[/dim]", highlight=False)


def _fmt_value(value: float, unit: str) -> str:
    """Ratios with three decimals (``0.397x``), counts and sizes as whole numbers."""
    if unit == "x":
        return f"{value:.3f}x"
    return f"{value:,.0f}{unit}"


def _baseline_key(m: Measurement) -> str:
    return str(m.params.get("compare", ""))


def _baseline_rates(measurements: Sequence[Measurement]) -> dict[tuple[str, str, str], float]:
    """Index the ``baseline=True`` measurements by (scenario, operation, compare key)."""
    rates: dict[tuple[str, str, str], float] = {}
    for m in measurements:
        if m.params.get("baseline") and m.ops_per_s > 0:
            rates.setdefault((m.scenario, m.operation, _baseline_key(m)), m.ops_per_s)
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
    """Draw throughput-vs-threads and latency-histogram PNGs, when matplotlib is installed.

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
        fig, ax = plt.subplots(figsize=(7, 4.5))
        low = max(min(min(m.samples_us) for m in group), 0.1)
        high = max(max(m.samples_us) for m in group) * 1.01
        bins = [low * (high / low) ** (k / 60) for k in range(61)] if high > low else 10
        for m in group[:8]:
            ax.hist(m.samples_us, bins=bins, histtype="step", label=m.label)
        ax.set_xscale("log")
        ax.set_xlabel("latency (µs, log scale)")
        ax.set_ylabel("operations")
        ax.set_yscale("log")
        ax.set_title(f"{name.replace('-', ' ')} latency")
        ax.legend(fontsize="x-small")
        save(fig, f"{name}-latency")
    return written, None


def utc_now() -> datetime:
    """Return the current time in UTC (a report's ``started``)."""
    return datetime.now(UTC)
