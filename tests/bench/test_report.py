"""The bench's result types and helpers: percentiles, targets, the JSON file, options."""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from bench.options import Option, declare, int_list, pick, settle
from bench.report import (
    MAX_KEPT_SAMPLES,
    PANELS_PER_PLOT,
    Measurement,
    Report,
    Target,
    machine_info,
    measurement,
    percentile,
    print_summary,
    ratio_target,
    target_line,
    utc_now,
    write_json,
    write_plots,
)


class TestPercentile:
    def test_median_of_odd_count_is_the_middle_value(self) -> None:
        assert 3.0 == percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5)

    def test_p99_of_a_hundred_values_is_the_99th(self) -> None:
        assert 99.0 == percentile([float(i) for i in range(1, 101)], 0.99)

    def test_percentile_of_nothing_is_an_error(self) -> None:
        with pytest.raises(ValueError):
            percentile([], 0.5)

    @given(st.lists(st.floats(0, 1e9), min_size=1), st.floats(0.01, 1.0))
    def test_percentile_is_a_sample_with_at_least_that_fraction_at_or_below(
        self, values: list[float], fraction: float
    ) -> None:
        ordered = sorted(values)

        value = percentile(ordered, fraction)

        assert value in ordered
        assert sum(v <= value for v in ordered) >= fraction * len(ordered) - 1e-9


class TestMeasurement:
    def test_rate_and_percentiles_come_from_the_raw_figures(self) -> None:
        m = measurement(
            scenario="s",
            system="sharedesk",
            operation="append",
            label="l",
            ops=10,
            seconds=2.0,
            latencies_ns=[1000 * i for i in range(1, 11)],
        )

        assert (5.0, 5.0, 10.0) == (m.ops_per_s, m.median_us, m.p99_us)

    def test_no_latencies_leave_percentiles_empty(self) -> None:
        m = measurement(scenario="s", system="x", operation="o", label="l", ops=3, seconds=1.0)

        assert (None, None, []) == (m.median_us, m.p99_us, m.samples_us)

    def test_kept_samples_are_capped_but_statistics_use_all(self) -> None:
        latencies = list(range(1000, 15_000_001, 1000))  # 15,000 samples: 1 µs .. 15,000 µs

        m = measurement(
            scenario="s",
            system="x",
            operation="o",
            label="l",
            ops=len(latencies),
            seconds=1.0,
            latencies_ns=latencies,
        )

        assert len(m.samples_us) <= MAX_KEPT_SAMPLES
        assert (7500.0, 14850.0) == (m.median_us, m.p99_us)

    def test_zero_seconds_gives_zero_rate(self) -> None:
        m = measurement(scenario="s", system="x", operation="o", label="l", ops=0, seconds=0.0)

        assert 0.0 == m.ops_per_s


def target(value: float | None, **changes: object) -> Target:
    """A ratio target of ``value`` held to at least 0.4 (``changes`` override fields)."""
    fields: dict[str, object] = {
        "name": "append-store-vs-raw-lmdb",
        "claim": "append LmdbStore durable t=16",
        "value": value,
        "bound": 0.4,
        "at_least": True,
        "detail": "d",
        "baseline": "raw py-lmdb (16 events/txn)",
        **changes,
    }
    return Target(**fields)  # type: ignore[arg-type]


def shown(line: str) -> str:
    """``line`` as printed, its rich markup rendered to plain text."""
    console = Console(record=True, width=400)
    console.print(line, highlight=False)
    return console.export_text().strip()


