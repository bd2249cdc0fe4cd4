"""LmdbStore: the durable store, one LMDB environment (a directory) shared by processes.

The store port is :class:`~sharedesk.store.base.StoreBase`'s; this module supplies only
LMDB's I/O: one write transaction per group (``_transact``), the facts a group's writes
are planned from and the puts of their plans (:class:`_WriteTxn`), and the reads. The
keys and sub-databases are :mod:`sharedesk.store._lmdb_layout`'s; the environment, its
map and its reader slots are :mod:`sharedesk.store._lmdb_env`'s.

Writes. The base's writer thread hands a group to ``_transact``, which opens one write
transaction (waiting for LMDB's write lock, which other processes may hold), lets the
base plan and put every write in it, and commits once (one fsync when durable). The
planner runs before any put, so a write that fails its checks puts nothing. If the
transaction fails, nothing of the group is written: ``MapFullError`` doubles the map
(up to ``max_map_size``) and runs the group again; at the ceiling, or on a full disk
(``ENOSPC``), it raises ``StoreFullError``, which the base answers by retrying the
group one write per transaction, so only the writes that do not fit get it.

Reads run in the caller's thread, in a read-only transaction, and walk a cursor from the
requested end, so ``read(newest_first=True, limit=n)`` and ``log().read_before`` cost
what the page costs, not the history. A read or write that finds the map grown by
another process adopts it and runs again; a read that finds the reader table full
reclaims the slots of dead processes and runs once more, and the writer reclaims them
every ``READER_CHECK_COMMITS`` commits too (a dead reader's slot stops page reuse).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

import lmdb
import msgspec

from sharedesk.projection.append import Facts, StoredRow, Wants, WritePlan
from sharedesk.protocol.errors import (
    CorruptRecordError,
    StoreClosedError,
    StoreFullError,
    StoreIOError,
    ValidationError,
)
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.ports import SessionInfo
from sharedesk.protocol.records import (
    ENCODER,
    EVENT_DECODER,
    LOG_DECODER,
    LogRecord,
    decode_record,
    decode_session_state,
    decode_state,
    event_id_key,
    run_index_key,
    sharing_key,
)
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.validation import check_optional_int, check_path
from sharedesk.protocol.views import Conversation, LogMessage, SessionPage, SharingState
from sharedesk.store._lmdb_env import (
    DATABASES,
    READER_CHECK_COMMITS,
    REGISTRY,
    OpenEnvironment,
    SharedEnvironment,
)
from sharedesk.store._lmdb_follow import Following, FollowsCommits
from sharedesk.store._lmdb_layout import (
    EPOCH,
    MAX_SEQ,
    META,
    MICROSECOND,
    SEQ,
    decode_info,
    session_of,
    session_prefix,
    walk,
)
from sharedesk.store.base import StoreBase, WriteTxn

__all__ = ["Durability", "LmdbStore"]

T = TypeVar("T")
_Record = TypeVar("_Record", Event, LogRecord)

#: ``"durable"``: every acknowledged append is fsync'd. ``"relaxed"``: no fsync per commit.
Durability = Literal["durable", "relaxed"]

_DEFAULT_MAP_SIZE: Final = 64 * 2**20
#: The smallest map opened: LMDB cannot create the sub-databases in less (about 40
#: KiB), so a smaller ``map_size`` starts here and grows as any map does.
_MIN_MAP_SIZE: Final = 64 * 2**10
# Under load, callers answered by one commit take more than 0.5 ms to come back, so a
# durable writer waiting only that long commits half groups (two fsyncs where one would
# do); relaxed commits are cheap.
_GROUP_WAIT_DURABLE: Final = 0.002
_GROUP_WAIT_RELAXED: Final = 0.0005
#: Free bytes below which a failed write transaction counts as a full disk.
DISK_FULL_BELOW: Final = 1 << 20


class _MapFull(Exception):
    """Internal: the map (or, ``disk``, the disk) was full; ``paused``: readers are held off."""

    def __init__(self, paused: bool, *, disk: bool) -> None:
        super().__init__("disk full" if disk else "map full")
        self.paused = paused
        self.disk = disk


class LmdbStore(FollowsCommits, StoreBase):
    """A durable event store in an LMDB environment (a directory), with group commit.

    Safe to share between threads; stores opened on the same path in one process share
    one environment, and other processes may open the same path at the same time (LMDB's
    own lock serialises their writes).

    Durability: with ``"durable"`` (the default), ``append`` returns only once its
    transaction is on disk (fsync'd). With ``"relaxed"``, commits are not fsync'd: each
    is still atomic, and a crash of the process (even SIGKILL) loses nothing that was
    acknowledged, because the pages are already in the OS; but an OS crash or power loss
    may lose the newest commits, and LMDB's documentation warns that it may then also
    damage the file. Use ``"relaxed"`` for tests, demos and data you can rebuild.

    Args:
        path: The directory of the environment (created if missing).
        durability: ``"durable"`` or ``"relaxed"`` (see above). All stores on one path
            in one process must agree.
        map_size: The initial map size in bytes (ignored when the path is already open
            in this process, or when the file is already larger); at least 64 KiB is
            opened, whatever is asked.
        max_map_size: The ceiling the map may grow to, or ``None`` for no ceiling.
        group_wait: Most seconds the writer gathers a group once a write is waiting (see
            :mod:`sharedesk.store._group_commit`); ``None``: 2 ms when durable, 0.5 ms
            when relaxed.
        verify: Walk every page of the file with py-lmdb's offline verifier before
            trusting it (``sharedesk inspect`` does). Without it the open checks the
            meta pages and the branch pages only (see ``_lmdb_layout``). Damage done
            after the open is never checked.
        environment: Opens the ``lmdb.Environment`` (``lmdb.open``'s signature; the
            seam through which fault tests inject failures). Used only by the store
            that opens the path first in this process; the others share its
            environment.

    Raises:
        ValidationError: A bad option (``max_map_size`` under 64 KiB included), a path
            that is not one, or a durability that differs from the one this path is
            already open with in this process.
        StoreFormatError: The file holds another format (nothing is changed).
        CorruptRecordError: The data file is damaged (``session_id`` is ``""``).
        StoreIOError: LMDB could not open the environment.

    Cost: opens (or shares) the environment and starts one writer thread; walks the
    branch pages (about 0.25 ms per MB of small events); with ``verify``, reads the whole
    file instead (2.5 to 10 ms per MB). The open of an existing file takes no write
    lock, so it never waits for another process's writer; only a new file waits for it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "durable",
        map_size: int = _DEFAULT_MAP_SIZE,
        max_map_size: int | None = None,
        group_wait: float | None = None,
        verify: bool = False,
        environment: OpenEnvironment = lmdb.open,
    ) -> None:
        path = check_path(path)
        if durability not in ("durable", "relaxed"):
            raise ValidationError(f"durability must be 'durable' or 'relaxed', got {durability!r}")
        if map_size is None:
            raise ValidationError("map_size must be an int, got None")
        check_optional_int("map_size", map_size, minimum=1)
        check_optional_int("max_map_size", max_map_size, minimum=_MIN_MAP_SIZE)
        map_size = max(map_size, _MIN_MAP_SIZE)
        if group_wait is None:
            group_wait = _GROUP_WAIT_DURABLE if durability == "durable" else _GROUP_WAIT_RELAXED
        if not isinstance(group_wait, int | float) or not 0 <= group_wait <= 1:
            raise ValidationError(f"group_wait must be seconds in [0, 1], got {group_wait!r}")
        if max_map_size is not None and map_size > max_map_size:
            raise ValidationError(f"map_size={map_size} exceeds max_map_size={max_map_size}")
        if not isinstance(verify, bool):
            raise ValidationError(f"verify must be a bool, got {verify!r}")
        self._durability: Durability = durability
        self._max_map_size = max_map_size
        self._shared: SharedEnvironment = REGISTRY.acquire(
            os.fspath(path),
            durability=durability,
            map_size=map_size,
            verify=verify,
            environment=environment,
        )
        self._commits = 0
        real = self._shared.path
        self._following = Following(self._shared, self._in_read, real)
        super().__init__(real, writer=f"sharedesk-lmdb-writer:{real}", group_wait=group_wait)

    @property
    def path(self) -> str:
        """The real path of the environment."""
        return self._shared.path

    @property
    def durability(self) -> Durability:
        """``"durable"`` or ``"relaxed"``, as opened."""
        return self._durability

    def map_size(self) -> int:
        """Return the environment's current map size in bytes.

        Raises:
            StoreClosedError: The store is closed.

        Cost: O(1).
        """
        return self._in_read(lambda _txn, _dbs: self._shared.map_size())

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"LmdbStore({self.path!r}, durability={self._durability!r}) [{state}]"

    # -- the write transaction ---------------------------------------------------------

    def _transact(self, work: Callable[[WriteTxn], T]) -> T:
        shared = self._shared
        shared.publish()  # the first write opens the sub-databases for every transaction
        while True:
            try:
                return self._transact_once(work)
            except _MapFull as full:
                if not full.disk and self._grow(paused=full.paused):
                    continue
                if full.disk and full.paused:
                    shared.lock.release_exclusive()
                error = StoreFullError(
                    self.path, shared.map_size(), self._max_map_size or 0, disk_full=full.disk
                )
                raise error from full.__cause__
            except lmdb.MapResizedError:
                shared.resize(0)  # another process grew the map: adopt it, run again
            except lmdb.Error as exc:
                raise StoreIOError(self.path, "append") from exc

    def _transact_once(self, work: Callable[[WriteTxn], T]) -> T:
        """Run ``work`` in one write transaction and commit it (nothing written if it fails).

        Raises:
            _MapFull: The map or the disk is full; the transaction was aborted.
            lmdb.Error: LMDB failed; the transaction was aborted.
        """
        shared = self._shared
        lock = shared.lock
        lock.acquire_shared()
        try:
            txn = shared.env.begin(write=True, buffers=False)
        except BaseException:
            lock.release_shared()
            raise
        try:
            assert shared.published is not None
            result = work(_WriteTxn(txn, shared.published))
            txn.commit()
        except BaseException as exc:
            paused = lock.pause()  # see ResizeLock.pause: abort only with readers held off
            try:
                txn.abort()
            finally:
                lock.release_shared()
            disk = isinstance(exc, lmdb.DiskError) or (
                isinstance(exc, lmdb.Error) and self._disk_is_full()
            )
            if disk or isinstance(exc, lmdb.MapFullError):
                raise _MapFull(paused, disk=disk) from exc
            if paused:
                lock.release_exclusive()
            raise
        lock.release_shared()
        self._commits += 1
        if self._commits % READER_CHECK_COMMITS == 0:
            shared.reclaim_readers()  # a dead reader's slot would stop page reuse
        return result

    def _disk_is_full(self) -> bool:
        """Whether the store's filesystem has less than :data:`DISK_FULL_BELOW` bytes free.

        LMDB reports a page write cut short by a full disk as ``EIO``, not ``ENOSPC``.
        """
        with contextlib.suppress(OSError):
            stat = os.statvfs(self.path)
            return stat.f_bavail * stat.f_frsize < DISK_FULL_BELOW
        return False

    def _grow(self, *, paused: bool) -> bool:
        """Double the map (up to ``max_map_size``); return whether it grew.

        ``paused``: the writer paused transactions when it aborted; the pause ends here.
        """
        shared = self._shared
        current = shared.map_size()
        target = current * 2
        if self._max_map_size is not None:
            target = min(target, self._max_map_size)
        if target <= current:
            if paused:
                shared.lock.release_exclusive()
            return False
        shared.resize(target, paused=paused)
        return True

    # -- reads -------------------------------------------------------------------------

    def _in_read(self, body: Callable[[Any, Mapping[bytes, Any]], T]) -> T:
        """Run ``body(txn, dbs)`` in a read-only transaction (see ``SharedEnvironment.run``).

        Raises:
            StoreClosedError: The store is closed.
            StoreIOError: LMDB failed; the cause is chained.
        """
        shared = self._shared

        def attempt() -> T:
            if self._closed or shared.closed:
                raise StoreClosedError(self.path)
            with shared.read() as (txn, dbs):
                return body(txn, dbs)

        return shared.run("read", attempt, damage=False)

    def _get(self, db: bytes, key: bytes) -> bytes | None:
        raw: bytes | None = self._in_read(lambda txn, dbs: txn.get(key, db=dbs[db]))
        return raw

    def _read(
        self, session_id: str, after: int, before: int | None, limit: int | None, newest_first: bool
    ) -> list[Event]:
        prefix = session_prefix(session_id)
        high = MAX_SEQ if before is None else before

        def body(txn: Any, dbs: Mapping[bytes, Any]) -> list[Event]:
            cursor = txn.cursor(db=dbs[b"events"])
            rows = walk(cursor, prefix, after, high, newest_first=newest_first)
            events: list[Event] = []
            for sequence, raw in rows:
                events.append(decode_record(EVENT_DECODER, session_id, sequence, raw))
                if len(events) == limit:
                    break
            return events

        return self._in_read(body)

    def _last_sequence(self, session_id: str) -> int:
        raw = self._get(b"meta", session_prefix(session_id))
        return 0 if raw is None else int(META.unpack(raw)[0])

    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage:
        prefix = session_prefix(session_id)
        high = MAX_SEQ if before is None or before > MAX_SEQ else before

        def body(txn: Any, dbs: Mapping[bytes, Any]) -> tuple[list[LogMessage], bool]:
            # The Text index shares its keys with the events; a row decodes into
            # LogRecord, which skips the fields a log row does not carry.
            rows: list[LogMessage] = []
            texts = txn.cursor(db=dbs[b"texts"])
            for sequence, _ in walk(texts, prefix, 0, high, newest_first=True):
                if len(rows) == limit:
                    return rows, True
                record = _record_at(txn, dbs, session_id, prefix, sequence, LOG_DECODER)
                content, parent = record.body.content, record.parent
                rows.append(LogMessage(sequence, record.author, content, session_id, parent))
            return rows, False

        rows, more = self._in_read(body)
        return SessionPage(messages=rows, next_before=rows[-1].sequence if more else None)

    def _first_replies(self, session_id: str, roots: list[int]) -> dict[int, int]:
        prefix = session_prefix(session_id)

        def body(txn: Any, dbs: Mapping[bytes, Any]) -> dict[int, int]:
            replies_db = dbs[b"replies"]
            found: dict[int, int] = {}
            for root in roots:
                entry = txn.get(prefix + SEQ.pack(root), db=replies_db)
                if entry:
                    found[root] = SEQ.unpack(entry)[0]
            return found

        return self._in_read(body)

    def _session_state(self, session_id: str) -> SessionState:
        return decode_session_state(session_id, self._get(b"runs", session_prefix(session_id)))

    def _run_events(self, session_id: str, run_id: str) -> list[Event]:
        prefix = session_prefix(session_id)
        start = run_index_key(prefix, run_id)

        def body(txn: Any, dbs: Mapping[bytes, Any]) -> list[Event]:
            cursor = txn.cursor(db=dbs[b"runs"])
            events: list[Event] = []
            if not cursor.set_range(start):
                return events
            for key in cursor.iternext(keys=True, values=False):
                if not key.startswith(start):
                    break
                sequence = SEQ.unpack(key[len(start) :])[0]
                event = _record_at(txn, dbs, session_id, prefix, sequence, EVENT_DECODER)
                if event.run_id == run_id:
                    events.append(event)
            return events

        return self._in_read(body)

    def _get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        raw = self._get(b"sharing", sharing_key(session_prefix(session_id), viewer, conversation))
        return None if raw is None else decode_state(session_id, raw)

    def _sessions(self) -> list[str]:
        def body(txn: Any, dbs: Mapping[bytes, Any]) -> list[str]:
            cursor = txn.cursor(db=dbs[b"meta"])
            return [session_of(key) for key in cursor.iternext(keys=True, values=False)]

        return sorted(self._in_read(body))

    def _session_info(self, session_id: str) -> SessionInfo | None:
        raw = self._get(b"meta", session_prefix(session_id))
        return None if raw is None else decode_info(session_id, raw)

    def _session_infos(self) -> list[SessionInfo]:
        def body(txn: Any, dbs: Mapping[bytes, Any]) -> list[SessionInfo]:
            cursor = txn.cursor(db=dbs[b"meta"])
            return [decode_info(session_of(key), raw) for key, raw in cursor.iternext()]

        return sorted(self._in_read(body), key=lambda info: info.session_id)

    def _close(self) -> None:
        self._following.close()
        REGISTRY.release(self._shared)


