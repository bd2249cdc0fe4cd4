"""LmdbStore: the durable store, one LMDB environment (a directory) shared by processes.

This module supplies only LMDB's I/O under :class:`~sharedesk.store.base.StoreBase`: one
write transaction per group (``_transact``: LMDB's write lock, which other processes may
hold, and one fsync when durable), the facts and puts of a group (:class:`_WriteTxn`),
and the reads. Keys are :mod:`sharedesk.store._lmdb_layout`'s; the environment, its map
and its reader slots :mod:`sharedesk.store._lmdb_env`'s.

A failed transaction writes nothing of its group: ``MapFullError`` doubles the map (up
to ``max_map_size``) and runs the group again; at the ceiling, or on a full disk, it
raises ``StoreFullError``. Reads run in the caller's thread and walk a cursor from the
requested end, so a page costs what the page costs, not the history. A map grown by
another process is adopted and the call run again; a full reader table is cleared of
dead processes' slots (by the writer too, every ``READER_CHECK_COMMITS`` commits).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

import lmdb
import msgspec

from sharedesk.projection.append import Facts, SharingKey, StoredRow, Wants, WritePlan
from sharedesk.protocol.errors import (
    CorruptRecordError,
    StoreClosedError,
    StoreFullError,
    StoreIOError,
    ValidationError,
)
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.ports import AppendCallback, SessionInfo
from sharedesk.protocol.records import (
    ENCODER,
    EVENT_DECODER,
    LOG_DECODER,
    decode_record,
    decode_session_state,
    decode_state,
    event_id_key,
    run_index_key,
    sharing_key,
)
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SessionState
from sharedesk.protocol.validation import (
    check_bool,
    check_int,
    check_optional_int,
    check_path,
    check_seconds,
)
from sharedesk.protocol.views import Conversation, SessionPage, SharingState
from sharedesk.store._follow import Followers
from sharedesk.store._lmdb_env import (
    READER_CHECK_COMMITS,
    REGISTRY,
    OpenEnvironment,
    SharedEnvironment,
)
from sharedesk.store._lmdb_follow import LmdbWatcher
from sharedesk.store._lmdb_layout import (
    EPOCH,
    MAX_SEQ,
    META,
    MICROSECOND,
    SEQ,
    decode_info,
    record_at,
    session_of,
    session_prefix,
    walk,
)
from sharedesk.store.base import StoreBase, WriteTxn, text_page

__all__ = ["Durability", "LmdbStore"]

T = TypeVar("T")

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
#: The sub-databases a group writes, in order (``meta`` last: it follows the events).
_PUT_ORDER: Final = (b"events", b"ids", b"texts", b"replies", b"runs", b"sharing", b"meta")
#: Free bytes below which a failed write transaction counts as a full disk.
DISK_FULL_BELOW: Final = 1 << 20


class LmdbStore(StoreBase):
    """A durable event store in an LMDB environment (a directory), with group commit.

    Safe to share between threads; stores on one path in one process share one
    environment, and other processes may open it too (LMDB's lock serialises writes).

    Durability: ``"durable"`` (the default) acknowledges a write once it is fsync'd.
    ``"relaxed"`` commits are atomic but not fsync'd: a process crash (even SIGKILL)
    loses nothing acknowledged, but an OS crash or power loss may lose the newest commits
    and, LMDB warns, damage the file. Use it for tests, demos and rebuildable data.

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

    Cost: opens (or shares) the environment, starts one writer thread, walks the branch
    pages (about 0.25 ms per MB; ``verify``: 2.5 to 10 ms per MB). Opening an existing
    file never waits for another process's writer.
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
        check_int("map_size", map_size, minimum=1)
        check_optional_int("max_map_size", max_map_size, minimum=_MIN_MAP_SIZE)
        map_size = max(map_size, _MIN_MAP_SIZE)
        if group_wait is None:
            group_wait = _GROUP_WAIT_DURABLE if durability == "durable" else _GROUP_WAIT_RELAXED
        group_wait = check_seconds("group_wait", group_wait, 0, 1)
        if max_map_size is not None and map_size > max_map_size:
            raise ValidationError(f"map_size={map_size} exceeds max_map_size={max_map_size}")
        check_bool("verify", verify)
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
        self._followers = Followers(
            functools.partial(LmdbWatcher, self._shared, self._in_read), real
        )
        super().__init__(real, writer=f"sharedesk-lmdb-writer:{real}", group_wait=group_wait)

    @property
    def path(self) -> str:
        """The real path of the environment."""
        return self._shared.path

    def map_size(self) -> int:
        """Return the environment's current map size in bytes (``StoreClosedError``)."""
        return self._in_read(lambda _txn, _dbs: self._shared.map_size())

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"LmdbStore({self.path!r}, durability={self._durability!r}) [{state}]"

    # -- the write transaction ---------------------------------------------------------

    def _transact(self, work: Callable[[WriteTxn], T]) -> T:
        shared, lock = self._shared, self._shared.lock
        shared.publish()  # the first write opens the sub-databases for every transaction
        while True:
            paused = False
            lock.acquire_shared()
            try:
                txn = shared.env.begin(write=True, buffers=False)
                try:
                    assert shared.published is not None
                    result = work(_WriteTxn(txn, shared.published))
                    txn.commit()
                except BaseException:
                    paused = lock.pause()  # see ResizeLock.pause: abort only with readers held off
                    txn.abort()
                    raise
            except BaseException as exc:
                lock.release_shared()
                disk = isinstance(exc, lmdb.DiskError) or (
                    isinstance(exc, lmdb.Error) and self._disk_is_full()
                )
                full = disk or isinstance(exc, lmdb.MapFullError)
                if full and not disk:  # double the map, up to its ceiling, and run again
                    current = shared.map_size()
                    target = min(current * 2, self._max_map_size or current * 2)
                    if target > current:
                        shared.resize(target, paused=paused)
                        continue
                if paused:
                    lock.release_exclusive()
                if isinstance(exc, lmdb.MapResizedError):
                    shared.resize(0)  # another process grew the map: adopt it, run again
                    continue
                if full:
                    ceiling = self._max_map_size or 0
                    raise StoreFullError(
                        self.path, shared.map_size(), ceiling, disk_full=disk
                    ) from exc
                if isinstance(exc, lmdb.Error):
                    raise StoreIOError(self.path, "append") from exc
                raise
            lock.release_shared()
            self._commits += 1
            if self._commits % READER_CHECK_COMMITS == 0:
                shared.reclaim_readers()  # a dead reader's slot would stop page reuse
            return result

    def _disk_is_full(self) -> bool:
        """Whether under :data:`DISK_FULL_BELOW` bytes are free (LMDB says ``EIO`` then)."""
        with contextlib.suppress(OSError):
            stat = os.statvfs(self.path)
            return stat.f_bavail * stat.f_frsize < DISK_FULL_BELOW
        return False

    # -- reads -------------------------------------------------------------------------

    def _in_read(self, body: Callable[[Any, Mapping[bytes, Any]], T]) -> T:
        """Run ``body(txn, dbs)`` in a read-only transaction (see ``SharedEnvironment.run``)."""
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

    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage:
        prefix = session_prefix(session_id)
        high = MAX_SEQ if before is None or before > MAX_SEQ else before

        def body(txn: Any, dbs: Mapping[bytes, Any]) -> SessionPage:
            # The Text index shares its keys with the events; a row decodes into
            # LogRecord, which skips the fields a log row does not carry.
            texts = walk(txn.cursor(db=dbs[b"texts"]), prefix, 0, high, newest_first=True)
            at = functools.partial(record_at, txn, dbs, session_id, prefix)
            return text_page(session_id, texts, limit, lambda seq, _: at(seq, LOG_DECODER))

        return self._in_read(body)

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

    def _session_states(self, session_ids: list[str]) -> list[SessionState]:
        def body(txn: Any, dbs: Mapping[bytes, Any]) -> list[SessionState]:
            db = dbs[b"runs"]
            return [decode_session_state(s, txn.get(session_prefix(s), db=db)) for s in session_ids]

        return self._in_read(body)

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
                events.append(record_at(txn, dbs, session_id, prefix, sequence, EVENT_DECODER))
            return events

        return self._in_read(body)

    def _get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        raw = self._get(b"sharing", sharing_key(session_prefix(session_id), viewer, conversation))
        return None if raw is None else decode_state(session_id, raw)

    def _session_info(self, session_id: str) -> SessionInfo | None:
        raw = self._get(b"meta", session_prefix(session_id))
        return None if raw is None else decode_info(session_id, raw)

    def _session_infos(self) -> list[SessionInfo]:
        def body(txn: Any, dbs: Mapping[bytes, Any]) -> list[SessionInfo]:
            cursor = txn.cursor(db=dbs[b"meta"])
            return [decode_info(session_of(key), raw) for key, raw in cursor.iternext()]

        return sorted(self._in_read(body), key=lambda info: info.session_id)

    def follow(self, on_append: AppendCallback) -> Callable[[], None]:
        """As :meth:`~sharedesk.protocol.ports.FollowingStore.follow` (see ``_lmdb_follow``)."""
        return self._followers.add(on_append)

    def _close(self) -> None:
        self._followers.close()
        REGISTRY.release(self._shared)


class _WriteTxn:
    """One write transaction as the writer uses it: facts in, plans out.

    py-lmdb releases the GIL in every call, so the calls are per group (``getmulti``,
    ``putmulti``), and none is made for a sub-database the group leaves alone.
    """

    __slots__ = ("_dbs", "_prefixes", "_texts", "_txn")

    def __init__(self, txn: Any, dbs: Mapping[bytes, Any]) -> None:
        self._txn = txn
        self._dbs = dbs
        #: The Text rows of each session, as this transaction left them.
        self._texts: dict[bytes, int] = {}
        self._prefixes: dict[str, bytes] = {}  # the key prefix of each session read

    def _get_many(self, db: bytes, keys: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
        """Return (key, value) of the ``keys`` that ``db`` holds, in their order."""
        if not keys:
            return []
        found: list[tuple[bytes, bytes]] = self._txn.cursor(db=self._dbs[db]).getmulti(keys)
        return found

    def _events(
        self, session_id: str, prefix: bytes, sequences: Sequence[int], *, indexed: bool
    ) -> dict[int, Event]:
        """Return the stored events at ``sequences`` (``indexed``: each must be there)."""
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
        txn, dbs, prefixes = self._txn, self._dbs, self._prefixes
        found: dict[str, Facts] = {}
        for session_id in wants:
            prefixes[session_id] = session_prefix(session_id)
        # The meta records and the id index entries of the whole group: one lookup each.
        metas = dict(self._get_many(b"meta", sorted(prefixes.values())))
        id_keys = {  # the key of each id wanted -> the id (the key starts with its session)
            event_id_key(prefixes[session_id], event_id): event_id
            for session_id, want in wants.items()
            for event_id in want.ids
        }
        stored_ids: dict[str, dict[str, int]] = {}
        for key, raw in self._get_many(b"ids", sorted(id_keys)):
            stored_ids.setdefault(session_of(key), {})[id_keys[key]] = SEQ.unpack(raw)[0]
        empty: tuple[
            dict[str, Event], dict[int, StoredRow], set[int], dict[SharingKey, SharingState | None]
        ] = ({}, {}, set(), {})
        for session_id, want in wants.items():
            prefix = prefixes[session_id]
            raw_meta = metas.get(prefix)
            last, texts, _micros = (0, 0, 0) if raw_meta is None else META.unpack(raw_meta)
            self._texts[prefix] = texts
            known, rows, answered, sharing = empty  # shared while empty (see ``Facts``)
            stored_at = stored_ids.get(session_id)
            if stored_at:
                events = self._events(session_id, prefix, [*stored_at.values()], indexed=True)
                known = {event_id: events[sequence] for event_id, sequence in stored_at.items()}
            if want.parents:
                rows, answered = {}, set()
                parents = sorted(want.parents)
                keys = [prefix + SEQ.pack(p) for p in parents]
                for key, entry in self._get_many(b"replies", keys):
                    parent = SEQ.unpack(key[-SEQ.size :])[0]
                    rows[parent] = StoredRow("Text", None)  # only a root Text row has one
                    if entry:
                        answered.add(parent)
                others = [parent for parent in parents if parent not in rows]
                found_rows = self._events(session_id, prefix, others, indexed=False)
                for parent, event in found_rows.items():
                    rows[parent] = StoredRow(type(event.body).__name__, event.parent)
            state = EMPTY_SESSION_STATE
            if want.state:
                state = decode_session_state(session_id, txn.get(prefix, db=dbs[b"runs"]))
            if want.sharing:
                sharing = {}
            for wanted in want.sharing:
                raw = txn.get(sharing_key(prefix, *wanted), db=dbs[b"sharing"])
                sharing[wanted] = None if raw is None else decode_state(session_id, raw)
            found[session_id] = Facts(last, known, rows, answered, state, sharing)
        return found

    def put(self, plans: Sequence[WritePlan]) -> None:
        """Write ``plans`` in order, then each session's meta record once.

        One pass builds flat key/value lists, fed through ``zip``: no row tuple outlives its put.
        """
        rows: dict[bytes, list[bytes]] = {name: [] for name in _PUT_ORDER}
        events, ids, texts, replies, runs = (rows[name] for name in _PUT_ORDER[:5])
        encode, pack = ENCODER.encode, SEQ.pack
        metas: dict[bytes, bytes] = {}
        for plan in plans:
            write = plan.write
            prefix = self._prefixes[write.session_id]
            run: tuple[str | None, bytes] = (None, b"")
            for event in plan.new:
                assert event.sequence is not None
                seq = pack(event.sequence)
                key = prefix + seq
                events += (key, encode(event))
                ids += (event_id_key(prefix, event.id), seq)
                if event.run_id is not None:
                    if run[0] != event.run_id:  # a batch is usually one run's
                        run = (event.run_id, run_index_key(prefix, event.run_id))
                    runs += (run[1] + seq, b"")
                if isinstance(event.body, Text):
                    texts += (key, b"")
                    if event.parent is None:  # a root, with no reply yet
                        replies += (key, b"")
            for root, reply in plan.first_replies.items():
                replies += (prefix + pack(root), pack(reply))
            if plan.state is not None:
                runs += (prefix, encode(plan.state))
            if write.share is not None and plan.sharing:
                key = sharing_key(prefix, write.share.viewer, plan.sharing.conversation)
                rows[b"sharing"] += (key, encode(plan.sharing))
            if plan.new:
                newest = plan.new[-1]
                assert newest.sequence is not None and newest.timestamp is not None
                self._texts[prefix] += plan.texts
                micros = (newest.timestamp - EPOCH) // MICROSECOND
                metas[prefix] = META.pack(newest.sequence, self._texts[prefix], micros)
        rows[b"meta"] = [part for meta in metas.items() for part in meta]  # each session's once
        for name, flat in rows.items():
            if flat:
                pairs = iter(flat)
                cursor = self._txn.cursor(db=self._dbs[name])
                added = cursor.putmulti(zip(pairs, pairs, strict=True), overwrite=name != b"events")
                if name == b"events" and added[1] != len(flat) // 2:  # the meta record lags
                    raise CorruptRecordError(plans[0].write.session_id, 0, "an event key was taken")

    # -- retention ---------------------------------------------------------------------

    def remove(self, session_id: str, through: int) -> int:
        """Remove the session's rows up to ``through`` (see ``WriteTxn.remove``)."""
        txn, dbs, prefix = self._txn, self._dbs, session_prefix(session_id)
        state = decode_session_state(session_id, txn.get(prefix, db=dbs[b"runs"]))
        if through <= state.archived_through:
            return 0
        cursor = txn.cursor(db=dbs[b"events"])
        rows = list(walk(cursor, prefix, state.archived_through, through + 1, newest_first=False))
        texts = 0
        for sequence, raw in rows:
            event = decode_record(EVENT_DECODER, session_id, sequence, raw)
            key = prefix + SEQ.pack(sequence)
            txn.delete(key, db=dbs[b"events"])
            txn.delete(event_id_key(prefix, event.id), db=dbs[b"ids"])
            if isinstance(event.body, Text):
                texts += txn.delete(key, db=dbs[b"texts"])
                txn.delete(key, db=dbs[b"replies"])
            if event.run_id is not None:
                txn.delete(run_index_key(prefix, event.run_id) + key[-SEQ.size :], db=dbs[b"runs"])
        last, count, micros = META.unpack(txn.get(prefix, db=dbs[b"meta"]))  # rows stay above
        txn.put(prefix, META.pack(last, count - texts, micros), db=dbs[b"meta"])
        state = msgspec.structs.replace(state, archived_through=through)
        txn.put(prefix, ENCODER.encode(state), db=dbs[b"runs"])
        return len(rows)
