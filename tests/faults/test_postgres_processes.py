"""Process faults on one PostgreSQL database: many writers, kill -9, restarts, lost connections.

The load is :mod:`tests.faults.pg_writer`: batches of event ids drawn from one pool that
every writer shares, so several processes submit the same id, and a writer that replaces
a killed one resubmits ids whose first append may or may not have committed. Writers
report every event ``append`` returned (``ack``); afterwards an audit reads every session
back and checks it: sequences 1..N with no gap, every id stored once and in its own
session, every acknowledged event stored with the sequence it was acknowledged with.

Each test prints its figures on one line, ``fault <test>: cycles=... acknowledged=...
lost=... duplicated=... gaps=... hangs=...`` (see ``tests.faults.test_lmdb_processes``),
which the README's Reliability table cites. Every wait is bounded (``HANG``): a writer,
a thread or a notice that does not come in time is a hang, and the test fails.

Tests that restart or stop the server start their own (``ThrowawayPostgres``, durable
commits); the others use a fresh database on the session's server.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import psycopg
import pytest

from bench.pg import create_database
from bench.pgserver import ThrowawayPostgres
from sharedesk import Hub
from sharedesk.protocol import Conversation, Event, Person, SharingState
from sharedesk.store.postgres import PostgresStore
from tests.conftest import start_postgres
from tests.faults.pg_writer import PooledWriter, pooled_event, pooled_session
from tests.faults.test_lmdb_processes import HANG, Report
from tests.store.conftest import ROOT, child_env
from tests.store.contract import append_shared

pytestmark = pytest.mark.slow

SESSIONS = 8
VIEWER = "person:pgfault"


class Hang(AssertionError):
    """A writer, a thread or a notice did not arrive within ``HANG`` seconds."""


class Writer:
    """A writer child (``tests.faults.pg_writer``) whose lines a thread collects as they come.

    Its stdout holds only the report lines; its stderr (the driver's and the pool's log
    lines, a traceback) is kept apart, for the failure messages.
    """

    def __init__(
        self,
        dsn: str,
        *,
        threads: int,
        pool: int,
        seed: int,
        appends: int,
        **options: object,
    ) -> None:
        args = [dsn, str(threads), str(SESSIONS), str(pool), str(seed), str(appends)]
        args += [f"{name}={value}" for name, value in options.items()]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.pg_writer", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            cwd=ROOT,
        )
        self._lines: list[str] = []
        self._stderr: list[str] = []
        self._ended = False
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, True), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, False), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[bytes] | None, report: bool) -> None:
        assert stream is not None
        for raw in stream:
            with self._changed:
                (self._lines if report else self._stderr).append(
                    raw.decode(errors="replace").rstrip("\n")
                )
                self._changed.notify_all()
        if report:
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def diagnosis(self) -> str:
        """The child's last report lines and the end of its stderr."""
        with self._changed:
            return "\n".join([*self._lines[-10:], "-- stderr:", *self._stderr[-30:]])

    def lines(self) -> list[str]:
        """The lines the child wrote so far."""
        with self._changed:
            return list(self._lines)

    def stderr(self) -> list[str]:
        """The lines the child wrote to stderr so far (logging is left unconfigured)."""
        with self._changed:
            return list(self._stderr)

    def wait_for(self, predicate: Callable[[list[str]], bool]) -> None:
        """Wait until ``predicate(lines)`` holds; the child ending first fails the test."""
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self._lines) or self._ended, HANG):
                raise Hang(f"writer {self.process.pid} is stuck:\n{self.diagnosis()}")
        assert predicate(self.lines()), f"the writer ended early:\n{self.diagnosis()}"

    def kill(self) -> None:
        """SIGKILL the child and reap it (and its reader)."""
        os.kill(self.process.pid, signal.SIGKILL)
        self._end()
        assert -signal.SIGKILL == self.process.returncode

    def go(self) -> None:
        """Tell a child with a number of appends to start them."""
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.flush()

    def finish(self) -> None:
        """Close stdin (the child's cue to stop), wait for it; it must end with ``done``."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self._end()
        ended = (self.process.returncode, self.lines()[-1:])
        assert (0, ["done"]) == ended, self.diagnosis()

    def _end(self) -> None:
        try:
            self.process.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            raise Hang(f"writer {self.process.pid} did not end") from None
        for reader in self._readers:
            reader.join(HANG)
            if reader.is_alive():
                raise Hang(f"writer {self.process.pid}: its output did not end")
        close_pipes(self.process)


def close_pipes(process: subprocess.Popen[bytes]) -> None:
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


StartWriter = Callable[..., Writer]


@pytest.fixture
def start_writer() -> Iterator[StartWriter]:
    """Start writer children; any still running at teardown is killed and reaped."""
    writers: list[Writer] = []

    def start(dsn: str, **options: Any) -> Writer:
        writers.append(Writer(dsn, **options))
        return writers[-1]

    yield start
    for writer in writers:
        if writer.process.poll() is None:
            writer.process.kill()
        writer.process.wait(timeout=HANG)
        close_pipes(writer.process)


@pytest.fixture
def own_server() -> Iterator[ThrowawayPostgres]:
    """A server of this test's own, to restart (durable commits, so a crash keeps them)."""
    server = start_postgres(fsync=True)
    try:
        yield server
    finally:
        server.stop()


