r"""PostgresStore: the event store on PostgreSQL, for several processes on one database.

The store port is :class:`~sharedesk.store.base.StoreBase`'s; this module supplies its
I/O on the tables of :mod:`sharedesk.store._pg_schema`, and ``follow`` (``LISTEN``/
``NOTIFY``, :mod:`sharedesk.store._pg_listen`). Every write goes to the base's group
writer (thread ``sharedesk-pg-writer:<dsn>``); each group is one transaction of two
round trips (:mod:`sharedesk.store._pg_txn`) that sends the group's one ``NOTIFY``,
delivered at commit, in commit order, and never lost: its payload lists
``<last_seq>:<hex of the session id's UTF-8>`` per session written, space-separated, on
the channel ``<schema>_appended``.

Connections come from the store's :class:`~sharedesk.store._pg_watchdog.Pool`: a refused
connection fails the open at once with ``StoreUnreachable``. An operation whose
connection (or server) went away is retried on a fresh one for up to ``retry_timeout``
seconds when that is safe: reads, and groups whose ``COMMIT`` was not sent, always; a
group cut off during its ``COMMIT`` when it holds plain appends only (their ids make the
rerun return what a committed first attempt stored). A group holding a guarded write is
*settled* instead: once its server process is gone, a read of one row that write stores
tells whether it committed; when that cannot be told within ``retry_timeout``,
``CommitOutcomeUnknown``. Deadlocks and serialisation failures run again; any other
driver error is a ``StoreIOError``. A use of a connection still running ``call_timeout``
seconds after it began is cut off (:mod:`sharedesk.store._pg_watchdog`) and treated as
a lost connection.
"""

from __future__ import annotations

import functools
import math
import random
import re
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any, Final, TypeVar, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import (
    CommitOutcomeUnknown,
    StoreClosedError,
    StoreIOError,
    StoreUnreachable,
    ValidationError,
)
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import AppendCallback, SessionInfo
from sharedesk.protocol.records import (
    EVENT_DECODER,
    LOG_DECODER,
    decode_record,
    decode_session_state,
    decode_state,
    run_index_key,
    sharing_key,
)
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.validation import check_bool, check_int, check_seconds, is_postgres_dsn
from sharedesk.protocol.views import Conversation, SessionPage, SharingState
from sharedesk.store._follow import Followers
from sharedesk.store._pg_listen import Listener
from sharedesk.store._pg_schema import Queries, check_schema_name, open_schema
from sharedesk.store._pg_txn import GroupTxn, utf8
from sharedesk.store._pg_watchdog import Connect, Pool, Watchdog
from sharedesk.store.base import StoreBase, WriteTxn, text_page

__all__ = ["PostgresStore"]

T = TypeVar("T")

_log = logger()

#: Most seconds the group writer gathers writes once one is waiting.
_GROUP_WAIT: Final = 0.002
#: Whether a server process is still running (a write's, whose connection broke).
_BACKEND_ALIVE: Final = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
#: SQLSTATEs of transactions the server aborted that are safe to run again.
_RETRYABLE_STATES: Final = frozenset({"40001", "40P01"})
#: A password in what a caller gave as a DSN: ``user:password@`` or ``password=...``.
_PASSWORD: Final = re.compile(r"(://[^:/@]*:)[^@]*(@)|(password\s*=\s*)(?:'[^']*'|\S+)", re.I)
_TOP: Final = 2**63 - 1


def redact_dsn(dsn: str) -> str:
    """Return ``dsn`` as ``postgresql://user@host:port/dbname``, without its password."""
    parts = conninfo_to_dict(dsn)
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def _hide_password(text: str) -> str:
    return _PASSWORD.sub(lambda m: f"{m[1] or m[3]}***{m[2] or ''}", text)


