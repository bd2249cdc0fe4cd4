r"""LmdbStore: the durable, group-committed event store every session's stream lives in.

Layout. One LMDB environment (a directory) holds the store's sub-databases (``events``,
``ids``, ``meta``, ``texts``, ``sharing``, ``replies``, ``runs``); every key starts with its
session's prefix, so no session's keys can fall inside another's range. The keys, the
records and the cursor walks are :mod:`sharedesk.store._lmdb_layout`'s.

Writes. ``append`` and ``append_and_share`` validate their input in the caller's thread,
put a request on the store's group committer (:mod:`sharedesk.store._group_commit`) and
wait. Its writer thread takes every request waiting (after gathering for up to
``group_wait``) and hands the group to this store, which checks each request against the
state inside a single write transaction (``expected_version``, the sharing-state
compare-and-swap, idempotency, parents; earlier requests of the same group are visible),
writes the ones that pass and commits once (one fsync when durable); then the committer
answers every caller (woken in relay). Under load the writer pipelines: when requests
are already waiting as a commit ends, it takes them at once and wakes the callers just
committed only once the new group is written, right before its commit, so that they run
while that commit syncs; two groups then alternate, one syncing while the other's
callers come back with their next appends. A request that fails its checks gets its own
error and leaves nothing behind (the ids, records and ``Text`` rows it wrote are deleted
again before the commit); the others commit. If the transaction itself fails, the whole
group gets the error.
``submit_append`` and ``submit_append_and_share`` (the ``SubmittingStore`` port, for
asyncio front ends) queue a request with a ticket instead of a waiting caller: it joins
the same groups, and where a caller would be woken its ticket is settled, the group's
tickets going to their sinks in one ``deliver`` per sink (one hop into each event loop).

py-lmdb releases the GIL around every get and put, and each release lets a waiting
thread take the interpreter from the writer, so the writer keeps its calls few: an id
is checked and claimed with one ``put(overwrite=False)``, each event costs three puts
(id, record, ``Text`` row) in one pass (a root or a first reply one more, the
``replies`` entry, and a reply one get, its parent's entry), and per-session metadata
is cached between this store's own commits (dropped whenever the transaction id shows
that another writer, in this process or another, committed in between) and written
once per session per group.

The figures behind this design (where a durable append's time goes, what each part of
it gained) and the alternatives measured and left out are in ``docs/performance.md``.

Growth. The map starts at ``map_size`` and doubles when LMDB reports it full: new
transactions are held off, the transaction is aborted, the map is resized with no
transaction of this process open (see ``_lmdb_env``), and the group is retried. At
``max_map_size`` the group is retried one request per transaction, so only the requests
that do not fit get ``StoreFullError``; nothing partial is ever written.

Reads run in the caller's thread, in a read-only transaction, and walk a cursor from the
requested end, so ``read(newest_first=True, limit=n)`` and ``log().read_before`` cost
what the page costs, not the history.

Several processes (see ``_lmdb_env``): opening an existing file never takes LMDB's
write lock (the first write publishes the sub-database handles); a read or write that
finds the map grown by another process adopts it and runs again; a read that finds the
reader table full reclaims the slots of dead processes and runs once more; the writer
reclaims them every ``READER_CHECK_COMMITS`` commits too, since one dead reader's slot
stops LMDB reusing pages. A full disk (ENOSPC at commit) is handled like a full map at
its ceiling: request by request, and only those that do not fit get ``StoreFullError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeVar

import lmdb
import msgspec

from sharedesk.projection.runstate import fold_session_state, moves_session_state
from sharedesk.projection.session import is_blank
from sharedesk.projection.sharing import note_present
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import (
    AlreadyStored,
    ConcurrencyError,
    CorruptRecordError,
    SharedeskError,
    SharingStateConflict,
    StoreClosedError,
    StoreFullError,
    StoreIOError,
    ValidationError,
)
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.ports import WriteTicket
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SessionState
from sharedesk.protocol.validation import (
    check_append_args,
    check_conversation,
    check_optional_int,
    check_optional_str,
    check_path,
    check_session_id,
    parent_error,
)
from sharedesk.protocol.views import Conversation, LogMessage, SessionPage, SharingState
from sharedesk.store._common import (
    SessionInfo,
    check_log_args,
    check_read_args,
    check_roots,
    check_sharing_args,
    check_viewer,
    not_a_root_error,
    watermark_of,
)
from sharedesk.store._group_commit import GroupCommitter, Request
from sharedesk.store._lmdb_env import READER_CHECK_COMMITS, REGISTRY, OpenEnvironment
from sharedesk.store._lmdb_layout import (
    ENCODER,
    EPOCH,
    EVENT_DECODER,
    LOG_DECODER,
    MAX_SEQ,
    META,
    MICROSECOND,
    SEQ,
    SESSION_STATE_DECODER,
    decode_info,
    decode_record,
    decode_state,
    event_id_key,
    position_below,
    run_index_key,
    session_of,
    session_prefix,
    sharing_key,
    walk_down,
    walk_up,
)

__all__ = ["Durability", "LmdbStore"]

T = TypeVar("T")

#: ``"durable"``: every acknowledged append is fsync'd. ``"relaxed"``: no fsync per commit.
Durability = Literal["durable", "relaxed"]

_log = logger()

_DEFAULT_MAP_SIZE: Final = 64 * 2**20
#: The smallest map opened: LMDB cannot create the sub-databases in less (about 40
#: KiB), so a smaller ``map_size`` starts here and grows as any map does.
_MIN_MAP_SIZE: Final = 64 * 2**10
_META_CACHE_SIZE: Final = 100_000
# Measured with 16 threads x 1000 sessions on 2 cores: under load, callers answered by
# one commit take more than 0.5 ms to come back, so a durable writer waiting only that
# long commits half groups (two fsyncs where one would do); relaxed commits are cheap.
_GROUP_WAIT_DURABLE: Final = 0.002
_GROUP_WAIT_RELAXED: Final = 0.0005


class _Request(Request):
    """One append (or append-and-share) for the writer: what it writes, and its outcome.

    Made on the caller's thread; waiting, waking and tickets are
    :class:`~sharedesk.store._group_commit.Request`'s.
    """

    __slots__ = (
        "events",
        "expected_version",
        "prefix",
        "reply_present",
        "session_id",
        "sharing",
        "unless_stored",
    )

    def __init__(
        self,
        session_id: str,
        events: list[Event],
        expected_version: int | None,
        sharing: tuple[str, SharingState, SharingState | None] | None,
        ticket: WriteTicket | None = None,
        reply_present: bool = False,
        unless_stored: str | None = None,
    ) -> None:
        super().__init__(ticket)
        self.session_id = session_id
        self.reply_present = reply_present
        self.prefix = session_prefix(session_id)
        self.events = events
        self.expected_version = expected_version
        self.sharing = sharing
        self.unless_stored = unless_stored


class _StaleMeta(Exception):
    """Internal: a cached last sequence pointed at a taken key; the group is redone."""


class _MapFull(Exception):
    """Internal: the map (or, ``disk``, the disk) was full.

    ``paused`` says whether the writer paused readers.
    """

    def __init__(self, paused: bool, *, disk: bool = False) -> None:
        super().__init__("disk full" if disk else "map full")
        self.paused = paused
        self.disk = disk


class LmdbStore:
    """A durable event store in an LMDB environment (a directory), with group commit.

    Implements the store interface of the contract and the sharing-state port. Safe to
    share between threads; stores opened on the same path in one process share one
    environment, and other processes may open the same path at the same time (LMDB's own
    lock serialises their writes).

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
        group_wait: Most seconds the writer waits, once a request is queued, for as
            many requests as its last group held (0 commits at once); it also never
            waits longer than its last commit took. Larger groups share one fsync; one
            caller alone never waits, and when requests are waiting as a commit ends
            the writer takes them at once. The callers of a group are woken one after
            another, each by the next thread that blocks in the store; one that no
            thread wakes is woken by the writer after the same window (plus the commit
            in progress, if any). ``None``: 2 ms when durable, 0.5 ms when relaxed.
        verify: Walk every page of the file with py-lmdb's offline verifier before
            trusting it (``sharedesk inspect`` does). Without it the open checks the
            meta pages against the file size (a truncated, zeroed or garbled-meta file
            is refused) and walks the trees' branch pages and the header of every page
            they point at, so a garbled leaf, on which LMDB's own assertion would
            abort the process (SIGABRT), is refused too (``CorruptRecordError``). What
            that walk does not read (the nodes inside a leaf, overflow pages) LMDB
            trusts: damaged, it was a typed error or an intact read in every case the
            fault suite ran, which proves nothing more. Damage done after the open is
            never checked.
        environment: Opens the ``lmdb.Environment`` (``lmdb.open``'s signature; the
            seam through which fault tests inject failures). Used only by the store
            that opens the path first in this process; the others share its
            environment.

    Raises:
        ValidationError: A bad option (``max_map_size`` under 64 KiB included), a path
            that is not one (empty, a NUL, not a ``str``/``os.PathLike``), or a
            durability that differs from the one this path is already open with in this
            process.
        StoreFormatError: The file holds another format (nothing is changed).
        CorruptRecordError: The data file is damaged (``session_id`` is ``""``).
        StoreIOError: LMDB could not open the environment.

    Cost: opens (or shares) the environment and starts one writer thread; walks the
    branch pages (about 0.25 ms per MB of small events, 0.01 ms per MB of large ones);
    with ``verify``, reads the whole file instead (2.5 to 10 ms per MB). The
    open of an existing file takes no write lock, so it never waits for another
    process's writer; only creating a new file waits for LMDB's write lock. Until this
    process's first write, its reads of such a file run one at a time (see
    ``_lmdb_env``).
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
        self._durability = durability
        self._max_map_size = max_map_size
        if not isinstance(verify, bool):
            raise ValidationError(f"verify must be a bool, got {verify!r}")
        self._shared = REGISTRY.acquire(
            os.fspath(path),
            durability=durability,
            map_size=map_size,
            verify=verify,
            environment=environment,
        )
        self._path = self._shared.path
        # The handles as this thread sees them until published, then the published ones.
        self._dbs: Mapping[bytes, Any] = self._shared.dbs
        # (last sequence, Text rows) per session prefix as of this store's last commit;
        # valid only while no other writer committed in between (checked by txn id).
        self._meta_cache: dict[bytes, tuple[int, int]] = {}
        self._last_txn = -1
        self._commits = 0
        self._committer: GroupCommitter[_Request] = GroupCommitter(
            self._commit,
            group_wait=group_wait,
            name=f"sharedesk-lmdb-writer:{self._path}",
            closed_error=lambda: StoreClosedError(self._path),
            path=self._path,
        )

    @property
    def path(self) -> str:
        """The real path of the environment."""
        return self._path

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
        return self._in_read(lambda _txn: self._shared.map_size())

    # -- writes ------------------------------------------------------------------------

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
            StoreFullError: The store may not grow to hold the events.
            StoreClosedError: The store is closed (also when it closes while waiting).
            StoreIOError: LMDB failed; the cause is chained.

        Cost: blocks until the writer thread commits the group this append joins: one
        write transaction and (durable) one fsync shared by the group; O(len(events))
        index lookups and writes. Under load the writer answers a group once it has
        written the next one, just before that one's commit.
        """
        batch = check_append_args(session_id, events, expected_version)
        guard = check_optional_str("unless_stored", unless_stored)
        return self._committer.submit(
            _Request(session_id, batch, expected_version, None, unless_stored=guard)
        )

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
        """Append ``events`` and store ``state`` in one atomic, durable step.

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
            StoreFullError, StoreClosedError, StoreIOError: As for :meth:`append`.

        Cost: as :meth:`append`, plus one state read and write in the same transaction.
        """
        batch = check_append_args(session_id, events, expected_version)
        sharing = check_sharing_args(viewer, state, expected_state)
        return self._committer.submit(
            _Request(session_id, batch, expected_version, sharing, reply_present=reply_present)
        )

    def submit_append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        ticket: WriteTicket,
    ) -> None:
        """Queue an append that no thread waits for; ``ticket`` gets its outcome.

        The ``SubmittingStore`` port: the write joins the same group commit as
        :meth:`append` (same transaction, same fsync); after the commit the writer
        settles the ticket (the stored events, or the error :meth:`append` would raise)
        and delivers the group's tickets to their sinks, one ``deliver`` per sink.

        Raises:
            ValidationError: Malformed input; nothing was queued.
            StoreClosedError: The store is closed; nothing was queued.

        Cost: O(len(events)) validation and one queue append under the store's lock;
        never blocks on the writer.
        """
        batch = check_append_args(session_id, events, expected_version)
        self._committer.enqueue(_Request(session_id, batch, expected_version, None, ticket))

    def submit_append_and_share(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        viewer: str,
        state: SharingState,
        expected_state: SharingState | None,
        expected_version: int | None = None,
        ticket: WriteTicket,
        reply_present: bool = False,
    ) -> None:
        """Queue an :meth:`append_and_share` that no thread waits for (as :meth:`submit_append`).

        Raises:
            ValidationError: Malformed input; nothing was queued.
            StoreClosedError: The store is closed; nothing was queued.

        Cost: as :meth:`submit_append`.
        """
        batch = check_append_args(session_id, events, expected_version)
        sharing = check_sharing_args(viewer, state, expected_state)
        self._committer.enqueue(
            _Request(
                session_id, batch, expected_version, sharing, ticket, reply_present=reply_present
            )
        )

    def _commit(self, group: list[_Request], before_commit: Callable[[], None]) -> None:
        """Write ``group`` in one transaction, commit it, settle every request.

        The committer's commit function: ``before_commit()`` is called just before the
        commit, or as soon as the transaction fails. A full map is grown and the group
        retried; at the ceiling (or on a full disk) the group is retried one request per
        transaction. Raises nothing LMDB raises: such failures settle the group. The
        first group opens the sub-databases for every transaction (see
        :meth:`SharedEnvironment.publish`), if the open did not.
        """
        try:
            self._shared.publish()
        except SharedeskError as exc:
            for request in group:
                request.settle(error=exc)
            return
        self._dbs = self._shared.published or self._dbs  # plain handles from now on
        while True:
            try:
                outcomes = self._write(group, before_commit)
            except _MapFull as full:
                if full.disk:
                    if full.paused:
                        self._shared.lock.release_exclusive()
                elif self._grow(paused=full.paused):
                    continue
                if len(group) > 1:
                    for request in group:
                        self._commit([request], before_commit)
                    return
                full_error = StoreFullError(
                    self._path,
                    self._shared.map_size(),
                    self._max_map_size or 0,
                    disk_full=full.disk,
                )
                full_error.__cause__ = full.__cause__
                group[0].settle(error=full_error)
                return
            except lmdb.MapResizedError:
                self._shared.resize(0)
                continue
            except _StaleMeta:
                _log.warning("store.meta_cache_stale", path=self._path)
                self._meta_cache.clear()
                self._last_txn = -1
                continue
            except lmdb.Error as exc:
                error = StoreIOError(self._path, "append")
                error.__cause__ = exc
                for request in group:
                    request.settle(error=error)
                return
            for request, outcome in outcomes:
                if isinstance(outcome, BaseException):
                    request.settle(error=outcome)
                else:
                    request.settle(result=outcome)
            return

    def _grow(self, *, paused: bool) -> bool:
        """Double the map (up to ``max_map_size``); return whether it grew.

        ``paused``: the writer paused transactions when it aborted; the pause is always
        ended here.
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

    def _write(
        self, group: list[_Request], before_commit: Callable[[], None]
    ) -> list[tuple[_Request, list[Event] | SharedeskError]]:
        """Plan and write every request of ``group`` in one transaction, then commit.

        Raises:
            _MapFull: The map is full; the transaction was aborted.
            lmdb.Error: The transaction failed (nothing of the group was written).
        """
        now = datetime.now(UTC)
        shared = self._shared
        lock = shared.lock
        lock.acquire_shared()
        try:
            txn = shared.env.begin(write=True, buffers=False)
        except BaseException:
            lock.release_shared()
            raise
        try:
            txn_id = txn.id()
            if txn_id != self._last_txn + 1:
                self._meta_cache.clear()  # another writer committed since our last commit
            overlay: dict[bytes, tuple[int, int]] = {}
            outcomes: list[tuple[_Request, list[Event] | SharedeskError]] = []
            for request in group:
                try:
                    outcomes.append((request, self._write_request(txn, request, now, overlay)))
                except SharedeskError as exc:
                    outcomes.append((request, exc))
            micros = (now - EPOCH) // MICROSECOND
            meta_db = self._dbs[b"meta"]
            for prefix, (last, texts) in overlay.items():
                txn.put(prefix, META.pack(last, texts, micros), db=meta_db)
            before_commit()
            txn.commit()
        except BaseException as exc:
            before_commit()
            paused = lock.pause()  # see ResizeLock.pause: abort only with readers held off
            try:
                txn.abort()
            finally:
                lock.release_shared()
            if isinstance(exc, lmdb.MapFullError | lmdb.DiskError):
                raise _MapFull(paused, disk=isinstance(exc, lmdb.DiskError)) from exc
            if paused:
                lock.release_exclusive()
            raise
        lock.release_shared()
        self._last_txn = txn_id
        self._commits += 1
        if self._commits % READER_CHECK_COMMITS == 0:
            shared.reclaim_readers()  # a dead reader's slot would stop page reuse
        cache = self._meta_cache
        if len(cache) + len(overlay) > _META_CACHE_SIZE:
            cache.clear()
        cache.update(overlay)
        return outcomes

    def _write_request(
        self, txn: Any, request: _Request, now: datetime, overlay: dict[bytes, tuple[int, int]]
    ) -> list[Event]:
        """Check ``request`` against the transaction and write it, or write nothing.

        ``overlay`` holds (last sequence, Text rows) of the sessions this group wrote;
        the per-session meta records are written from it once per group.

        Raises:
            SharedeskError: The request fails a check; whatever it wrote is undone.
            lmdb.Error: The transaction failed (the caller aborts it).
        """
        dbs = self._dbs
        prefix = request.prefix
        counts = overlay.get(prefix) or self._meta_cache.get(prefix)
        if counts is None:
            raw_meta = txn.get(prefix, db=dbs[b"meta"])
            counts = (0, 0) if raw_meta is None else META.unpack(raw_meta)[:2]
        last, text_count = counts
        if request.expected_version is not None and request.expected_version != last:
            raise ConcurrencyError(request.expected_version, last)
        guard = request.unless_stored
        if guard is not None and txn.get(event_id_key(prefix, guard), db=dbs[b"ids"]) is not None:
            raise AlreadyStored(request.session_id, guard)
        sharing: tuple[bytes, SharingState] | None = None
        if request.sharing is not None:
            viewer, state, expected_state = request.sharing
            key = sharing_key(prefix, viewer, state.conversation)
            raw_state = txn.get(key, db=dbs[b"sharing"])
            stored_state = (
                None if raw_state is None else decode_state(request.session_id, raw_state)
            )
            if stored_state != expected_state:
                raise SharingStateConflict(watermark_of(expected_state), watermark_of(stored_state))
            sharing = (key, state)
        ids_db, events_db, texts_db = dbs[b"ids"], dbs[b"events"], dbs[b"texts"]
        replies_db, runs_db = dbs[b"replies"], dbs[b"runs"]
        put, get = txn.put, txn.get
        result: list[Event] = []
        inserted: list[bytes] = []  # the id keys this request claimed
        written: list[bytes] = []  # the events keys this request wrote
        indexed: list[tuple[bytes, bytes | None]] = []  # replies keys set, and their old value
        run_keys: list[bytes] = []  # the run index keys this request wrote
        session_state: SessionState | None = None  # folded, written once at the end
        last_run_id: str | None = None
        run_base = b""
        next_sequence = last + 1
        try:
            # One pass per event: claim the id, check the parent, write the event. An id
            # repeated within the batch finds the claim and the event written just before.
            for event in request.events:
                id_key = event_id_key(prefix, event.id)
                seq = SEQ.pack(next_sequence)
                # Check and claim the id in one call: put refuses an existing key.
                if not put(id_key, seq, overwrite=False, db=ids_db):
                    raw_seq = get(id_key, db=ids_db)
                    result.append(self._get_event(txn, request.session_id, prefix, raw_seq))
                    continue
                inserted.append(id_key)
                parent = event.parent
                first: bytes | None = None  # the parent's replies value (a root's)
                if parent is not None:
                    if parent >= next_sequence:
                        raise parent_error(len(written), parent, next_sequence)
                    first = self._root_entry(txn, request.session_id, prefix, parent, len(written))
                stored = msgspec.structs.replace(event, sequence=next_sequence, timestamp=now)
                key = prefix + seq
                if not put(key, ENCODER.encode(stored), overwrite=False, db=events_db):
                    raise _StaleMeta  # never overwrite an event: redo the group from the disk
                written.append(key)
                body = stored.body
                if isinstance(body, Text):
                    put(key, b"", db=texts_db)
                    text_count += 1
                    if parent is None:
                        put(key, b"", db=replies_db)  # a root, with no reply yet
                        indexed.append((key, None))
                    elif first == b"" and not is_blank(body.content):
                        root_key = prefix + SEQ.pack(parent)
                        put(root_key, seq, db=replies_db)  # its first non-blank reply
                        indexed.append((root_key, first))
                run_id = stored.run_id
                if run_id is not None:
                    if run_id != last_run_id:  # a batch is usually one run's: hash it once
                        last_run_id, run_base = run_id, run_index_key(prefix, run_id)
                    run_key = run_base + seq
                    put(run_key, b"", db=runs_db)
                    run_keys.append(run_key)
                if moves_session_state(stored):
                    if session_state is None:
                        session_state = self._session_state_in(txn, request.session_id, prefix)
                    session_state = fold_session_state(session_state, stored)
                next_sequence += 1
                result.append(stored)
            encoded: bytes | None = None
            if sharing is not None:
                state = sharing[1]
                if request.reply_present and result:
                    reply = result[0].sequence
                    assert reply is not None
                    state = note_present(state, reply)
                encoded = ENCODER.encode(state)
        except SharedeskError:
            for id_key in inserted:
                txn.delete(id_key, db=ids_db)
            for key in written:
                txn.delete(key, db=events_db)
                txn.delete(key, db=texts_db)
            for key, old in reversed(indexed):
                if old is None:
                    txn.delete(key, db=replies_db)
                else:
                    put(key, old, db=replies_db)
            for key in run_keys:
                txn.delete(key, db=runs_db)
            raise
        if session_state is not None:
            put(prefix, ENCODER.encode(session_state), db=runs_db)
        if sharing is not None and encoded is not None:
            put(sharing[0], encoded, db=dbs[b"sharing"])
        if written:
            overlay[prefix] = (next_sequence - 1, text_count)
        return result

    def _root_entry(
        self, txn: Any, session_id: str, prefix: bytes, parent: int, index: int
    ) -> bytes | None:
        """Return the ``replies`` value of ``parent``, checking that it is a root ``Text`` row.

        ``b""``: a root with no non-blank reply yet; 8 bytes: its first reply's sequence.

        Raises:
            ValidationError: ``parent`` is a reply, or not a ``Text`` row.
            CorruptRecordError: A record on the way does not decode.

        Cost: one key read; the parent's record when it is no root.
        """
        dbs = self._dbs
        root_key = prefix + SEQ.pack(parent)
        entry = txn.get(root_key, db=dbs[b"replies"])
        if entry is not None:
            return bytes(entry)
        raw = txn.get(root_key, db=dbs[b"events"])
        what = "missing"
        if raw is not None:
            record = decode_record(EVENT_DECODER, session_id, parent, raw)
            body = record.body
            what = (
                f"a reply to row {record.parent}"
                if isinstance(body, Text)
                else f"a {type(body).__name__} event"
            )
        raise not_a_root_error(index, parent, what)

    def first_replies(self, session_id: str, roots: Collection[int]) -> dict[int, int]:
        """Return, for each root in ``roots`` that has one, its first non-blank reply.

        Args:
            session_id: The session.
            roots: Sequences of root rows (others are left out of the answer).

        Raises:
            ValidationError: A malformed session id or root.
            CorruptRecordError: A record read on the way does not decode.
            StoreClosedError: The store is closed.
            StoreIOError: LMDB failed.

        Cost: one read transaction, one key read per root (the index is written on
        append).
        """
        check_session_id(session_id)
        wanted = check_roots(roots)
        prefix = session_prefix(session_id)

        def body(txn: Any) -> dict[int, int]:
            found: dict[int, int] = {}
            replies_db = self._dbs[b"replies"]
            for root in wanted:
                entry = txn.get(prefix + SEQ.pack(root), db=replies_db)
                if entry:
                    found[root] = SEQ.unpack(entry)[0]
            return found

        if not wanted:
            self._live()
            return {}
        return self._in_read(body)

    # -- reads ---------------------------------------------------------------------------
    def _live(self) -> None:
        if self._committer.closed:
            raise StoreClosedError(self._path)

    def _in_read(self, body: Callable[[Any], T]) -> T:
        """Run ``body(txn)`` in a read-only transaction, adopting a map grown elsewhere.

        A full reader table is retried once after freeing the slots of dead processes.

        Raises:
            StoreClosedError: The store is closed.
            StoreIOError: LMDB failed; the cause is chained.
        """
        shared = self._shared
        reclaimed = False
        while True:
            if self._committer.closed:
                raise StoreClosedError(self._path)
            shared.lock.acquire_shared()
            try:
                if self._committer.closed or shared.closed:
                    raise StoreClosedError(self._path)
                published = shared.published
                if published is None:
                    with shared.read() as txn:
                        return body(txn)
                self._dbs = published  # plain handles from now on
                with shared.env.begin(buffers=False) as txn:
                    return body(txn)
            except lmdb.MapResizedError:
                full = False
            except lmdb.ReadersFullError as exc:
                if reclaimed:
                    raise StoreIOError(self._path, "read") from exc
                full = True
            except lmdb.Error as exc:
                raise StoreIOError(self._path, "read") from exc
            finally:
                shared.lock.release_shared()
            if full:  # slots of dead processes: free them and try once more
                reclaimed = True
                shared.reclaim_readers()
            else:
                shared.resize(0)

    def _get_event(self, txn: Any, session_id: str, prefix: bytes, raw_seq: bytes) -> Event:
        raw = txn.get(prefix + raw_seq, db=self._dbs[b"events"])
        sequence = SEQ.unpack(raw_seq)[0]
        if raw is None:
            raise CorruptRecordError(session_id, sequence, "indexed but missing")
        return decode_record(EVENT_DECODER, session_id, sequence, raw)

    def _session_state_in(self, txn: Any, session_id: str, prefix: bytes) -> SessionState:
        raw = txn.get(prefix, db=self._dbs[b"runs"])
        if raw is None:
            return EMPTY_SESSION_STATE
        try:
            state: SessionState = SESSION_STATE_DECODER.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CorruptRecordError(session_id, 0, f"session state: {exc}") from exc
        return state

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
            newest_first: Order newest first (the cursor starts at ``before``).

        Raises:
            ValidationError: A bound that is not a non-negative int.
            CorruptRecordError: A record in the range cannot be decoded.
            StoreClosedError: The store is closed.
            StoreIOError: LMDB failed.

        Cost: one read transaction; O(rows returned) cursor steps and decodes, whichever
        end it starts from; no writes.
        """
        check_session_id(session_id)
        after, before, limit = check_read_args(after, before, limit, newest_first)
        prefix = session_prefix(session_id)
        low = 0 if after is None else after
        high = MAX_SEQ if before is None or before > MAX_SEQ else before
        if limit == 0 or high <= low + 1:
            self._live()
            return []

        def body(txn: Any) -> list[Event]:
            cursor = txn.cursor(db=self._dbs[b"events"])
            rows = (
                walk_down(cursor, prefix, high, low)
                if newest_first
                else walk_up(cursor, prefix, low, high)
            )
            events: list[Event] = []
            for sequence, raw in rows:
                events.append(decode_record(EVENT_DECODER, session_id, sequence, raw))
                if limit is not None and len(events) >= limit:
                    break
            return events

        return self._in_read(body)

    def last_sequence(self, session_id: str) -> int:
        """Return the session's last sequence (0 for a session with no events).

        Raises:
            ValidationError: A malformed session id.
            StoreClosedError: The store is closed.

        Cost: one key read; no writes.
        """
        check_session_id(session_id)
        prefix = session_prefix(session_id)
        raw = self._in_read(lambda txn: txn.get(prefix, db=self._dbs[b"meta"]))
        return 0 if raw is None else int(META.unpack(raw)[0])

    def session_state(self, session_id: str) -> SessionState:
        """Return the session's state, folded as its events were appended.

        Raises:
            ValidationError: A malformed session id.
            CorruptRecordError: The stored state cannot be decoded.
            StoreClosedError: The store is closed.

        Cost: one key read; no writes.
        """
        check_session_id(session_id)
        prefix = session_prefix(session_id)
        return self._in_read(lambda txn: self._session_state_in(txn, session_id, prefix))

    def run_events(self, session_id: str, run_id: str) -> list[Event]:
        """Return the events carrying ``run_id``, oldest first (read from the run index).

        Raises:
            ValidationError: A malformed argument.
            CorruptRecordError: A record cannot be decoded.
            StoreClosedError: The store is closed.

        Cost: one read transaction; O(the run's events) cursor steps and decodes.
        """
        check_session_id(session_id)
        check_optional_str("run_id", run_id)
        prefix = session_prefix(session_id)
        start = run_index_key(prefix, run_id)

        def body(txn: Any) -> list[Event]:
            cursor = txn.cursor(db=self._dbs[b"runs"])
            events: list[Event] = []
            if not cursor.set_range(start):
                return events
            for key in cursor.iternext(keys=True, values=False):
                if not key.startswith(start):
                    break
                event = self._get_event(txn, session_id, prefix, key[len(start) :])
                if event.run_id == run_id:
                    events.append(event)
            return events

        return self._in_read(body)

    def session_info(self, session_id: str) -> SessionInfo | None:
        """Return what the store knows about ``session_id``, or ``None`` if it has no events.

        Raises:
            ValidationError: A malformed session id.
            StoreClosedError: The store is closed.

        Cost: one key read; no writes.
        """
        check_session_id(session_id)
        prefix = session_prefix(session_id)
        raw = self._in_read(lambda txn: txn.get(prefix, db=self._dbs[b"meta"]))
        return None if raw is None else decode_info(session_id, raw)

    def sessions(self) -> list[str]:
        """Return the ids of the sessions holding at least one event, sorted.

        Raises:
            StoreClosedError: The store is closed.

        Cost: one read transaction over the per-session metadata, O(sessions).
        """

        def body(txn: Any) -> list[str]:
            cursor = txn.cursor(db=self._dbs[b"meta"])
            return sorted(session_of(key) for key in cursor.iternext(keys=True, values=False))

        return self._in_read(body)

    def session_infos(self) -> list[SessionInfo]:
        """Return :class:`SessionInfo` for every session holding events, sorted by id.

        Raises:
            StoreClosedError: The store is closed.

        Cost: one read transaction over the per-session metadata, O(sessions).
        """

        def body(txn: Any) -> list[SessionInfo]:
            cursor = txn.cursor(db=self._dbs[b"meta"])
            return [decode_info(session_of(key), raw) for key, raw in cursor.iternext()]

        return sorted(self._in_read(body), key=lambda info: info.session_id)

    def get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        """Return the stored sharing state of (session, viewer, conversation), or ``None``.

        Raises:
            ValidationError: A malformed argument.
            CorruptRecordError: The stored state cannot be decoded.
            StoreClosedError: The store is closed.

        Cost: one key read; no writes.
        """
        check_session_id(session_id)
        check_viewer(viewer)
        check_conversation(conversation)
        key = sharing_key(session_prefix(session_id), viewer, conversation)
        raw = self._in_read(lambda txn: txn.get(key, db=self._dbs[b"sharing"]))
        return None if raw is None else decode_state(session_id, raw)

    def log(self, session_id: str) -> _LmdbLog:
        """Return the session's ``Text`` rows as a :class:`~sharedesk.SessionLog`.

        Rows carry ``desk == session_id``; the log reads the store at each call.

        Raises:
            ValidationError: A malformed session id.

        Cost: none until ``read_before``, which walks the ``Text`` index from its cursor:
        one read transaction, ``limit + 1`` index steps and ``limit`` event reads.
        """
        check_session_id(session_id)
        return _LmdbLog(self, session_id)

    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage:
        before, limit = check_log_args(before, limit)
        prefix = session_prefix(session_id)
        high = MAX_SEQ if before is None or before > MAX_SEQ else before
        if limit == 0 or high <= 1:
            self._live()
            return SessionPage(messages=[], next_before=None)

        def body(txn: Any) -> tuple[list[LogMessage], bool]:
            # The Text index and the events share their keys (prefix + sequence), so
            # each index key fetches its event directly; rows decode into LogRecord,
            # which skips the fields a log row does not carry.
            cursor = txn.cursor(db=self._dbs[b"texts"])
            if not position_below(cursor, prefix, high):
                return [], False
            get, events_db = txn.get, self._dbs[b"events"]
            size, rows = len(prefix) + 8, list[LogMessage]()
            for key in cursor.iterprev(keys=True, values=False):
                if len(key) != size or not key.startswith(prefix):
                    break
                if len(rows) == limit:
                    return rows, True
                sequence = int.from_bytes(key[-8:], "big")
                raw = get(key, db=events_db)
                if raw is None:
                    raise CorruptRecordError(session_id, sequence, "indexed but missing")
                record = decode_record(LOG_DECODER, session_id, sequence, raw)
                rows.append(
                    LogMessage(
                        sequence=sequence,
                        author=record.author,
                        content=record.body.content,
                        desk=session_id,
                        parent=record.parent,
                    )
                )
            return rows, False

        rows, more = self._in_read(body)
        return SessionPage(messages=rows, next_before=rows[-1].sequence if more else None)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the store; later calls raise ``StoreClosedError``. Idempotent.

        Appends still queued get ``StoreClosedError``; a group already being written
        completes. Stops the writer thread and releases the environment (closed when
        no other store in this process uses it).

        Cost: waits for the group in progress, if any.
        """
        if not self._committer.close():
            return
        REGISTRY.release(self._shared)

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
        state = "closed" if self._committer.closed else "open"
        return f"LmdbStore({self._path!r}, durability={self._durability!r}) [{state}]"


class _LmdbLog:
    """A :class:`~sharedesk.SessionLog` over one session of an :class:`LmdbStore`."""

    __slots__ = ("_session_id", "_store")

    def __init__(self, store: LmdbStore, session_id: str) -> None:
        self._store = store
        self._session_id = session_id

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        """Return at most ``limit`` ``Text`` rows below ``before``, newest first.

        Raises:
            ValidationError: Bad arguments.
            CorruptRecordError: A row in the page cannot be decoded.
            StoreClosedError: The store is closed.

        Cost: one read transaction, ``limit + 1`` index steps and ``limit`` event reads.
        """
        return self._store._read_text_before(self._session_id, before, limit)
