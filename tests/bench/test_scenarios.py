"""Each bench scenario runs in its tiny ``--quick`` configuration (the harness, not speed)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import lmdb
import msgspec
import pytest
import structlog

from bench.__main__ import build_parser, main
from bench.options import COMMON
from bench.pgserver import ThrowawayPostgres
from bench.report import Report
from bench.scenarios import SCENARIOS
from sharedesk import LmdbStore

CHECKOUT = Path(__file__).resolve().parents[2]


def documented_commands() -> list[str]:
    """The ``python -m bench SCENARIO ...`` commands the README and docs/ name."""
    found: set[str] = set()
    for page in [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]:
        for match in re.finditer(r"python -m bench [a-z][^`#|\n]*", page.read_text()):
            command = match.group().strip()
            if "SCENARIO" not in command and "..." not in command:
                found.add(command)
    return sorted(found)


DOCUMENTED = documented_commands()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``main`` configures structlog as a program does; give other tests theirs back."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def run_bench(tmp_path: Path, *args: str) -> Report:
    """Run ``python -m bench ARGS --quick`` in-process; return the report it wrote."""
    out = tmp_path / "results"
    status = main(
        [
            *args,
            "--quick",
            "--no-progress",
            "--no-plots",
            "--out",
            str(out),
            "--dir",
            str(tmp_path / "data"),
        ]
    )
    assert 0 == status
    (path,) = out.glob("*.json")
    return msgspec.json.decode(path.read_bytes(), type=Report)


def labels(report: Report) -> set[str]:
    return {m.label for m in report.measurements}


class TestAppend:
    def test_append_measures_sharedesk_and_every_baseline(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "append")

        assert {
            "append sharedesk store durable t=1",
            "append sharedesk store durable t=2",
            "append sharedesk hub durable t=1",
            "append sharedesk hub durable t=2",
            "append sqlite WAL FULL t=1",
            "append sqlite WAL FULL t=2",
            "append lmdb-raw 1/txn",
            "append lmdb-raw 16/txn",
            "append lmdb-raw 1000/txn",
        } <= labels(report)
        assert all(m.ops > 0 and m.ops_per_s > 0 for m in report.measurements)

    def test_append_checks_the_three_throughput_targets_as_ratios(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "append")

        assert ["append-store-vs-raw-lmdb", "append-store-vs-sqlite", "append-hub-vs-store"] == [
            t.name for t in report.targets
        ]
        assert {"not judged"} == {t.status for t in report.targets}
        assert ["raw py-lmdb (16 events/txn)", "sqlite3 WAL synchronous=FULL t=2"] == [
            t.baseline for t in report.targets[:2]
        ]

    def test_a_quick_run_prints_its_targets_as_not_judged_with_their_baselines(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_bench(tmp_path, "append", "--via", "store", "--threads", "2")

        printed = capsys.readouterr().out
        (line,) = [ln for ln in printed.splitlines() if "append-store-vs-raw-lmdb:" in ln]
        assert line.startswith("not judged (--quick) ")
        assert "x raw py-lmdb (16 events/txn) (target >= 0.400x;" in line
        assert not [ln for ln in printed.splitlines() if ln.startswith(("PASS", "SHORT"))]

    def test_headline_rounds_are_summed_into_one_figure_per_system(self, tmp_path: Path) -> None:
        report = run_bench(
            tmp_path, "append", "--rounds", "3", "--threads", "1,2", "--events", "90"
        )

        rounds = {m.label: m.params["rounds"] for m in report.measurements}
        assert 3 == rounds["append sharedesk store durable t=2"] == rounds["append lmdb-raw 16/txn"]
        assert 1 == rounds["append sharedesk store durable t=1"]
        assert {90} == {m.ops for m in report.measurements}

    def test_the_headline_ratio_is_also_reported_round_by_round(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "append", "--rounds", "3", "--threads", "2", "--via", "store")

        (line,) = [n for n in report.notes if "round by round" in n]
        assert 3 == line.count("x (")

    def test_rounds_continue_one_database_per_system_after_one_warm_up(
        self, tmp_path: Path
    ) -> None:
        run_bench(tmp_path, "append", "--rounds", "3", "--threads", "2", "--events", "90")

        data = tmp_path / "data"
        (store_dir,) = data.glob("*-append-store-durable-t2")
        (raw_dir,) = data.glob("*-append-raw-16")
        with LmdbStore(store_dir) as store:
            stored = sum(info.last_sequence for info in store.session_infos())
        env = lmdb.open(str(raw_dir), max_dbs=2, readonly=True)
        try:
            with env.begin() as txn:
                raw = txn.stat(env.open_db(b"events", txn=txn))["entries"]
        finally:
            env.close()
        quick_sessions = 20
        assert (quick_sessions + 90, quick_sessions + 90) == (stored, raw)

    def test_append_without_baselines_has_only_sharedesk_figures(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "append", "--no-baselines", "--via", "store")

        assert {"sharedesk"} == {m.system for m in report.measurements}

    def test_relaxed_and_durable_are_both_measured_when_asked(self, tmp_path: Path) -> None:
        report = run_bench(
            tmp_path,
            "append",
            "--durability",
            "both",
            "--via",
            "store",
            "--no-baselines",
            "--threads",
            "2",
        )

        assert {
            "append sharedesk store durable t=2",
            "append sharedesk store relaxed t=2",
        } == labels(report)

    def test_memory_backend_is_measured_through_store_and_hub(self, tmp_path: Path) -> None:
        report = run_bench(
            tmp_path, "append", "--backend", "memory", "--threads", "2", "--no-baselines"
        )

        assert {
            "append sharedesk store memory t=2",
            "append sharedesk hub memory t=2",
        } == labels(report)


@pytest.fixture(scope="class")
def postgres_report(
    postgres_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Report:
    """One ``append --backend postgres --quick --posts 7`` run on a fresh database."""
    from bench.pg import create_database

    dsn = create_database(postgres_server.dsn, f"t_{uuid.uuid4().hex}")
    saved = structlog.get_config()
    try:
        tmp = tmp_path_factory.mktemp("postgres-bench")
        return run_bench(tmp, "append", "--backend", "postgres", "--dsn", dsn, "--posts", "7")
    finally:
        structlog.configure(**saved)


class TestAppendPostgres:
    def test_postgres_backend_measures_the_store_and_its_baselines_on_one_server(
        self, postgres_report: Report
    ) -> None:
        assert {
            "append sharedesk store postgres t=2",
            "append sharedesk hub postgres t=2",
            "append eventsourcing aggregate-recorder t=2",
            "append eventsourcing application-recorder t=2",
            "append psycopg raw t=2",
            "append psycopg raw +notify t=2",
        } <= labels(postgres_report)
        assert all(m.ops > 0 for m in postgres_report.measurements)

    def test_postgres_backend_checks_two_ratios_of_the_store_and_the_latency(
        self, postgres_report: Report
    ) -> None:
        assert [
            ("append-postgres-vs-eventsourcing", "not judged"),
            ("append-postgres-vs-raw-psycopg", "not judged"),
            ("append-postgres-hub-vs-store", "context"),
            ("cross-process-view-latency-median", "not judged"),
        ] == [(t.name, t.status) for t in postgres_report.targets]
        assert "eventsourcing PostgresAggregateRecorder t=2" == postgres_report.targets[0].baseline

    def test_postgres_backend_times_every_post_from_another_process_both_ways(
        self, postgres_report: Report
    ) -> None:
        by_label = {m.label: m for m in postgres_report.measurements}

        assert (7, 7) == (
            by_label["cross-process wait_turn postgres"].ops,
            by_label["cross-process view postgres"].ops,
        )
        assert {"median", "p99", "posts"} == set(
            postgres_report.figures["cross_process_wait_turn_ms"]
        )

    def test_postgres_backend_reports_the_client_cpu_of_one_append_both_ways(
        self, postgres_report: Report
    ) -> None:
        figure = postgres_report.figures[
            "postgres one thread, µs per append (wall / this process's CPU)"
        ]

        assert {"store", "raw psycopg +notify"} == set(figure)

    def test_postgres_store_holds_every_event_it_acknowledged(
        self, postgres_report: Report
    ) -> None:
        figure = postgres_report.figures["postgres store events acknowledged / stored / sessions"]
        acknowledged, stored, sessions = (int(part) for part in figure.split(" / "))

        assert (acknowledged, 20) == (stored, sessions)

    def test_postgres_backend_drops_the_databases_it_created(
        self, postgres_report: Report, postgres_server: ThrowawayPostgres
    ) -> None:
        import psycopg

        with psycopg.connect(postgres_server.dsn) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_database WHERE datname LIKE 'sdbench_%'"
            ).fetchone()

        assert (0,) == left


class TestRead:
    def test_read_measures_projection_views_turns_and_sqlite_per_size(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "read", "--sizes", "200,400")

        for rows in (200, 400):
            assert {
                f"project cold n={rows}",
                f"last30 sqlite n={rows}",
                f"view warm n={rows}",
                f"turn delta n={rows}",
                f"turn commit n={rows}",
            } <= labels(report)
        assert {"delta": 5} == report.figures["read n=200 turn reasons"]

    def test_read_on_both_backends_labels_the_memory_figures(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "read", "--sizes", "200", "--backend", "both")

        assert {
            "project cold n=200",
            "project cold n=200 memory",
            "view warm n=200 memory",
            "turn delta n=200 memory",
        } <= labels(report)

    def test_read_targets_are_not_applicable_without_their_sizes(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "read", "--sizes", "200")

        assert ["N/A", "N/A", "N/A"] == [t.status for t in report.targets]


class TestDesk:
    def test_desk_reports_turn_commit_and_post_latency(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "desk")

        assert {"desk turn", "desk commit", "desk post"} == labels(report)
        assert all(m.median_us is not None for m in report.measurements)

    def test_desk_never_offers_a_reply_back_nor_a_row_twice(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "desk", "--agents", "3", "--rounds", "10")

        assert (
            0 == report.figures["desk rows shown in a view but never offered by a turn (must be 0)"]
        )

        assert 0 == report.figures["desk replies offered back to their author (must be 0)"]
        assert 0 == report.figures["desk rows delivered twice in one conversation (must be 0)"]


class TestScale:
    def test_scale_touches_every_session_and_reports_peaks(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "scale", "--sessions", "120", "--max-active", "8")

        (touch,) = report.measurements
        assert 120 == touch.ops
        threads, _ = report.targets
        assert ["scale-peak-threads", "scale-peak-memory"] == [t.name for t in report.targets]
        assert threads.value is not None and threads.bound is not None
        assert threads.value <= threads.bound

    def test_scale_read_touch_starts_actors_and_stays_within_max_active(
        self, tmp_path: Path
    ) -> None:
        report = run_bench(
            tmp_path, "scale", "--sessions", "60", "--max-active", "6", "--touch", "read"
        )

        assert 0 < report.figures["scale peak live actors"] <= 6

    def test_scale_leaves_no_thread_behind(self, tmp_path: Path) -> None:
        before = {t.ident for t in threading.enumerate()}

        run_bench(tmp_path, "scale", "--sessions", "50", "--max-active", "4")

        assert set() == {t.name for t in threading.enumerate() if t.ident not in before}


class TestLong:
    def test_long_checks_that_every_cost_stays_flat(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "long")

        assert [
            "long-rss-after-many-desks",
            "long-run-once-flat-in-history",
            "long-get-session-flat-in-history",
            "long-transcript-flat-in-history",
            "long-posts-with-warm-viewers",
            "long-posting-peak-threads",
            "long-streamed-reply-vs-final-text",
            "long-retained-view",
            "long-retained-turn",
            "long-retained-transcript",
            "long-retained-run-once",
            "long-lmdb-reuses-freed-pages",
        ] == [t.name for t in report.targets]
        assert {"not judged"} == {t.status for t in report.targets}
        assert "the 200-event desk" == report.targets[1].baseline

    def test_long_measures_both_desks_both_crowds_and_both_replies(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "long", "--small", "50", "--large", "300")

        assert {
            "long run_once replay desk=50",
            "long run_once replay desk=300",
            "long get_session desk=300",
            "long transcript limit=500 desk=300",
            "long post viewers=1",
            "long post viewers=5",
            "long run_once durable final text alone",
            "long run_once durable 30 chunks",
        } <= labels(report)


class TestCrash:
    def test_crash_loop_acknowledges_events_and_loses_none(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "crash")

        (m,) = report.measurements
        assert m.ops > 0
        assert [0.0, 0.0] == [t.value for t in report.targets]

    def test_retried_ids_are_answered_with_their_first_sequence(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "crash", "--cycles", "3")

        figure = report.figures[
            "crash ids re-sent after a restart / answered with another sequence"
        ]
        retried, moved = (int(part) for part in figure.split(" / "))
        assert retried > 0
        assert 0 == moved

    def test_crash_loop_through_a_hub_loses_nothing(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "crash", "--via", "hub", "--cycles", "2")

        (m,) = report.measurements
        assert m.ops > 0
        assert [0.0, 0.0] == [t.value for t in report.targets]


class TestAsync:
    def test_async_measures_the_async_hub_next_to_raw_lmdb_and_the_threaded_store(
        self, tmp_path: Path
    ) -> None:
        report = run_bench(tmp_path, "async")

        assert {
            "async sharedesk AsyncHub c=20",
            "async lmdb-raw 16/txn",
            "async sharedesk store t=2",
            "async wait_turn wake-up",
        } <= labels(report)

    def test_async_reports_the_loops_stalls_and_wait_turn_wake_ups(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "async")

        stall = report.figures["async_loop_stall_ms"]
        assert stall["heartbeats"] > 0 and stall["max"] >= stall["p99"] >= 0
        assert {"median", "p99"} == set(report.figures["async_wait_turn_wakeup_us"])

    def test_async_checks_three_ratios_and_two_stall_bounds_and_gives_context(
        self, tmp_path: Path
    ) -> None:
        report = run_bench(tmp_path, "async")

        assert [
            ("async-append-vs-raw-lmdb", "x", "raw py-lmdb (16 events/txn)"),
            ("async-append-vs-threaded-store", "x", "threaded LmdbStore t=2"),
            ("async-append-vs-sqlite-session", "x", "openai-agents SQLiteSession c=20"),
            ("async-threaded-store-vs-raw-lmdb", "x", "raw py-lmdb (16 events/txn)"),
            ("async-loop-stall-max", "ms", ""),
            ("async-loop-stall-p99", "ms", ""),
        ] == [(t.name, t.unit, t.baseline) for t in report.targets]
        assert "context" == report.targets[3].status


class TestImports:
    def test_import_time_is_reported_as_a_ratio_to_the_core_dependencies(
        self, tmp_path: Path
    ) -> None:
        report = run_bench(tmp_path, "imports")

        (target,) = report.targets
        assert ("import-vs-core-deps", 3) == (target.name, len(report.measurements))
        assert target.value is not None and target.value > 0


class TestWeb:
    def test_web_measures_posts_with_and_without_pages_and_telemetry_on_and_off(
        self, tmp_path: Path
    ) -> None:
        report = run_bench(tmp_path, "web")

        assert {
            "web post, no page open, agents in their own process",
            "web post, 3 pages open, agents in their own process",
            "web post, no page open, agents in the server",
            "web post, 3 pages open, agents in the server",
            "turn+commit, telemetry off, lmdb",
            "turn+commit, telemetry on, lmdb",
            "turn+commit, telemetry off, memory",
            "turn+commit, telemetry on, memory",
        } == labels(report)
        assert {
            "web-post-rate-with-pages",
            "web-post-rate-with-pages-same-process",
            "web-telemetry-turn-cost",
            "web-telemetry-turn-cost-in-memory",
            "web-telemetry-turn-cpu",
            "web-telemetry-turn-cpu-in-memory",
        } == {t.name for t in report.targets}
        delivered = [v for k, v in report.figures.items() if k.startswith("web rows delivered")]
        assert ["30/30", "30/30"] == delivered

    def test_web_telemetry_only_times_turns_in_pairs_and_opens_no_page(
        self, tmp_path: Path
    ) -> None:
        report = run_bench(tmp_path, "web", "--telemetry-only", "--pairs", "2")

        assert {
            "turn+commit, telemetry off, lmdb",
            "turn+commit, telemetry on, lmdb",
            "turn+commit, telemetry off, memory",
            "turn+commit, telemetry on, memory",
        } == labels(report)
        assert all("median of 2 pairs' ratios" in t.detail for t in report.targets)


class TestAll:
    def test_all_runs_every_scenario_into_one_report(self, tmp_path: Path) -> None:
        report = run_bench(tmp_path, "all")

        assert {
            *("append", "async", "desk", "read", "scale", "long", "crash", "imports"),
            *("adk", "web", "mcp"),
        } == {m.scenario for m in report.measurements}
        assert "all" == report.scenario

    def test_all_measures_postgres_on_the_server_it_is_given(
        self, tmp_path: Path, postgres_dsn: str
    ) -> None:
        report = run_bench(tmp_path, "all", "--dsn", postgres_dsn)

        assert {
            "append sharedesk store postgres t=2",
            "append psycopg raw t=2",
            "append sharedesk store durable t=2",
        } <= labels(report)


class TestCommandLine:
    def test_every_scenario_and_all_are_subcommands(self) -> None:
        parser = build_parser()

        for name in (
            "append",
            "async",
            "desk",
            "read",
            "scale",
            "long",
            "crash",
            "imports",
            "web",
            "all",
        ):
            assert name == parser.parse_args([name]).scenario

    def test_help_runs_from_the_checkout(self) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "bench", "--help"],
            capture_output=True,
            text=True,
            cwd=CHECKOUT,
            timeout=60,
        )

        assert 0 == result.returncode
        assert "SCENARIO" in result.stdout and "--quick" in result.stdout

    @pytest.mark.parametrize("name", [*(m.NAME for m in SCENARIOS), "all"])
    def test_each_scenario_help_lists_its_own_and_the_common_options(
        self, name: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        module = {m.NAME: m for m in SCENARIOS}.get(name)
        own = [o.flag for o in module.OPTIONS] if module is not None else ["--dsn"]

        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([name, "--help"])

        shown = capsys.readouterr().out
        assert 0 == exited.value.code
        assert [] == [flag for flag in [*own, *(o.flag for o in COMMON)] if flag not in shown]

    @pytest.mark.parametrize("command", DOCUMENTED, ids=DOCUMENTED)
    def test_each_bench_command_the_docs_name_parses(self, command: str) -> None:
        words = shlex.split(command)[3:]

        assert words[0] == build_parser().parse_args(words).scenario