def _check_dsn(dsn: Any) -> str:
    """Return ``dsn`` if it is a ``postgresql://`` (or ``postgres://``) URL libpq parses.

    Raises:
        ValidationError: Not such a URL; the message quotes it without its password.
    """
    if not isinstance(dsn, str):
        raise ValidationError(f"dsn must be a str, got {type(dsn).__name__}")
    hidden = _hide_password(dsn)
    given = repr(hidden if len(hidden) <= 200 else hidden[:200] + "...")
    if not is_postgres_dsn(dsn):
        raise ValidationError(
            f"dsn must be a URL starting with postgresql:// or postgres://, got {given}"
        )
    if "\0" in dsn:
        raise ValidationError(f"dsn holds a NUL character: {given}")
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = _hide_password(str(exc).strip())
        raise ValidationError(f"dsn {given} is not a valid connection URL: {reason}") from None
    return dsn


def _default_connect(dsn: str, connect_timeout: float) -> Connect:
    """Return the factory of plain connections to ``dsn``.

    It sets ``connect_timeout`` unless the DSN does: libpq's default waits for good on a
    server that accepts but never answers.
    """
    if "connect_timeout" in conninfo_to_dict(dsn):
        return functools.partial(psycopg.connect, dsn)
    seconds = max(1, math.ceil(connect_timeout))
    return functools.partial(psycopg.connect, dsn, connect_timeout=seconds)


