"""PostgreSQL for the bench: the run's databases and the two baselines of ``PostgresStore``.

Every system measured against one server gets a database of its own on it (created by
:class:`RunDatabases`, dropped when the run ends), so they share the server's WAL, its
fsyncs and its CPU, and none reads another's tables.

- :class:`EventsourcingAppends`: the eventsourcing library's
  ``eventsourcing.postgres.PostgresAggregateRecorder`` (on its ``PostgresDatastore``),
  ``insert_events`` with one ``StoredEvent`` per call. It is the recorder whose
  guarantees match ``PostgresStore``'s: one stream per originator (our session), versions
  unique per stream (its primary key ``(originator_id, originator_version)`` rejects a
  second writer of the same version), no order across streams. Its
  ``PostgresApplicationRecorder`` adds a total order over all streams
  (``notification_id``), paid for with a table lock (``LOCK TABLE ... IN EXCLUSIVE
  MODE``) that serializes every writer, which ``PostgresStore`` does not promise: it is
  context, without a target. A counter per session in the bench process gives each
  event its version, as an application knows it from the aggregate it holds. The
  recorder has no index on event ids (idempotency is ours alone).
- :class:`RawPsycopgAppends`: psycopg 3 with a ``psycopg_pool.ConnectionPool`` and
  none of our code: per append, one statement in autocommit (:data:`RAW_APPEND`: one
  transaction, one round trip) that takes the session's next sequence from its stream
  row and inserts the event row.
  The sequence rule is ``PostgresStore``'s: the last sequence plus one, read and raised
  under the stream row's lock in the transaction that inserts the event (from 1,
  gap-free, unique under any number of writers). The tables are ``PostgresStore``'s,
  made by its own DDL (:data:`sharedesk.store._pg_schema.TABLES`); it keeps no folded
  session state, sends no ``NOTIFY`` and validates nothing.
  A second mode, context rather than a baseline, calls ``pg_notify`` in the same
  statement (:data:`RAW_APPEND_NOTIFY`, as a ``PostgresStore`` group does): PostgreSQL
  serialises the commits of transactions that ``NOTIFY`` (``PreCommit_Notify`` in its
  ``async.c`` holds a cluster-wide lock until the commit ends, WAL flush included, so
  those commits share no fsync).

Both write the same events as the sharedesk run (:func:`bench.baselines.event_row`,
msgpack-encoded), spread over the same sessions from the same threads.
"""

from __future__ import annotations

import abc
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

import msgspec
import psycopg
from psycopg import conninfo, sql
from psycopg_pool import ConnectionPool

from bench.baselines import event_row
from bench.harness import ThreadedResult, run_threads
from sharedesk.store._pg_schema import TABLES

__all__ = [
    "EventsourcingAppends",
    "RawPsycopgAppends",
    "RunDatabases",
    "create_database",
    "database_dsn",
    "spread",
]

#: The topic of every stored event of the eventsourcing baseline.
TOPIC = "sharedesk.protocol:Text"


#: One raw append: the stream row's next sequence and the event row, in one statement.
RAW_APPEND = (
    "WITH s AS (UPDATE streams SET last_seq = last_seq + 1, text_count = text_count + 1,"
    " last_activity = now() WHERE session_id = %s RETURNING last_seq)"
    " INSERT INTO events (session_id, seq, id_key, kind, parent, run_key, record)"
    " SELECT %s, s.last_seq, %s, 'Text', NULL, NULL, %s FROM s"
)


#: :data:`RAW_APPEND` notifying in the same statement (so in the same transaction), with
#: ``PostgresStore``'s payload ``<seq>:<session id, hex>``.
RAW_APPEND_NOTIFY = (
    "WITH s AS (UPDATE streams SET last_seq = last_seq + 1, text_count = text_count + 1,"
    " last_activity = now() WHERE session_id = %s RETURNING last_seq),"
    " i AS (INSERT INTO events (session_id, seq, id_key, kind, parent, run_key, record)"
    " SELECT %s, s.last_seq, %s, 'Text', NULL, NULL, %s FROM s RETURNING seq)"
    " SELECT pg_notify('bench_appended', i.seq || ':' || %s) FROM i"
)