def database(server: ThrowawayPostgres, name: str) -> str:
    """Create database ``name`` on ``server``; return its DSN."""
    return create_database(server.dsn, name)


@dataclass
class Acks:
    """What the writers reported: acknowledged events and the other outcomes, counted."""

    sequences: dict[tuple[str, str], set[int]] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, lines: list[str]) -> None:
        for line in lines:
            word, _, rest = line.partition(" ")
            if word == "ack" and rest.count(" ") == 2:
                session_id, event_id, sequence = rest.split(" ")
                self.sequences.setdefault((session_id, event_id), set()).add(int(sequence))
            self.outcomes[word if word in ("ack", "conflict", "gave-up") else line] += 1

    def retries(self) -> dict[str, int]:
        """Typed errors the writers retried after, by type."""
        return {
            line.split(" ", 1)[1]: count
            for line, count in self.outcomes.items()
            if line.startswith("retry ")
        }

    def untyped(self) -> list[str]:
        """Lines that report an error that is not a retried ``StoreError``."""
        return [line for line in self.outcomes if line.startswith(("raw ", "error ", "gave-up"))]


@dataclass
class Audit:
    """One read of every session after the load."""

    stored: dict[tuple[str, str], int]
    duplicated: int
    gaps: int
    misplaced: int

    @classmethod
    def of(cls, dsn: str) -> Audit:
        stored: dict[tuple[str, str], int] = {}
        duplicated = gaps = misplaced = 0
        with PostgresStore(dsn) as store:
            for session_id in store.sessions():
                events = store.read(session_id)
                if [e.sequence for e in events] != list(range(1, len(events) + 1)):
                    gaps += 1
                if store.last_sequence(session_id) != len(events):
                    gaps += 1
                duplicated += len(events) - len({e.id for e in events})
                misplaced += sum(pooled_session(e.id, SESSIONS) != session_id for e in events)
                stored.update({(session_id, e.id): e.sequence or 0 for e in events})
        return cls(stored, duplicated, gaps, misplaced)

    def last_sequences(self) -> Counter[str]:
        """Each session's last sequence."""
        last: Counter[str] = Counter()
        for (session_id, _), sequence in self.stored.items():
            last[session_id] = max(last[session_id], sequence)
        return last

    def lost(self, acks: Acks) -> int:
        """Acknowledged events not stored with the sequence they were acknowledged with."""
        return sum(
            1 for key, sequences in acks.sequences.items() if sequences != {self.stored.get(key)}
        )

    def figures(self, acks: Acks) -> dict[str, int]:
        """The figures of the report line (and what the tests assert)."""
        return {
            "acknowledged": len(acks.sequences),
            "lost": self.lost(acks),
            "duplicated": self.duplicated
            + sum(1 for sequences in acks.sequences.values() if len(sequences) > 1),
            "gaps": self.gaps,
            "misplaced": self.misplaced,
        }


#: What a follower was told: ``(session_id, last_sequence)`` calls, in order.
Calls = list[tuple[str | None, int]]


class Notices:
    """A ``follow()`` callback that keeps every ``(session_id, last_sequence)`` it is told."""

    def __init__(self) -> None:
        self.calls: Calls = []
        self._changed = threading.Condition()

    def __call__(self, session_id: str | None, last_sequence: int) -> None:
        with self._changed:
            self.calls.append((session_id, last_sequence))
            self._changed.notify_all()

    def mark(self) -> int:
        with self._changed:
            return len(self.calls)

    def wait_for(
        self, predicate: Callable[[Calls], bool], expected: Callable[[], object] = str
    ) -> None:
        """Wait until ``predicate(calls)`` holds, at most ``HANG`` seconds.

        ``expected()`` describes what was waited for, in the failure message.
        """
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self.calls), HANG):
                newest = sorted(told_last(self.calls).items())
                raise Hang(
                    f"no such notice ({expected()}); {len(self.calls)} told, the last ones: "
                    f"{self.calls[-10:]}; the newest per session: {newest}"
                )


def told_last(calls: Calls) -> Counter[str]:
    """The newest sequence each session was told at."""
    newest: Counter[str] = Counter()
    for session_id, sequence in calls:
        if session_id is not None:
            newest[session_id] = max(newest[session_id], sequence)
    return newest


def out_of_order(calls: Calls) -> int:
    """Notices of a session that did not tell a higher sequence than the one before."""
    newest: dict[str, int] = {}
    disorders = 0
    for session_id, sequence in calls:
        if session_id is not None:
            disorders += sequence <= newest.get(session_id, 0)
            newest[session_id] = sequence
    return disorders


def reset_after(mark: int) -> Callable[[Calls], bool]:
    """A ``Notices.wait_for`` predicate: past ``mark``, an ``on_append(None, 0)``."""
    return lambda calls: (None, 0) in calls[mark:]


