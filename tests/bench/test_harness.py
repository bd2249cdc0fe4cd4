"""The harness and the baselines do the work they claim (a lazy baseline skews every ratio)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from rich.console import Console

from bench import baselines
from bench.harness import BenchRun, calling, run_threads, time_calls
from bench.report import measurement


def make_run(tmp_path: Path) -> BenchRun:
    return BenchRun(console=Console(file=None, quiet=True), workdir=tmp_path, show_progress=False)


@contextlib.contextmanager
def raw_read(path: Path) -> Iterator[tuple[Any, Any, Any]]:
    """A read transaction on a raw baseline's database: (txn, events db, ids db)."""
    env = lmdb.open(str(path), max_dbs=2, readonly=True)
    try:
        with env.begin() as txn:
            yield txn, env.open_db(b"events", txn=txn), env.open_db(b"ids", txn=txn)
    finally:
        env.close()


class TestRunThreads:
    def test_every_thread_performs_its_operations(self) -> None:
        seen: list[tuple[int, int]] = []
        lock = threading.Lock()

        def op(thread: int, j: int) -> None:
            with lock:
                seen.append((thread, j))

        result = run_threads(4, 25, op, max_seconds=60)

        assert 100 == result.ops == len(result.latencies_ns)
        assert {(t, j) for t in range(4) for j in range(25)} == set(seen)

    def test_first_error_is_raised_after_every_thread_stopped(self) -> None:
        def op(thread: int, j: int) -> None:
            if thread == 1 and j == 3:
                raise KeyError("boom")

        before = threading.active_count()

        with pytest.raises(KeyError):
            run_threads(3, 1000, op, max_seconds=60)

        assert before == threading.active_count()

    def test_progress_is_advanced_by_every_operation(self) -> None:
        advanced: list[int] = []
        lock = threading.Lock()

        def advance(n: int) -> None:
            with lock:
                advanced.append(n)

        run_threads(3, 70, lambda t, j: None, max_seconds=60, advance=advance)

        assert 210 == sum(advanced)


class TestTimeCalls:
    def test_one_latency_per_call_and_arguments_bound_at_once(self) -> None:
        calls: list[str] = []

        seconds, latencies = time_calls(5, calling(calls.append, "x"))

        assert (5, ["x"] * 5) == (len(latencies), calls)
        assert seconds >= 0


class TestBenchRun:
    def test_fresh_dirs_are_new_and_distinct(self, tmp_path: Path) -> None:
        run = make_run(tmp_path)

        first, second = run.fresh_dir("a"), run.fresh_dir("a")

        assert first != second
        assert first.is_dir() and second.is_dir()

    def test_a_note_is_kept_once(self, tmp_path: Path) -> None:
        run = make_run(tmp_path)

        run.note("n")
        run.note("n")

        assert ["n"] == run.notes

    def test_figures_are_found_by_label(self, tmp_path: Path) -> None:
        run = make_run(tmp_path)
        run.measurements.append(
            measurement(
                scenario="s",
                system="x",
                operation="o",
                label="l",
                ops=10,
                seconds=2.0,
                latencies_ns=[3000],
            )
        )

        assert (5.0, 3.0, None) == (run.rate("l"), run.median("l"), run.rate("missing"))