class TestTarget:
    @pytest.mark.parametrize(
        ("value", "at_least", "status"),
        [
            (0.5, True, "PASS"),
            (0.4, True, "PASS"),
            (0.3, True, "SHORT"),
            (0.3, False, "PASS"),
            (0.5, False, "SHORT"),
            (None, True, "N/A"),
        ],
    )
    def test_status_compares_value_with_bound_in_the_stated_direction(
        self, value: float | None, at_least: bool, status: str
    ) -> None:
        assert status == target(value, at_least=at_least).status

    @pytest.mark.parametrize("value", [0.1, 0.9])
    def test_a_quick_run_judges_no_target(self, value: float) -> None:
        assert "not judged" == target(value, judged=False).status

    def test_a_target_without_a_bound_is_context(self) -> None:
        assert "context" == target(0.35, bound=None).status

    def test_a_ratio_must_name_its_baseline(self) -> None:
        with pytest.raises(ValueError, match="baseline"):
            target(0.5, baseline="")

    def test_an_absolute_figure_needs_no_baseline(self) -> None:
        assert "PASS" == target(4.0, unit="ms", baseline="", bound=10.0, at_least=False).status

    def test_ratio_is_numerator_over_denominator(self) -> None:
        made = ratio_target(
            name="append-store-vs-raw-lmdb",
            claim="c",
            numerator=30.0,
            denominator=60.0,
            baseline="raw py-lmdb (16 events/txn)",
            bound=0.4,
            at_least=True,
            what="ev/s",
        )

        assert (0.5, "PASS") == (made.value, made.status)

    @pytest.mark.parametrize(("numerator", "denominator"), [(None, 1.0), (1.0, None), (1.0, 0.0)])
    def test_ratio_with_a_missing_side_is_not_applicable(
        self, numerator: float | None, denominator: float | None
    ) -> None:
        made = ratio_target(
            name="warm-view-vs-sqlite",
            claim="c",
            numerator=numerator,
            denominator=denominator,
            baseline="sqlite last-30",
            bound=1.0,
            at_least=False,
            what="µs",
        )

        assert ("N/A", None) == (made.status, made.value)


class TestTargetLine:
    def test_a_ratio_is_followed_by_the_name_of_its_baseline(self) -> None:
        line = shown(target_line(target(1.04)))

        assert line.startswith("PASS append-store-vs-raw-lmdb: append LmdbStore durable t=16: ")
        assert "1.040x raw py-lmdb (16 events/txn) (target >= 0.400x; d)" in line

    @pytest.mark.parametrize("value", [0.1, 0.9])
    def test_a_quick_run_prints_neither_pass_nor_short(self, value: float) -> None:
        line = shown(target_line(target(value, judged=False)))

        assert line.startswith("not judged (--quick) append-store-vs-raw-lmdb:")
        assert "PASS" not in line and "SHORT" not in line

    def test_a_context_figure_is_printed_without_a_bound(self) -> None:
        line = shown(target_line(target(0.35, bound=None)))

        assert line.startswith("context ")
        assert "0.350x raw py-lmdb (16 events/txn) (d)" in line


class TestJsonFile:
    def test_report_round_trips_through_its_json_file(self, tmp_path: Path) -> None:
        report = Report(
            scenario="append",
            started=utc_now(),
            argv=["python", "-m", "bench", "append"],
            machine=machine_info(),
            measurements=[
                measurement(
                    scenario="append",
                    system="sqlite",
                    operation="append",
                    label="l",
                    ops=1,
                    seconds=1.0,
                    latencies_ns=[5],
                )
            ],
            targets=[target(1.0)],
            figures={"k": 1},
            notes=["n"],
        )

        path = write_json(report, tmp_path / "results")

        assert path.name.startswith("append-") and path.suffix == ".json"
        assert report == msgspec.json.decode(path.read_bytes(), type=Report)


class TestOptions:
    def test_int_list_reads_commas_and_underscores(self) -> None:
        assert [1, 16, 100000] == int_list("1, 16,100_000")

    @pytest.mark.parametrize("text", ["", "0", "1,-2", "a"])
    def test_int_list_refuses_anything_but_positive_ints(self, text: str) -> None:
        with pytest.raises(ValueError):
            int_list(text)

    def test_pick_prefers_the_given_value_then_the_mode_default(self) -> None:
        assert (5, 1, 2) == (pick(5, 1, 2, True), pick(None, 1, 2, False), pick(None, 1, 2, True))

    @pytest.mark.parametrize(
        ("argv", "quick", "expected"),
        [([], False, [1, 4, 16]), ([], True, [1, 2]), (["--threads", "8"], True, [8])],
        ids=["default", "quick-default", "given-wins"],
    )
    def test_a_settled_option_is_as_given_else_its_mode_default(
        self, argv: list[str], quick: bool, expected: list[int]
    ) -> None:
        threads = Option("--threads", [1, 4, 16], "writer threads", quick=[1, 2])
        parser = argparse.ArgumentParser()
        declare(parser, [threads])

        assert expected == settle(parser.parse_args(argv), [threads], quick).threads

    def test_an_option_without_a_quick_default_keeps_its_default_when_quick(self) -> None:
        via = Option("--via", "both", "write path", choices=("store", "hub", "both"))
        parser = argparse.ArgumentParser()
        declare(parser, [via])

        assert "both" == settle(parser.parse_args([]), [via], quick=True).via

    def test_the_help_of_an_option_names_its_default(self) -> None:
        parser = argparse.ArgumentParser()
        declare(parser, [Option("--max-seconds", 8.0, "time budget", quick=2.0)])

        assert "time budget (default 8)" in " ".join(parser.format_help().split())

    def test_a_switch_is_off_unless_given(self) -> None:
        switch = Option("--no-baselines", False, "sharedesk only")
        parser = argparse.ArgumentParser()
        declare(parser, [switch])

        assert (False, True) == (
            settle(parser.parse_args([]), [switch], quick=True).no_baselines,
            settle(parser.parse_args(["--no-baselines"]), [switch], quick=True).no_baselines,
        )