def told_after(mark: int, session_id: str, sequence: int) -> Callable[[Calls], bool]:
    """A ``Notices.wait_for`` predicate: past ``mark``, ``session_id`` told at ``sequence``+."""
    return lambda calls: any(s == session_id and n >= sequence for s, n in calls[mark:])


def resumed_after(mark: int) -> Callable[[Calls], bool]:
    """A ``Notices.wait_for`` predicate: past ``mark``, a reset, then a notice of a commit."""

    def resumed(calls: Calls) -> bool:
        later = calls[mark:]
        if (None, 0) not in later:
            return False
        return any(session_id is not None for session_id, _ in later[later.index((None, 0)) :])

    return resumed


def acks_after(mark: int, count: int) -> Callable[[list[str]], bool]:
    """A ``Writer.wait_for`` predicate: ``count`` acks written after the first ``mark`` lines."""
    return lambda lines: sum(line[:4] == "ack " for line in lines[mark:]) >= count


def terminate_backends(admin: psycopg.Connection[tuple[int]], dbname: str) -> int:
    """``pg_terminate_backend`` every other connection to ``dbname``; return how many."""
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = %s AND pid <> pg_backend_pid()",
        (dbname,),
    ).fetchall()
    return sum(1 for (done,) in rows if done)


class TestConcurrentProcesses:
    def test_four_processes_appending_shared_ids_store_each_once_with_gap_free_sequences(
        self, postgres_dsn: str, start_writer: StartWriter, report: Report
    ) -> None:
        """4 processes x 2 threads x 60 appends of ids from a pool of 400 over 8 sessions.

        The four open the fresh database at once, so they race to create the schema too.
        A follower in this process (another store) is told every session's commits in
        order, up to its last sequence.
        """
        processes, threads, appends = 4, 2, 60
        writers = [
            start_writer(postgres_dsn, threads=threads, pool=400, seed=seed, appends=appends)
            for seed in range(processes)
        ]
        for writer in writers:
            writer.wait_for(lambda lines: "ready" in lines)
        notices = Notices()
        with PostgresStore(postgres_dsn) as follower:
            stop_following = follower.follow(notices)
            for writer in writers:
                writer.go()
            acks = Acks()
            for writer in writers:
                writer.wait_for(lambda lines: bool(lines) and lines[-1] == "done")
                writer.finish()
                acks.add(writer.lines())
            audit = Audit.of(postgres_dsn)
            last = audit.last_sequences()
            notices.wait_for(lambda calls: told_last(calls) == last, lambda: sorted(last.items()))
            stop_following()
        figures = audit.figures(acks)
        shared = sum(1 for line in acks.outcomes.elements() if line == "ack") - len(acks.sequences)
        disorders = out_of_order(notices.calls)

        report(
            cycles=processes * threads * appends,
            processes=processes,
            **figures,
            acks_of_shared_ids=shared,
            conflicts=acks.outcomes["conflict"],
            retries=sum(acks.retries().values()),
            notices=len(notices.calls),
            notices_out_of_order=disorders,
            hangs=0,
        )
        assert 0 == disorders
        assert (0, 0, 0, 0) == (
            figures["lost"],
            figures["duplicated"],
            figures["gaps"],
            figures["misplaced"],
        )
        assert ({}, []) == (acks.retries(), acks.untyped())
        assert set(acks.sequences) == set(audit.stored)  # nothing stored unacknowledged
        assert shared > 0  # two writers did submit the same ids


class TestWritersKilled:
    def test_kill_9_of_writers_mid_load_loses_duplicates_and_gaps_no_acknowledged_event(
        self, postgres_dsn: str, start_writer: StartWriter, report: Report
    ) -> None:
        """3 writers (2 threads each) at once; 30 times, one is killed and replaced."""
        rng = random.Random(20261201)
        cycles, pool = 30, 4000
        acks = Acks()
        writers = [
            start_writer(postgres_dsn, threads=2, pool=pool, seed=seed, appends=0)
            for seed in range(3)
        ]
        for cycle in range(cycles):
            victim = writers.pop(0)
            mark, more = len(victim.lines()), rng.randint(1, 8)  # killed mid-load, at random
            victim.wait_for(acks_after(mark, more))
            victim.kill()
            acks.add(victim.lines())
            writers.append(
                start_writer(postgres_dsn, threads=2, pool=pool, seed=100 + cycle, appends=0)
            )
        for writer in writers:  # the survivors still work, then stop cleanly
            writer.wait_for(lambda lines: "ack" in {line[:3] for line in lines[-3:]})
            writer.finish()
            acks.add(writer.lines())
        audit = Audit.of(postgres_dsn)
        figures = audit.figures(acks)

        report(
            cycles=cycles,
            **figures,
            stored=len(audit.stored),
            conflicts=acks.outcomes["conflict"],
            retries=sum(acks.retries().values()),
            hangs=0,
        )
        assert (0, 0, 0, 0) == (
            figures["lost"],
            figures["duplicated"],
            figures["gaps"],
            figures["misplaced"],
        )
        assert ({}, []) == (acks.retries(), acks.untyped())
        assert figures["acknowledged"] > cycles


