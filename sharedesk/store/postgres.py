r"""PostgresStore: the event store on PostgreSQL, for several processes on one database.

The store port is :class:`~sharedesk.store.base.StoreBase`'s (its public methods,
validation and documentation live there); this module supplies PostgreSQL's I/O, the
tables of :mod:`sharedesk.store._pg_schema`, and ``follow`` (several processes, several
Hubs, may share one database; each learns what the others commit through
``LISTEN``/``NOTIFY``).

One write path. Every write (a plain append, a guarded one with ``expected_version`` or
``unless_stored``, a commit's sharing state) goes to the base's group writer (thread
``sharedesk-pg-writer:<dsn>``), which hands each group to :meth:`PostgresStore._transact`:
one transaction on one connection. Inside it :meth:`_Txn.facts` locks the group's
``streams`` rows (``SELECT ... ORDER BY session_id FOR UPDATE``, creating the missing
ones first), so two processes' groups cannot deadlock and each session's writers, in
any process, are serialised: sequences stay gap-free and unique (the primary key
``(session_id, seq)`` and the unique ``(session_id, id_key)`` stand behind it). It then
reads what the append rules need (stored ids, parent rows, answered roots, the session
state, sharing states); the base plans every write with
:func:`~sharedesk.projection.append.plan_write`, and :meth:`_Txn.put` writes the plans
with one statement (events, first replies, sharing states, stream rows, and one
``NOTIFY`` for the group), then ``COMMIT``. A group of one is a group. The notice is sent
inside the transaction, so PostgreSQL delivers it exactly at commit, in commit order, and
never loses it: its payload lists ``<last_seq>:<hex of the session id's UTF-8>`` per
session written, separated by spaces (hex, because a payload cannot hold NUL and a
session id can), on the channel ``<schema>_appended``.

Connections and retries. Connections come from the store's pool
(:class:`~sharedesk.store._pg_watchdog.Pool`), made on the caller's thread by the
``connect`` factory: a refused or unauthenticated connection fails the open at once with
:class:`~sharedesk.protocol.errors.StoreUnreachable`, naming libpq's reason; the pool
logs nothing and runs no thread. An operation whose connection (or server) went away is
retried on a fresh connection for up to ``retry_timeout`` seconds when that is safe:
reads, and any group whose ``COMMIT`` was not yet sent, always; a group whose connection
broke while its ``COMMIT`` was under way only when it wrote plain appends alone (their
ids make the rerun return what the first attempt stored). A group holding a guarded
write is *settled* instead, on another connection: once the server process that ran it
is gone, a read of one row the write stores tells whether it committed. When that cannot
be told within ``retry_timeout``, the group's writes raise
:class:`~sharedesk.protocol.errors.CommitOutcomeUnknown` (retrying with the same ids is
safe). Transactions the server aborted for a deadlock or a serialisation failure run
again; anything else the driver raises becomes ``StoreIOError`` (the cause chained).
Each use of a connection is watched (:mod:`sharedesk.store._pg_watchdog`): one still
running ``call_timeout`` seconds after it began has its connection cut off, which the
rules above then treat as a lost connection, so no call waits on a silent server for
good.

:meth:`PostgresStore.follow` keeps one dedicated connection that ``LISTEN``\s on the
channel, read by a daemon thread (``sharedesk-pg-listener:<dsn>``); ``close()`` wakes it
at once with a notice on a channel of its own. When that connection is lost, the thread
reconnects with backoff and tells every follower ``(None, 0)``: notices may have been
missed.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC
from typing import Any, Final, NamedTuple, TypeVar, cast

import msgspec
import psycopg
from psycopg.conninfo import conninfo_to_dict

from sharedesk.projection.append import Facts, StoredRow, Wants, WritePlan
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import (
    CommitOutcomeUnknown,
    CorruptRecordError,
    SharedeskError,
    StoreClosedError,
    StoreIOError,
    StoreUnreachable,
    ValidationError,
)
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import AppendCallback, SessionInfo
from sharedesk.protocol.records import (
    ENCODER,
    EVENT_DECODER,
    LOG_DECODER,
    SESSION_STATE_DECODER,
    decode_record,
    decode_state,
    event_id_key,
    run_index_key,
    sharing_key,
)
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SessionState
from sharedesk.protocol.validation import check_int
from sharedesk.protocol.views import Conversation, LogMessage, SessionPage, SharingState
from sharedesk.store._pg_schema import check_schema_name, migrate, notify_channel
from sharedesk.store._pg_watchdog import Connect, Pool, PoolExhausted, Watchdog
from sharedesk.store.base import StoreBase, WriteTxn

__all__ = ["PostgresStore"]

T = TypeVar("T")

_log = logger()

#: Most seconds the listener waits for a notice before it looks at its stop flag.
_LISTEN_POLL: Final = 0.2
#: Backoff of the listener's reconnection attempts: first and longest wait, seconds.
_RECONNECT_FIRST: Final = 0.05
_RECONNECT_MAX: Final = 2.0
#: Most seconds the group writer gathers writes once one is waiting.
_GROUP_WAIT: Final = 0.002
#: Longest notice payload PostgreSQL takes is 8000 bytes; a group's notices are split
#: into payloads of at most this many characters.
_PAYLOAD: Final = 7900
#: Whether a server process is still running (a write's, whose connection broke).
_BACKEND_ALIVE: Final = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
#: SQLSTATEs of transactions the server aborted that are safe to run again.
_RETRYABLE_STATES: Final = frozenset({"40001", "40P01"})
_URL: Final = re.compile(r"postgres(ql)?://", re.IGNORECASE)
#: A password in what a caller gave as a DSN: ``user:password@`` or ``password=...``.
_PASSWORD: Final = re.compile(r"(://[^:/@]*:)[^@]*(@)|(password\s*=\s*)(?:'[^']*'|\S+)", re.I)
_TOP: Final = 2**63 - 1


def _redact(dsn: str) -> str:
    """Return ``dsn`` as ``postgresql://user@host:port/dbname``, without its password."""
    parts = conninfo_to_dict(dsn)
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def _hide_password(text: str) -> str:
    return _PASSWORD.sub(lambda m: f"{m[1] or m[3]}***{m[2] or ''}", text)


