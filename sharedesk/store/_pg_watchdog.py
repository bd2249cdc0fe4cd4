"""The connections of a ``PostgresStore``: its pool, and a deadline on every use.

:class:`Pool` lends connections made on the caller's thread by the store's ``connect``
factory. :class:`Watchdog` bounds each use: psycopg has no per-call timeout, so a server
that stops answering but keeps its connections (a stopped process, a network dropping
packets) would hold a call, and ``close()``, for good. Each use is *watched*; one daemon
thread (``sharedesk-pg-watchdog:<dsn>``) shuts down the socket of any use still running
``timeout`` seconds after it began (``shutdown(SHUT_RDWR)`` on a duplicate of its
descriptor: the waiting thread wakes at once, libpq reports the connection lost, and the
store's retry rules decide). A cut connection is closed when its use ends, so nobody
else receives it, and nothing closes a connection inside a watched block, so the
descriptor shut down is never one the system handed to somebody else. A use costs one
lock and one dictionary entry and wakes nobody: the thread sleeps until the oldest
use's deadline, and after one ``timeout`` with nothing watched, until the next use.
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

__all__ = ["Connect", "ConnectFailed", "Pool", "PoolExhausted", "Watchdog"]

_log = logger()


class Watchdog:
    """Shuts down the connection of any watched use running past its deadline.

    Thread-safe. ``timeout`` 0 watches nothing (and starts no thread).
    """

    def __init__(self, timeout: float, path: str) -> None:
        self._timeout = timeout
        self._path = path
        self._cond = threading.Condition()
        self._uses: dict[int, tuple[float, Any]] = {}  # key -> (deadline, connection)
        self._cut: set[int] = set()  # keys whose socket was shut down
        self._next = 0
        self._stopping = False
        self._asleep = False  # the thread waits for a notify (nothing watched for a while)
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, conn: Any) -> Iterator[None]:
        """Watch one use of ``conn`` (a psycopg connection) while the block runs.

        When the block is still running ``timeout`` seconds after it began, ``conn``'s
        socket is shut down (the block then sees a lost connection); ``conn`` is then
        closed when the block ends, so that it is never used again.

        Cost: one lock and one dictionary entry; starts the watchdog thread the first
        time.
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
            elif self._asleep:
                self._asleep = False
                self._cond.notify()
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
        """Cut every use still watched, stop the thread (idempotent).

        The store stops its watchdog last in ``close()``: a call still waiting on the
        server then has its connection cut at once (it ends as a lost connection, which
        a closed store reports as ``StoreClosedError``) instead of waiting with nobody
        left to cut it. Later uses are not watched.
        """
        with self._cond:
            self._stopping = True
            thread = self._thread
            for key, (_due, conn) in self._uses.items():
                if key not in self._cut:
                    self._cut.add(key)
                    _cut_off(conn, self._path, self._timeout)
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        """Sleep until the oldest use's deadline and cut what is due.

        With nothing watched, the thread naps one ``timeout`` (a use that begins
        meanwhile is due no sooner than the nap ends, so it needs no wake-up), then, if
        still nothing is watched, sleeps until a use wakes it: back-to-back calls from
        one thread never wake it, and an idle store costs nothing.
        """
        cond = self._cond
        napped = False
        with cond:
            while not self._stopping:
                pending = [entry for key, entry in self._uses.items() if key not in self._cut]
                if not pending:
                    if napped:
                        self._asleep = True
                        cond.wait()
                        napped = False
                    else:
                        cond.wait(self._timeout)
                        napped = True
                    continue
                napped = False
                deadline = min(deadline for deadline, _ in pending)
                now = time.monotonic()
                if deadline > now:
                    cond.wait(deadline - now)
                    continue
                for key, (due, conn) in list(self._uses.items()):
                    if due <= now and key not in self._cut:
                        self._cut.add(key)
                        _cut_off(conn, self._path, self._timeout)


def _cut_off(conn: Any, path: str, timeout: float) -> None:
    """Shut down ``conn``'s socket so that the thread waiting on it wakes now."""
    try:
        fd = conn.pgconn.socket
        duplicate = socket.socket(fileno=os.dup(fd))
    except Exception:  # closed or broken already: nobody waits on it
        return
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        duplicate.close()
    _log.warning("store.pg_call_timeout", path=path, seconds=timeout)


#: Makes a new psycopg connection (``PostgresStore``'s ``connect`` seam).
Connect = Callable[[], psycopg.Connection[Any]]


class PoolExhausted(Exception):
    """No connection of the pool came free within the caller's timeout."""


class ConnectFailed(Exception):
    """A new connection could not be made; ``reason`` is libpq's, on one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Pool:
    """The store's connections: made on the caller's thread, kept while idle, at most ``size``.

    A call takes an idle connection (or makes one with ``connect``, so a refused or
    unauthenticated connection fails on the caller's thread, at once, with libpq's
    reason), uses it under the watchdog, and gives it back: a connection that is broken,
    closed or left inside a transaction is closed instead. An idle connection whose
    socket is readable is dead (the server closes idle connections it terminates, and
    says so first), so it is closed and the next one taken: a write is never sent on a
    connection the server had already dropped. Nothing is logged and no thread is run.
    """

    def __init__(self, connect: Connect, size: int, watchdog: Watchdog) -> None:
        self._connect = connect
        self._watchdog = watchdog
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._closed = False

    @contextlib.contextmanager
    def connection(self, timeout: float) -> Iterator[Any]:
        """Lend a live connection for one use, cut off after the watchdog's timeout.

        Raises:
            PoolExhausted: Every connection stayed busy for ``timeout`` seconds.
            ConnectFailed: A new connection could not be made.
        """
        if not self._slots.acquire(timeout=timeout):
            raise PoolExhausted
        conn = None
        try:
            conn = self._take()
            with self._watchdog.watch(conn):
                yield conn
        finally:
            if conn is not None:
                self._give_back(conn)
            self._slots.release()

    def _take(self) -> Any:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new()
            if not select.select([conn.pgconn.socket], [], [], 0)[0]:
                return conn
            conn.close()  # the server dropped it while it was idle

    def _new(self) -> Any:
        try:
            conn = self._connect()
        except psycopg.Error as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise ConnectFailed(" ".join(lines) or type(exc).__name__) from exc
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
        """Make connections until ``count`` are idle.

        Raises:
            ConnectFailed: A connection could not be made.
        """
        made = [self._new() for _ in range(count - len(self._idle))]
        with self._lock:
            self._idle += made

    def close(self) -> None:
        """Close the idle connections; those in use are closed when given back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