class TestServerRestart:
    def test_a_server_restart_mid_load_gives_typed_errors_and_loses_no_acknowledged_event(
        self, own_server: ThrowawayPostgres, start_writer: StartWriter, report: Report
    ) -> None:
        """2 writers (2 threads each); 3 restarts mid-load; a follower in this process.

        One writer has the store's defaults; the other ``retry_timeout=0`` (every lost
        connection reaches it). Once all are back, the follower is told every
        session's commits up to its last sequence.
        """
        dsn = database(own_server, "restarts")
        restarts = 3
        notices = Notices()
        follower = PostgresStore(dsn)
        stop_following = follower.follow(notices)
        writers = [  # the store retries lost connections in one, the writer in the other
            start_writer(dsn, threads=2, pool=3000, seed=0, appends=0),
            start_writer(
                dsn,
                threads=2,
                pool=3000,
                seed=1,
                appends=0,
                retry_timeout=0,
            ),
        ]
        for writer in writers:
            writer.wait_for(lambda lines: len(lines) > 5)
        notices.wait_for(lambda calls: any(session_id for session_id, _ in calls))
        first_restart = notices.mark()
        for _ in range(restarts):
            for writer in writers:  # some load between restarts
                writer.wait_for(acks_after(len(writer.lines()), 5))
            last_restart = notices.mark()
            own_server.restart(mode="immediate")
        # Recovered without reopening: each writer acknowledges 20 more events, and the
        # follower (another process's store) says it reconnected, then follows again.
        marks = [len(writer.lines()) for writer in writers]
        for writer, mark in zip(writers, marks, strict=True):
            writer.wait_for(acks_after(mark, 20))
        notices.wait_for(resumed_after(last_restart))
        # 150 more acks each, so every session commits again while the follower listens.
        marks = [len(writer.lines()) for writer in writers]
        for writer, mark in zip(writers, marks, strict=True):
            writer.wait_for(acks_after(mark, 150))
        acks, by_writer = Acks(), []
        for writer in writers:
            writer.finish()
            acks.add(writer.lines())
            alone = Acks()
            alone.add(writer.lines())
            by_writer.append(sum(alone.retries().values()))
        audit = Audit.of(dsn)
        last = audit.last_sequences()
        notices.wait_for(lambda calls: told_last(calls) == last, lambda: sorted(last.items()))
        stop_following()
        follower.close()
        resets = notices.calls[first_restart:].count((None, 0))
        figures = audit.figures(acks)
        retries = acks.retries()

        report(
            cycles=restarts,
            **figures,
            typed_errors_store_retrying=by_writer[0],
            typed_errors_caller_retrying=by_writer[1],
            error_types="+".join(sorted(retries)) or "none",
            untyped_errors=len(acks.untyped()),
            follower_resets=resets,
            hangs=0,
        )
        assert (0, 0, 0, 0) == (
            figures["lost"],
            figures["duplicated"],
            figures["gaps"],
            figures["misplaced"],
        )
        assert [] == acks.untyped()
        assert by_writer[0] == 0  # the store retried (or settled) every loss in time
        assert by_writer[1] > 0  # the writer without store retries saw the restarts
        assert resets > 0
        assert set(acks.sequences) == set(audit.stored)  # every retry ended acknowledged
        assert [[], []] == [writer.stderr() for writer in writers]  # the library is silent


