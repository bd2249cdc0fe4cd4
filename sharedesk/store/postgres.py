r"""PostgresStore: the event store on PostgreSQL, for several processes on one database.

Interface. The store contract and every port ``LmdbStore`` has (``EventStore``,
``SharingStateStore``, ``RunIndexStore``, the session listing), plus ``FollowingStore``:
several processes (several Hubs) may share one database, and each learns what the others
commit through ``LISTEN``/``NOTIFY``. The rules are the other stores' own: the append
rules are :func:`~sharedesk.store._common.plan_append`, the session state is folded by
``projection/runstate``, input is checked by ``protocol/validation`` before any SQL, and
records are the msgpack encoding ``LmdbStore`` writes (``_lmdb_layout``), so ``append``
returns what ``read`` returns. The tables are :mod:`sharedesk.store._pg_schema`'s.

Sequencing. Every write locks its session's row in ``streams`` (``SELECT ... FOR
UPDATE``; the session's first write creates it, ``INSERT ... ON CONFLICT DO NOTHING``)
before it reads what its checks need and assigns ``last_seq + 1, ...``. An ``append`` is
one statement, a call of the schema's ``append_events`` function, which is its own
transaction: the store plans the batch (:func:`~sharedesk.store._common.plan_append`:
sequences, records, first replies, the folded state) against its cached *tail* of the
session (last sequence, ``Text`` rows, state; a session it has not seen is planned as
empty), and the function, holding the row lock, writes the plan only if
``expected_version``, the ``unless_stored`` guard, the batch's ids, the tail and the
stored parents are as planned. Otherwise it answers what to plan again with (the
conflict, the ids already stored and their records, the real tail, or that a parent is
not a root, whose rows the store then reads), and nothing is written; so a warm append
costs one round trip, and a stale tail one more. A one-event append (the common case)
sends the call's parameters as scalars in binary (the statement builds the arrays),
which psycopg adapts for a fraction of the client CPU of nine array parameters. A plan
that fails its own checks (a bad parent) is decided again by the exact path.
``append_and_share`` is that exact path: one transaction of several statements (lock,
known ids, the sharing state, parents, one statement writing events, first replies,
state and stream row, ``COMMIT``), since its compare-and-swap compares decoded states.
The row lock serialises the writers of one session, in any process, and nobody else:
sequences are gap-free and unique (the primary key ``(session_id, seq)`` and the unique
``(session_id, id_key)`` stand behind it), ``expected_version`` is compared with the
locked ``last_seq``, and the sharing compare-and-swap and ``unless_stored`` are decided
under the same lock. This is the per-stream serialisation KurrentDB applies for
expected-revision appends. The alternative, the eventsourcing library's
``PostgresApplicationRecorder``, takes ``LOCK TABLE ... IN EXCLUSIVE MODE`` for every
insert, which serialises writers of *all* sessions (it needs that for its global
notification order, which sharedesk does not have); an optimistic insert that retries on
a unique violation of ``(session_id, seq)`` would need no lock but turns every collision
into a rolled-back transaction and still needs the stream row for the session's counters
and state. Measured with every append committed alone (16 threads, 1,000 desks, one
event per append, fsync on, 2 shared cores, notices sent after commit so that they do
not serialise the commits): the row lock appended 4.09x as fast as the same store
serialised by the table lock. With the group writer below, the probe
(``python -m bench.probe_pg_sequencing``, 16:00 UTC, load 1-2) measures the row lock at
1.04x the table lock and 0.78x raw psycopg: a group already takes its rows' locks
together, so the lock matters less than it did for lone commits.

Group commit. A plain append (no ``expected_version``, no ``unless_stored``) made while
another plain append of this store is under way goes to the store's group writer (a
:class:`~sharedesk.store._group_commit.GroupCommitter`, thread
``sharedesk-pg-writer:<dsn>``); a lone one runs on its caller's thread as above. The
writer takes the waiting appends as a group and writes them with one statement
(``append_group``, its own transaction), at most one write per session: each write is
planned on its session's cached tail, the plans go to the server as arrays, and the
statement locks the sessions' ``streams`` rows in the order of the session ids' bytes
(so two processes' groups cannot deadlock on each other), writes the plans of the
sessions whose row, ids and stored parents are as planned, notifies each, and names
them. One commit ends it: one WAL flush and, with ``notify="commit"``, one turn of the
notify lock for the whole group, instead of one each. Each write the statement did not
write (its session not cached here, a second write of one session, a stale tail, an id
already stored, a parent that is not a root) is then appended alone by its own caller,
which plans it exactly. When the statement fails (a server error, a lost connection,
also during the commit), each write of the group is appended alone so: plain appends are
idempotent by id, so the outcome is the same whether the group committed or not. The
writer itself never appends alone, so one slow append cannot hold the groups behind
it. ``group_commit=False`` appends every write alone. Every pooled connection uses
generic plans (``plan_cache_mode = force_generic_plan``): the default mode kept
re-planning the group statement, which cost more than running it. Measured (``python -m bench append
--backend postgres``, 16 threads, 1,000 desks, one event per call, fsync on, 2 shared
cores): see the README's PostgreSQL figures; one writer thread beat two (each with its
own connection), whose groups were half the size.

Notices. Each commit that stored events announces ``<last_seq>:<hex of the session
id's UTF-8>`` (hex, because a payload cannot hold NUL and a session id can) on the
channel ``<schema>_appended`` (for the default schema, ``sharedesk_appended``). With
``notify="commit"`` (the default) the ``pg_notify`` runs inside the append's
transaction, so PostgreSQL delivers it exactly at commit, in commit order, and never
loses it; but the server serialises the commits of notifying transactions (a
database-wide lock from pre-commit to the end of the commit), so they no longer share
WAL flushes. With ``notify="after_commit"`` a notifier thread
(``sharedesk-pg-notifier:<dsn>``) sends the notices right after the commits, coalesced
per session and in commit order, from its own connection with ``synchronous_commit``
off; a process killed between a commit and its notice loses that notice. Under group
commit a group's notices cost one turn of the lock, so ``"after_commit"`` gains nothing
there (measured: 0.73-0.93x the default, which saves the notifier thread's work); it
helps only appends committed alone (``group_commit=False``), whose notifying commits
would otherwise take the lock one at a time.
:meth:`PostgresStore.follow` keeps one dedicated autocommit connection that ``LISTEN``\s
on the channel, read by a daemon thread (``sharedesk-pg-listener:<dsn>``) that waits at
most ``_LISTEN_POLL`` seconds at a time; ``close()`` wakes it at once with a notice on a
channel of the listener's own (``sharedesk_wake_<uuid>``). When that
connection is lost, the thread reconnects with backoff and tells every follower
``(None, 0)``: notices may have been missed.

Connection loss and retries. Connections come from the store's pool
(:class:`~sharedesk.store._pg_watchdog.Pool`), made on the caller's thread by the
``connect`` factory: a refused or unauthenticated connection fails the open at once with
:class:`~sharedesk.protocol.errors.StoreUnreachable`, naming libpq's reason, and the pool
logs nothing and runs no thread. An operation that fails because its connection or the server
went away is retried on a fresh connection for up to ``retry_timeout`` seconds, when
that is safe:

- reads, and any write whose ``COMMIT`` was not yet sent (its transaction is lost, so
  nothing was written), are always retried; an ``append`` is one statement, so its
  ``COMMIT`` is under way as soon as it is sent;
- a write whose connection broke while its ``COMMIT`` was under way may or may not be
  stored. A plain ``append`` (no ``expected_version``, no ``unless_stored``) is retried:
  its ids make the retry return the stored events if the first attempt committed, and
  store them otherwise, so the outcome is the same either way. Any other write (with
  ``expected_version``, ``unless_stored``, or ``append_and_share``, whose retry would
  fail its own check if the first attempt committed) is *settled* first, on another
  connection: once the server process that ran it is gone (its transaction is over,
  committed or not), a read of one row it writes (its first new event, or the sharing
  state it stores) tells which. Committed: its result is returned. Not committed: it
  runs again. When that cannot be told within ``retry_timeout`` (the old server process
  lives on, as when the network rather than the server failed, or the server stays
  unreachable), it raises :class:`~sharedesk.protocol.errors.CommitOutcomeUnknown`, and
  retrying with the same ids is safe for the caller, who can re-read first.

Anything else the driver raises becomes ``StoreIOError`` (with the cause chained);
transactions the server aborted for a deadlock or a serialisation failure are retried.

A server that stops answering while its connections stay open (a stopped server
process, a network that drops packets without closing anything) would hold a call
forever, since psycopg has no per-call timeout: each use of a connection is watched
(:mod:`sharedesk.store._pg_watchdog`), and one still running ``call_timeout`` seconds
(default 60) after it began has its connection cut off, which the rules above then
treat as a lost connection. So every call ends within about ``call_timeout +
retry_timeout`` (plus ``connect_timeout`` for a new connection), with its result or a
typed error, and so does ``close()``; an append that joined a group may also wait out
the group ahead of it and its own (two more ``call_timeout`` at most), since the group
writer hands every write it could not write back to its caller.
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
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Literal, NamedTuple, Self, TypeVar, cast

import msgspec
import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict

from sharedesk.projection.sharing import note_present
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import (
    AlreadyStored,
    CommitOutcomeUnknown,
    ConcurrencyError,
    CorruptRecordError,
    SharedeskError,
    SharingStateConflict,
    StoreClosedError,
    StoreIOError,
    StoreUnreachable,
    ValidationError,
)
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import AppendCallback
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SessionState
from sharedesk.protocol.validation import (
    check_append_args,
    check_conversation,
    check_int,
    check_optional_str,
    check_session_id,
)
from sharedesk.protocol.views import Conversation, LogMessage, SessionPage, SharingState
from sharedesk.store._common import (
    AppendPlan,
    SessionInfo,
    StoredRow,
    check_log_args,
    check_read_args,
    check_roots,
    check_sharing_args,
    check_viewer,
    plan_append,
    watermark_of,
)
from sharedesk.store._group_commit import GroupCommitter, Request
from sharedesk.store._lmdb_layout import (
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
from sharedesk.store._pg_schema import check_schema_name, migrate, notify_channel
from sharedesk.store._pg_watchdog import Connect, Pool, PoolExhausted, Watchdog

__all__ = ["Notify", "PostgresStore"]

T = TypeVar("T")

_log = logger()

#: When an append's notice is sent: ``"commit"``, by the append's own transaction (it
#: cannot be lost, but PostgreSQL serialises the commits of notifying transactions);
#: ``"after_commit"``, by the store's notifier thread right after (commits group again;
#: a process killed in between loses that notice).
Notify = Literal["commit", "after_commit"]

#: Most seconds the listener waits for a notice before it looks at its stop flag.
_LISTEN_POLL: Final = 0.2
#: Backoff of the listener's reconnection attempts: first and longest wait, seconds.
_RECONNECT_FIRST: Final = 0.05
_RECONNECT_MAX: Final = 2.0
#: Whether a server process is still running (a write's, whose connection broke).
_BACKEND_ALIVE: Final = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
#: SQLSTATEs of transactions the server aborted that are safe to run again.
_RETRYABLE_STATES: Final = frozenset({"40001", "40P01"})
_URL: Final = re.compile(r"postgres(ql)?://", re.IGNORECASE)


def _redact(dsn: str) -> str:
    """Return ``dsn`` as ``postgresql://user@host:port/dbname``, without its password."""
    parts = conninfo_to_dict(dsn)
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