def _as_given(dsn: str) -> str:
    """Return ``dsn`` as a caller gave it, its password replaced by ``***``, quoted."""
    hidden = _hide_password(dsn)
    return repr(hidden if len(hidden) <= 200 else hidden[:200] + "...")


def _check_dsn(dsn: Any) -> str:
    """Return ``dsn`` if it is a ``postgresql://`` (or ``postgres://``) URL libpq parses.

    Raises:
        ValidationError: Not a ``str``, not such a URL, a NUL, or unparsable; the
            message quotes what was given, without its password.
    """
    if not isinstance(dsn, str):
        raise ValidationError(f"dsn must be a str, got {type(dsn).__name__}")
    if _URL.match(dsn) is None:
        raise ValidationError(
            f"dsn must be a URL starting with postgresql:// or postgres://, got {_as_given(dsn)}"
        )
    if "\0" in dsn:
        raise ValidationError(f"dsn holds a NUL character: {_as_given(dsn)}")
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = _hide_password(str(exc).strip())
        raise ValidationError(
            f"dsn {_as_given(dsn)} is not a valid connection URL: {reason}"
        ) from None
    return dsn


def _check_seconds(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValidationError(f"{name} must be seconds in [{low}, {high}], got {value!r}")
    return float(value)


def _default_connect(dsn: str, connect_timeout: float) -> Connect:
    """Return the factory of plain connections to ``dsn``.

    It sets ``connect_timeout`` unless the DSN does: libpq's default waits for good on a
    server that accepts but never answers.
    """
    if "connect_timeout" in conninfo_to_dict(dsn):
        return functools.partial(psycopg.connect, dsn)
    seconds = max(1, math.ceil(connect_timeout))
    return functools.partial(psycopg.connect, dsn, connect_timeout=seconds)


class _ConnectFailed(Exception):
    """A new connection could not be made; ``reason`` is libpq's, on one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _reason(exc: BaseException) -> str:
    """Return what ``exc`` says, on one line (libpq's messages span several)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines) or type(exc).__name__


def _utf8(value: str) -> bytes:
    return value.encode("utf-8")


class _Probe(NamedTuple):
    """A row one write stores, by which a later read tells whether it committed."""

    query: str  # selects the row's bytes by (session_id, key)
    sid: bytes
    key: bytes
    value: bytes


class _Attempt:
    """How far one transaction got: whether its ``COMMIT`` was sent (its outcome then unknown).

    Once committing, it also keeps the server process that runs it, whether it may run
    again (``rerun``: it wrote plain appends alone), a probe of a guarded write and the
    transaction's result, so that a broken connection's outcome can be settled by a read
    (see ``PostgresStore._settle``).
    """

    __slots__ = ("backend_pid", "committing", "probe", "rerun", "result", "session_id")

    def __init__(self) -> None:
        self.committing = False
        self.rerun = True
        self.backend_pid = 0
        self.probe: _Probe | None = None
        self.result: Any = None
        self.session_id = ""


class PostgresStore(StoreBase):
    """An event store in a PostgreSQL database, shared by any number of processes.

    Implements the store port, sharing states, the run index and ``follow`` (see the
    module header for how writes are sequenced, notified and retried). Safe to share
    between threads. An append returns once its group's transaction has committed
    (durable as the server's ``synchronous_commit`` makes it).

    Args:
        dsn: A libpq connection URL, ``postgresql://user:password@host:port/dbname``
            (``postgres://`` too; query parameters as libpq takes them).
        schema: The PostgreSQL schema holding the store's tables (created if missing;
            a lower-case identifier of at most 40 characters, not a system schema).
            Stores on different schemas of one database are independent.
        min_connections: Connections opened with the store.
        max_connections: Most connections open at once (more callers wait for one).
        connect_timeout: Most seconds a call waits for a connection (a free one, or a
            new one from the server).
        retry_timeout: Most seconds an operation whose connection was lost is retried
            (see the module header for which are); 0 never retries.
        call_timeout: Most seconds one use of a connection may take; a use still
            waiting then has its connection cut off, and is retried or fails like any
            lost connection (see ``_pg_watchdog``). 0: no limit.
        connect: Makes a new psycopg connection (default: ``psycopg.connect(dsn,
            connect_timeout=...)``); the store sets it to autocommit. The seam through
            which a test injects connection faults.

    Raises:
        ValidationError: An unknown or bad option, or a ``dsn`` that is not a
            PostgreSQL URL.
        SchemaTooNewError: The database was written by a newer sharedesk.
        StoreUnreachable: The server refused the connection, or could not be reached.
        StoreIOError: The server refused the schema.

    Cost: opens ``min_connections`` connections on the caller's thread, then one
    connection checks the schema (two reads when current; otherwise the migrations,
    under an advisory lock); starts the group writer thread.
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
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ValidationError(
                f"unknown PostgresStore options {sorted(unknown)}; the options are schema, "
                "min_connections, max_connections, connect_timeout, retry_timeout, "
                "call_timeout, connect"
            )
        dsn = _check_dsn(dsn)
        self._schema = check_schema_name(schema)
        check_int("min_connections", min_connections)
        check_int("max_connections", max_connections, minimum=1)
        if min_connections > max_connections:
            raise ValidationError(
                f"min_connections={min_connections} exceeds max_connections={max_connections}"
            )
        if connect is not None and not callable(connect):
            raise ValidationError(f"connect must be callable, got {type(connect).__name__}")
        self._connect_timeout = _check_seconds("connect_timeout", connect_timeout, 0.001, 3600)
        self._retry_timeout = _check_seconds("retry_timeout", retry_timeout, 0, 3600)
        call_timeout = _check_seconds("call_timeout", call_timeout, 0, 86400)
        path = _redact(dsn)
        self._watchdog = Watchdog(call_timeout, path)
        self._channel = notify_channel(self._schema)
        self._sql = _Queries(f'"{self._schema}"')
        self._follow_lock = threading.Lock()
        self._followers: dict[int, AppendCallback] = {}
        self._next_follower = 0
        self._listener: _Listener | None = None
        self._connect = _default_connect(dsn, connect_timeout) if connect is None else connect
        self._pool = Pool(self._new_connection, max_connections, self._watchdog)
        self._path: str = path
        self._closed = False
        try:
            self._run("open", lambda conn: migrate(conn, self._schema, path))
            self._run("open", lambda conn: self._pool.fill(min_connections - 1))
        except BaseException:
            self._pool.close()
            self._watchdog.stop()
            raise
        super().__init__(path, writer=f"sharedesk-pg-writer:{path}", group_wait=_GROUP_WAIT)

    @property
    def path(self) -> str:
        """Where the store lives: its DSN without the password."""
        return self._path

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the store's tables."""
        return self._schema

    @property
    def channel(self) -> str:
        """The ``NOTIFY`` channel commits are announced on (``<schema>_appended``)."""
        return self._channel

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"PostgresStore({self._path!r}, schema={self._schema!r}) [{state}]"

    # -- connections ---------------------------------------------------------------------

    def _new_connection(self) -> psycopg.Connection[Any]:
        """Make a connection with the ``connect`` factory, in autocommit.

        Raises:
            _ConnectFailed: The factory failed (refused, unauthenticated, unreachable).
        """
        try:
            conn: psycopg.Connection[Any] = self._connect()
        except psycopg.Error as exc:
            raise _ConnectFailed(_reason(exc)) from exc
        conn.autocommit = True  # reads are one statement; writes open a transaction
        return conn

    @contextlib.contextmanager
    def _borrow(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a connection for one use, cut off after ``call_timeout``.

        Raises:
            PoolExhausted: No connection came free within ``timeout`` (default
                ``connect_timeout``).
            _ConnectFailed: A new connection could not be made.
        """
        with self._pool.connection(self._connect_timeout if timeout is None else timeout) as conn:
            yield conn

    def _run(
        self,
        operation: str,
        work: Callable[[psycopg.Connection[Any]], T],
        attempt: _Attempt | None = None,
    ) -> T:
        """Run ``work(conn)`` on a borrowed connection, retrying lost connections if safe.

        ``attempt`` (for writes) tells whether the ``COMMIT`` was sent when the
        connection broke, and whether the transaction may then run again.

        Raises:
            SharedeskError: What ``work`` raised (its transaction rolled back).
            CommitOutcomeUnknown: The connection broke during the ``COMMIT`` of a
                guarded write whose outcome could not be told.
            StoreUnreachable: No connection could be made (at once for ``"open"``).
            StoreIOError: The server failed, or stayed unreachable past the budget.
            StoreClosedError: The store is closed.
        """
        deadline = time.monotonic() + self._retry_timeout
        delay = 0.0
        while True:
            self._live()
            if attempt is not None:
                attempt.committing = False
            try:
                with self._borrow() as conn:
                    return work(conn)
            except SharedeskError:
                raise
            except PoolExhausted as exc:
                self._live()
                raise StoreIOError(self._path, operation) from exc
            except _ConnectFailed as exc:
                self._live()
                if operation == "open" or time.monotonic() >= deadline:
                    raise StoreUnreachable(self._path, operation, exc.reason) from exc.__cause__
            except psycopg.Error as exc:
                if self._closed:
                    raise StoreClosedError(self._path) from None
                lost = isinstance(exc, psycopg.OperationalError) and (
                    exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))
                )
                aborted = exc.sqlstate in _RETRYABLE_STATES
                if lost and attempt is not None and attempt.committing and not attempt.rerun:
                    settled = self._settle(attempt, deadline)
                    if settled is None:
                        session_id = attempt.session_id
                        raise CommitOutcomeUnknown(self._path, operation, session_id) from exc
                    if settled:
                        return cast(T, attempt.result)  # it committed: its result stands
                if not (lost or aborted) or time.monotonic() >= deadline:
                    raise StoreIOError(self._path, operation) from exc
                _log.warning(
                    "store.pg_retry", path=self._path, operation=operation, error=type(exc).__name__
                )
            time.sleep(delay + random.uniform(0, delay))
            delay = min(max(delay * 2, 0.01), 0.5)

    def _settle(self, attempt: _Attempt, deadline: float) -> bool | None:
        """Tell whether a transaction whose connection broke while committing was stored.

        Waits (until ``deadline``) for the server process that ran it to be gone, so
        that its transaction is over, then reads its probe row on another connection:
        the row as the write would have stored it means it committed.

        Returns:
            ``True`` when it committed, ``False`` when it did not (it may run again),
            ``None`` when that cannot be told in time.
        """
        probe = attempt.probe
        assert probe is not None
        while True:
            try:
                with self._borrow() as conn:
                    while conn.execute(_BACKEND_ALIVE, [attempt.backend_pid]).fetchone():
                        if time.monotonic() >= deadline or self._closed:
                            return None
                        time.sleep(0.05)
                    row = conn.execute(probe.query, [probe.sid, probe.key]).fetchone()
            except (psycopg.Error, PoolExhausted, _ConnectFailed):
                if time.monotonic() >= deadline or self._closed:
                    return None
                time.sleep(0.05)
                continue
            return row is not None and bytes(row[0]) == probe.value

    # -- writes (StoreBase hooks) --------------------------------------------------------

    def _transact(self, work: Callable[[WriteTxn], T]) -> T:
        attempt = _Attempt()

        def run(conn: psycopg.Connection[Any]) -> T:
            txn = _Txn(self, conn)
            with conn.pipeline(), conn.transaction():
                result = work(txn)
                attempt.rerun = txn.probe is None
                attempt.probe = txn.probe
                attempt.session_id = txn.guarded_session
                attempt.backend_pid = conn.info.backend_pid
                attempt.result = result
                attempt.committing = True  # leaving the block sends COMMIT
            return result

        return self._run("append", run, attempt)

    # -- reads (StoreBase hooks) ---------------------------------------------------------

    def _rows(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._run("read", lambda conn: conn.execute(query, params).fetchall())

    def _events(self, session_id: str, query: str, params: Sequence[Any]) -> list[Event]:
        rows = self._rows(query, params)
        return [decode_record(EVENT_DECODER, session_id, seq, raw) for seq, raw in rows]

    def _read(
        self,
        session_id: str,
        after: int | None,
        before: int | None,
        limit: int | None,
        newest_first: bool,
    ) -> list[Event]:
        low = 0 if after is None else after
        high = _TOP if before is None else before
        if high <= low + 1:
            return []
        query = self._sql.read_desc if newest_first else self._sql.read_asc
        return self._events(session_id, query, [_utf8(session_id), low, high, limit])

    def _last_sequence(self, session_id: str) -> int:
        rows = self._rows(self._sql.stream, [_utf8(session_id)])
        return int(rows[0][0]) if rows else 0

    def _session_state(self, session_id: str) -> SessionState:
        rows = self._rows(self._sql.stream, [_utf8(session_id)])
        return _decode_session_state(session_id, rows[0][2] if rows else None)

    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage:
        high = _TOP if before is None else before
        if high <= 1:
            return SessionPage(messages=[], next_before=None)
        rows = self._rows(self._sql.texts_before, [_utf8(session_id), high, limit + 1])
        messages: list[LogMessage] = []
        for seq, raw in rows[:limit]:
            record = decode_record(LOG_DECODER, session_id, seq, raw)
            messages.append(
                LogMessage(
                    sequence=seq,
                    author=record.author,
                    content=record.body.content,
                    desk=session_id,
                    parent=record.parent,
                )
            )
        more = len(rows) > limit
        return SessionPage(messages=messages, next_before=messages[-1].sequence if more else None)

    def _first_replies(self, session_id: str, roots: list[int]) -> dict[int, int]:
        rows = self._rows(self._sql.first_replies, [_utf8(session_id), roots])
        return {int(root): int(reply) for root, reply in rows}

    def _run_events(self, session_id: str, run_id: str) -> list[Event]:
        params = [_utf8(session_id), run_index_key(b"", run_id)]
        events = self._events(session_id, self._sql.run_events, params)
        return [event for event in events if event.run_id == run_id]

    def _get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        key = sharing_key(b"", viewer, conversation)
        rows = self._rows(self._sql.get_sharing, [_utf8(session_id), key])
        return decode_state(session_id, rows[0][0]) if rows else None

    def _sessions(self) -> list[str]:
        return [info.session_id for info in self._session_infos()]

    def _session_info(self, session_id: str) -> SessionInfo | None:
        sid = _utf8(session_id)
        rows = self._rows(self._sql.session_info, [sid])
        return _info(sid, rows[0][1:]) if rows else None

    def _session_infos(self) -> list[SessionInfo]:
        infos = [_info(row[0], row[1:]) for row in self._rows(self._sql.session_infos, [])]
        return sorted(infos, key=lambda info: info.session_id)

    # -- following -----------------------------------------------------------------------

    def follow(self, on_append: AppendCallback) -> Callable[[], None]:
        """Call ``on_append(session_id, last_sequence)`` after each commit to a session.

        Commits of every process on this database and schema count, this store's
        included; several commits may be told as one call with the newest sequence,
        and calls for one session come in commit order. ``on_append(None, 0)`` follows
        a reconnection of the listener: notices may have been missed, so the follower
        should re-read what it follows. Calls come from the store's listener thread;
        ``on_append`` must be quick and must not raise (what it raises is logged).

        Returns:
            The function that stops following (idempotent); ``close()`` stops every
            follower. The listener thread stops with the last follower.

        Raises:
            ValidationError: ``on_append`` is not callable.
            StoreClosedError: The store is closed.
            StoreIOError: The listener's connection could not be opened.

        Cost: the first follower opens one dedicated connection and starts the
        ``sharedesk-pg-listener`` thread; nothing per commit beyond the notice.
        """
        if not callable(on_append):
            raise ValidationError(f"on_append must be callable, got {type(on_append).__name__}")
        with self._follow_lock:
            self._live()
            token = self._next_follower
            self._next_follower += 1
            self._followers[token] = on_append
            if self._listener is None:
                listener = _Listener(self)
                try:
                    listener.start()
                except BaseException:
                    del self._followers[token]
                    raise
                self._listener = listener

        def stop() -> None:
            with self._follow_lock:
                if self._followers.pop(token, None) is None or self._followers:
                    return
                listener, self._listener = self._listener, None
            if listener is not None:
                listener.stop()

        return stop

    def _followers_now(self) -> list[AppendCallback]:
        with self._follow_lock:
            return list(self._followers.values())

    def _close(self) -> None:
        with self._follow_lock:
            listener, self._listener = self._listener, None
            self._followers.clear()
        if listener is not None:
            listener.stop()
        self._pool.close()
        self._watchdog.stop()


def _decode_session_state(session_id: str, raw: bytes | None) -> SessionState:
    if raw is None:
        return EMPTY_SESSION_STATE
    try:
        state: SessionState = SESSION_STATE_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptRecordError(session_id, 0, f"session state: {exc}") from exc
    return state


def _info(sid: bytes, row: Sequence[Any]) -> SessionInfo:
    last, texts, activity = row
    return SessionInfo(
        session_id=bytes(sid).decode("utf-8"),
        last_sequence=int(last),
        text_count=int(texts),
        last_activity=activity.astimezone(UTC),
    )


class _Txn:
    """One group's write transaction on ``conn`` (see the module header)."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any]) -> None:
        self._store = store
        self._conn = conn
        self._sql = store._sql
        #: A row a guarded write of the group stores (``None``: plain appends only).
        self.probe: _Probe | None = None
        self.guarded_session = ""

    def facts(self, wants: Mapping[str, Wants]) -> dict[str, Facts]:
        """Lock the sessions' rows (in id order), then read what the plans need.

        The statements are pipelined (one round trip, with the ``BEGIN``); a session
        with no row yet gets one, and the reads run again once every row is locked.
        """
        conn, sql = self._conn, self._sql
        sids = sorted(_utf8(session_id) for session_id in wants)
        ids: tuple[list[bytes], list[bytes]] = ([], [])
        parents: tuple[list[bytes], list[int]] = ([], [])
        shares: tuple[list[bytes], list[bytes]] = ([], [])
        share_of: dict[tuple[bytes, bytes], tuple[str, Conversation]] = {}
        for session_id, want in wants.items():
            sid = _utf8(session_id)
            for event_id in want.ids:
                ids[0].append(sid)
                ids[1].append(event_id_key(b"", event_id))
            for parent in want.parents:
                parents[0].append(sid)
                parents[1].append(parent)
            for viewer, conversation in want.sharing:
                key = sharing_key(b"", viewer, conversation)
                shares[0].append(sid)
                shares[1].append(key)
                share_of[(sid, key)] = (viewer, conversation)

        def read() -> tuple[psycopg.Cursor[Any], ...]:
            return (
                conn.execute(sql.lock, [sids]),
                conn.execute(sql.known, ids),
                conn.execute(sql.parents, parents),
                conn.execute(sql.sharing, shares),
            )

        cursors = read()
        streams = {bytes(row[0]): row for row in cursors[0]}
        if len(streams) < len(sids):
            conn.execute(sql.create, [[sid for sid in sids if sid not in streams]])
            cursors = read()
            streams = {bytes(row[0]): row for row in cursors[0]}
        facts: dict[str, Facts] = {}
        for session_id, want in wants.items():
            _, last, raw = streams[_utf8(session_id)]
            state = _decode_session_state(session_id, raw) if want.state else EMPTY_SESSION_STATE
            sharing: dict[tuple[str, Conversation], SharingState | None]
            sharing = dict.fromkeys(want.sharing)
            facts[session_id] = Facts(last, {}, {}, set(), state, sharing)
        for sid, seq, record in cursors[1]:
            session_id = bytes(sid).decode("utf-8")
            event = decode_record(EVENT_DECODER, session_id, seq, record)
            facts[session_id].known[event.id] = event
        for sid, seq, kind, parent, answered in cursors[2]:
            session_facts = facts[bytes(sid).decode("utf-8")]
            session_facts.rows[seq] = StoredRow(kind, parent)
            if answered:
                session_facts.answered.add(seq)
        for sid, key, raw in cursors[3]:
            session_id = bytes(sid).decode("utf-8")
            state_key = share_of[(bytes(sid), bytes(key))]
            facts[session_id].sharing[state_key] = decode_state(session_id, raw)
        return facts

    def put(self, plans: Sequence[WritePlan]) -> None:
        """Write ``plans`` with one statement: events, replies, sharing, streams, notice."""
        events: list[list[Any]] = [[], [], [], [], [], [], []]
        replies: list[list[Any]] = [[], [], []]
        shares: dict[tuple[bytes, bytes], bytes] = {}
        streams: dict[bytes, list[Any]] = {}  # sid -> [last, texts, state, last activity]
        for plan in plans:
            write = plan.write
            sid = _utf8(write.session_id)
            for event in plan.new:
                for column, value in zip(events, _row(sid, event), strict=True):
                    column.append(value)
            for root, reply in plan.first_replies.items():
                for column, value in zip(replies, (sid, root, reply), strict=True):
                    column.append(value)
            if plan.new:
                stream = streams.setdefault(sid, [0, 0, None, None])
                stream[0], stream[3] = plan.new[-1].sequence, plan.new[-1].timestamp
                stream[1] += plan.texts
                if plan.state is not None:
                    stream[2] = ENCODER.encode(plan.state)
            if plan.sharing is not None:
                assert write.share is not None
                key = sharing_key(b"", write.share.viewer, plan.sharing.conversation)
                shares[(sid, key)] = ENCODER.encode(plan.sharing)
            guarded = write.expected_version is not None or write.unless_stored is not None
            if self.probe is None and (guarded or write.share is not None):
                self.probe = self._probe_of(sid, plan)
                self.guarded_session = write.session_id
        payloads: list[str] = []
        for sid, (last, *_) in streams.items():
            notice = f"{last}:{sid.hex()}"
            if payloads and len(payloads[-1]) + len(notice) < _PAYLOAD:
                payloads[-1] += " " + notice
            else:
                payloads.append(notice)
        columns = [list(c) for c in zip(*streams.values(), strict=True)] or [[], [], [], []]
        params: list[Any] = [
            *events,
            *replies,
            [sid for sid, _ in shares],
            [key for _, key in shares],
            list(shares.values()),
            list(streams),
            *columns,
            self._store.channel,
            payloads,
        ]
        self._conn.execute(self._sql.put, params)

    def _probe_of(self, sid: bytes, plan: WritePlan) -> _Probe:
        if plan.new:
            first = plan.new[0]
            key, value = event_id_key(b"", first.id), ENCODER.encode(first)
            return _Probe(self._sql.probe_event, sid, key, value)
        assert plan.sharing is not None and plan.write.share is not None
        key = sharing_key(b"", plan.write.share.viewer, plan.sharing.conversation)
        return _Probe(self._sql.get_sharing, sid, key, ENCODER.encode(plan.sharing))


def _row(sid: bytes, event: Event) -> tuple[Any, ...]:
    """Return the ``events`` columns of ``event``, a planned new event (its sequence set)."""
    return (
        sid,
        event.sequence,
        event_id_key(b"", event.id),
        type(event.body).__name__,
        event.parent,
        None if event.run_id is None else run_index_key(b"", event.run_id),
        ENCODER.encode(event),
    )


class _Queries:
    """The store's SQL, with its schema's quoted name filled in."""

    def __init__(self, s: str) -> None:
        stream = f"SELECT session_id, last_seq, state FROM {s}.streams"
        self.lock = f"{stream} WHERE session_id = ANY(%b) ORDER BY session_id FOR UPDATE"
        self.stream = f"SELECT last_seq, text_count, state FROM {s}.streams WHERE session_id = %s"
        self.create = (
            f"INSERT INTO {s}.streams (session_id) SELECT * FROM unnest(%b::bytea[]) "
            "ON CONFLICT DO NOTHING"
        )
        self.known = (
            f"SELECT e.session_id, e.seq, e.record FROM unnest(%b::bytea[], %b::bytea[]) "
            f"AS k(sid, id_key) JOIN {s}.events e ON e.session_id = k.sid AND e.id_key = k.id_key"
        )
        self.parents = (
            f"SELECT e.session_id, e.seq, e.kind, e.parent, r.reply IS NOT NULL "
            f"FROM unnest(%b::bytea[], %b::bigint[]) AS p(sid, seq) "
            f"JOIN {s}.events e ON e.session_id = p.sid AND e.seq = p.seq "
            f"LEFT JOIN {s}.replies r ON r.session_id = e.session_id AND r.root = e.seq"
        )
        self.sharing = (
            f"SELECT h.session_id, h.key, h.state FROM unnest(%b::bytea[], %b::bytea[]) "
            f"AS k(sid, key) JOIN {s}.sharing h ON h.session_id = k.sid AND h.key = k.key"
        )
        self.put = (
            f"WITH ev AS (INSERT INTO {s}.events "
            "(session_id, seq, id_key, kind, parent, run_key, record) "
            "SELECT * FROM unnest(%b::bytea[], %b::bigint[], %b::bytea[], %b::text[], "
            "%b::bigint[], %b::bytea[], %b::bytea[])), "
            f"rep AS (INSERT INTO {s}.replies (session_id, root, reply) "
            "SELECT * FROM unnest(%b::bytea[], %b::bigint[], %b::bigint[]) "
            "ON CONFLICT DO NOTHING), "
            f"shr AS (INSERT INTO {s}.sharing (session_id, key, state) "
            "SELECT * FROM unnest(%b::bytea[], %b::bytea[], %b::bytea[]) "
            "ON CONFLICT (session_id, key) DO UPDATE SET state = excluded.state), "
            f"upd AS (UPDATE {s}.streams st SET last_seq = u.last, "
            "text_count = st.text_count + u.texts, last_activity = u.at, "
            "state = coalesce(u.state, st.state) FROM unnest(%b::bytea[], %b::bigint[], "
            "%b::bigint[], %b::bytea[], %b::timestamptz[]) AS u(sid, last, texts, state, at) "
            "WHERE st.session_id = u.sid) "
            "SELECT count(pg_notify(%b, p)) FROM unnest(%b::text[]) AS p"
        )
        self.probe_event = f"SELECT record FROM {s}.events WHERE session_id = %s AND id_key = %s"
        self.get_sharing = f"SELECT state FROM {s}.sharing WHERE session_id = %s AND key = %s"
        events = f"SELECT seq, record FROM {s}.events WHERE session_id = %s"
        self.read_asc = f"{events} AND seq > %s AND seq < %s ORDER BY seq LIMIT %s"
        self.read_desc = f"{events} AND seq > %s AND seq < %s ORDER BY seq DESC LIMIT %s"
        self.texts_before = f"{events} AND kind = 'Text' AND seq < %s ORDER BY seq DESC LIMIT %s"
        self.run_events = f"{events} AND run_key = %s ORDER BY seq"
        self.first_replies = (
            f"SELECT root, reply FROM {s}.replies WHERE session_id = %s "
            "AND root = ANY(%s::bigint[])"
        )
        infos = f"SELECT session_id, last_seq, text_count, last_activity FROM {s}.streams"
        self.session_info = f"{infos} WHERE session_id = %s AND last_seq > 0"
        self.session_infos = f"{infos} WHERE last_seq > 0"


class _Listener:
    """The thread that listens on the store's channel and calls its followers.

    A notice no newer than one already told for its session is dropped. The connection
    also listens on a channel of this listener's own (``sharedesk_wake_<uuid>``), which
    :meth:`stop` notifies so that the thread ends at once instead of at its next poll.
    """

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._wake = f"sharedesk_wake_{uuid.uuid4().hex}"  # 47 bytes: under NAMEDATALEN
        self._stopping = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._newest: dict[str, int] = {}  # the newest last told per session (this thread's)
        self._thread = threading.Thread(
            target=self._run, name=f"sharedesk-pg-listener:{store.path}", daemon=True
        )

    def _connect(self) -> psycopg.Connection[Any]:
        store = self._store
        conn = store._connect()
        try:
            conn.autocommit = True
            with store._watchdog.watch(conn):
                conn.execute(f'LISTEN "{store.channel}"')
                conn.execute(f'LISTEN "{self._wake}"')
        except BaseException:
            conn.close()
            raise
        return conn

    def start(self) -> None:
        """Open the connection and start the thread.

        Raises:
            StoreIOError: The connection could not be opened.
        """
        try:
            self._conn = self._connect()
        except psycopg.Error as exc:
            raise StoreIOError(self._store.path, "follow") from exc
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its connection (joins unless called from it).

        Cost: one ``pg_notify`` on a pooled connection to wake the thread (when the
        server cannot take it, the thread ends at its next poll, ``_LISTEN_POLL``).
        """
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            with (
                contextlib.suppress(psycopg.Error, PoolExhausted, _ConnectFailed),
                self._store._borrow(timeout=_LISTEN_POLL) as conn,
            ):
                conn.execute("SELECT pg_notify(%s, '')", [self._wake])
            self._thread.join()

    def _run(self) -> None:
        delay = _RECONNECT_FIRST
        try:
            while not self._stopping.is_set():
                conn = self._conn
                if conn is None:
                    try:
                        conn = self._conn = self._connect()
                    except psycopg.Error as exc:
                        _log.warning("store.pg_listener_reconnect_failed", error=repr(exc))
                        self._stopping.wait(delay)
                        delay = min(delay * 2, _RECONNECT_MAX)
                        continue
                    delay = _RECONNECT_FIRST
                    self._tell(None, 0)
                try:
                    self._drain(conn)
                except psycopg.Error as exc:
                    if self._stopping.is_set():
                        break
                    _log.warning("store.pg_listener_lost", error=repr(exc))
                    conn.close()
                    self._conn = None
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _drain(self, conn: psycopg.Connection[Any]) -> None:
        """Wait up to ``_LISTEN_POLL`` for notices, telling the followers of each at once."""
        for notice in conn.notifies(timeout=_LISTEN_POLL):
            if notice.channel == self._wake:
                return  # stop() woke the thread
            for session_id, last in _parse_payload(notice.payload):
                if last > self._newest.get(session_id, 0):
                    if len(self._newest) >= 100_000:
                        self._newest.clear()
                    self._newest[session_id] = last
                    self._tell(session_id, last)
            if self._stopping.is_set():
                return

    def _tell(self, session_id: str | None, last: int) -> None:
        for follower in self._store._followers_now():
            try:
                follower(session_id, last)
            except Exception:
                _log.exception("store.pg_follower_failed")


def _parse_payload(payload: str) -> list[tuple[str, int]]:
    """Return the (session id, last sequence) pairs of a payload ``<last>:<hex id> ...``."""
    told: list[tuple[str, int]] = []
    for notice in payload.split():
        last, _, hexed = notice.partition(":")
        try:
            told.append((bytes.fromhex(hexed).decode("utf-8"), int(last)))
        except ValueError:
            _log.warning("store.pg_bad_notice", payload=notice[:100])
    return told