def _record_at(
    txn: Any,
    dbs: Mapping[bytes, Any],
    session_id: str,
    prefix: bytes,
    sequence: int,
    decoder: msgspec.msgpack.Decoder[_Record],
) -> _Record:
    """Return the record an index names at ``sequence``.

    Raises:
        CorruptRecordError: It is missing or does not decode.
    """
    raw = txn.get(prefix + SEQ.pack(sequence), db=dbs[b"events"])
    if raw is None:
        raise CorruptRecordError(session_id, sequence, "indexed but missing")
    return decode_record(decoder, session_id, sequence, raw)


class _WriteTxn:
    """One write transaction as the base's writer uses it: facts in, plans out.

    py-lmdb releases the GIL around every call into LMDB, and each release lets a waiting
    thread take the interpreter from the writer, so the calls are per group, not per
    event: per session, one meta get and one ``getmulti`` each for its ids, the records
    they name and its parents; per group, one ``putmulti`` per sub-database.
    """

    __slots__ = ("_counts", "_dbs", "_txn")

    def __init__(self, txn: Any, dbs: Mapping[bytes, Any]) -> None:
        self._txn = txn
        self._dbs = dbs
        #: (last sequence, Text rows) per session prefix, as this transaction left them.
        self._counts: dict[bytes, tuple[int, int]] = {}

    def _get_many(self, db: bytes, keys: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
        """Return (key, value) of the ``keys`` that ``db`` holds, in their order."""
        if not keys:
            return []
        found: list[tuple[bytes, bytes]] = self._txn.cursor(db=self._dbs[db]).getmulti(keys)
        return found

    def _events(
        self, session_id: str, prefix: bytes, sequences: Sequence[int], *, indexed: bool
    ) -> dict[int, Event]:
        """Return the stored events at ``sequences`` (``indexed``: each must be there).

        Raises:
            CorruptRecordError: A record does not decode, or (``indexed``) is missing.
        """
        keys = [prefix + SEQ.pack(sequence) for sequence in sequences]
        events: dict[int, Event] = {}
        for key, raw in self._get_many(b"events", keys):
            sequence = SEQ.unpack(key[-SEQ.size :])[0]
            events[sequence] = decode_record(EVENT_DECODER, session_id, sequence, raw)
        missing = [sequence for sequence in sequences if sequence not in events]
        if indexed and missing:
            raise CorruptRecordError(session_id, missing[0], "indexed but missing")
        return events

    def facts(self, wants: Mapping[str, Wants]) -> dict[str, Facts]:
        """Read what each session's writes need (see :class:`~sharedesk.store.base.WriteTxn`)."""
        txn, dbs = self._txn, self._dbs
        found: dict[str, Facts] = {}
        # The meta records and the id index entries of the whole group: one lookup each.
        prefixes = {session_id: session_prefix(session_id) for session_id in wants}
        metas = dict(self._get_many(b"meta", sorted(prefixes.values())))
        id_keys = {
            event_id_key(prefixes[session_id], event_id): (session_id, event_id)
            for session_id, want in wants.items()
            for event_id in want.ids
        }
        stored_ids: dict[str, dict[str, int]] = {}
        for key, raw in self._get_many(b"ids", sorted(id_keys)):
            session_id, event_id = id_keys[key]
            stored_ids.setdefault(session_id, {})[event_id] = SEQ.unpack(raw)[0]
        for session_id, want in wants.items():
            prefix = prefixes[session_id]
            raw_meta = metas.get(prefix)
            counts = (0, 0) if raw_meta is None else META.unpack(raw_meta)[:2]
            self._counts[prefix] = counts
            stored_at = stored_ids.get(session_id, {})
            events = self._events(session_id, prefix, [*stored_at.values()], indexed=True)
            rows: dict[int, StoredRow] = {}
            answered: set[int] = set()
            parents = sorted(want.parents)
            for key, entry in self._get_many(b"replies", [prefix + SEQ.pack(p) for p in parents]):
                parent = SEQ.unpack(key[-SEQ.size :])[0]
                rows[parent] = StoredRow("Text", None)  # only a root Text row has an entry
                if entry:
                    answered.add(parent)
            others = [parent for parent in parents if parent not in rows]
            for parent, event in self._events(session_id, prefix, others, indexed=False).items():
                rows[parent] = StoredRow(type(event.body).__name__, event.parent)
            raw_state = txn.get(prefix, db=dbs[b"runs"]) if want.state else None
            state = decode_session_state(session_id, raw_state)
            sharing: dict[tuple[str, Conversation], SharingState | None] = {}
            for viewer, conversation in want.sharing:
                raw = txn.get(sharing_key(prefix, viewer, conversation), db=dbs[b"sharing"])
                sharing[(viewer, conversation)] = (
                    None if raw is None else decode_state(session_id, raw)
                )
            known = {event_id: events[sequence] for event_id, sequence in stored_at.items()}
            found[session_id] = Facts(counts[0], known, rows, answered, state, sharing)
        return found

    def put(self, plans: Sequence[WritePlan]) -> None:
        """Write ``plans`` in order, then each session's meta record once."""
        puts: dict[bytes, list[tuple[bytes, bytes]]] = {name: [] for name in DATABASES}
        events, ids, texts = puts[b"events"], puts[b"ids"], puts[b"texts"]
        replies, runs = puts[b"replies"], puts[b"runs"]
        touched: dict[bytes, int] = {}  # prefix -> microseconds of its newest events
        for plan in plans:
            write = plan.write
            prefix = session_prefix(write.session_id)
            run_id, run_base = None, b""
            for event in plan.new:
                assert event.sequence is not None
                seq = SEQ.pack(event.sequence)
                key = prefix + seq
                events.append((key, ENCODER.encode(event)))
                ids.append((event_id_key(prefix, event.id), seq))
                if isinstance(event.body, Text):
                    texts.append((key, b""))
                    if event.parent is None:
                        replies.append((key, b""))  # a root, with no reply yet
                if event.run_id is not None:
                    if event.run_id != run_id:  # a batch is usually one run's: hash it once
                        run_id, run_base = event.run_id, run_index_key(prefix, event.run_id)
                    runs.append((run_base + seq, b""))
            replies.extend(
                (prefix + SEQ.pack(r), SEQ.pack(s)) for r, s in plan.first_replies.items()
            )
            if plan.state is not None:
                runs.append((prefix, ENCODER.encode(plan.state)))
            share = write.share
            if share is not None and plan.sharing is not None:
                key = sharing_key(prefix, share.viewer, plan.sharing.conversation)
                puts[b"sharing"].append((key, ENCODER.encode(plan.sharing)))
            if plan.new:
                _last, texts_before = self._counts[prefix]
                newest = plan.new[-1]
                assert newest.sequence is not None and newest.timestamp is not None
                self._counts[prefix] = (newest.sequence, texts_before + plan.texts)
                touched[prefix] = (newest.timestamp - EPOCH) // MICROSECOND
        for prefix, micros in touched.items():
            last, text_rows = self._counts[prefix]
            puts[b"meta"].append((prefix, META.pack(last, text_rows, micros)))
        for name, items in puts.items():
            if not items:
                continue
            cursor = self._txn.cursor(db=self._dbs[name])
            _consumed, added = cursor.putmulti(items, overwrite=name != b"events")
            if added != len(items):  # an event key taken: the meta record lags the events
                raise CorruptRecordError(session_of(items[0][0]), 0, "an event key was taken")
