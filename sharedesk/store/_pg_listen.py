r"""The listener of ``PostgresStore.follow``: one connection ``LISTEN``\ing, one thread.

The thread (``sharedesk-pg-listener:<dsn>``) calls every follower with each session's
newest committed sequence; when its connection is lost it reconnects with backoff and
tells every follower ``(None, 0)``: notices may have been missed. ``stop`` wakes it by
shutting its connection's socket down (:func:`~sharedesk.store._pg_watchdog.shut_down`),
which needs no server: a stopped one does not hold ``close()``.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import psycopg

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import StoreIOError
from sharedesk.store._follow import Followers, Watcher
from sharedesk.store._pg_watchdog import Connect, Watchdog, shut_down

__all__ = ["LISTEN_POLL", "Listener", "parse_payload"]

_log = logger()

#: Most seconds the listener waits for a notice before it looks at its stop flag.
LISTEN_POLL: Final = 0.2
#: Backoff of the listener's reconnection attempts: first and longest wait, seconds.
_RECONNECT_FIRST: Final = 0.05
_RECONNECT_MAX: Final = 2.0


class Listener(Watcher):
    """The thread that listens on the store's channel and calls its followers."""

    def __init__(
        self,
        connect: Connect,
        watchdog: Watchdog,
        channel: str,
        followers: Followers,
    ) -> None:
        super().__init__("pg-listener", followers)
        self._connect_to = connect
        self._watchdog = watchdog
        self._channel = channel
        self._lock = threading.Lock()  # guards _conn: stop() never shuts a closed one down
        self._conn: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        conn = self._connect_to()
        try:
            conn.autocommit = True
            with self._watchdog.watch(conn):
                conn.execute(f'LISTEN "{self._channel}"')
        except BaseException:
            conn.close()
            raise
        return conn

    def start(self) -> None:
        """Open the connection (else ``StoreIOError``) and start the thread."""
        try:
            self._conn = self._connect()
        except psycopg.Error as exc:
            raise StoreIOError(self._path, "follow") from exc
        super().start()

    def _wake(self) -> None:
        """Shut the connection down under the thread's wait (the thread closes it)."""
        with self._lock:
            if self._conn is not None:
                shut_down(self._conn)

    def _run(self) -> None:
        delay = _RECONNECT_FIRST
        try:
            while not self._stopping.is_set():
                conn = self._conn
                if conn is None:
                    try:
                        conn = self._connect()
                    except psycopg.Error as exc:
                        _log.warning("store.pg_listener_reconnect_failed", error=repr(exc))
                        self._stopping.wait(delay)
                        delay = min(delay * 2, _RECONNECT_MAX)
                        continue
                    with self._lock:
                        self._conn = conn
                    delay = _RECONNECT_FIRST
                    self._tell(None, 0)
                try:
                    self._drain(conn)
                except psycopg.Error as exc:
                    if self._stopping.is_set():
                        break
                    _log.warning("store.pg_listener_lost", error=repr(exc))
                    self._close()
        finally:
            self._close()

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _drain(self, conn: psycopg.Connection[Any]) -> None:
        """Wait up to ``LISTEN_POLL`` for notices, telling the followers of each at once."""
        for notice in conn.notifies(timeout=LISTEN_POLL):
            for session_id, last in parse_payload(notice.payload):
                self._tell(session_id, last)
            if self._stopping.is_set():
                return


def parse_payload(payload: str) -> list[tuple[str, int]]:
    """Return the (session id, last sequence) pairs of a payload ``<last>:<hex id> ...``."""
    told: list[tuple[str, int]] = []
    for notice in payload.split():
        last, _, hexed = notice.partition(":")
        try:
            told.append((bytes.fromhex(hexed).decode("utf-8"), int(last)))
        except ValueError:
            _log.warning("store.pg_bad_notice", payload=notice[:100])
    return told
