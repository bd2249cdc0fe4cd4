"""Baselines measured in the same run as sharedesk, so every headline is a ratio.

- :func:`raw_lmdb_appends`: py-lmdb doing the scenario's writes with none of our code,
  ``per_txn`` events per durable (fsync'd, lmdb's default ``sync=True``) write
  transaction: one event row and one idempotency-index row per event, keys spread over
  the same sessions. One writer thread, since LMDB has one writer at a time: this is the
  ceiling any design on LMDB can reach at that batch size.
- :func:`raw_lmdb_group_commit`: the smallest threaded design on py-lmdb: the same
  writer threads as sharedesk, one event per call, a bare writer thread that takes every
  waiting call and commits them in one durable transaction, then wakes each caller. No
  validation, no event objects: what CPython's threads and GIL leave of the raw ceiling
  before any library code runs.
- :func:`sqlite_appends`: stdlib sqlite3 in WAL mode with ``synchronous=FULL``, one
  connection per writer thread and one commit per append: the storage most
  agent-session libraries use.
- :class:`SqliteDesk` and :func:`sqlite_last30`: the same desk mirrored into SQLite,
  read as ``ORDER BY seq DESC LIMIT 30`` plus a JSON decode of each row.
- :func:`agents_appends` and :func:`agents_reads`: openai-agents' ``SQLiteSession``
  when it is importable (``add_items`` one item per call, ``get_items(limit=30)``), run
  in a child process by :func:`run_agents_child`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import lmdb
import msgspec

from bench.harness import ThreadedResult, run_threads

#: The map size of the raw LMDB baseline (sparse; it never grows).
RAW_LMDB_MAP_SIZE = 8 << 30


def session_key(session_id: str) -> bytes:
    """Return the key prefix of a session: length-prefixed UTF-8, so ids never collide."""
    raw = session_id.encode()
    return len(raw).to_bytes(4, "big") + raw


def event_row(session_id: str, sequence: int, payload: str) -> dict[str, Any]:
    """Return the plain record a baseline stores for one event (same fields as ours)."""
    return {
        "author": {"type": "agent", "id": "writer", "label": "writer"},
        "body": {"type": "text", "content": payload},
        "id": uuid.uuid4().hex,
        "parent": None,
        "sequence": sequence,
        "timestamp": time.time(),
        "session": session_id,
    }


class RawDatabase(NamedTuple):
    """A raw baseline's environment, opened to continue what earlier calls wrote."""

    env: lmdb.Environment
    events_db: Any
    ids_db: Any
    prefixes: list[bytes]
    last: list[int]


def open_raw(path: Path, sessions: Sequence[str]) -> RawDatabase:
    """Open (or create) a raw baseline's environment at ``path``, durable (``sync=True``).

    ``last`` holds each session's last stored sequence, read before any clock starts.
    The caller closes ``env``.
    """
    env = lmdb.open(str(path), map_size=RAW_LMDB_MAP_SIZE, max_dbs=2, sync=True)
    events_db = env.open_db(b"events")
    prefixes = [session_key(s) for s in sessions]
    with env.begin() as txn:
        last = last_sequences(txn, events_db, prefixes)
    return RawDatabase(env, events_db, env.open_db(b"ids"), prefixes, last)


def last_sequences(txn: lmdb.Transaction, db: Any, prefixes: Sequence[bytes]) -> list[int]:
    """Return each session's last stored sequence (0 when none) in a baseline's ``db``.

    Keys are ``prefix + sequence`` (8 bytes, big-endian), as the raw baselines write them.
    Cost: one cursor seek per session.
    """
    cursor = txn.cursor(db=db)
    last: list[int] = []
    for prefix in prefixes:
        # The first key past the session's range, then one back (or the very last key).
        moved = cursor.prev() if cursor.set_range(prefix + b"\xff" * 8) else cursor.last()
        key = bytes(cursor.key()) if moved else b""
        own = key.startswith(prefix) and len(key) == len(prefix) + 8
        last.append(int.from_bytes(key[len(prefix) :], "big") if own else 0)
    return last