class TestConnectionsTerminated:
    @pytest.mark.parametrize("retry_timeout", [10.0, 0.0], ids=["store-retries", "caller-retries"])
    def test_terminated_connections_give_typed_errors_and_the_pool_reconnects(
        self, postgres_dsn: str, report: Report, retry_timeout: float
    ) -> None:
        """3 threads of one store append; its connections are killed 10 times.

        With the store's retries, no lost connection reaches the caller, not even the
        one a write's settling read is on. With ``retry_timeout=0`` the store retries
        nothing: every lost connection reaches the caller as a typed error, and the
        caller retries with the same ids.
        """
        dbname = postgres_dsn.rsplit("/", 1)[1]
        cycles, rng = 10, random.Random(5)
        lines: list[str] = []
        lock = threading.Condition()

        def say(line: str) -> None:
            with lock:
                lines.append(line)
                lock.notify_all()

        def acked(count: int) -> None:
            """Wait for ``count`` more acks (bounded: a hang fails the test)."""
            with lock:
                more = acks_after(len(lines), count)
                if not lock.wait_for(lambda: more(lines), HANG):
                    raise Hang(f"{count} more acks did not come")

        failures: list[BaseException] = []
        stop = threading.Event()
        terminated = 0
        with (
            PostgresStore(postgres_dsn, retry_timeout=retry_timeout) as store,
            psycopg.connect(postgres_dsn, autocommit=True) as admin,
        ):
            writer = PooledWriter(store, SESSIONS, 3000, say)

            def work(seed: int) -> None:
                try:
                    writer.run(seed, 0, stop)
                except BaseException as error:  # reported as a failure below
                    failures.append(error)

            threads = [threading.Thread(target=work, args=(seed,)) for seed in range(3)]
            for thread in threads:
                thread.start()
            for _ in range(cycles):
                acked(rng.randint(5, 30))  # terminated mid-load, at random
                terminated += terminate_backends(admin, dbname)
            with lock:
                mark = len(lines)
            acked(20)  # recovered: 20 more events acknowledged
            stop.set()
            for thread in threads:
                thread.join(HANG)
            hangs = sum(thread.is_alive() for thread in threads)
            recovered = sum(line[:4] == "ack " for line in lines[mark:]) >= 20
        acks = Acks()
        acks.add(lines)
        audit = Audit.of(postgres_dsn)
        figures = audit.figures(acks)
        retries = acks.retries()

        report(
            cycles=cycles,
            **figures,
            connections_terminated=terminated,
            typed_errors=sum(retries.values()),
            error_types="+".join(sorted(retries)) or "none",
            untyped_errors=len(acks.untyped()),
            hangs=hangs,
        )
        assert ([], 0, True) == (failures, hangs, recovered)
        assert (0, 0, 0, 0) == (
            figures["lost"],
            figures["duplicated"],
            figures["gaps"],
            figures["misplaced"],
        )
        assert [] == acks.untyped()
        assert terminated >= cycles
        assert set(acks.sequences) == set(audit.stored)
        if retry_timeout == 0:  # the losses reached the caller, as typed errors
            assert sum(retries.values()) > 0
        else:  # the store retried or settled every one within its retry_timeout
            assert {} == retries


class TestFollowerReconnects:
    def test_a_terminated_listen_connection_tells_the_follower_to_reread_then_follows_again(
        self, postgres_dsn: str, report: Report
    ) -> None:
        """8 times: every connection of the store is killed, its LISTEN one included."""
        dbname = postgres_dsn.rsplit("/", 1)[1]
        cycles, terminated = 8, 0
        notices = Notices()
        lines: list[str] = []
        with (
            PostgresStore(postgres_dsn) as store,
            psycopg.connect(postgres_dsn, autocommit=True) as admin,
        ):
            writer = PooledWriter(store, SESSIONS, 1000, lines.append)
            stop_following = store.follow(notices)
            writer.append("pg/0", [pooled_event(0)], False)
            notices.wait_for(lambda calls: ("pg/0", 1) in calls)
            first_kill = notices.mark()
            for cycle in range(1, cycles + 1):
                mark = notices.mark()
                terminated += terminate_backends(admin, dbname)
                notices.wait_for(reset_after(mark))
                # A commit after the reset is told: the follower listens again.
                writer.append("pg/0", [pooled_event(SESSIONS * cycle)], False)
                notices.wait_for(told_after(mark, "pg/0", cycle + 1))
            stop_following()
        acks = Acks()
        acks.add(lines)
        audit = Audit.of(postgres_dsn)
        figures = audit.figures(acks)
        retries = acks.retries()

        report(
            cycles=cycles,
            **figures,
            connections_terminated=terminated,
            follower_resets=notices.calls[first_kill:].count((None, 0)),
            typed_errors=sum(retries.values()),
            untyped_errors=len(acks.untyped()),
            hangs=0,
        )
        assert (cycles + 1, 0, 0, 0) == (
            figures["acknowledged"],
            figures["lost"],
            figures["duplicated"],
            figures["gaps"],
        )
        assert [] == acks.untyped()
        assert terminated >= 2 * cycles  # the LISTEN connection and at least one more


class Background:
    """``call()`` on a thread of its own: its result, or the name of what it raised."""

    def __init__(self, call: Callable[[], object]) -> None:
        self._outcome: list[object] = []
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], object]) -> None:
        try:
            self._outcome.append(call())
        except BaseException as error:  # the outcome under test
            self._outcome.append(type(error).__name__)

    def outcome(self) -> object:
        """Wait for the call; return its result or its exception's type name.

        Raises:
            Hang: It did not return within ``HANG`` seconds.
        """
        self._thread.join(HANG)
        if self._thread.is_alive():
            raise Hang("a call did not return")
        return self._outcome[0]


def bounded(call: Callable[[], object]) -> object:
    """Run ``call`` on a thread; return its result or its exception's type name (see above)."""
    return Background(call).outcome()


def calls_on(store: PostgresStore) -> dict[str, Callable[[], object]]:
    """The store calls a server fault test makes of session ``pg/0`` (acknowledged: 1 event)."""
    return {
        "append": lambda: store.append("pg/0", [pooled_event(SESSIONS)]),
        "append-expected_version": lambda: store.append(
            "pg/0", [pooled_event(2 * SESSIONS)], expected_version=1
        ),
        "read": lambda: store.read("pg/0"),
        "last_sequence": lambda: store.last_sequence("pg/0"),
        "log": lambda: store.log("pg/0").read_before(None, 10),
    }