def database_dsn(server_dsn: str, dbname: str) -> str:
    """Return ``server_dsn`` (a ``postgresql://`` URL) with its database set to ``dbname``."""
    parts = urlsplit(server_dsn)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"expected a postgresql:// URL, got {server_dsn!r}")
    return urlunsplit(parts._replace(path="/" + quote(dbname)))


def create_database(server_dsn: str, name: str) -> str:
    """Create the empty database ``name`` on the server ``server_dsn`` names; return its DSN.

    Cost: one connection and one ``CREATE DATABASE``.
    """
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_dsn(server_dsn, name)


class RunDatabases:
    """The databases one bench run creates on a server, dropped by :meth:`close`.

    Args:
        server_dsn: A DSN of the server with the right to ``CREATE DATABASE``.

    Cost: one connection per create or drop.
    """

    def __init__(self, server_dsn: str) -> None:
        self._server_dsn = server_dsn
        self._prefix = f"sdbench_{uuid.uuid4().hex[:8]}"
        self._names: list[str] = []

    def create(self, system: str) -> str:
        """Create an empty database for ``system``; return its DSN."""
        name = f"{self._prefix}_{system.replace('-', '_')}"
        dsn = create_database(self._server_dsn, name)
        self._names.append(name)
        return dsn

    def close(self) -> None:
        """Drop every database created (closing what is still connected to them)."""
        if not self._names:
            return
        with psycopg.connect(self._server_dsn, autocommit=True) as conn:
            for name in self._names:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
        self._names.clear()


def spread(
    sessions: Sequence[str],
    threads: int,
    events: int,
    write: Callable[[int, int], None],
    *,
    max_seconds: float,
    advance: Callable[[int], None] = lambda n: None,
) -> ThreadedResult:
    """Run ``write(session_index, thread)`` as the append scenario spreads its calls."""

    def op(thread: int, j: int) -> None:
        write((thread + j * threads) % len(sessions), thread)

    return run_threads(threads, -(-events // threads), op, max_seconds=max_seconds, advance=advance)


class _SpreadAppends(abc.ABC):
    """A baseline whose ``append(index)`` the append scenario spreads over threads."""

    _sessions: Sequence[str]
    payload: str

    @abc.abstractmethod
    def append(self, index: int) -> None:
        """Append one event to the ``index``-th session."""

    def run(
        self,
        threads: int,
        events: int,
        payload: str,
        *,
        max_seconds: float,
        advance: Callable[[int], None] = lambda n: None,
    ) -> ThreadedResult:
        """Append ``events`` events from ``threads`` threads (at most ``max_seconds``)."""
        self.payload = payload
        return spread(
            self._sessions,
            threads,
            events,
            lambda s, _t: self.append(s),
            max_seconds=max_seconds,
            advance=advance,
        )


class RawPsycopgAppends(_SpreadAppends):
    """Raw psycopg appends (see the module header): a pool, one statement per append.

    Args:
        dsn: The baseline's own (empty) database.
        sessions: The sessions written; each gets its stream row now.
        pool_size: Connections in the pool (one per writer thread).
        statements: ``"one"``: :data:`RAW_APPEND`; ``"notify"``: :data:`RAW_APPEND_NOTIFY`.
    """

    def __init__(
        self,
        dsn: str,
        sessions: Sequence[str],
        *,
        pool_size: int,
        statements: Literal["one", "notify"] = "one",
    ) -> None:
        self._sessions = list(sessions)
        self._statements = statements
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in TABLES:
                conn.execute(statement.format(s="public"))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO streams (session_id) VALUES (%s) ON CONFLICT DO NOTHING",
                    [(s.encode(),) for s in self._sessions],
                )
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            dsn,
            min_size=pool_size,
            max_size=pool_size,
            kwargs={"autocommit": True},
            open=True,
            name="bench-raw-psycopg",
        )
        self._pool.wait()
        self._encode = msgspec.msgpack.Encoder().encode
        self.payload = ""

    def append(self, index: int) -> None:
        """Append one event to session ``index`` (one transaction)."""
        session = self._sessions[index]
        key = session.encode()
        row = event_row(session, 0, self.payload)
        id_key = row["id"].encode()
        record = self._encode(row)
        with self._pool.connection() as conn:
            if self._statements == "notify":
                params: tuple[Any, ...] = (key, key, id_key, record, key.hex())
                cur = conn.execute(RAW_APPEND_NOTIFY, params, prepare=True)
            else:
                cur = conn.execute(RAW_APPEND, (key, key, id_key, record), prepare=True)
            if cur.rowcount != 1:
                raise RuntimeError(f"no stream row for {session!r}")

    def stored(self) -> tuple[int, int]:
        """Return (events stored, sum of the streams' last sequences): equal when sound."""
        with self._pool.connection() as conn:
            (events,) = conn.execute("SELECT count(*) FROM events").fetchone() or (0,)
            (last,) = conn.execute("SELECT COALESCE(sum(last_seq), 0) FROM streams").fetchone() or (
                0,
            )
        return int(events), int(last)

    def close(self) -> None:
        """Close the pool."""
        self._pool.close()