def raw_lmdb_appends(
    path: Path,
    sessions: Sequence[str],
    *,
    events: int,
    per_txn: int,
    payload: str,
    max_seconds: float,
    advance: Callable[[int], None] = lambda n: None,
) -> tuple[int, float]:
    """Write ``events`` events with raw py-lmdb, ``per_txn`` per durable transaction.

    Continues what earlier calls wrote at ``path``: each session's next event gets the
    sequence after its last one (read before the clock starts), so a run split into
    rounds writes the same database as one long run.

    Args:
        path: The baseline's directory (created if missing).
        sessions: Session ids the events are spread over (round robin).
        events: Events to write at most.
        per_txn: Events per write transaction (each commit fsyncs).
        payload: Message content of each event.
        max_seconds: Time budget; the loop stops at the first commit past it.
        advance: Progress callback.

    Returns:
        Events written and wall seconds.
    """
    env, events_db, ids_db, prefixes, last = open_raw(path, sessions)
    try:
        encode = msgspec.msgpack.encode
        written = 0
        start = time.perf_counter()
        deadline = start + max_seconds
        while written < events:
            batch = min(per_txn, events - written)
            with env.begin(write=True) as txn:
                for i in range(written, written + batch):
                    s = i % len(sessions)
                    last[s] += 1
                    row = event_row(sessions[s], last[s], payload)
                    prefix = prefixes[s]
                    seq_key = prefix + last[s].to_bytes(8, "big")
                    txn.put(seq_key, encode(row), db=events_db)
                    txn.put(prefix + row["id"].encode(), last[s].to_bytes(8, "big"), db=ids_db)
            written += batch
            advance(batch)
            if time.perf_counter() > deadline:
                break
        return written, time.perf_counter() - start
    finally:
        env.close()