class TestServerGone:
    def test_a_server_that_never_comes_back_gives_store_io_errors_and_close_returns(
        self, own_server: ThrowawayPostgres, report: Report
    ) -> None:
        """The server shuts down at once (SIGQUIT) under a store that appends and follows."""
        dsn = database(own_server, "gone")
        notices = Notices()
        store = PostgresStore(dsn, connect_timeout=1.0, retry_timeout=1.0)
        store.follow(notices)
        store.append("pg/0", [pooled_event(0)])
        notices.wait_for(lambda calls: ("pg/0", 1) in calls)
        postmaster = int((own_server.data_dir / "postmaster.pid").read_text().split()[0])
        with ended(postmaster):
            os.kill(postmaster, signal.SIGQUIT)
        calls = {
            **calls_on(store),
            "sessions": store.sessions,
            "open": lambda: PostgresStore(dsn, connect_timeout=1.0, retry_timeout=1.0),
        }
        outcomes = {name: bounded(call) for name, call in calls.items()}

        def close() -> str:
            store.close()
            return "closed"

        closed = bounded(close)
        listeners = [t.name for t in threading.enumerate() if t.name.startswith("sharedesk-pg")]

        report(
            cases=len(calls),
            typed_errors=sum(outcome == "StoreUnreachable" for outcome in outcomes.values()),
            listeners_left=len(listeners),
            hangs=0,
        )
        assert {name: "StoreUnreachable" for name in calls} == outcomes
        assert ("closed", []) == (closed, listeners)


@contextlib.contextmanager
def ended(pid: int) -> Iterator[None]:
    """Wait, after the block, until process ``pid`` (not a child of ours) has ended.

    The postmaster ends after every process it started, so once it is gone no server
    process holds a connection and nothing can still commit.

    Raises:
        Hang: It was still running ``HANG`` seconds later.
    """
    fd = os.pidfd_open(pid)
    try:
        yield
        if not select.select([fd], [], [], HANG)[0]:
            raise Hang(f"process {pid} did not end")
    finally:
        os.close(fd)


def server_processes(server: ThrowawayPostgres) -> list[int]:
    """The pids of ``server``'s postmaster and of every process it started."""
    postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            children.append(int(entry))
    return [postmaster, *children]


@contextlib.contextmanager
def stopped(server: ThrowawayPostgres) -> Iterator[None]:
    """SIGSTOP every process of ``server`` (it keeps its connections and answers nothing)."""
    pids = server_processes(server)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


#: The stopped-server test's ``call_timeout`` (with 0, no limit, its first call hangs).
CALL_TIMEOUT = 0.5


