"""The PostgreSQL schema of a ``PostgresStore``: its tables, created once, and its statements.

Every table lives in one PostgreSQL schema (``sharedesk`` unless the store is opened with
``schema=...``). Identifiers callers choose may hold any character, NUL included, which
``text`` cannot: they are stored as UTF-8 ``bytea``, the unbounded ones hashed as
``LmdbStore`` hashes them (``protocol/records``). ``streams`` holds one row per session
(its last sequence, text count, last activity and folded state: the row each write
locks); ``events`` the records as LMDB stores them, keyed ``(session_id, seq)`` and
unique by ``id_key``; ``replies`` each root's first non-blank reply; ``sharing`` the
sharing states. ``schema_version`` records the format version at creation.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

from sharedesk.protocol.errors import StoreFormatError, ValidationError

#: The format version this code writes and reads.
SCHEMA_VERSION: Final = 1

#: The version table, made first (``{s}``: the quoted schema name).
_VERSION_TABLE: Final = """CREATE TABLE IF NOT EXISTS {s}.schema_version (
    version integer PRIMARY KEY,
    description text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
#: The store's tables and indexes (the raw psycopg baseline of the bench makes them too).
TABLES: Final = (
    """CREATE TABLE {s}.streams (
        session_id bytea PRIMARY KEY,
        last_seq bigint NOT NULL DEFAULT 0,
        text_count bigint NOT NULL DEFAULT 0,
        last_activity timestamptz,
        state bytea
    )""",
    """CREATE TABLE {s}.events (
        session_id bytea NOT NULL,
        seq bigint NOT NULL,
        id_key bytea NOT NULL,
        kind text NOT NULL,
        parent bigint,
        run_key bytea,
        record bytea NOT NULL,
        PRIMARY KEY (session_id, seq),
        UNIQUE (session_id, id_key)
    )""",
    "CREATE INDEX events_texts ON {s}.events (session_id, seq) WHERE kind = 'Text'",
    "CREATE INDEX events_runs ON {s}.events (session_id, run_key, seq) WHERE run_key IS NOT NULL",
    """CREATE TABLE {s}.replies (
        session_id bytea NOT NULL,
        root bigint NOT NULL,
        reply bigint NOT NULL,
        PRIMARY KEY (session_id, root)
    )""",
    """CREATE TABLE {s}.sharing (
        session_id bytea NOT NULL,
        key bytea NOT NULL,
        state bytea NOT NULL,
        PRIMARY KEY (session_id, key)
    )""",
)

#: A schema name the store accepts: a lower-case SQL identifier, at most 40 characters
#: (the ``NOTIFY`` channel adds a suffix and must stay under 64 bytes).
_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,39}")
#: Schemas PostgreSQL keeps for itself besides ``pg_*`` (``pg_catalog``, ``pg_toast``, ...).
_SYSTEM_SCHEMAS: Final = frozenset({"information_schema"})


def check_schema_name(schema: Any) -> str:
    """Return ``schema`` if it can name the store's schema, else raise ``ValidationError``."""
    if not isinstance(schema, str) or _SCHEMA_NAME.fullmatch(schema) is None:
        raise ValidationError(
            f"schema must be a lower-case SQL identifier of at most 40 characters "
            f"([a-z_][a-z0-9_]*), got {schema!r}"
        )
    if schema.startswith("pg_") or schema in _SYSTEM_SCHEMAS:
        raise ValidationError(
            f"schema must not name a system schema (information_schema, pg_*), got {schema!r}"
        )
    return schema


def open_schema(conn: Any, schema: str, where: str, *, create: bool) -> None:
    """Create the store's tables in ``schema`` unless they exist (or ``create`` is false).

    An existing store is found by two reads; a new one is created in one transaction
    holding the schema's advisory lock (concurrent openers wait, then find it made).

    Raises:
        ValidationError: No store is there and ``create`` is false; nothing was changed.
        StoreFormatError: The database holds another version; nothing was changed.
        psycopg.Error: The server failed (the caller wraps it).
    """
    quoted = f'"{schema}"'
    with conn.transaction():  # the common case: there already, no lock, no DDL
        found = _version(conn, quoted)
    if not found and not create:
        raise ValidationError(f"not a store: {where} holds no schema {schema!r}")
    if not found:
        digest = hashlib.blake2b(f"sharedesk.migrate:{schema}".encode(), digest_size=8)
        with conn.transaction():
            key = int.from_bytes(digest.digest(), "big", signed=True)
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [key])
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
            conn.execute(_VERSION_TABLE.format(s=quoted))  # sees what the lock waited for
            found = _version(conn, quoted)
            if not found:
                for statement in TABLES:
                    conn.execute(statement.format(s=quoted))
                conn.execute(
                    f"INSERT INTO {quoted}.schema_version (version, description) VALUES (%s, %s)",
                    [SCHEMA_VERSION, "streams, events, replies, sharing"],
                )
                found = SCHEMA_VERSION
    if found != SCHEMA_VERSION:
        raise StoreFormatError(where, f"schema {schema!r} at version {found}", SCHEMA_VERSION)