class TestRawLmdbBaseline:
    def test_each_event_writes_one_row_and_one_idempotency_entry(self, tmp_path: Path) -> None:
        sessions = [f"s{i}" for i in range(7)]

        written, _ = baselines.raw_lmdb_appends(
            tmp_path, sessions, events=100, per_txn=16, payload="p", max_seconds=60
        )

        with raw_read(tmp_path) as (txn, events_db, ids_db):
            events, ids = txn.stat(events_db)["entries"], txn.stat(ids_db)["entries"]
        assert (100, 100, 100) == (written, events, ids)

    def test_a_second_call_continues_each_session_after_its_last_sequence(
        self, tmp_path: Path
    ) -> None:
        sessions = ["a", "ab", "b"]  # "a" is a prefix of "ab": their sequences stay apart

        for events in (7, 5):
            baselines.raw_lmdb_appends(
                tmp_path, sessions, events=events, per_txn=4, payload="p", max_seconds=60
            )

        with raw_read(tmp_path) as (txn, db, _):
            keys = [bytes(k) for k, _ in txn.cursor(db=db)]
            last = baselines.last_sequences(
                txn, db, [baselines.session_key(s) for s in [*sessions, "c"]]
            )
        assert (12, [5, 4, 3, 0]) == (len(keys), last)

    def test_the_group_commit_baseline_continues_an_existing_database(self, tmp_path: Path) -> None:
        for _ in range(2):
            baselines.raw_lmdb_group_commit(
                tmp_path, ["a", "b"], threads=2, events=6, payload="p", max_seconds=60
            )

        with raw_read(tmp_path) as (txn, db, _):
            last = baselines.last_sequences(
                txn, db, [baselines.session_key("a"), baselines.session_key("b")]
            )
            entries = txn.stat(db)["entries"]
        assert (12, [6, 6]) == (entries, last)

    def test_session_keys_never_collide(self) -> None:
        assert baselines.session_key("a") != baselines.session_key("a\x00")
        assert not baselines.session_key("ab").startswith(baselines.session_key("a"))


class TestSqliteBaseline:
    def test_appends_are_contiguous_per_session_from_every_thread(self, tmp_path: Path) -> None:
        path = tmp_path / "events.db"

        result = baselines.sqlite_appends(
            path, ["a", "b", "c"], threads=4, events=60, payload="p", max_seconds=60
        )

        conn = sqlite3.connect(path)
        try:
            rows = conn.execute("SELECT session, seq FROM events ORDER BY session, seq").fetchall()
        finally:
            conn.close()
        by_session: dict[str, list[int]] = {}
        for session, seq in rows:
            by_session.setdefault(session, []).append(seq)
        assert 60 == result.ops == len(rows)
        assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in by_session.values())

    def test_last30_returns_the_newest_rows_decoded_newest_first(self, tmp_path: Path) -> None:
        desk = baselines.SqliteDesk(tmp_path / "desk.db", "d")
        try:
            desk.add([baselines.event_row("d", seq, f"m{seq}") for seq in range(1, 101)])

            rows = desk.last30()
        finally:
            desk.close()

        assert list(range(100, 70, -1)) == [r["sequence"] for r in rows]
        assert "m100" == rows[0]["body"]["content"]


class TestAgentsBaseline:
    def test_child_process_reports_figures_or_says_why_it_cannot(self, tmp_path: Path) -> None:
        request = {
            "kind": "read",
            "path": str(tmp_path / "a.db"),
            "rows": 50,
            "repeat": 3,
            "payload": "p",
        }

        if baselines.agents_available():
            result = baselines.run_agents_child(request)

            assert (3, 3) == (result.ops, len(result.latencies_ns))
        else:
            with pytest.raises(RuntimeError, match="agents"):
                baselines.run_agents_child(request)


class TestRawGroupCommitBaseline:
    def test_every_call_writes_one_row_and_one_idempotency_entry(self, tmp_path: Path) -> None:
        sessions = [f"s{i}" for i in range(7)]

        result = baselines.raw_lmdb_group_commit(
            tmp_path, sessions, threads=4, events=100, payload="p", max_seconds=60
        )

        with raw_read(tmp_path) as (txn, events_db, ids_db):
            events, ids = txn.stat(events_db)["entries"], txn.stat(ids_db)["entries"]
        assert (100, 100, 100) == (result.ops, events, ids)

    def test_it_leaves_no_thread_behind(self, tmp_path: Path) -> None:
        baselines.raw_lmdb_group_commit(
            tmp_path, ["s"], threads=2, events=10, payload="p", max_seconds=60
        )

        assert [] == [t.name for t in threading.enumerate() if t.name.startswith("bench-raw")]
