"""Probe: PostgresStore's per-session row lock against a table lock (eventsourcing's way).

Run from the repository root: ``.venv/bin/python docs/pg_sequencing_probe.py``. Starts a
throwaway server (fsync on), then alternates two stores on it, each appending one event
per call from 16 threads over 1,000 desks: ``PostgresStore`` as shipped (each write
locks its session's ``streams`` row), and the same store that also takes ``LOCK TABLE
events IN EXCLUSIVE MODE`` first, as eventsourcing's ``PostgresApplicationRecorder``
does for every insert (all writers serialised; here added to the ``append_events``
function, so both run the same statement). Prints appends per second of each and
their ratio. Not a benchmark (``python -m bench append --backend postgres`` is): a
quick in-run ratio behind the choice documented in ``sharedesk/store/postgres.py``.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from bench.pgserver import ThrowawayPostgres  # noqa: E402
from sharedesk import Event, Person, Text  # noqa: E402
from sharedesk.store._pg_schema import APPEND_FUNCTION  # noqa: E402
from sharedesk.store.postgres import PostgresStore  # noqa: E402

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


def main() -> None:
    with ThrowawayPostgres(fsync=True) as server:
        rates: dict[str, list[float]] = {"row lock": [], "table lock": []}
        for round_ in range(ROUNDS):
            for name, cls in (("row lock", PostgresStore), ("table lock", TableLockedStore)):
                schema = f"probe_{name.replace(' ', '_')}_{round_}"
                with cls(server.dsn, schema=schema, max_connections=THREADS) as store:
                    rates[name].append(rate(store))
        row, table = (sorted(r)[len(r) // 2] for r in rates.values())
        print(f"row lock   {row:8.0f} appends/s (median of {ROUNDS}: {rates['row lock']})")
        print(f"table lock {table:8.0f} appends/s (median of {ROUNDS}: {rates['table lock']})")
        print(f"row lock / table lock = {row / table:.2f}x")


if __name__ == "__main__":
    main()