def raw_lmdb_group_commit(
    path: Path,
    sessions: Sequence[str],
    *,
    threads: int,
    events: int,
    payload: str,
    max_seconds: float,
    advance: Callable[[int], None] = lambda n: None,
) -> ThreadedResult:
    """Write ``events`` events from ``threads`` callers through a bare group-commit writer.

    Each call hands one pre-encoded event to a writer thread and blocks until the
    transaction holding it is committed (fsync'd); the writer takes every waiting call at
    once. The rows written are those of :func:`raw_lmdb_appends`, continuing what earlier
    calls wrote at ``path`` as it does.

    Args:
        path: The baseline's directory (created if missing).
        sessions: Session ids the events are spread over (as the sharedesk writes are).
        threads: Writer threads.
        events: Events to write at most.
        payload: Message content of each event.
        max_seconds: Time budget.
        advance: Progress callback.

    Returns:
        The calls completed, wall time and per-call latencies.
    """
    env, events_db, ids_db, prefixes, last = open_raw(path, sessions)
    encode = msgspec.msgpack.encode
    waiting: list[tuple[int, bytes, str, threading.Lock]] = []
    cond = threading.Condition()
    stopping = [False]

    def writer() -> None:
        while True:
            with cond:
                while not waiting and not stopping[0]:
                    cond.wait()
                if not waiting:
                    return
                group = waiting[:]
                waiting.clear()
            with env.begin(write=True) as txn:
                for s, row, event_id, _done in group:
                    last[s] += 1
                    seq = last[s].to_bytes(8, "big")
                    txn.put(prefixes[s] + seq, row, db=events_db)
                    txn.put(prefixes[s] + event_id.encode(), seq, db=ids_db)
            for *_, done in group:
                done.release()

    def op(thread: int, j: int) -> None:
        s = (thread + j * threads) % len(sessions)
        row = event_row(sessions[s], 0, payload)
        done = threading.Lock()
        done.acquire()
        with cond:
            waiting.append((s, encode(row), row["id"], done))
            cond.notify()
        done.acquire()

    thread = threading.Thread(target=writer, name="bench-raw-group-commit")
    thread.start()
    try:
        return run_threads(
            threads, -(-events // threads), op, max_seconds=max_seconds, advance=advance
        )
    finally:
        with cond:
            stopping[0] = True
            cond.notify()
        thread.join()
        env.close()


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=60.0, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def sqlite_schema(path: Path) -> None:
    """Create the baseline's events table at ``path`` (one row per event)."""
    conn = _sqlite_connect(path)
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS events ("
            " session TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL,"
            " body TEXT NOT NULL, PRIMARY KEY (session, seq), UNIQUE (session, id))"
        )
    finally:
        conn.close()


def sqlite_appends(
    path: Path,
    sessions: Sequence[str],
    *,
    threads: int,
    events: int,
    payload: str,
    max_seconds: float,
    advance: Callable[[int], None] = lambda n: None,
) -> ThreadedResult:
    """Append from ``threads`` threads to SQLite (WAL, synchronous=FULL), one commit each.

    Each append is ``BEGIN IMMEDIATE``, the session's next sequence, one ``INSERT`` and
    ``COMMIT``: the same work as one sharedesk append of one event.

    Args:
        path: The database file (created if missing; appends continue what is there).
        sessions: Session ids, spread over as in the sharedesk run.
        threads: Writer threads (one connection each).
        events: Events in total at most.
        payload: Message content of each event.
        max_seconds: Time budget.
        advance: Progress callback.

    Returns:
        The threaded result (ops, seconds, latencies).
    """
    sqlite_schema(path)
    local = threading.local()
    opened: list[sqlite3.Connection] = []
    lock = threading.Lock()

    def op(thread: int, j: int) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = _sqlite_connect(path)
            with lock:
                opened.append(conn)
        session = sessions[(thread + j * threads) % len(sessions)]
        conn.execute("BEGIN IMMEDIATE")
        try:
            (seq,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE session = ?", (session,)
            ).fetchone()
            row = event_row(session, seq, payload)
            conn.execute(
                "INSERT INTO events (session, seq, id, body) VALUES (?, ?, ?, ?)",
                (session, seq, row["id"], json.dumps(row)),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    try:
        return run_threads(
            threads, -(-events // threads), op, max_seconds=max_seconds, advance=advance
        )
    finally:
        for conn in opened:
            conn.close()


class SqliteDesk:
    """One desk mirrored into SQLite, for the last-30-rows read baseline."""

    def __init__(self, path: Path, session_id: str) -> None:
        sqlite_schema(path)
        self._conn = _sqlite_connect(path)
        self._conn.execute("PRAGMA synchronous=OFF")
        self.session_id = session_id
        self.rows = 0

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows (each with ``sequence`` and ``id``) in one transaction."""
        self._conn.execute("BEGIN")
        self._conn.executemany(
            "INSERT INTO events (session, seq, id, body) VALUES (?, ?, ?, ?)",
            [(self.session_id, r["sequence"], r["id"], json.dumps(r)) for r in rows],
        )
        self._conn.execute("COMMIT")
        self.rows += len(rows)

    def last30(self) -> list[dict[str, Any]]:
        """Return the newest 30 rows, decoded, newest first (the measured read)."""
        cursor = self._conn.execute(
            "SELECT body FROM events WHERE session = ? ORDER BY seq DESC LIMIT 30",
            (self.session_id,),
        )
        return [json.loads(body) for (body,) in cursor]

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


def agents_available() -> bool:
    """Return whether openai-agents (the ``agents`` package) is importable, without importing it."""
    return importlib.util.find_spec("agents") is not None


def _sqlite_session_class() -> Any:
    """Import openai-agents' ``SQLiteSession`` (untyped here: the package is optional)."""
    return importlib.import_module("agents").SQLiteSession


def agents_appends(
    path: Path,
    sessions: Sequence[str],
    *,
    threads: int,
    events: int,
    payload: str,
    max_seconds: float,
) -> ThreadedResult:
    """Append with openai-agents ``SQLiteSession.add_items``, one item per call.

    One ``SQLiteSession`` per session id, shared by the threads as the library intends
    (it keeps one connection per thread). Run it in a child process
    (:func:`run_agents_child`): the library's imports, event loops and connections would
    otherwise stay in the bench process and skew what is measured after it.

    Raises:
        ImportError: openai-agents is not installed.
    """
    sqlite_session = _sqlite_session_class()

    local = threading.local()
    lock = threading.Lock()
    loops: list[asyncio.AbstractEventLoop] = []
    by_id: dict[str, Any] = {}

    def op(thread: int, j: int) -> None:
        loop = getattr(local, "loop", None)
        if loop is None:
            loop = local.loop = asyncio.new_event_loop()
            with lock:
                loops.append(loop)
        session_id = sessions[(thread + j * threads) % len(sessions)]
        with lock:
            session = by_id.get(session_id)
            if session is None:
                session = by_id[session_id] = sqlite_session(session_id, str(path))
        loop.run_until_complete(session.add_items([{"role": "user", "content": payload}]))

    try:
        return run_threads(threads, -(-events // threads), op, max_seconds=max_seconds)
    finally:
        for loop in loops:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()


def agents_async_appends(
    path: Path,
    sessions: Sequence[str],
    *,
    coroutines: int,
    events: int,
    payload: str,
    max_seconds: float,
) -> ThreadedResult:
    """Append with ``SQLiteSession.add_items`` from ``coroutines`` coroutines on one loop.

    Coroutine ``c``'s ``j``-th call goes to session ``(c + j * coroutines) % sessions``,
    one item per call, one ``SQLiteSession`` per session id over one database file, as
    an asyncio agent runtime would use it. Run it in a child process
    (:func:`run_agents_child`).

    Raises:
        ImportError: openai-agents is not installed.
    """
    sqlite_session = _sqlite_session_class()
    by_id: dict[str, Any] = {s: sqlite_session(s, str(path)) for s in sessions}
    per = -(-events // coroutines)
    latencies: list[int] = []

    async def writer(c: int, deadline: float) -> None:
        for j in range(per):
            session = by_id[sessions[(c + j * coroutines) % len(sessions)]]
            t0 = time.perf_counter_ns()
            await session.add_items([{"role": "user", "content": payload}])
            latencies.append(time.perf_counter_ns() - t0)
            if time.perf_counter() > deadline:
                return

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(writer(c, start + max_seconds) for c in range(coroutines)))
        return time.perf_counter() - start

    try:
        seconds = asyncio.run(main())
    finally:
        for session in by_id.values():
            session.close()
    return ThreadedResult(ops=len(latencies), seconds=seconds, latencies_ns=latencies)


def agents_reads(path: Path, *, rows: int, repeat: int, payload: str) -> tuple[float, list[int]]:
    """Fill one ``SQLiteSession`` with ``rows`` items, then time ``get_items(limit=30)``.

    Returns:
        Wall seconds and per-call latencies of the timed reads.

    Raises:
        ImportError: openai-agents is not installed.
    """
    sqlite_session = _sqlite_session_class()

    session = sqlite_session("desk", str(path))
    loop = asyncio.new_event_loop()
    try:
        for first in range(0, rows, 1000):
            count = min(1000, rows - first)
            items: list[Any] = [
                {"role": "user", "content": f"{first + k} {payload}"} for k in range(count)
            ]
            loop.run_until_complete(session.add_items(items))
        latencies: list[int] = []
        start = time.perf_counter_ns()
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            loop.run_until_complete(session.get_items(limit=30))
            latencies.append(time.perf_counter_ns() - t0)
        return (time.perf_counter_ns() - start) / 1e9, latencies
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
        session.close()


def run_agents_child(request: dict[str, Any]) -> ThreadedResult:
    """Run one openai-agents baseline in a child process (see :mod:`bench.agents_child`).

    Args:
        request: ``{"kind": "append", "path", "sessions", "threads", "events", "payload",
            "max_seconds"}``, ``{"kind": "async_append", "path", "sessions",
            "coroutines", "events", "payload", "max_seconds"}`` or ``{"kind": "read",
            "path", "rows", "repeat", "payload"}``.

    Returns:
        The child's figures.

    Raises:
        RuntimeError: The child failed (its last stderr line is the message).
    """
    done = subprocess.run(
        [sys.executable, "-m", "bench.agents_child", json.dumps(request)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"openai-agents baseline failed: {tail}")
    figures = json.loads(lines[-1])
    return ThreadedResult(
        ops=int(figures["ops"]),
        seconds=float(figures["seconds"]),
        latencies_ns=[int(ns) for ns in figures["latencies_ns"]],
    )
