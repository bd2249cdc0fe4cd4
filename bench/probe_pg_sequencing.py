"""Probe: PostgresStore's per-session row lock against a table lock (eventsourcing's way).

Run from the repository root: ``.venv/bin/python -m bench.probe_pg_sequencing``.
Starts a throwaway server (fsync on), then alternates two stores on it, each appending one event
per call from 16 threads over 1,000 desks: ``PostgresStore`` as shipped (each write
locks its session's ``streams`` row), and the same store that also takes ``LOCK TABLE
events IN EXCLUSIVE MODE`` first, as eventsourcing's ``PostgresApplicationRecorder``
does for every insert (all writers serialised; here added to the ``append_events``
function, so both run the same statement). A third line, raw psycopg inserting the
same records one transaction per append (``BEGIN``, ``INSERT``, ``COMMIT``, no checks),
is the floor the issue measures against. The two stores send their notices with
``notify="after_commit"``, because a ``NOTIFY`` inside the transaction serialises every
notifying commit of the server and would hide the difference; a fourth line is the
store with the default ``notify="commit"``. Prints appends per second and the ratios.
Not a benchmark (``python -m bench append --backend postgres`` is): a quick in-run
ratio behind the choice documented in ``sharedesk/store/postgres.py``.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from bench.pgserver import ThrowawayPostgres
from sharedesk import Event, Person, Text
from sharedesk.protocol.records import ENCODER
from sharedesk.store._pg_schema import APPEND_FUNCTION
from sharedesk.store.postgres import Notify, PostgresStore

THREADS, DESKS, PER_THREAD, ROUNDS = 16, 1000, 120, 3
ALICE = Person(id="alice", label="Alice")


class TableLockedStore(PostgresStore):
    """The rejected alternative: every append serialised on the events table first."""

    def __init__(self, dsn: str, **options: Any) -> None:
        super().__init__(dsn, **options)
        body = APPEND_FUNCTION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
        body = body.replace("BEGIN\n", "BEGIN\n    LOCK TABLE {s}.events IN EXCLUSIVE MODE;\n", 1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(body.format(s=f'"{self.schema}"'))


def rate(store: PostgresStore) -> float:
    barrier = threading.Barrier(THREADS + 1)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        barrier.wait()
        for _ in range(PER_THREAD):
            store.append(f"desk-{rng.randrange(DESKS)}", [Event(ALICE, Text("hello"))])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return THREADS * PER_THREAD / (time.perf_counter() - start)


class RawInserts:
    """Raw psycopg: the same record inserted in one transaction per append, no checks."""

    def __init__(self, dsn: str) -> None:
        self._pool: ConnectionPool[Any] = ConnectionPool(
            dsn, min_size=THREADS, max_size=THREADS, kwargs={"autocommit": True}
        )
        with self._pool.connection() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS raw_events (session_id bytea, seq bigserial, "
                "id bytea, record bytea, PRIMARY KEY (session_id, seq))"
            )

    def append(self, session_id: str, events: list[Event]) -> None:
        (event,) = events
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO raw_events (session_id, id, record) VALUES (%s, %s, %s)",
                [session_id.encode(), event.id.encode(), ENCODER.encode(event)],
            )

    def close(self) -> None:
        self._pool.close()


def main() -> None:
    with ThrowawayPostgres(fsync=True) as server:
        rates: dict[str, list[float]] = {
            "row lock": [],
            "table lock": [],
            "raw": [],
            "row lock, notify=commit": [],
        }
        stores: tuple[tuple[str, type[PostgresStore], Notify], ...] = (
            ("row lock", PostgresStore, "after_commit"),
            ("table lock", TableLockedStore, "after_commit"),
            ("row lock, notify=commit", PostgresStore, "commit"),
        )
        for _round in range(ROUNDS):
            for name, cls, notify in stores:
                schema = f"probe_{len(rates[name])}_{abs(hash(name)) % 1000}"
                with cls(
                    server.dsn, schema=schema, max_connections=THREADS, notify=notify
                ) as store:
                    rates[name].append(rate(store))
            raw = RawInserts(server.dsn)
            try:
                rates["raw"].append(rate(raw))  # type: ignore[arg-type]
            finally:
                raw.close()
        row, table, floor, in_commit = (sorted(r)[len(r) // 2] for r in rates.values())
        for name, values in rates.items():
            each = ", ".join(f"{r:.0f}" for r in values)
            median = sorted(values)[len(values) // 2]
            print(f"{name:22} {median:6.0f} appends/s (median of {ROUNDS}: {each})")
        print(
            f"row lock / table lock = {row / table:.2f}x; row lock / raw = {row / floor:.2f}x; "
            f"notify=commit / raw = {in_commit / floor:.2f}x"
        )


if __name__ == "__main__":
    main()