#: A password in what a caller gave as a DSN: ``user:password@`` or ``password=...``.
_PASSWORD: Final = re.compile(r"(://[^:/@]*:)[^@]*(@)|(password\s*=\s*)(?:'[^']*'|\S+)", re.I)


def _as_given(dsn: str) -> str:
    """Return ``dsn`` as a caller gave it, its password replaced by ``***``, quoted."""
    hidden = _PASSWORD.sub(lambda m: f"{m[1] or m[3]}***{m[2] or ''}", dsn)
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
        reason = _PASSWORD.sub(lambda m: f"{m[1] or m[3]}***{m[2] or ''}", str(exc))
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
    return functools.partial(
        psycopg.connect, dsn, connect_timeout=max(1, math.ceil(connect_timeout))
    )


class _ConnectFailed(Exception):
    """A new connection could not be made; ``reason`` is libpq's, on one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _reason(exc: BaseException) -> str:
    """Return what ``exc`` says, on one line (libpq's messages span several)."""
    return (
        " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        or type(exc).__name__
    )


def _utf8(value: str) -> bytes:
    return value.encode("utf-8")


class _Probe(NamedTuple):
    """A row one write stores, by which a later read tells whether it committed."""

    query: str  # selects the row's bytes by (session_id, key)
    sid: bytes
    key: bytes
    value: bytes


class _Attempt:
    """How far one write got: whether its ``COMMIT`` was sent (its outcome then unknown).

    Once committing, it also keeps the server process that runs the write, a probe
    (``None``: the write stores nothing) and the write's result, so that a broken
    connection's outcome can be settled by a read (see ``PostgresStore._settle``).
    """

    __slots__ = ("backend_pid", "committing", "probe", "result")

    def __init__(self) -> None:
        self.committing = False
        self.backend_pid = 0
        self.probe: _Probe | None = None
        self.result: list[Event] = []

    def commit_sent(
        self, conn: psycopg.Connection[Any], probe: _Probe | None, result: list[Event]
    ) -> None:
        """Note that the ``COMMIT`` (or the one-statement write) is about to be sent."""
        self.committing = True
        self.backend_pid = conn.info.backend_pid
        self.probe = probe
        self.result = result


class _Write(NamedTuple):
    """One checked write: an append, or (``sharing`` set) an append-and-share."""

    session_id: str
    events: list[Event]
    expected_version: int | None
    unless_stored: str | None
    sharing: tuple[str, SharingState, SharingState | None] | None
    reply_present: bool


class _AppendAlone(Exception):
    """What a group write's caller is told when its group did not write it: append it alone.

    The group writer never appends a write alone itself, so that one slow or cut-off
    append cannot hold the writes queued behind it; each caller does its own, at once.
    """


class _GroupWrite(Request):
    """A plain append waiting for the store's group writer."""

    __slots__ = ("write",)

    def __init__(self, write: _Write) -> None:
        super().__init__()
        self.write = write


class _Tail(NamedTuple):
    """What a store last saw of a session's ``streams`` row (plans start from it)."""

    last: int
    text_count: int
    state: bytes | None


class _Unit(NamedTuple):
    """A write of a group, planned on its session's cached tail."""

    request: _GroupWrite
    sid: bytes
    tail: _Tail
    plan: AppendPlan


class _GroupShape(NamedTuple):
    """Which optional parts a group's ``append_group`` statement needs (see ``_Queries``)."""

    parents: bool  # a stored parent to check
    replies: bool  # a first reply to record
    states: bool  # a folded session state to store
    runs: bool  # an event of a run
    event_parents: bool  # an event with a parent
    notify: bool  # notices sent by the statement


class _Row(NamedTuple):
    """A new event's ``events`` columns as every write statement sends them."""

    seq: int
    id_key: bytes
    kind: str  # the body's class
    parent: int  # 0: none (the statements turn it into NULL)
    run_key: bytes  # empty: none (likewise)
    record: bytes  # the event, msgpack


def _row(event: Event) -> _Row:
    """Return the columns of ``event``, a planned new event (its sequence set)."""
    assert event.sequence is not None
    return _Row(
        event.sequence,
        event_id_key(b"", event.id),
        type(event.body).__name__,
        0 if event.parent is None else event.parent,
        b"" if event.run_id is None else run_index_key(b"", event.run_id),
        ENCODER.encode(event),
    )


def _stored_parents(events: Sequence[Event], last: int) -> list[int]:
    """Return the parents ``events`` name that are stored (at or below ``last``), ascending."""
    return sorted({e.parent for e in events if e.parent is not None and e.parent <= last})


_EMPTY_TAIL: Final = _Tail(0, 0, None)
#: ``stored_row`` of a first plan: every stored parent taken for a root ``Text`` row
#: (``append_events`` checks them; a ``parent`` answer brings the real rows).
_ROOT_ROW: Final = StoredRow("Text", None)


def _assumed_root(sequence: int) -> StoredRow:
    return _ROOT_ROW


#: Most sessions whose tail a store caches (the cache is emptied when full).
_TAIL_CACHE: Final = 100_000
#: Most plans one append makes before it takes the exact, multi-statement path.
_MAX_REPLANS: Final = 50
#: Most seconds the group writer gathers plain appends once one is waiting (see
#: ``_group_commit``; it never waits longer than its last commit took).
_GROUP_WAIT: Final = 0.002


class _Stream(NamedTuple):
    """A session's ``streams`` row as locked by a write."""

    last: int
    text_count: int
    state: bytes | None


class PostgresStore:
    """An event store in a PostgreSQL database, shared by any number of processes.

    Implements the store contract, the sharing-state, run-index and following ports
    (see the module header for how writes are sequenced, notified and retried). Safe
    to share between threads: each call borrows a connection from the store's pool.
    ``append`` returns once its transaction has committed (durable as the server's
    ``synchronous_commit`` makes it).

    Args:
        dsn: A libpq connection URL, ``postgresql://user:password@host:port/dbname``
            (``postgres://`` too; query parameters as libpq takes them).
        schema: The PostgreSQL schema holding the store's tables (created if missing;
            a lower-case identifier of at most 40 characters). Stores on different
            schemas of one database are independent.
        min_connections: Connections opened with the store.
        max_connections: Most connections the pool opens (the most calls served at
            once; more wait for one).
        connect_timeout: Most seconds a call waits for a connection from the pool
            (when the server cannot be reached, the open fails after this long).
        retry_timeout: Most seconds an operation whose connection was lost is retried
            (see the module header for which are); 0 never retries.
        notify: When each append's ``NOTIFY`` is sent. ``"commit"``: inside the
            append's transaction, so it is delivered exactly when the append commits
            and never lost; but PostgreSQL holds a database-wide lock from a notifying
            transaction's pre-commit to its end, so notifying commits do not share WAL
            flushes. ``"after_commit"``: the store's notifier thread sends the notices
            right after each commit (coalesced per session, on its own connection with
            ``synchronous_commit`` off): commits group again, but a process killed
            between a commit and its notice loses that notice (followers learn of the
            append with the session's next one). Worth it only with
            ``group_commit=False``: a group pays one turn of the lock for all its
            notices, and the default is then the faster mode too.
        group_commit: Whether plain appends made while others are under way are
            committed together, one transaction per group (see the module header);
            ``False`` commits each alone.
        call_timeout: Most seconds one use of a connection may take (a statement, or
            the statements of one write); a use still waiting then has its connection
            cut off, and is retried or fails like any lost connection, so no call waits
            on a server that stopped answering for more than about ``call_timeout +
            retry_timeout`` (see ``_pg_watchdog``; an append that joined a group may
            also wait out the group ahead of it and its own, two more
            ``call_timeout`` at most). 0: no limit. Raise it for reads so
            large that one statement takes longer.
        connect: Makes a new psycopg connection (default: ``psycopg.connect(dsn,
            connect_timeout=...)``); the store sets it to autocommit. The seam through
            which a test injects connection faults.

    Raises:
        ValidationError: An unknown or bad option, or a ``dsn`` that is not a
            PostgreSQL URL.
        SchemaTooNewError: The database was written by a newer sharedesk.
        StoreUnreachable: The server refused the connection, or could not be reached.
        StoreIOError: The server refused the schema.

    Cost: opens ``min_connections`` connections on the caller's thread,
    then one connection checks the schema (two reads when current; otherwise the
    migrations, under an advisory lock).
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
        notify: Notify = "commit",
        group_commit: bool = True,
        call_timeout: float = 60.0,
        connect: Connect | None = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ValidationError(
                f"unknown PostgresStore options {sorted(unknown)}; the options are "
                "schema, min_connections, max_connections, connect_timeout, retry_timeout, notify, "
                "group_commit, call_timeout, connect"
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
        if notify not in ("commit", "after_commit"):
            raise ValidationError(f"notify must be 'commit' or 'after_commit', got {notify!r}")
        self._notify: Notify = notify
        if not isinstance(group_commit, bool):
            raise ValidationError(f"group_commit must be a bool, got {group_commit!r}")
        self._dsn = dsn
        self._path = _redact(dsn)
        self._watchdog = Watchdog(call_timeout, self._path)
        self._channel = notify_channel(self._schema)
        self._sql = _Queries(f'"{self._schema}"')
        self._closed = False
        self._lock = threading.Lock()
        self._followers: dict[int, AppendCallback] = {}
        self._next_follower = 0
        self._listener: _Listener | None = None
        self._tails: dict[bytes, _Tail] = {}
        self._notifier: _Notifier | None = None
        self._committer: GroupCommitter[_GroupWrite] | None = None
        self._flight_lock = threading.Lock()
        self._in_flight = 0  # plain appends under way (alone or in a group)
        self._connect = _default_connect(dsn, self._connect_timeout) if connect is None else connect
        self._pool = Pool(self._new_connection, max_connections, self._watchdog)
        try:
            self._run("open", lambda conn: migrate(conn, self._schema, self._path), retry=False)
            self._run("open", lambda conn: self._pool.fill(min_connections - 1), retry=False)
            if notify == "after_commit":
                self._notifier = _Notifier(self)
            if group_commit:
                self._committer = GroupCommitter(
                    self._commit_group,
                    group_wait=_GROUP_WAIT,
                    pipeline=False,  # a group's fixed cost on the server: see _group_commit
                    name=f"sharedesk-pg-writer:{self._path}",
                    closed_error=lambda: StoreClosedError(self._path),
                    path=self._path,
                )
        except BaseException:
            if self._notifier is not None:
                self._notifier.stop()
            self._pool.close()
            self._watchdog.stop()
            raise

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
        """The ``NOTIFY`` channel appends are announced on (``<schema>_appended``)."""
        return self._channel

    # -- running statements --------------------------------------------------------------

    def _live(self) -> None:
        if self._closed:
            raise StoreClosedError(self._path)

    def _new_connection(self) -> psycopg.Connection[Any]:
        """Make a connection with the ``connect`` factory and set it up.

        Generic plans for every prepared statement: the store's statements look rows up
        by key, which a generic plan does as well as a custom one.

        Raises:
            _ConnectFailed: The factory failed (refused, unauthenticated, unreachable).
        """
        try:
            conn: psycopg.Connection[Any] = self._connect()
        except psycopg.Error as exc:
            raise _ConnectFailed(_reason(exc)) from exc
        try:
            conn.autocommit = True  # reads are one statement; writes open a transaction
            with self._watchdog.watch(conn):
                conn.execute("SET plan_cache_mode = force_generic_plan")
        except BaseException:
            conn.close()
            raise
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
        *,
        retry: bool,
        attempt: _Attempt | None = None,
        session_id: str = "",
    ) -> T:
        """Run ``work(conn)`` on a pooled connection, retrying lost connections if safe.

        ``attempt`` (for writes) tells whether the ``COMMIT`` was sent when the
        connection broke; ``retry`` says whether a write whose outcome is then unknown
        may run again.

        Raises:
            SharedeskError: What ``work`` raised (its transaction rolled back).
            CommitOutcomeUnknown: The connection broke during the ``COMMIT`` of a write
                that may not run again.
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
                if self._closed:
                    raise StoreClosedError(self._path) from None
                error: StoreIOError = StoreIOError(self._path, operation)
                raise error from exc
            except _ConnectFailed as exc:
                if self._closed:
                    raise StoreClosedError(self._path) from None
                if operation == "open" or time.monotonic() >= deadline:
                    raise StoreUnreachable(self._path, operation, exc.reason) from exc.__cause__
                time.sleep(delay + random.uniform(0, delay))
                delay = min(max(delay * 2, 0.01), 0.5)
                continue
            except psycopg.Error as exc:
                if self._closed:
                    raise StoreClosedError(self._path) from None
                lost = isinstance(exc, psycopg.OperationalError) and (
                    exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))
                )
                aborted = exc.sqlstate in _RETRYABLE_STATES
                unknown = lost and attempt is not None and attempt.committing
                if unknown and not retry:
                    assert attempt is not None
                    settled = self._settle(attempt, deadline)
                    if settled is None:
                        raise CommitOutcomeUnknown(self._path, operation, session_id) from exc
                    if settled:
                        return cast(T, attempt.result)  # it committed: its result stands
                if not (lost or aborted) or time.monotonic() >= deadline:
                    raise StoreIOError(self._path, operation) from exc
                _log.warning(
                    "store.pg_retry",
                    path=self._path,
                    operation=operation,
                    error=type(exc).__name__,
                    unknown=unknown,
                )
                time.sleep(delay + random.uniform(0, delay))
                delay = min(max(delay * 2, 0.01), 0.5)

    def _settle(self, attempt: _Attempt, deadline: float) -> bool | None:
        """Tell whether a write whose connection broke while committing was stored.

        Waits (until ``deadline``) for the server process that ran it to be gone, so
        that the write's transaction is over, then reads its probe row on another
        connection: the row as the write would have stored it means it committed. A
        connection lost meanwhile is replaced, until ``deadline``.

        Returns:
            ``True`` when it committed, ``False`` when it did not (it may run again),
            ``None`` when that cannot be told in time.
        """
        while True:
            try:
                with self._borrow() as conn:
                    while conn.execute(_BACKEND_ALIVE, [attempt.backend_pid]).fetchone():
                        if time.monotonic() >= deadline or self._closed:
                            return None
                        time.sleep(0.05)
                    probe = attempt.probe
                    if probe is None:
                        return False  # it stores nothing either way
                    row = conn.execute(probe.query, [probe.sid, probe.key]).fetchone()
            except (psycopg.Error, PoolExhausted, _ConnectFailed):
                # This connection went too (or none came): ask again on another one.
                if time.monotonic() >= deadline or self._closed:
                    return None
                time.sleep(0.05)
                continue
            return row is not None and bytes(row[0]) == probe.value

    # -- writes --------------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        unless_stored: str | None = None,
    ) -> list[Event]:
        """Append ``events`` to ``session_id`` and return them as stored.

        Args:
            session_id: The session.
            events: Events with ``sequence`` and ``timestamp`` left ``None``.
            expected_version: When set, append only if the session's last sequence
                equals it.
            unless_stored: When set, append only if the session holds no event with
                this id (checked inside the write transaction).

        Returns:
            One stored event per input, in input order; an event whose ``id`` the
            session already holds (or that repeats an earlier id of the batch) is
            returned as stored, not stored again.

        Raises:
            ValidationError: Malformed input; nothing was written.
            ConcurrencyError: ``expected_version`` differs from the last sequence.
            AlreadyStored: The event ``unless_stored`` names is stored; nothing written.
            CommitOutcomeUnknown: The connection broke during the ``COMMIT`` of a
                guarded append (``expected_version`` or ``unless_stored``) and whether
                it was stored could not be told (see the module header).
            StoreClosedError: The store is closed.
            StoreIOError: The server failed; the cause is chained.

        Cost: one ``append_events`` statement (its own transaction, one round trip)
        when the cached tail is current; one more per re-plan (a stale tail, known
        ids, parents to read); one ``NOTIFY`` when events were stored. A plain append
        made while others are under way is committed in its group's transaction
        instead (one commit and one flush per group; it waits for the group writer).
        Blocks while another writer of the same session (in any process) holds its
        row.
        """
        batch = check_append_args(session_id, events, expected_version)
        guard = check_optional_str("unless_stored", unless_stored)
        write = _Write(session_id, batch, expected_version, guard, None, False)
        if not batch and guard is None:
            self._live()
            if expected_version is not None:
                last = self.last_sequence(session_id)
                if last != expected_version:
                    raise ConcurrencyError(expected_version, last)
            return []
        plain = expected_version is None and guard is None
        if not plain or self._committer is None:
            return self._append_alone(write, plain=plain)
        with self._flight_lock:
            alone = self._in_flight == 0  # no one to group with: no hand-off either
            self._in_flight += 1
        try:
            if alone:
                return self._append_alone(write, plain=True)
            try:
                return self._committer.submit(_GroupWrite(write))
            except _AppendAlone:  # the group did not write it: plan it exactly, alone
                return self._append_alone(write, plain=True)
        finally:
            with self._flight_lock:
                self._in_flight -= 1

    def _append_alone(self, write: _Write, *, plain: bool) -> list[Event]:
        """Append ``write`` in a transaction of its own (one ``append_events`` call)."""
        attempt = _Attempt()
        return self._run(
            "append",
            lambda conn: self._append_in(conn, write, attempt),
            retry=plain,
            attempt=attempt,
            session_id=write.session_id,
        )

    def _commit_group(self, group: list[_GroupWrite], before_commit: Callable[[], None]) -> None:
        """Write a group of plain appends in one statement: one transaction, one flush.

        The group writer's commit function (see ``_group_commit``). A group of one is
        handed back to its caller, to append alone (``_AppendAlone``). Otherwise each
        write is planned on its session's cached tail and the plans go to the server
        as one ``append_group`` statement (its own transaction): it locks the
        sessions' ``streams`` rows in session-id order (so two groups, of two
        processes, cannot deadlock) and writes the plan of every session whose row
        still holds the planned last sequence, none of whose ids is stored and whose
        stored parents are root ``Text`` rows; the others are left alone. Each write
        not written so (a session not cached here, a second write
        of one session in the group, a plan that failed its own checks or that the
        server refused) is then handed back to its caller to append alone, which
        plans it exactly. When the statement fails (a server error, a lost or cut-off
        connection, also mid-commit), each write is handed back so: plain appends are
        idempotent by id, so the outcome is the same whether or not the group
        committed.
        """
        if len(group) == 1:
            before_commit()
            group[0].settle(error=_AppendAlone())
            return
        units: list[_Unit] = []
        later: list[_GroupWrite] = []
        planned: set[bytes] = set()
        now = datetime.now(UTC)
        for request in group:
            write = request.write
            sid = _utf8(write.session_id)
            tail = self._tails.get(sid)
            if tail is None or sid in planned:
                later.append(request)
                continue
            try:
                plan = self._plan_on(write, tail, {}, None, now)
            except SharedeskError:  # its own checks, or a stored state it cannot read
                later.append(request)
                continue
            planned.add(sid)
            units.append(_Unit(request, sid, tail, plan))
        units.sort(key=lambda unit: unit.sid)  # lock order: see _Queries.group
        written: dict[bytes, int] = {}
        if not units:
            before_commit()
        else:
            try:
                self._live()
                query, params = self._group_call(units, now)
                with self._borrow() as conn:
                    before_commit()  # the last group's callers run while this one is written
                    answer = conn.execute(query, params, binary=True)
                    written = {bytes(sid): texts for sid, texts, _ in answer}
            except (psycopg.Error, PoolExhausted, _ConnectFailed, SharedeskError) as exc:
                for unit in units:  # what the statement may have written is unknown
                    self._tails.pop(unit.sid, None)
                _log.warning(
                    "store.pg_group_failed",
                    path=self._path,
                    writes=len(group),
                    error=type(exc).__name__,
                )
                later.extend(unit.request for unit in units)
                units = []
        for unit in units:
            texts = written.get(unit.sid)
            if texts is None:
                later.append(unit.request)
                continue
            plan = unit.plan
            last = plan.new[-1].sequence
            assert last is not None
            state = unit.tail.state if plan.state is None else ENCODER.encode(plan.state)
            self._remember(unit.sid, _Tail(last, texts, state))
            unit.request.settle(plan.result)
            if self._notifier is not None:
                self._notifier.tell(unit.sid, last)
        before_commit()  # called already, unless the statement failed before it was sent
        for request in later:  # each caller appends its own, all at once
            request.settle(error=_AppendAlone())

    def _group_call(self, units: list[_Unit], now: datetime) -> tuple[str, dict[str, Any]]:
        """Return the ``append_group`` statement writing ``units`` and its parameters."""
        sids: list[bytes] = []
        lasts: list[int] = []
        new_lasts: list[int | None] = []
        texts: list[int] = []
        states: list[bytes | None] = []
        e_sid: list[bytes] = []
        e_seq: list[int] = []
        e_id: list[bytes] = []
        e_kind: list[str] = []
        e_parent: list[int] = []
        e_run: list[bytes] = []
        e_record: list[bytes] = []
        p_sid: list[bytes] = []
        p_seq: list[int] = []
        r_sid: list[bytes] = []
        r_root: list[int] = []
        r_reply: list[int] = []
        any_state = any_run = any_parent = False
        for _request, sid, tail, plan in units:
            new = plan.new
            sids.append(sid)
            lasts.append(tail.last)
            new_lasts.append(new[-1].sequence)
            texts.append(plan.texts)
            if plan.state is None:
                states.append(None)
            else:
                states.append(ENCODER.encode(plan.state))
                any_state = True
            for event in new:
                row = _row(event)
                e_sid.append(sid)
                e_seq.append(row.seq)
                e_id.append(row.id_key)
                e_kind.append(row.kind)
                e_parent.append(row.parent)
                e_run.append(row.run_key)
                e_record.append(row.record)
                any_parent = any_parent or row.parent != 0
                any_run = any_run or row.run_key != b""
            for parent in _stored_parents(new, tail.last):
                p_sid.append(sid)
                p_seq.append(parent)
            for root, reply in plan.first_replies.items():
                r_sid.append(sid)
                r_root.append(root)
                r_reply.append(reply)
        params: dict[str, Any] = {
            "sid": sids,
            "last": lasts,
            "new_last": new_lasts,
            "texts": texts,
            "e_sid": e_sid,
            "e_seq": e_seq,
            "e_id": e_id,
            "e_kind": e_kind,
            "e_record": e_record,
            "at": now,
        }
        if any_state:
            params["state"] = states
        if any_run:
            params["e_run"] = e_run
        if any_parent:
            params["e_parent"] = e_parent
        if p_sid:
            params["p_sid"] = p_sid
            params["p_seq"] = p_seq
        if r_sid:
            params["r_sid"] = r_sid
            params["r_root"] = r_root
            params["r_reply"] = r_reply
        notify = self._notifier is None
        if notify:
            params["channel"] = self._channel
        shape = _GroupShape(bool(p_sid), bool(r_sid), any_state, any_run, any_parent, notify)
        return self._sql.group(shape), params

    def _append_in(
        self,
        conn: psycopg.Connection[Any],
        write: _Write,
        attempt: _Attempt,
    ) -> list[Event]:
        """Append ``write`` with ``append_events``: one statement, usually one round trip.

        The batch is planned against this store's cached tail of the session (last
        sequence, ``Text`` rows, state; an unknown session is planned as empty), taking
        every stored parent for a root ``Text`` row; the function checks all of that
        under the row lock and either writes the plan or says what to plan again with
        (known ids, the real tail, the real parents). A plan that fails its own checks
        is decided by the exact path (:meth:`_write_in`) instead, since what it assumed
        may be out of date.
        """
        session_id = write.session_id
        sid = _utf8(session_id)
        guard = None if write.unless_stored is None else event_id_key(b"", write.unless_stored)
        known: dict[str, Event] = {}
        rows: dict[int, StoredRow] | None = None  # the real parents, once asked
        checked = False  # an answer passed expected_version and the guard
        for _ in range(_MAX_REPLANS):
            tail = self._tails.get(sid, _EMPTY_TAIL)
            now = datetime.now(UTC)
            try:
                plan = self._plan_on(write, tail, known, rows, now)
            except ValidationError:
                if rows is not None:
                    raise  # decided on the real rows: exact
                break
            new = plan.new
            if not new and checked:  # every id is stored; the guards passed in that call
                if self._notifier is not None and tail.last:
                    # The attempt that stored them may have been cut off before its
                    # notice: tell it again (followers drop a notice they have had).
                    self._notifier.tell(sid, tail.last)
                return plan.result
            query, params, probe, parents = self._call(write, sid, guard, tail, plan, now)
            attempt.commit_sent(conn, probe, plan.result)
            row = conn.execute(query, params, binary=True).fetchone()
            attempt.committing = False
            assert row is not None
            outcome, last, texts, state, known_seqs, known_records = row
            self._remember(sid, _Tail(last, texts, state))
            if outcome == "ok":
                if new and self._notifier is not None:
                    self._notifier.tell(sid, last)
                return plan.result
            if outcome == "conflict":
                assert write.expected_version is not None
                raise ConcurrencyError(write.expected_version, last)
            if outcome == "guarded":
                assert write.unless_stored is not None
                raise AlreadyStored(session_id, write.unless_stored)
            checked = True
            if outcome == "known":
                for seq, record in zip(known_seqs, known_records, strict=True):
                    event = decode_record(EVENT_DECODER, session_id, seq, record)
                    known[event.id] = event
            elif outcome == "parent":
                rows = {}
                for seq, kind, parent, _reply in conn.execute(self._sql.parents, [sid, parents]):
                    rows[seq] = StoredRow(kind, parent)
        return self._write_in(conn, write, attempt)

    def _plan_on(
        self,
        write: _Write,
        tail: _Tail,
        known: dict[str, Event],
        rows: dict[int, StoredRow] | None,
        now: datetime,
    ) -> AppendPlan:
        """Plan ``write`` on the cached ``tail`` with what the server has told so far.

        ``known``: the stored events of ids the server named; ``rows``: the real parent
        rows once asked (``None``: every parent is assumed a root ``Text`` row, which
        ``append_events`` checks under the row lock).

        Raises:
            ValidationError: The plan fails its own checks on what it assumed.
        """
        return plan_append(
            write.events,
            tail.last,
            known,
            now,
            stored_row=_assumed_root if rows is None else rows.get,
            answered=(),
            state=functools.partial(self._decode_session_state, write.session_id, tail.state),
        )

    def _call(
        self,
        write: _Write,
        sid: bytes,
        guard: bytes | None,
        tail: _Tail,
        plan: AppendPlan,
        now: datetime,
    ) -> tuple[str, list[Any], _Probe | None, list[int]]:
        """Return the ``append_events`` call writing ``plan`` (planned on ``tail``).

        Returns the statement, its parameters, the probe of its first new event and
        the stored parents it checks. One event (the common case) is sent as scalars,
        which psycopg adapts far more cheaply than arrays; the statement builds them.
        """
        new = plan.new
        parents = _stored_parents(new, tail.last)
        payload = f"{new[-1].sequence}:{sid.hex()}" if new else ""
        channel = self._channel if self._notifier is None else None
        state = None if plan.state is None else ENCODER.encode(plan.state)
        rows = [_row(e) for e in new]
        if len(rows) == 1:
            row = rows[0]
            root, reply = next(iter(plan.first_replies.items()), (None, None))
            query = self._sql.append_one
            params: list[Any] = [
                sid,
                tail.last,
                write.expected_version,
                guard,
                row.id_key,
                parents[0] if parents else None,
                row.seq,
                row.kind,
                row.parent,
                row.run_key,
                row.record,
                root,
                reply,
                plan.texts,
                now,
                state,
                channel,
                payload,
            ]
        else:
            query = self._sql.append_events
            params = [
                sid,
                tail.last,
                write.expected_version,
                guard,
                [r.id_key for r in rows],
                parents,
                [r.seq for r in rows],
                [r.kind for r in rows],
                [r.parent for r in rows],
                [r.run_key for r in rows],
                [r.record for r in rows],
                list(plan.first_replies),
                list(plan.first_replies.values()),
                plan.texts,
                now,
                state,
                channel,
                payload,
            ]
        probe = _Probe(self._sql.probe_event, sid, rows[0].id_key, rows[0].record) if rows else None
        return query, params, probe, parents

    def _remember(self, sid: bytes, tail: _Tail) -> None:
        """Cache ``tail`` as the session's newest known tail (bounded; see ``_TAIL_CACHE``).

        An older tail (a slower thread's answer) never replaces a newer one.
        """
        tails = self._tails
        known = tails.get(sid)
        if known is not None and known.last > tail.last:
            return
        if known is None and len(tails) >= _TAIL_CACHE:
            tails.clear()
        tails[sid] = tail

    def append_and_share(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        viewer: str,
        state: SharingState,
        expected_state: SharingState | None,
        expected_version: int | None = None,
        reply_present: bool = False,
    ) -> list[Event]:
        """Append ``events`` and store ``state`` in one transaction.

        The state is keyed by (session, viewer, ``state.conversation``); ``events`` may
        be empty. Checks run in this order: input, ``expected_version``, the stored
        state, parents, the present set.

        Args:
            session_id: The session.
            events: Events to append, as for :meth:`append`.
            viewer: The participant's :func:`~sharedesk.protocol.author_key`.
            state: The state to store.
            expected_state: The state the caller read (``None``: no state stored).
            expected_version: When set, write only if the last sequence equals it.
            reply_present: Note the first event's stored sequence (its old one when its
                id was stored before) as present in ``state``, inside the transaction.

        Returns:
            The events as stored, as :meth:`append` returns them.

        Raises:
            ValidationError: Malformed input; nothing was written.
            ConcurrencyError: ``expected_version`` differs from the last sequence.
            SharingStateConflict: The stored state is not ``expected_state``; nothing
                was written.
            PresentSetOverflow: Noting the reply overflows the present set; nothing
                was written.
            CorruptRecordError: The stored state cannot be decoded; nothing was written.
            CommitOutcomeUnknown: The connection broke during the ``COMMIT`` and
                whether it was stored could not be told (see the module header).
            StoreClosedError, StoreIOError: As for :meth:`append`.

        Cost: as :meth:`append`, plus one state read and write in the same transaction.
        """
        batch = check_append_args(session_id, events, expected_version)
        sharing = check_sharing_args(viewer, state, expected_state)
        write = _Write(session_id, batch, expected_version, None, sharing, reply_present)
        return self._write(write, "append_and_share", plain=False)

    def _write(self, write: _Write, operation: str, *, plain: bool) -> list[Event]:
        attempt = _Attempt()
        return self._run(
            operation,
            lambda conn: self._write_in(conn, write, attempt),
            retry=plain,
            attempt=attempt,
            session_id=write.session_id,
        )

    def _lock_stream(self, conn: psycopg.Connection[Any], sid: bytes) -> _Stream:
        """Lock the session's ``streams`` row (creating it first if needed); return it."""
        sql = self._sql
        row = conn.execute(sql.lock_stream, [sid]).fetchone()
        if row is None:
            conn.execute(sql.create_stream, [sid])
            row = conn.execute(sql.lock_stream, [sid]).fetchone()
            assert row is not None
        return _Stream(row[0], row[1], row[2])

    def _write_in(
        self,
        conn: psycopg.Connection[Any],
        write: _Write,
        attempt: _Attempt,
    ) -> list[Event]:
        """Check ``write`` against the locked stream and write it, in one transaction."""
        sql = self._sql
        session_id = write.session_id
        sid = _utf8(session_id)
        now = datetime.now(UTC)
        with conn.transaction():
            stream = self._lock_stream(conn, sid)
            last = stream.last
            if write.expected_version is not None and write.expected_version != last:
                raise ConcurrencyError(write.expected_version, last)
            id_keys = [event_id_key(b"", event.id) for event in write.events]
            guard_key = (
                None if write.unless_stored is None else event_id_key(b"", write.unless_stored)
            )
            lookup = id_keys if guard_key is None else [*id_keys, guard_key]
            known: dict[str, Event] = {}
            guarded = False
            if lookup:
                for seq, id_key, record in conn.execute(sql.known_ids, [sid, lookup]):
                    if id_key == guard_key:
                        guarded = True
                    event = decode_record(EVENT_DECODER, session_id, seq, record)
                    known[event.id] = event
            if guarded:
                assert write.unless_stored is not None
                raise AlreadyStored(session_id, write.unless_stored)
            sharing_row: tuple[bytes, SharingState] | None = None
            if write.sharing is not None:
                viewer, state, expected_state = write.sharing
                key = sharing_key(b"", viewer, state.conversation)
                found = conn.execute(sql.get_sharing, [sid, key]).fetchone()
                stored_state = None if found is None else decode_state(session_id, found[0])
                if stored_state != expected_state:
                    raise SharingStateConflict(
                        watermark_of(expected_state), watermark_of(stored_state)
                    )
                sharing_row = (key, state)
            parents = _stored_parents(write.events, last)
            rows: dict[int, StoredRow] = {}
            answered: set[int] = set()
            if parents:
                for seq, kind, parent, reply in conn.execute(sql.parents, [sid, parents]):
                    rows[seq] = StoredRow(kind, parent)
                    if reply is not None:
                        answered.add(seq)
            plan = plan_append(
                write.events,
                last,
                known,
                now,
                stored_row=rows.get,
                answered=answered,
                state=lambda: self._decode_session_state(session_id, stream.state),
            )
            if sharing_row is not None:
                key, state = sharing_row
                if write.reply_present and plan.result:
                    reply_seq = plan.result[0].sequence
                    assert reply_seq is not None
                    state = note_present(state, reply_seq)
                sharing_row = (key, state)
            if plan.new or sharing_row is not None:
                self._write_rows(conn, sid, plan, sharing_row, now)
            probe: _Probe | None = None
            if plan.new:
                first = plan.new[0]
                probe = _Probe(
                    sql.probe_event, sid, event_id_key(b"", first.id), ENCODER.encode(first)
                )
            elif sharing_row is not None:
                probe = _Probe(sql.get_sharing, sid, sharing_row[0], ENCODER.encode(sharing_row[1]))
            attempt.commit_sent(conn, probe, plan.result)  # leaving the block sends COMMIT
        if self._notifier is not None and (plan.new or (write.events and stream.last)):
            # Every event known: told again, the attempt that stored them may have been
            # cut off before its notice (followers drop a notice they have had).
            self._notifier.tell(sid, stream.last + len(plan.new))
        if plan.new:
            raw_state = stream.state if plan.state is None else ENCODER.encode(plan.state)
            self._remember(
                sid, _Tail(stream.last + len(plan.new), stream.text_count + plan.texts, raw_state)
            )
        return plan.result

    def _write_rows(
        self,
        conn: psycopg.Connection[Any],
        sid: bytes,
        plan: AppendPlan,
        sharing_row: tuple[bytes, SharingState] | None,
        now: datetime,
    ) -> None:
        """Write the plan's events, first replies, sharing state and stream row: one statement."""
        sql = self._sql
        new = plan.new
        if not new:
            assert sharing_row is not None
            conn.execute(sql.put_sharing, [sid, sharing_row[0], ENCODER.encode(sharing_row[1])])
            return
        last = new[-1].sequence
        assert last is not None
        rows = [_row(e) for e in new]
        state = None if plan.state is None else ENCODER.encode(plan.state)
        payload = f"{last}:{sid.hex()}"
        params: list[Any] = [sid, *([list(column) for column in zip(*rows, strict=True)])]
        if plan.first_replies:
            roots = list(plan.first_replies)
            params += [sid, roots, [plan.first_replies[r] for r in roots]]
        if sharing_row is not None:
            params += [sid, sharing_row[0], ENCODER.encode(sharing_row[1])]
        channel = self._channel if self._notifier is None else None
        params += [last, plan.texts, now, state, sid, channel, channel, payload]
        query = sql.write(bool(plan.first_replies), sharing_row is not None)
        conn.execute(query, params)

    def _decode_session_state(self, session_id: str, raw: bytes | None) -> SessionState:
        if raw is None:
            return EMPTY_SESSION_STATE
        try:
            state: SessionState = SESSION_STATE_DECODER.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CorruptRecordError(session_id, 0, f"session state: {exc}") from exc
        return state

    # -- reads ---------------------------------------------------------------------------

    def _read(self, operation: str, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        return self._run(operation, work, retry=True)

    def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Return stored events with ``after < sequence < before``.

        Args:
            session_id: The session.
            after: Exclusive lower bound, or ``None``.
            before: Exclusive upper bound, or ``None``.
            limit: The first ``limit`` events in the chosen order, or all.
            newest_first: Order newest first.

        Raises:
            ValidationError: A bound that is not a non-negative int.
            CorruptRecordError: A record in the range cannot be decoded.
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one statement, an index range scan from the requested end: O(rows returned).
        """
        check_session_id(session_id)
        after, before, limit = check_read_args(after, before, limit, newest_first)
        low = 0 if after is None else after
        high = 2**63 - 1 if before is None else before
        if limit == 0 or high <= low + 1:
            self._live()
            return []
        query = self._sql.read_desc if newest_first else self._sql.read_asc
        sid = _utf8(session_id)

        def work(conn: psycopg.Connection[Any]) -> list[Event]:
            rows = conn.execute(query, [sid, low, high, limit]).fetchall()
            return [decode_record(EVENT_DECODER, session_id, seq, raw) for seq, raw in rows]

        return self._read("read", work)

    def _one(self, operation: str, query: str, params: list[Any]) -> tuple[Any, ...] | None:
        def work(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            row = conn.execute(query, params).fetchone()
            return row

        return self._read(operation, work)

    def last_sequence(self, session_id: str) -> int:
        """Return the session's last sequence (0 for a session with no events).

        Raises:
            ValidationError: A malformed session id.
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one primary-key lookup.
        """
        check_session_id(session_id)
        row = self._one("read", self._sql.last_sequence, [_utf8(session_id)])
        return 0 if row is None else int(row[0])

    def session_state(self, session_id: str) -> SessionState:
        """Return the session's state, folded as its events were appended.

        Raises:
            ValidationError: A malformed session id.
            CorruptRecordError: The stored state cannot be decoded.
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one primary-key lookup.
        """
        check_session_id(session_id)
        row = self._one("read", self._sql.session_state, [_utf8(session_id)])
        return self._decode_session_state(session_id, None if row is None else row[0])

    def run_events(self, session_id: str, run_id: str) -> list[Event]:
        """Return the events carrying ``run_id``, oldest first (read from the run index).

        Raises:
            ValidationError: A malformed argument.
            CorruptRecordError: A record cannot be decoded.
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one statement over the run index: O(the run's events).
        """
        check_session_id(session_id)
        check_optional_str("run_id", run_id)
        sid, key = _utf8(session_id), run_index_key(b"", run_id)

        def work(conn: psycopg.Connection[Any]) -> list[Event]:
            rows = conn.execute(self._sql.run_events, [sid, key]).fetchall()
            return [decode_record(EVENT_DECODER, session_id, seq, raw) for seq, raw in rows]

        return [event for event in self._read("read", work) if event.run_id == run_id]

    def first_replies(self, session_id: str, roots: Collection[int]) -> dict[int, int]:
        """Return, for each root in ``roots`` that has one, its first non-blank reply.

        Args:
            session_id: The session.
            roots: Sequences of root rows (others are left out of the answer).

        Raises:
            ValidationError: A malformed session id or root.
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one statement, one index lookup per root (the index is written on append).
        """
        check_session_id(session_id)
        wanted = check_roots(roots)
        if not wanted:
            self._live()
            return {}
        sid = _utf8(session_id)

        def work(conn: psycopg.Connection[Any]) -> dict[int, int]:
            rows = conn.execute(self._sql.first_replies, [sid, wanted]).fetchall()
            return {int(root): int(reply) for root, reply in rows}

        return self._read("read", work)

    def get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        """Return the stored sharing state of (session, viewer, conversation), or ``None``.

        Raises:
            ValidationError: A malformed argument.
            CorruptRecordError: The stored state cannot be decoded.
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one primary-key lookup.
        """
        check_session_id(session_id)
        check_viewer(viewer)
        check_conversation(conversation)
        key = sharing_key(b"", viewer, conversation)
        row = self._one("read", self._sql.get_sharing, [_utf8(session_id), key])
        return None if row is None else decode_state(session_id, row[0])

    def sessions(self) -> list[str]:
        """Return the ids of the sessions holding at least one event, sorted.

        Raises:
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one scan of the ``streams`` table, O(sessions).
        """
        return [info.session_id for info in self.session_infos()]

    def session_info(self, session_id: str) -> SessionInfo | None:
        """Return what the store knows about ``session_id``, or ``None`` if it has no events.

        Raises:
            ValidationError: A malformed session id.
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one primary-key lookup.
        """
        check_session_id(session_id)
        sid = _utf8(session_id)
        row = self._one("read", self._sql.session_info, [sid])
        return None if row is None else _info(sid, row)

    def session_infos(self) -> list[SessionInfo]:
        """Return :class:`SessionInfo` for every session holding events, sorted by id.

        Raises:
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one scan of the ``streams`` table, O(sessions).
        """

        def work(conn: psycopg.Connection[Any]) -> list[SessionInfo]:
            rows = conn.execute(self._sql.session_infos).fetchall()
            return [_info(row[0], row[1:]) for row in rows]

        return sorted(self._read("read", work), key=lambda info: info.session_id)

    def log(self, session_id: str) -> _PostgresLog:
        """Return the session's ``Text`` rows as a :class:`~sharedesk.SessionLog`.

        Rows carry ``desk == session_id``; the log reads the store at each call.

        Raises:
            ValidationError: A malformed session id.

        Cost: none until ``read_before``: one statement over the ``Text`` index, reading
        ``limit + 1`` index entries and ``limit`` records, whatever lies between.
        """
        check_session_id(session_id)
        return _PostgresLog(self, session_id)

    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage:
        before, limit = check_log_args(before, limit)
        high = 2**63 - 1 if before is None else before
        if limit == 0 or high <= 1:
            self._live()
            return SessionPage(messages=[], next_before=None)
        sid = _utf8(session_id)

        def work(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            rows = conn.execute(self._sql.texts_before, [sid, high, limit + 1]).fetchall()
            return rows

        rows = self._read("read", work)
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

    # -- following ------------------------------------------------------------------------

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
            StoreClosedError: The store is closed.
            StoreIOError: The listener's connection could not be opened.

        Cost: the first follower opens one dedicated connection and starts the
        ``sharedesk-pg-listener`` thread; nothing per commit beyond the notice.
        """
        if not callable(on_append):
            raise ValidationError(f"on_append must be callable, got {type(on_append).__name__}")
        with self._lock:
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
            with self._lock:
                if self._followers.pop(token, None) is None or self._followers:
                    return
                listener, self._listener = self._listener, None
            if listener is not None:
                listener.stop()

        return stop

    def _followers_now(self) -> list[AppendCallback]:
        with self._lock:
            return list(self._followers.values())

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the store; later calls raise ``StoreClosedError``. Idempotent.

        Stops the listener (woken at once by a notice of its own) and every follower,
        and closes the pool (calls in progress finish or fail with
        ``StoreClosedError``).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            listener, self._listener = self._listener, None
            self._followers.clear()
        if self._committer is not None:
            self._committer.close()  # the group being written completes
        if listener is not None:
            listener.stop()
        if self._notifier is not None:
            self._notifier.stop()
        self._pool.close()
        self._watchdog.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"PostgresStore({self._path!r}, schema={self._schema!r}) [{state}]"


def _info(sid: bytes, row: Sequence[Any]) -> SessionInfo:
    last, texts, activity = row
    return SessionInfo(
        session_id=bytes(sid).decode("utf-8"),
        last_sequence=int(last),
        text_count=int(texts),
        last_activity=activity.astimezone(UTC),
    )


class _Queries:
    """The store's SQL, with its schema's quoted name filled in."""

    def __init__(self, s: str) -> None:
        self.s = s
        self.lock_stream = (
            f"SELECT last_seq, text_count, state FROM {s}.streams WHERE session_id = %s FOR UPDATE"
        )
        self.create_stream = (
            f"INSERT INTO {s}.streams (session_id) VALUES (%s) ON CONFLICT DO NOTHING"
        )
        self.known_ids = (
            f"SELECT seq, id_key, record FROM {s}.events WHERE session_id = %s AND id_key = ANY(%s)"
        )
        self.parents = (
            f"SELECT e.seq, e.kind, e.parent, r.reply FROM {s}.events e "
            f"LEFT JOIN {s}.replies r ON r.session_id = e.session_id AND r.root = e.seq "
            f"WHERE e.session_id = %s AND e.seq = ANY(%s::bigint[])"
        )
        self.append_events = (
            f"SELECT * FROM {s}.append_events(%s, %s, %s::bigint, %s::bytea, %s::bytea[], "
            f"%s::bigint[], %s::bigint[], %s::text[], %s::bigint[], %s::bytea[], %s::bytea[], "
            f"%s::bigint[], %s::bigint[], %s::bigint, %s::timestamptz, %s::bytea, %s::text, "
            f"%s::text)"
        )
        # append_events for one event, from scalars: array_remove(ARRAY[NULL], NULL)
        # is the empty array (no stored parent to check, no first reply).
        self.append_one = (
            f"SELECT * FROM {s}.append_events(%s, %s, %s::bigint, %s::bytea, "
            f"ARRAY[%s::bytea], array_remove(ARRAY[%s::bigint], NULL), ARRAY[%s::bigint], "
            f"ARRAY[%s::text], ARRAY[%s::bigint], ARRAY[%s::bytea], ARRAY[%s::bytea], "
            f"array_remove(ARRAY[%s::bigint], NULL), array_remove(ARRAY[%s::bigint], NULL), "
            f"%s::bigint, %s::timestamptz, %s::bytea, %s::text, %s::text)"
        )
        self.probe_event = f"SELECT record FROM {s}.events WHERE session_id = %s AND id_key = %s"
        self.get_sharing = f"SELECT state FROM {s}.sharing WHERE session_id = %s AND key = %s"
        self.put_sharing = (
            f"INSERT INTO {s}.sharing (session_id, key, state) VALUES (%s, %s, %s) "
            f"ON CONFLICT (session_id, key) DO UPDATE SET state = excluded.state"
        )
        self.read_asc = (
            f"SELECT seq, record FROM {s}.events WHERE session_id = %s AND seq > %s AND seq < %s "
            f"ORDER BY seq LIMIT %s"
        )
        self.read_desc = (
            f"SELECT seq, record FROM {s}.events WHERE session_id = %s AND seq > %s AND seq < %s "
            f"ORDER BY seq DESC LIMIT %s"
        )
        self.texts_before = (
            f"SELECT seq, record FROM {s}.events WHERE session_id = %s AND kind = 'Text' "
            f"AND seq < %s ORDER BY seq DESC LIMIT %s"
        )
        self.run_events = (
            f"SELECT seq, record FROM {s}.events WHERE session_id = %s AND run_key = %s "
            f"ORDER BY seq"
        )
        self.first_replies = (
            f"SELECT root, reply FROM {s}.replies WHERE session_id = %s "
            f"AND root = ANY(%s::bigint[])"
        )
        self.last_sequence = f"SELECT last_seq FROM {s}.streams WHERE session_id = %s"
        self.session_state = f"SELECT state FROM {s}.streams WHERE session_id = %s"
        self.session_info = (
            f"SELECT last_seq, text_count, last_activity FROM {s}.streams "
            f"WHERE session_id = %s AND last_seq > 0"
        )
        self.session_infos = (
            f"SELECT session_id, last_seq, text_count, last_activity FROM {s}.streams "
            f"WHERE last_seq > 0"
        )
        self._writes: dict[tuple[bool, bool], str] = {}
        self._groups: dict[_GroupShape, str] = {}

    def write(self, replies: bool, sharing: bool) -> str:
        """Return the one statement that writes an append's rows (see ``_write_rows``)."""
        key = (replies, sharing)
        query = self._writes.get(key)
        if query is None:
            s = self.s
            parts = [
                f"WITH ins AS (INSERT INTO {s}.events "
                f"(session_id, seq, id_key, kind, parent, run_key, record) "
                f"SELECT %s, q, i, k, nullif(p, 0), nullif(r, ''::bytea), d FROM unnest("
                f"%s::bigint[], %s::bytea[], %s::text[], %s::bigint[], %s::bytea[], %s::bytea[]"
                f") AS t(q, i, k, p, r, d))"
            ]
            if replies:
                parts.append(
                    f", rep AS (INSERT INTO {s}.replies (session_id, root, reply) "
                    f"SELECT %s, a, b FROM unnest(%s::bigint[], %s::bigint[]) AS t(a, b) "
                    f"ON CONFLICT DO NOTHING)"
                )
            if sharing:
                parts.append(f", shr AS ({self.put_sharing})")
            parts.append(
                f" UPDATE {s}.streams SET last_seq = %s, text_count = text_count + %s, "
                f"last_activity = %s, state = coalesce(%s::bytea, state) "
                f"WHERE session_id = %s RETURNING "
                f"CASE WHEN %s::text IS NULL THEN NULL ELSE pg_notify(%s::text, %s::text) END"
            )
            query = self._writes[key] = "".join(parts)
        return query

    def group(self, shape: _GroupShape) -> str:
        """Return the ``append_group`` statement of a group's plans (one session each).

        It locks the sessions' ``streams`` rows in the order given (the caller sorts
        them by session id), keeps the sessions whose row holds the planned last
        sequence, none of whose event ids is stored and whose stored parents (if
        ``shape.parents``) are root ``Text`` rows, writes their events, stream rows and
        first replies, and returns each written session's id and ``Text`` count,
        notifying each one unless ``shape.notify`` is false. A part the shape says no
        group row needs (stored parents, replies, states, run keys, event parents) is
        left out with its parameters: psycopg adapts fewer arrays, and the server
        neither plans nor starts that part.
        """
        query = self._groups.get(shape)
        if query is not None:
            return query
        s = self.s
        bad = (
            f"SELECT ev.sid FROM ev JOIN {s}.events e "
            f"ON e.session_id = ev.sid AND e.id_key = ev.id_key"
        )
        if shape.parents:
            bad += (
                f" UNION ALL SELECT p.sid FROM unnest(%(p_sid)b::bytea[], %(p_seq)b::bigint[]) "
                f"AS p(sid, seq) LEFT JOIN {s}.events e ON e.session_id = p.sid AND e.seq = p.seq "
                f"WHERE e.seq IS NULL OR e.kind <> 'Text' OR e.parent IS NOT NULL"
            )
        state = "%(state)b::bytea[]" if shape.states else "NULL::bytea[]"
        parent = "%(e_parent)b::bigint[]" if shape.event_parents else "NULL::bigint[]"
        run = "%(e_run)b::bytea[]" if shape.runs else "NULL::bytea[]"
        parts = [
            "WITH u AS MATERIALIZED (SELECT * FROM unnest(%(sid)b::bytea[], "
            f"%(last)b::bigint[], %(new_last)b::bigint[], %(texts)b::bigint[], {state}) "
            "AS u(sid, last, new_last, texts, state)), "
            f"lk AS MATERIALIZED (SELECT l.* FROM u CROSS JOIN LATERAL (SELECT st.session_id, "
            f"st.last_seq FROM {s}.streams st WHERE st.session_id = u.sid FOR UPDATE) l), "
            "ev AS MATERIALIZED (SELECT * FROM unnest(%(e_sid)b::bytea[], %(e_seq)b::bigint[], "
            f"%(e_id)b::bytea[], %(e_kind)b::text[], {parent}, {run}, %(e_record)b::bytea[]) "
            "AS ev(sid, seq, id_key, kind, parent, run_key, record)), "
            f"bad AS MATERIALIZED ({bad}), "
            "ok AS MATERIALIZED (SELECT u.* FROM u JOIN lk "
            "ON lk.session_id = u.sid AND lk.last_seq = u.last "
            "WHERE NOT EXISTS (SELECT 1 FROM bad WHERE bad.sid = u.sid)), "
            f"upd AS (UPDATE {s}.streams st SET last_seq = ok.new_last, "
            "text_count = st.text_count + ok.texts, last_activity = %(at)b::timestamptz, "
            "state = coalesce(ok.state, st.state) FROM ok WHERE st.session_id = ok.sid "
            "RETURNING st.session_id, st.last_seq, st.text_count), "
            f"ins AS (INSERT INTO {s}.events "
            "(session_id, seq, id_key, kind, parent, run_key, record) "
            "SELECT ev.sid, ev.seq, ev.id_key, ev.kind, nullif(ev.parent, 0), "
            "nullif(ev.run_key, ''::bytea), ev.record "
            "FROM ev JOIN upd ON upd.session_id = ev.sid)",
        ]
        if shape.replies:
            parts.append(
                f", rep AS (INSERT INTO {s}.replies (session_id, root, reply) "
                "SELECT r.sid, r.root, r.reply FROM unnest(%(r_sid)b::bytea[], "
                "%(r_root)b::bigint[], %(r_reply)b::bigint[]) AS r(sid, root, reply) "
                "JOIN upd ON upd.session_id = r.sid ON CONFLICT DO NOTHING)"
            )
        if shape.notify:  # the payload: <last_seq>:<hex of the session id>
            parts.append(
                " SELECT upd.session_id, upd.text_count, pg_notify(%(channel)b::text, "
                "upd.last_seq || ':' || encode(upd.session_id, 'hex')) FROM upd"
            )
        else:
            parts.append(" SELECT upd.session_id, upd.text_count, NULL FROM upd")
        query = self._groups[shape] = "".join(parts)
        return query


class _PostgresLog:
    """A :class:`~sharedesk.SessionLog` over one session of a :class:`PostgresStore`."""

    __slots__ = ("_session_id", "_store")

    def __init__(self, store: PostgresStore, session_id: str) -> None:
        self._store = store
        self._session_id = session_id

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        """Return at most ``limit`` ``Text`` rows below ``before``, newest first.

        Raises:
            ValidationError: Bad arguments.
            CorruptRecordError: A row in the page cannot be decoded.
            StoreClosedError: The store is closed.
            StoreIOError: The server failed.

        Cost: one statement over the ``Text`` index: ``limit + 1`` entries.
        """
        return self._store._read_text_before(self._session_id, before, limit)


class _Listener:
    """The thread that listens on the store's channel and calls its followers.

    A notice no newer than one already told for its session is dropped: notices sent
    after commit (``notify="after_commit"``) by several processes reach the channel in
    the order their notifiers send them, not always in commit order. The connection
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
            parsed = _parse_payload(notice.payload)
            if parsed is not None and parsed[1] > self._newest.get(parsed[0], 0):
                if len(self._newest) >= _TAIL_CACHE:
                    self._newest.clear()
                self._newest[parsed[0]] = parsed[1]
                self._tell(*parsed)
            if self._stopping.is_set():
                return

    def _tell(self, session_id: str | None, last: int) -> None:
        for follower in self._store._followers_now():
            try:
                follower(session_id, last)
            except Exception:
                _log.exception("store.pg_follower_failed")


def _parse_payload(payload: str) -> tuple[str, int] | None:
    """Return (session id, last sequence) of a notice payload ``<last>:<hex id>``."""
    last, _, hexed = payload.partition(":")
    try:
        return bytes.fromhex(hexed).decode("utf-8"), int(last)
    except ValueError:
        _log.warning("store.pg_bad_notice", payload=payload[:100])
        return None


class _Notifier:
    """The thread that sends the notices of a store opened with ``notify="after_commit"``.

    ``tell`` records a session's newest last sequence (coalesced while a send is under
    way); the thread sends every recorded notice in one transaction on its own
    autocommit connection, with ``synchronous_commit`` off. A lost connection is
    reopened and the notices are sent again.
    """

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._cond = threading.Condition()
        self._pending: dict[bytes, int] = {}
        self._newest: dict[bytes, int] = {}  # the newest last told per session
        self._stopping = False
        self._conn: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"sharedesk-pg-notifier:{store.path}", daemon=True
        )
        self._thread.start()

    def tell(self, sid: bytes, last: int) -> None:
        """Record that ``sid`` committed up to ``last``. Cost: O(1), never blocks on I/O."""
        with self._cond:
            if last <= self._newest.get(sid, 0):
                return  # a later commit of the session was told already: keep commit order
            if len(self._newest) >= _TAIL_CACHE:
                self._newest.clear()
            self._newest[sid] = self._pending[sid] = last
            self._cond.notify()

    def stop(self) -> None:
        """Send what is recorded, stop the thread, close its connection."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        delay = _RECONNECT_FIRST
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._stopping:
                        self._cond.wait()
                    pending, self._pending = self._pending, {}
                    stopping = self._stopping
                if pending:
                    try:
                        self._send(pending)
                        delay = _RECONNECT_FIRST
                    except psycopg.Error as exc:
                        _log.warning("store.pg_notifier_failed", error=repr(exc))
                        if self._conn is not None:
                            self._conn.close()
                            self._conn = None
                        if stopping:
                            return
                        with self._cond:
                            for sid, last in pending.items():
                                if last > self._pending.get(sid, 0):
                                    self._pending[sid] = last
                        time.sleep(delay)
                        delay = min(delay * 2, _RECONNECT_MAX)
                        continue
                if stopping:
                    return
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _send(self, pending: dict[bytes, int]) -> None:
        store = self._store
        conn = self._conn
        if conn is None:
            conn = self._conn = store._connect()
            conn.autocommit = True
            with store._watchdog.watch(conn):
                conn.execute("SET synchronous_commit = off")
        payloads = [f"{last}:{sid.hex()}" for sid, last in pending.items()]
        with store._watchdog.watch(conn):
            conn.execute(
                "SELECT count(pg_notify(%s::text, p)) FROM unnest(%s::text[]) AS p",
                [store.channel, payloads],
            )