def _version(conn: Any, quoted: str) -> int:
    """Return the newest version in the schema's version table (0: no table yet)."""
    exists = conn.execute("SELECT to_regclass(%s)", [f"{quoted}.schema_version"]).fetchone()
    if exists is None or exists[0] is None:
        return 0
    row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {quoted}.schema_version")
    return int(row.fetchone()[0])


#: The group transaction's statements, prepared on each connection that writes (``{s}``:
#: the quoted schema); their parameters are the arrays ``_pg_txn`` builds, in order.
_PREPARE: Final = """
PREPARE sharedesk_create (bytea[]) AS
  INSERT INTO {s}.streams (session_id) SELECT * FROM unnest($1) ON CONFLICT DO NOTHING;
PREPARE sharedesk_lock (bytea[]) AS
  SELECT session_id, last_seq, state FROM {s}.streams
  WHERE session_id = ANY($1) ORDER BY session_id FOR UPDATE;
PREPARE sharedesk_known (bytea[], bytea[]) AS
  SELECT e.session_id, e.seq, e.record FROM unnest($1, $2) AS k(sid, id_key)
  JOIN {s}.events e ON e.session_id = k.sid AND e.id_key = k.id_key;
PREPARE sharedesk_parents (bytea[], bigint[]) AS
  SELECT e.session_id, e.seq, e.kind, e.parent, r.reply IS NOT NULL
  FROM unnest($1, $2) AS p(sid, seq) JOIN {s}.events e ON e.session_id = p.sid AND e.seq = p.seq
  LEFT JOIN {s}.replies r ON r.session_id = e.session_id AND r.root = e.seq;
PREPARE sharedesk_sharing (bytea[], bytea[]) AS
  SELECT h.session_id, h.key, h.state FROM unnest($1, $2) AS k(sid, key)
  JOIN {s}.sharing h ON h.session_id = k.sid AND h.key = k.key;
PREPARE sharedesk_put (bytea[], bigint[], bytea[], text[], bigint[], bytea[], bytea[],
    bytea[], bigint[], bigint[], bytea[], bytea[], bytea[],
    bytea[], bigint[], bigint[], bytea[], timestamptz[], text, text[]) AS
  WITH ev AS (INSERT INTO {s}.events (session_id, seq, id_key, kind, parent, run_key, record)
    SELECT * FROM unnest($1, $2, $3, $4, $5, $6, $7)),
  rep AS (INSERT INTO {s}.replies (session_id, root, reply)
    SELECT * FROM unnest($8, $9, $10) ON CONFLICT DO NOTHING),
  shr AS (INSERT INTO {s}.sharing (session_id, key, state) SELECT * FROM unnest($11, $12, $13)
    ON CONFLICT (session_id, key) DO UPDATE SET state = excluded.state),
  upd AS (UPDATE {s}.streams st SET last_seq = u.last, text_count = st.text_count + u.texts,
    last_activity = u.at, state = coalesce(u.state, st.state)
    FROM unnest($14, $15, $16, $17, $18) AS u(sid, last, texts, state, at)
    WHERE st.session_id = u.sid)
  SELECT count(pg_notify($19, p)) FROM unnest($20) AS p
"""
#: A group's write and ``COMMIT``.
PUT_COMMIT: Final = f"EXECUTE sharedesk_put({', '.join(['%s'] * 20)}); COMMIT"


class Queries:
    """The store's statements, with its schema's quoted name ``s`` filled in."""

    def __init__(self, s: str) -> None:
        # In a transaction: a failure leaves the connection in it, and the pool closes it.
        self.prepare = (
            f"BEGIN; SET plan_cache_mode = force_generic_plan; {_PREPARE.format(s=s)}; COMMIT"
        )
        self.states = f"SELECT session_id, state FROM {s}.streams WHERE session_id = ANY(%s)"
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
        # Retention (``GroupTxn.remove``): the stream's lock, the rows, the stream's update.
        self.lock_stream = f"SELECT state FROM {s}.streams WHERE session_id = %s FOR UPDATE"
        rows = "session_id = %s AND {0} > %s AND {0} <= %s"  # the same bounds in both tables
        self.remove_events = f"DELETE FROM {s}.events WHERE {rows.format('seq')} RETURNING kind"
        self.remove_replies = f"DELETE FROM {s}.replies WHERE {rows.format('root')}"
        self.retained = (
            f"UPDATE {s}.streams SET state = %s, text_count = text_count - %s WHERE session_id = %s"
        )