def appends_at_once(store: PostgresStore, count: int) -> str:
    """Append to ``count`` sessions from as many threads at once (a group, and what
    it hands back); return the one error type they all ended with, else ``"mixed"``."""
    names: list[str] = []
    start = threading.Barrier(count)

    def append(index: int) -> None:
        start.wait()
        try:
            store.append(f"pg/{index}", [pooled_event(3 * SESSIONS + index)])
            names.append("stored")
        except Exception as error:
            names.append(type(error).__name__)

    threads = [threading.Thread(target=append, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return names[0] if len(set(names)) == 1 else "mixed"


def closing(closable: Hub | PostgresStore) -> str:
    closable.close()
    return "closed"


class TestServerStopped:
    def test_calls_on_a_server_that_stops_answering_fail_typed_within_their_budget(
        self, own_server: ThrowawayPostgres, report: Report
    ) -> None:
        """Every server process is stopped under a store whose connections stay open.

        Each call must end within about ``call_timeout + retry_timeout`` (plus the
        pool's ``connect_timeout`` for a new connection), with a typed error; so must a
        Hub's post and ``close()``. Once the server resumes, what was acknowledged is
        there and the same store serves again.
        """
        dsn = database(own_server, "stopped")
        budget: dict[str, Any] = {
            "call_timeout": CALL_TIMEOUT,
            "retry_timeout": 0.5,
            "connect_timeout": 0.5,
        }
        notices = Notices()
        store = PostgresStore(dsn, min_connections=2, max_connections=4, **budget)
        store.follow(notices)
        acknowledged = store.append("pg/0", [pooled_event(0)])
        hub = Hub.open(dsn, **budget)
        hub.session("pg/1").post(Person("pat", "Pat"), "before the stop")
        calls = {
            **calls_on(store),
            "hub post": lambda: hub.session("pg/1").post(Person("pat", "Pat"), "stopped"),
            "4 appends at once": lambda: appends_at_once(store, 4),
        }
        with stopped(own_server):
            outcomes = {name: bounded(call) for name, call in calls.items()}
            hub_closed = bounded(lambda: closing(hub))
        store.append("pg/2", [pooled_event(2)])  # resumed: the same store serves again
        stored = store.read("pg/0")
        with stopped(own_server):
            closed = bounded(lambda: closing(store))

        typed = {"StoreIOError", "StoreUnreachable", "CommitOutcomeUnknown"}
        report(
            cases=len(calls) + 2,
            typed_errors=sum(outcome in typed for outcome in outcomes.values()),
            hangs=0,
        )
        assert {name: True for name in calls} == {
            name: outcome in typed for name, outcome in outcomes.items()
        }, outcomes
        assert ("closed", "closed") == (hub_closed, closed)
        assert acknowledged == stored[:1]

    def test_retries_past_cut_connections_and_close_mid_call_stay_bounded(
        self, own_server: ThrowawayPostgres, report: Report
    ) -> None:
        """Retrying longer than a call may take, and closing while a call waits.

        A read with ``retry_timeout`` (3 s) well past ``call_timeout`` (0.5 s) retries
        on connections the pool checks first, each check cut off like any use; a store
        closed while a call waits on the stopped server (``call_timeout`` 60 s) cuts it.
        """
        dsn = database(own_server, "stopped_retries")
        retrying = PostgresStore(
            dsn, min_connections=3, call_timeout=0.5, retry_timeout=3.0, connect_timeout=0.5
        )
        sending = threading.Event()

        class Signalling(psycopg.Connection[Any]):
            def execute(self, *args: Any, **kwargs: Any) -> Any:
                sending.set()
                return super().execute(*args, **kwargs)

        patient = PostgresStore(
            dsn, min_connections=2, call_timeout=60.0, connect=lambda: Signalling.connect(dsn)
        )
        retrying.append("pg/0", [pooled_event(0)])
        patient.read("pg/0")
        with stopped(own_server):
            read = bounded(lambda: retrying.read("pg/0"))
            sending.clear()
            waiting = Background(lambda: patient.read("pg/0"))
            assert sending.wait(HANG)  # the read is sent to the stopped server
            closed = bounded(lambda: closing(patient))
            cut = waiting.outcome()
            retrying_closed = bounded(lambda: closing(retrying))

        io_error = read in ("StoreIOError", "StoreUnreachable")  # the retries ran out
        report(cases=2, typed_errors=io_error + (cut == "StoreClosedError"), hangs=0)
        assert (True, "closed", "StoreClosedError", "closed") == (
            io_error,
            closed,
            cut,
            retrying_closed,
        )


def waiting_for_a_lock(admin: psycopg.Connection[tuple[int]], dbname: str) -> list[int]:
    """The backends of ``dbname`` waiting for a lock (bounded: a hang fails the test)."""
    for _ in range(int(HANG / 0.01)):
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            (dbname,),
        ).fetchall()
        if rows:
            return [pid for (pid,) in rows]
        threading.Event().wait(0.01)  # the server is polled: nothing to wait on here
    raise Hang("no append came to wait for the session's row lock")


#: The writes whose connection dies under them, each as a caller would retry it.
WRITES = ["append", "append-expected_version", "shared_write"]
RETRIED = "stored-by-the-store's-retry"


class TestConnectionLostMidAppend:
    @pytest.mark.parametrize("write", WRITES)
    def test_a_write_whose_server_process_dies_mid_statement_is_settled_and_stored_once(
        self, postgres_dsn: str, report: Report, write: str
    ) -> None:
        """5 times: a write waits for its session's row lock, and its backend is killed.

        The statement was sent, so the store cannot know at once whether it committed.
        A plain append is retried (its ids make that exact); a write the retry of which
        would fail its own check if the first attempt committed (``expected_version``,
        a shared write) is settled first: its server process is gone, a read
        shows it was not stored, so it runs again. Either way the caller gets the
        stored events, stored once.
        """
        dbname = postgres_dsn.rsplit("/", 1)[1]
        cycles = 5
        conversation = Conversation("pg/0")
        outcomes: Counter[str] = Counter()
        acknowledged: dict[tuple[str, str], int] = {}
        with (
            PostgresStore(postgres_dsn) as store,
            psycopg.connect(postgres_dsn, autocommit=True) as admin,
            psycopg.connect(postgres_dsn) as holder,
        ):
            store.append("pg/0", [pooled_event(0)])

            def submit(event: Event, cycle: int) -> list[Event]:
                if write == "append":
                    return store.append("pg/0", [event])
                if write == "append-expected_version":
                    version = store.last_sequence("pg/0")
                    return store.append("pg/0", [event], expected_version=version)
                expected = store.get_sharing_state("pg/0", VIEWER, conversation)
                state = SharingState(conversation, cycle)
                return append_shared(
                    store, "pg/0", [event], viewer=VIEWER, state=state, expected_state=expected
                )

            for cycle in range(1, cycles + 1):
                event = pooled_event(SESSIONS * cycle)
                holder.execute(  # the row every write to pg/0 locks (README: the tables)
                    "SELECT last_seq FROM sharedesk.streams WHERE session_id = %s FOR UPDATE",
                    [b"pg/0"],
                )
                append = Background(functools.partial(submit, event, cycle))
                for pid in waiting_for_a_lock(admin, dbname):
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                holder.rollback()
                outcome = append.outcome()
                if isinstance(outcome, list):
                    outcomes[RETRIED] += 1
                else:
                    outcomes[str(outcome)] += 1
                    outcome = submit(event, cycle)  # the caller's retry, same ids
                assert isinstance(outcome, list)
                (stored,) = outcome
                acknowledged[("pg/0", stored.id)] = stored.sequence or 0
        acks = Acks(sequences={key: {sequence} for key, sequence in acknowledged.items()})
        figures = Audit.of(postgres_dsn).figures(acks)

        report(cycles=cycles, **figures, outcomes="+".join(sorted(outcomes)), hangs=0)
        assert (cycles, 0, 0, 0) == (
            figures["acknowledged"],
            figures["lost"],
            figures["duplicated"],
            figures["gaps"],
        )
        assert {RETRIED: cycles} == dict(outcomes)


#: The reply that says a write committed, as the wire protocol carries it: the
#: ``CommandComplete`` of a ``COMMIT``.
COMMITTED_REPLIES = (b"C\x00\x00\x00\x0bCOMMIT\x00",)


class CuttingProxy:
    """A TCP proxy to a server that can lose the reply of the next committed write.

    Every connection through it is forwarded both ways. After :meth:`arm`, the first
    reply from the server that says a write committed (``COMMITTED_REPLIES``) is
    dropped and its connection cut (both sockets closed): the server committed the
    write, but the client never hears of it.
    """

    def __init__(self, port: int) -> None:
        self._upstream = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self.cuts = 0
        self._threads[0].start()

    def arm(self) -> None:
        self._armed.set()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self._upstream))
            pumps = [
                threading.Thread(target=self._pump, args=(client, server, False), daemon=True),
                threading.Thread(target=self._pump, args=(server, client, True), daemon=True),
            ]
            with self._lock:
                self._sockets += [client, server]
                self._threads += pumps
            for pump in pumps:
                pump.start()

    def _pump(self, source: socket.socket, target: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if (
                    replies
                    and self._armed.is_set()
                    and any(reply in data for reply in COMMITTED_REPLIES)
                ):
                    with self._lock:
                        cut, self.cuts = self._armed.is_set(), self.cuts + self._armed.is_set()
                        self._armed.clear()
                    if cut:
                        break
                target.sendall(data)
        except OSError:
            pass
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            threads = list(self._threads)
        for thread in threads:
            thread.join(HANG)


class TestReplyLost:
    @pytest.mark.parametrize("write", WRITES)
    def test_a_committed_write_whose_reply_is_lost_returns_the_stored_events(
        self, postgres_server: ThrowawayPostgres, postgres_dsn: str, report: Report, write: str
    ) -> None:
        """5 times: the write commits, and its connection is cut before the reply.

        A plain append is retried and its ids return the stored events; a write with
        ``expected_version`` or a sharing state is settled (its server process gone, a
        read shows it stored) and returns its result: no ``ConcurrencyError`` and no
        ``SharingStateConflict`` for a write that did happen.
        """
        cycles = 5
        proxy = CuttingProxy(postgres_server.port)
        dsn = f"postgresql://postgres@127.0.0.1:{proxy.port}/{postgres_dsn.rsplit('/', 1)[1]}"
        conversation = Conversation("pg/0")
        outcomes: Counter[str] = Counter()
        acknowledged: dict[tuple[str, str], int] = {}
        try:
            with PostgresStore(dsn, max_connections=2) as store:
                store.append("pg/0", [pooled_event(0)])
                for cycle in range(1, cycles + 1):
                    event = pooled_event(SESSIONS * cycle)
                    version = store.last_sequence("pg/0")
                    expected = store.get_sharing_state("pg/0", VIEWER, conversation)
                    call: Callable[[], list[Event]]
                    if write == "append":
                        call = functools.partial(store.append, "pg/0", [event])
                    elif write == "append-expected_version":
                        call = functools.partial(
                            store.append, "pg/0", [event], expected_version=version
                        )
                    else:
                        call = functools.partial(
                            append_shared,
                            store,
                            "pg/0",
                            [event],
                            viewer=VIEWER,
                            state=SharingState(conversation, cycle),
                            expected_state=expected,
                        )
                    proxy.arm()
                    outcome = bounded(call)
                    if isinstance(outcome, list):
                        outcomes["returned"] += 1
                        (stored,) = outcome
                        acknowledged[("pg/0", stored.id)] = stored.sequence or 0
                    else:
                        outcomes[str(outcome)] += 1
        finally:
            proxy.close()
        acks = Acks(sequences={key: {sequence} for key, sequence in acknowledged.items()})
        audit = Audit.of(postgres_dsn)
        figures = audit.figures(acks)

        report(
            cycles=cycles,
            **figures,
            replies_cut=proxy.cuts,
            outcomes="+".join(sorted(outcomes)),
            hangs=0,
        )
        assert ({"returned": cycles}, cycles) == (dict(outcomes), proxy.cuts)
        assert (cycles, 0, 0, 0) == (
            figures["acknowledged"],
            figures["lost"],
            figures["duplicated"],
            figures["gaps"],
        )
        assert len(audit.stored) == cycles + 1
