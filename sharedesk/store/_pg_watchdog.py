"""The connections of a ``PostgresStore``: its pool, and a deadline on every use.

psycopg has no per-call timeout, so a server that stops answering but keeps its
connections would hold a call, and ``close()``, for good. :class:`Watchdog`'s thread
(``sharedesk-pg-watchdog:<dsn>``) shuts down the socket of any use still running
``timeout`` seconds after it began (on a duplicate of its descriptor: the waiting thread
wakes, libpq reports the connection lost, the store's retry rules decide). A cut
connection is closed when its use ends, never inside it, so the descriptor shut down is
never one the system handed to somebody else.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import StoreIOError, StoreUnreachable

__all__ = ["Connect", "Pool", "Watchdog", "shut_down"]

_log = logger()


class Watchdog:
    """Cuts the connection of any use running past its deadline; ``timeout`` 0: none.

    Every use gets the same ``timeout``, so the uses are due in the order they began: the
    thread sleeps until the oldest is due, or one ``timeout`` when there is none (a use
    begun meanwhile is due no sooner), and no use ever needs to wake it.
    """

    def __init__(self, timeout: float, path: str) -> None:
        self._timeout = timeout
        self._path = path
        self._cond = threading.Condition()
        self._uses: dict[int, tuple[float, Any]] = {}  # key -> (deadline, connection)
        self._cut: set[int] = set()  # keys whose socket was shut down
        self._next = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, conn: Any) -> Iterator[None]:
        """Watch one use of ``conn``: past ``timeout``, cut it; closed when the block ends.

        Cost: one lock and one dictionary entry (the first use starts the thread).
        """
        if self._timeout <= 0:
            yield
            return
        with self._cond:
            key = self._next
            self._next += 1
            self._uses[key] = (time.monotonic() + self._timeout, conn)
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(
                    target=self._run, name=f"sharedesk-pg-watchdog:{self._path}", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._cond:
                del self._uses[key]
                cut = key in self._cut
                self._cut.discard(key)
            if cut:
                conn.close()

    def stop(self) -> None:
        """Cut every use still watched (a closed store's calls end at once), stop the thread.

        Idempotent; later uses are not watched.
        """
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cut_due(float("inf"))
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        cond = self._cond
        with cond:
            while not self._stopping:
                now = time.monotonic()
                self._cut_due(now)
                pending = (due for key, (due, _) in self._uses.items() if key not in self._cut)
                cond.wait(next(pending, now + self._timeout) - now)

    def _cut_due(self, now: float) -> None:
        """Cut the uses due by ``now`` (holding the lock)."""
        for key, (due, conn) in self._uses.items():
            if due > now:
                return
            if key not in self._cut:
                self._cut.add(key)
                if shut_down(conn):
                    _log.warning("store.pg_call_timeout", path=self._path, seconds=self._timeout)


def shut_down(conn: Any) -> bool:
    """Shut down ``conn``'s socket so that a thread waiting on it wakes now (``False``: closed).

    On a duplicate of its descriptor: the connection stays open until its owner closes it.
    """
    try:
        duplicate = socket.socket(fileno=os.dup(conn.pgconn.socket))
    except Exception:  # closed or broken already: nobody waits on it
        return False
    with contextlib.suppress(OSError), duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)
    return True


#: Makes a new psycopg connection (``PostgresStore``'s ``connect`` seam).
Connect = Callable[[], psycopg.Connection[Any]]


class Pool:
    """The store's connections: made on the caller's thread, kept while idle, at most ``size``.

    A connection broken, closed or left inside a transaction is closed when given back.
    An idle one whose socket is readable is dead (the server says so before it closes
    it), so it is closed and the next one taken: no write goes to a dropped connection.
    """

    def __init__(self, connect: Connect, size: int, watchdog: Watchdog, path: str) -> None:
        self._connect = connect
        self._path = path
        self._watchdog = watchdog
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._closed = False

    @contextlib.contextmanager
    def connection(self, timeout: float, operation: str) -> Iterator[Any]:
        """Lend a live connection for one use (by ``operation``), watched.

        Raises:
            StoreIOError: Every connection stayed busy for ``timeout`` seconds.
            StoreUnreachable: A new connection could not be made (``reason``: libpq's).
        """
        if not self._slots.acquire(timeout=timeout):
            raise StoreIOError(self._path, operation)
        conn = None
        try:
            conn = self._take(operation)
            with self._watchdog.watch(conn):
                yield conn
        finally:
            if conn is not None:
                self._give_back(conn)
            self._slots.release()

    def _take(self, operation: str) -> Any:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new(operation)
            if not select.select([conn.pgconn.socket], [], [], 0)[0]:
                return conn
            conn.close()  # the server dropped it while it was idle

    def _new(self, operation: str) -> Any:
        try:
            conn = self._connect()
        except psycopg.Error as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            reason = " ".join(lines) or type(exc).__name__  # libpq's, on one line
            raise StoreUnreachable(self._path, operation, reason) from exc
        conn.autocommit = True  # reads are one statement; writes open a transaction
        return conn

    def _give_back(self, conn: Any) -> None:
        idle = not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE
        with self._lock:
            if idle and not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def fill(self, count: int) -> None:
        """Make connections until ``count`` are idle (``StoreUnreachable`` if one cannot be)."""
        made = [self._new("open") for _ in range(count - len(self._idle))]
        with self._lock:
            self._idle += made

    def close(self) -> None:
        """Close the idle connections; those in use are closed when given back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