class PostgresStore(StoreBase):
    """An event store in a PostgreSQL database, shared by any number of processes.

    The store port and ``follow`` (see the module header); thread-safe. An append returns
    once its group has committed (durable as the server's ``synchronous_commit`` makes it).

    Args:
        dsn: A libpq connection URL, ``postgresql://user:password@host:port/dbname``
            (``postgres://`` too; query parameters as libpq takes them).
        schema: The PostgreSQL schema holding the store's tables (created if missing;
            a lower-case identifier of at most 40 characters, not a system schema).
            Stores on different schemas of one database are independent.
        min_connections: Connections opened with the store.
        max_connections: Most connections open at once (more callers wait for one).
        connect_timeout: Most seconds a call waits for a connection (free or new).
        retry_timeout: Most seconds an operation whose connection was lost is retried
            (see the module header); 0 never retries.
        call_timeout: Most seconds one use of a connection may take before it is cut
            off and treated as lost; 0: no limit.
        connect: Makes a new psycopg connection (default: ``psycopg.connect(dsn,
            connect_timeout=...)``), which the store sets to autocommit: the seam for
            connection faults.
        create: Whether a database without the store's schema gets it; ``False``: such a
            database is refused with ``ValidationError`` and left as it is.

    Raises:
        ValidationError: An unknown or bad option, or a ``dsn`` that is not a
            PostgreSQL URL.
        StoreFormatError: The database was written by a newer sharedesk.
        StoreUnreachable: The server refused the connection, or could not be reached.
        StoreIOError: The server refused the schema.

    Cost: opens ``min_connections`` connections on the caller's thread, checks the schema
    (two reads when current) and starts the group writer thread.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "sharedesk",
        min_connections: int = 1,
        max_connections: int = 10,
        connect_timeout: float = 10.0,
        retry_timeout: float = 10.0,
        call_timeout: float = 60.0,
        connect: Connect | None = None,
        create: bool = True,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ValidationError(
                f"unknown PostgresStore options {sorted(unknown)}; the options are schema, "
                "min_connections, max_connections, connect_timeout, retry_timeout, "
                "call_timeout, connect, create"
            )
        dsn = _check_dsn(dsn)
        self._schema = check_schema_name(schema)
        check_int("min_connections", min_connections)
        check_int("max_connections", max_connections, minimum=1)
        if min_connections > max_connections:
            raise ValidationError(
                f"min_connections={min_connections} exceeds max_connections={max_connections}"
            )
        check_bool("create", create)
        if connect is not None and not callable(connect):
            raise ValidationError(f"connect must be callable, got {type(connect).__name__}")
        self._connect_timeout = check_seconds("connect_timeout", connect_timeout, 0.001, 3600)
        self._retry_timeout = check_seconds("retry_timeout", retry_timeout, 0, 3600)
        call_timeout = check_seconds("call_timeout", call_timeout, 0, 86400)
        path = redact_dsn(dsn)
        self._watchdog = Watchdog(call_timeout, path)
        self._channel = f"{self._schema}_appended"
        self._sql = Queries(f'"{self._schema}"')
        self._prepared: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
        self._connect = _default_connect(dsn, connect_timeout) if connect is None else connect
        self._pool = Pool(self._connect, max_connections, self._watchdog, path)
        self._path: str = path
        self._closed = False
        listener = functools.partial(Listener, self._connect, self._watchdog, self._channel)
        self._followers = Followers(listener, path)
        try:
            self._run("open", lambda conn: open_schema(conn, self._schema, path, create=create))
            self._run("open", lambda conn: self._pool.fill(min_connections - 1))
        except BaseException:
            self._close()
            raise
        super().__init__(path, writer=f"sharedesk-pg-writer:{path}", group_wait=_GROUP_WAIT)

    @property
    def path(self) -> str:
        """Where the store lives: its DSN without the password."""
        return self._path

    @property
    def channel(self) -> str:
        """The ``NOTIFY`` channel commits are announced on (``<schema>_appended``)."""
        return self._channel

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"PostgresStore({self._path!r}, schema={self._schema!r}) [{state}]"

    # -- connections ---------------------------------------------------------------------

    def _run(
        self,
        operation: str,
        work: Callable[[psycopg.Connection[Any]], T],
        written: list[GroupTxn] | None = None,
    ) -> T:
        """Run ``work(conn)`` on a pool connection, retrying lost connections when safe.

        ``written`` (a write's) holds its attempt's transaction: whether its ``COMMIT`` was
        sent when the connection broke, and whether it may then run again (see the module
        header).
        """
        deadline = time.monotonic() + self._retry_timeout
        delay = 0.0
        while True:
            self._live()
            try:
                with self._pool.connection(self._connect_timeout, operation) as conn:
                    return work(conn)
            except StoreUnreachable:  # the pool could not connect: retried until the deadline
                self._live()
                if operation == "open" or time.monotonic() >= deadline:
                    raise
            except StoreIOError:  # the pool found every connection busy, or work refused
                self._live()
                raise
            except psycopg.Error as exc:
                if self._closed:
                    raise StoreClosedError(self._path) from None
                lost = isinstance(exc, psycopg.OperationalError) and (
                    exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))
                )
                aborted = exc.sqlstate in _RETRYABLE_STATES
                txn = written[-1] if written else None
                if lost and txn is not None and txn.committing and txn.probe is not None:
                    settled = self._settle(txn, deadline)
                    if settled is None:
                        session = txn.guarded_session
                        raise CommitOutcomeUnknown(self._path, operation, session) from exc
                    if settled:
                        return cast(T, txn.result)  # it committed: its result stands
                if not (lost or aborted) or time.monotonic() >= deadline:
                    raise StoreIOError(self._path, operation) from exc
                _log.warning(
                    "store.pg_retry", path=self._path, operation=operation, error=type(exc).__name__
                )
            time.sleep(delay + random.uniform(0, delay))
            delay = min(max(delay * 2, 0.01), 0.5)

    def _settle(self, txn: GroupTxn, deadline: float) -> bool | None:
        """Whether a transaction whose connection broke while committing was stored.

        Waits (until ``deadline``) for its server process to be gone, then reads its
        probe row; ``None`` when that cannot be told in time.
        """
        probe = txn.probe
        assert probe is not None
        while True:
            try:
                with self._pool.connection(self._connect_timeout, "settle") as conn:
                    if not conn.execute(_BACKEND_ALIVE, [txn.backend_pid]).fetchone():
                        row = conn.execute(probe.query, [probe.sid, probe.key]).fetchone()
                        return row is not None and bytes(row[0]) == probe.value
            except (psycopg.Error, StoreIOError):
                pass  # the server cannot be asked yet: ask again until the deadline
            if time.monotonic() >= deadline or self._closed:
                return None
            time.sleep(0.05)

    # -- writes (StoreBase hooks) --------------------------------------------------------

    def _transact(self, work: Callable[[WriteTxn], T]) -> T:
        written: list[GroupTxn] = []

        def run(conn: psycopg.Connection[Any]) -> T:
            # A failure leaves conn inside the transaction: the pool closes it.
            written.clear()
            if conn not in self._prepared:
                conn.execute(self._sql.prepare)
                self._prepared.add(conn)
            txn = GroupTxn(conn, self._sql, self._channel)
            written.append(txn)
            txn.result = work(txn)
            txn.commit()
            return cast(T, txn.result)

        return self._run("append", run, written)

    # -- reads (StoreBase hooks) ---------------------------------------------------------

    def _rows(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._run("read", lambda conn: conn.execute(query, params).fetchall())

    def _events(self, session_id: str, query: str, params: Sequence[Any]) -> list[Event]:
        rows = self._rows(query, params)
        return [decode_record(EVENT_DECODER, session_id, seq, raw) for seq, raw in rows]

    def _read(
        self, session_id: str, after: int, before: int | None, limit: int | None, newest_first: bool
    ) -> list[Event]:
        high = _TOP if before is None else before
        query = self._sql.read_desc if newest_first else self._sql.read_asc
        return self._events(session_id, query, [utf8(session_id), after, high, limit])

    def _session_states(self, session_ids: list[str]) -> list[SessionState]:
        found = dict(self._rows(self._sql.states, [[utf8(s) for s in session_ids]]))
        return [decode_session_state(s, found.get(utf8(s))) for s in session_ids]

    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage:
        high = _TOP if before is None else before
        rows = self._rows(self._sql.texts_before, [utf8(session_id), high, limit + 1])
        decode = functools.partial(decode_record, LOG_DECODER, session_id)
        return text_page(session_id, rows, limit, decode)

    def _first_replies(self, session_id: str, roots: list[int]) -> dict[int, int]:
        rows = self._rows(self._sql.first_replies, [utf8(session_id), roots])
        return {int(root): int(reply) for root, reply in rows}

    def _run_events(self, session_id: str, run_id: str) -> list[Event]:
        params = [utf8(session_id), run_index_key(b"", run_id)]
        return self._events(session_id, self._sql.run_events, params)

    def _get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        key = sharing_key(b"", viewer, conversation)
        rows = self._rows(self._sql.get_sharing, [utf8(session_id), key])
        return decode_state(session_id, rows[0][0]) if rows else None

    def _session_info(self, session_id: str) -> SessionInfo | None:
        sid = utf8(session_id)
        rows = self._rows(self._sql.session_info, [sid])
        return _info(sid, rows[0][1:]) if rows else None

    def _session_infos(self) -> list[SessionInfo]:
        infos = [_info(row[0], row[1:]) for row in self._rows(self._sql.session_infos, [])]
        return sorted(infos, key=lambda info: info.session_id)

    # -- following -----------------------------------------------------------------------

    def follow(self, on_append: AppendCallback) -> Callable[[], None]:
        """As :meth:`~sharedesk.protocol.ports.FollowingStore.follow` (see ``_pg_listen``)."""
        return self._followers.add(on_append)

    def _close(self) -> None:
        self._followers.close()
        self._pool.close()
        self._watchdog.stop()


def _info(sid: bytes, row: Sequence[Any]) -> SessionInfo:
    last, texts, activity = row
    return SessionInfo(bytes(sid).decode("utf-8"), int(last), int(texts), activity.astimezone(UTC))