class EventsourcingAppends(_SpreadAppends):
    """The eventsourcing library's PostgreSQL recorder doing the same writes.

    Args:
        dsn: The baseline's own (empty) database.
        sessions: The sessions written (each an originator, ``originator_id_type="text"``).
        pool_size: Connections in the datastore's pool (one per writer thread).
        application: Use ``PostgresApplicationRecorder`` (a total order over all
            streams, under a table lock) instead of ``PostgresAggregateRecorder``.
    """

    def __init__(
        self, dsn: str, sessions: Sequence[str], *, pool_size: int, application: bool = False
    ) -> None:
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.postgres import (
            PostgresAggregateRecorder,
            PostgresApplicationRecorder,
            PostgresDatastore,
        )

        params = conninfo.conninfo_to_dict(dsn)
        self._datastore = PostgresDatastore(
            dbname=str(params.get("dbname", "postgres")),
            host=str(params.get("host", "127.0.0.1")),
            port=str(params.get("port", 5432)),
            user=str(params.get("user", "postgres")),
            password=str(params.get("password", "")),
            pool_size=pool_size,
            originator_id_type="text",
        )
        kind = PostgresApplicationRecorder if application else PostgresAggregateRecorder
        self._recorder = kind(self._datastore, events_table_name="stored_events")
        self._recorder.create_table()
        self._stored_event = StoredEvent
        self._sessions = list(sessions)
        self._versions = [0] * len(self._sessions)
        self._lock = threading.Lock()
        self._encode = msgspec.msgpack.Encoder().encode
        self.payload = ""

    def append(self, index: int) -> None:
        """Insert one stored event into session ``index``'s stream, at its next version."""
        with self._lock:
            self._versions[index] += 1
            version = self._versions[index]
        session = self._sessions[index]
        row = event_row(session, version, self.payload)
        self._recorder.insert_events(
            [
                self._stored_event(
                    originator_id=session,
                    originator_version=version,
                    topic=TOPIC,
                    state=self._encode(row),
                )
            ]
        )

    def stored(self) -> int:
        """Return the events stored."""
        with self._datastore.transaction(commit=False) as cur:
            cur.execute("SELECT count(*) AS n FROM stored_events")
            row = cur.fetchone()
        return 0 if row is None else int(row["n"])

    def close(self) -> None:
        """Close the datastore's pool."""
        self._datastore.close()