def append_run(
    system: str,
    threads: int,
    *,
    seconds: float = 1.0,
    latencies_ns: list[int] | None = None,
    **params: object,
) -> Measurement:
    """One ``append`` measurement of ``system`` at ``threads`` (100 operations)."""
    return measurement(
        scenario="append",
        system=system,
        operation="append",
        label=f"{system} t={threads} {params}",
        ops=100,
        seconds=seconds,
        latencies_ns=latencies_ns or [],
        params={"threads": threads, **params},
    )


def append_report(*runs: Measurement) -> Report:
    """A report of the ``append`` scenario holding ``runs`` and nothing else."""
    return Report(
        scenario="append",
        started=utc_now(),
        argv=[],
        machine={},
        measurements=list(runs),
        targets=[],
        figures={},
        notes=[],
    )


class TestPlots:
    def test_throughput_and_latency_plots_are_written_as_png(self, tmp_path: Path) -> None:
        report = append_report(
            *(
                append_run(
                    "sharedesk",
                    threads,
                    seconds=1.0 / threads,
                    latencies_ns=[1000 * (k + 1) for k in range(100)],
                    series="sharedesk store durable",
                )
                for threads in (1, 4, 16)
            )
        )

        written, skipped = write_plots(report, tmp_path)

        assert None is skipped
        assert 2 == len(written)
        assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)

    def test_the_throughput_plot_marks_only_the_raw_per_transaction_ceilings(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from matplotlib.axes import Axes

        annotations: list[str] = []
        monkeypatch.setattr(
            Axes, "annotate", lambda self, text, *args, **kw: annotations.append(text)
        )
        report = append_report(
            append_run("sharedesk", 1, series="sharedesk store durable"),
            append_run("sharedesk", 16, series="sharedesk store durable"),
            append_run("lmdb-raw", 1, per_txn=16),
            append_run("lmdb-raw", 16, series="lmdb-raw gc"),  # a threaded baseline
        )

        write_plots(report, tmp_path)

        assert ["raw lmdb 16/txn"] == annotations

    def test_many_latency_series_are_split_over_plots_of_small_multiples(
        self, tmp_path: Path
    ) -> None:
        series = PANELS_PER_PLOT + 2
        report = append_report(
            *(
                append_run("sqlite", k, latencies_ns=[1000 * (k + j + 1) for j in range(50)])
                for k in range(series)
            )
        )

        written, _ = write_plots(report, tmp_path)

        assert ["append-append-latency-1.png", "append-append-latency-2.png"] == sorted(
            p.name.split("Z-", 1)[1] for p in written if "latency" in p.name
        )


class TestSummary:
    def printed(self, report: Report) -> str:
        console = Console(record=True, width=300)
        print_summary(console, report)
        return console.export_text()

    def test_the_table_names_the_baseline_of_each_ratio(self) -> None:
        report = append_report(
            append_run("lmdb-raw", 1, seconds=0.5, baseline="raw py-lmdb (16 events/txn)"),
            append_run("sharedesk", 16, seconds=1.0),
        )

        assert "0.50x raw py-lmdb (16 events/txn)" in self.printed(report)

    def test_figures_are_printed_rounded(self) -> None:
        report = msgspec.structs.replace(
            append_report(), figures={"stall_ms": {"max": 2.976638, "heartbeats": 18}}
        )

        assert "  stall_ms: max 2.98, heartbeats 18" in self.printed(report)
