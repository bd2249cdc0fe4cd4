"""Cross-process wake latency of ``AsyncHub.wait_turn`` on PostgreSQL (issue 17).

A child process holds a Hub on the database and posts ``N`` messages, 10 ms apart, each
carrying ``time.time()`` taken just before its post; the parent's ``AsyncHub`` loops on
``wait_turn`` for another participant and records, for each message a wake-up returns,
``now - that time``: commit, ``NOTIFY``, the parent's listener thread, the session
actor's catch-up read, the push to the waiting task and its turn plan. Both processes
run on this machine (one clock). A throwaway server (``bench/pgserver.py``, fsync off)
is started and stopped here.

Run from the repository root::

    .venv/bin/python -m bench.probe_pg_follow [N] [notify]

``notify`` is ``PostgresStore``'s option (``commit``, the default, or ``after_commit``).
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
import uuid

from bench.pg import create_database
from bench.pgserver import ThrowawayPostgres
from sharedesk import AsyncHub, Person

CHILD = """
import sys, time
from sharedesk import Hub, Person
bob = Person(id="bob", label="Bob")
with Hub.open(sys.argv[1], notify=sys.argv[3]) as hub:
    desk = hub.session("desk")
    sys.stdin.readline()
    for _ in range(int(sys.argv[2])):
        desk.post(bob, repr(time.time()))
        time.sleep(0.01)
"""


async def measure(dsn: str, n: int, notify: str) -> list[float]:
    """Return the wake latencies, in milliseconds, of ``n`` posts by another process."""
    alice = Person(id="alice", label="Alice")
    latencies: list[float] = []
    async with AsyncHub.open(dsn, notify=notify) as hub:
        await (await hub.turn("desk", alice)).commit()
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, dsn, str(n), notify], stdin=subprocess.PIPE
        )
        await asyncio.sleep(1.0)  # the child opens its Hub
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
        while len(latencies) < n:
            turn = await hub.wait_turn("desk", alice, timeout=30)
            now = time.time()
            latencies.extend((now - float(m.content)) * 1000 for m in turn.messages)
            await turn.commit()
        child.wait()
    return sorted(latencies)


def main() -> None:
    """Start a server, measure, print median and p99."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    notify = sys.argv[2] if len(sys.argv) > 2 else "commit"
    with ThrowawayPostgres(fsync=False) as server:
        dsn = create_database(server.dsn, f"latency_{uuid.uuid4().hex}")
        lat = asyncio.run(measure(dsn, n, notify))
    p99 = lat[max(0, int(0.99 * len(lat)) - 1)]
    print(
        f"notify={notify}: {len(lat)} posts; wake latency median "
        f"{statistics.median(lat):.2f} ms, p99 {p99:.2f} ms, max {lat[-1]:.2f} ms"
    )


if __name__ == "__main__":
    main()
