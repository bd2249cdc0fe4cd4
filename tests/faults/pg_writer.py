"""The load of the PostgreSQL fault tests: appends of shared ids, every ack reported.

As a child process:
``python -m tests.faults.pg_writer DSN THREADS SESSIONS POOL SEED APPENDS [OPTION=VALUE...]``
(``APPENDS`` appends per thread, started when a line comes on stdin; 0: at once, until
stdin closes; each ``OPTION=VALUE`` a
``PostgresStore`` option: ``retry_timeout=0`` makes every lost connection reach the
writer as a typed error). The
tests also run :class:`PooledWriter` in their own process, on threads.

Every writer draws its event ids from one pool shared by all writers: id ``e<n>``
(``0 <= n < POOL``) always belongs to session ``pg/<n % SESSIONS>`` and always carries
the same body, so two processes (or two threads) often submit the same event, and a
writer started after another was killed resubmits ids whose first append may or may not
have committed. Each append is a batch of one to three ids of one session; about one in
five passes ``expected_version`` (the last sequence read just before).

What a writer reports, one line each (in a child: one ``os.write`` on stdout, shorter
than PIPE_BUF, so threads never interleave), only after ``append`` returned or raised:

- ``ready`` once the store is open (child only);
- ``ack <session> <id> <sequence>`` for every event ``append`` returned;
- ``conflict`` for a ``ConcurrencyError`` (``expected_version`` was stale);
- ``retry <ErrorType>`` for a ``StoreError``: the same batch (same ids) is submitted
  again, for about ``RETRY_FOR`` seconds of pauses, then ``gave-up`` (a child exits with status 3);
- ``error <ErrorType>`` for any other ``SharedeskError`` (a child exits with status 5);
- ``raw <ExceptionType> <repr>`` for an exception that is not a ``SharedeskError`` (a
  driver error leaked; a child exits with status 4);
- ``done`` when every thread finished and the store closed (child only).
"""

from __future__ import annotations

import itertools
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from sharedesk.protocol import (
    ConcurrencyError,
    Event,
    Person,
    SharedeskError,
    StoreError,
    Text,
)
from sharedesk.store.postgres import PostgresStore

#: Seconds one batch is retried after typed store errors before the writer gives up.
RETRY_FOR = 45.0
#: Seconds between two attempts of one batch.
RETRY_PAUSE = 0.05
AUTHOR = Person(id="pgfault", label="PG fault")


def pooled_event(number: int) -> Event:
    """The event with pool number ``number`` (the same value in every writer)."""
    return Event(AUTHOR, Text(f"pooled event {number}"), id=f"e{number}")


def pooled_session(event_id: str, sessions: int) -> str:
    """The session the pooled id ``event_id`` belongs to."""
    return f"pg/{int(event_id[1:]) % sessions}"


class GaveUp(Exception):
    """A batch still failed after about ``RETRY_FOR`` seconds of retries."""


class PooledWriter:
    """Appends batches of pooled ids to ``store`` and reports each outcome to ``say``.

    Args:
        store: The store to append to.
        sessions: How many sessions the pool spreads over.
        pool: How many ids the pool holds.
        say: Called with each report line (see the module doc); must be thread-safe.
    """

    def __init__(
        self, store: PostgresStore, sessions: int, pool: int, say: Callable[[str], None]
    ) -> None:
        self.store = store
        self.sessions = sessions
        self.pool = pool
        self.say = say

    def append(self, session_id: str, events: list[Event], check_version: bool) -> None:
        """Append one batch, retrying it (same ids) after a ``StoreError``.

        Raises:
            GaveUp: It still failed after ``RETRY_FOR / RETRY_PAUSE`` retries.
            SharedeskError: Any other typed error (reported as ``error``).
        """
        for attempt in itertools.count(1):
            try:
                version = self.store.last_sequence(session_id) if check_version else None
                stored = self.store.append(session_id, events, expected_version=version)
            except ConcurrencyError:
                try:
                    if attempt > 1 and self._stored(session_id, events):
                        return  # an earlier attempt committed, its reply lost: acknowledged now
                except StoreError as error:  # the check's read lost its connection too
                    self._pause(session_id, attempt, error)
                    continue
                self.say("conflict")
                return
            except StoreError as error:
                self._pause(session_id, attempt, error)
                continue
            for event in stored:
                self.say(f"ack {session_id} {event.id} {event.sequence}")
            return

    def _pause(self, session_id: str, attempt: int, error: StoreError) -> None:
        """Report a retry after ``error`` and pause before it (``GaveUp`` past ``RETRY_FOR``)."""
        self.say(f"retry {type(error).__name__}")
        if attempt * RETRY_PAUSE > RETRY_FOR:
            self.say("gave-up")
            raise GaveUp(session_id) from error
        time.sleep(RETRY_PAUSE)

    def _stored(self, session_id: str, events: list[Event]) -> bool:
        """Acknowledge ``events`` and return ``True`` if the session holds every one of them.

        Writers share the id pool, so another writer's batch may hold some of these ids:
        a batch is stored whole or not at all, and one held only in part is a conflict.
        """
        held = {event.id: event for event in self.store.read(session_id)}
        if any(event.id not in held for event in events):
            return False
        for event in events:
            self.say(f"ack {session_id} {event.id} {held[event.id].sequence}")
        return True

    def run(self, seed: int, appends: int, stop: threading.Event) -> None:
        """Append ``appends`` batches (0: until ``stop`` is set), drawn with ``seed``.

        Raises:
            GaveUp, SharedeskError: As :meth:`append`; anything else is reported as
            ``raw`` and re-raised.
        """
        rng = random.Random(seed)
        done = 0
        while not stop.is_set() and (appends == 0 or done < appends):
            session = rng.randrange(self.sessions)
            numbers = rng.sample(range(session, self.pool, self.sessions), rng.randint(1, 3))
            events = [pooled_event(number) for number in numbers]
            try:
                self.append(f"pg/{session}", events, rng.random() < 0.2)
            except GaveUp:
                raise
            except SharedeskError as error:
                self.say(f"error {type(error).__name__} {error}"[:400])
                raise
            except BaseException as error:
                self.say(f"raw {type(error).__name__} {error!r}"[:400])
                raise
            done += 1


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def main(argv: list[str]) -> None:
    dsn, threads, sessions, pool = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    seed, appends = int(argv[4]), int(argv[5])
    options: dict[str, Any] = dict(arg.split("=", 1) for arg in argv[6:])
    if "retry_timeout" in options:
        options["retry_timeout"] = float(options["retry_timeout"])
    store = PostgresStore(dsn, **options)
    writer = PooledWriter(store, sessions, pool, say)
    stop = threading.Event()

    def stop_at_end_of_input() -> None:
        sys.stdin.read()
        stop.set()

    if appends == 0:
        threading.Thread(target=stop_at_end_of_input, daemon=True).start()
    say("ready")
    if appends > 0:
        sys.stdin.readline()  # the cue to start

    def work(thread_seed: int) -> None:
        try:
            writer.run(thread_seed, appends, stop)
        except GaveUp:
            os._exit(3)
        except SharedeskError:
            os._exit(5)
        except BaseException:
            os._exit(4)

    workers = [
        threading.Thread(target=work, args=(seed * 1000 + index,)) for index in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    store.close()
    say("done")


if __name__ == "__main__":
    main(sys.argv[1:])
