"""Child process of the crash test: append from several threads, report every ack.

Usage: ``python -m tests.store.crash_writer PATH THREADS SESSIONS``

Each thread appends one or two events at a time to a random session and, once
``append`` has returned, writes one line per stored event to stdout:
``ack <session> <event id> <sequence>``. Each line is one ``os.write`` of less than
PIPE_BUF bytes, so lines from different threads never interleave, and a line is only
written after its event is durable. The parent kills this process with SIGKILL.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import uuid

from sharedesk.protocol import Event, Person, Text, TextDelta
from sharedesk.store import LmdbStore


def main(argv: list[str]) -> None:
    path, threads, sessions = argv[0], int(argv[1]), int(argv[2])
    store = LmdbStore(path)
    author = Person(id="crash", label="Crash")
    os.write(1, b"ready\n")

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            session_id = f"crash/{rng.randrange(sessions)}"
            events = [
                Event(
                    author, Text("m") if rng.random() < 0.5 else TextDelta("d"), id=uuid.uuid4().hex
                )
                for _ in range(rng.randint(1, 2))
            ]
            for stored in store.append(session_id, events):
                os.write(1, f"ack {session_id} {stored.id} {stored.sequence}\n".encode())

    workers = [threading.Thread(target=work, args=(seed,), daemon=True) for seed in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main(sys.argv[1:])
