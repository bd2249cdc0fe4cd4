"""One LMDB environment per path per process, shared by every LmdbStore on that path.

py-lmdb refuses to open one environment twice in a process, so stores on the same
(real) path share one :class:`SharedEnvironment`, reference-counted and closed when the
last store releases it. This registry is the one piece of process-wide mutable state in
sharedesk: it exists because the environment itself is process-wide.

Resizing the map (``set_mapsize``) is only safe while no transaction of this process is
open, because LMDB remaps the file. Every transaction, read or write, therefore holds
the environment's :class:`ResizeLock` in shared mode, and a resize (or adopting a map
grown by another process) holds it exclusively.

Several processes. The sub-databases are opened in an explicit write transaction:
``begin(write=True)`` waits for LMDB's write lock with the GIL released, so while
another process writes, only the opening thread waits (py-lmdb's ``open_db`` without a
transaction takes the lock while holding the GIL, which froze every thread of the
opener). A read-only transaction cannot do it: py-lmdb 3.0 resets a read-only
transaction on commit, so a handle opened in one is never published to the
environment. The write transaction writes nothing unless it creates them. A map
grown by another process (``MapResizedError``) is adopted (``set_mapsize(0)``) and the
open or transaction retried. Reader slots left by processes that died are reclaimed
(``reader_check``) at open, whenever a read finds the reader table full, and by each
store's writer every ``READER_CHECK_COMMITS`` commits (a stale slot pins the oldest
snapshot: until it is reclaimed no page is reused and the file grows). One case is left
to the processes already open: py-lmdb runs a read transaction inside ``lmdb.open``,
before there is an environment to reclaim slots with, so a process that finds every
slot held by dead processes fails to open (``StoreIOError``) until an open one reclaims
them (its next read that needs a slot, or its writer's next check).

The data file is checked before LMDB reads through its map (:func:`check_data_file`):
a file shorter than its committed meta page says would raise SIGBUS at the first read
of a missing page, so it is refused as :class:`CorruptRecordError` (after py-lmdb's
offline verifier, reading with plain file I/O, confirms that a missing page is in use:
LMDB legitimately leaves a short tail of free pages unwritten now and then). A zeroed
or garbled meta page is refused the same way. An empty ``data.mdb`` is a new
environment (LMDB's own rule: it creates the file empty and writes the meta pages).
"""

from __future__ import annotations

import os
import struct
import threading
from typing import Any, Final

import lmdb
import lmdb.verify

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import CorruptRecordError, StoreIOError, ValidationError

_log = logger()

#: The sub-databases of a store, by purpose. ``replies`` and ``runs`` came later: opening
#: a database written before them creates them empty (LmdbStore treats roots it lacks as
#: older ones; a session's state and run index cover the events appended since).
DATABASES: Final = (b"events", b"ids", b"meta", b"texts", b"sharing", b"replies", b"runs")

#: A store's writer reclaims dead processes' reader slots once per this many commits.
READER_CHECK_COMMITS: Final = 32

#: The slots of LMDB's reader table (one per open read transaction, in every process).
MAX_READERS: Final = 1024

#: The data file in an environment directory.
DATA_FILE: Final = "data.mdb"

# LMDB's meta page (64-bit builds, host byte order), after the page header: magic,
# version, fixed address, map size, the free and main databases' records (48 bytes each;
# the page size is the free database's first field), last used page, transaction id.
_MAGIC: Final = 0xBEEFC0DE
_META_PAGE: Final = struct.Struct("=IIQQI44x48xQQ")
_P_META: Final = 0x08
# Page header size -> the data version it goes with: LMDB 0.9 (16 bytes), 1.0 (24).
_LAYOUTS: Final = {16: 1, 24: 3}
_VERIFY_ATTEMPTS: Final = 3
# Opens that may each find the map grown by another process before giving up.
_OPEN_ATTEMPTS: Final = 100


def _damaged(path: str, detail: str) -> CorruptRecordError:
    """Return the error for a damaged data file (no session: ``session_id`` is ``""``)."""
    return CorruptRecordError("", 0, f"{os.path.join(path, DATA_FILE)}: {detail}")


def _committed_meta(head: bytes, size: int) -> tuple[int, int] | str:
    """Parse both meta pages from the file's first bytes.

    Returns:
        (page size, last used page) of the committed meta (the higher transaction id),
        or what is wrong.
    """
    header = next(
        (
            size_
            for size_ in _LAYOUTS
            if len(head) >= size_ + _META_PAGE.size
            and _META_PAGE.unpack_from(head, size_)[0] == _MAGIC
        ),
        None,
    )
    if header is None:
        return f"no LMDB meta page at the start ({size} bytes)"
    version = _LAYOUTS[header]
    page_size = _META_PAGE.unpack_from(head, header)[4]
    if page_size < 256 or page_size & (page_size - 1) or page_size > 65536:
        return f"meta page 0 holds an implausible page size {page_size}"
    metas = []
    for number in (0, 1):
        offset = number * page_size
        if len(head) < offset + header + _META_PAGE.size:
            return f"{size} bytes end before meta page {number}"
        (flags,) = struct.unpack_from("=H", head, offset + 10)
        magic, found, _at, _map, _psize, last, txn_id = _META_PAGE.unpack_from(
            head, offset + header
        )
        if magic != _MAGIC or not flags & _P_META:
            return f"meta page {number} is damaged"
        if found != version:
            return f"meta page {number} holds data version {found}, not {version}"
        metas.append((txn_id, last))
    _txn, last = max(metas)
    if last < 1:
        return f"the committed meta page names last page {last}"
    return page_size, last


def check_data_file(path: str, *, full: bool = False) -> None:
    """Refuse a data file that LMDB could not read without a signal.

    The committed meta page (read with plain file I/O, never through a map) says how many
    pages the file holds; a file that ends before them is walked by py-lmdb's offline
    verifier (``lmdb.verify``), and refused unless every page in use is within the file.

    Args:
        path: The environment directory.
        full: Walk every page with the verifier even when the size is right (LMDB trusts
            what its pages hold: a damaged page inside the file can make it abort the
            process). With other writers, call it inside a read transaction, which
            keeps the pages it walks from being reused.

    Raises:
        CorruptRecordError: The meta pages are damaged, or pages in use are missing or
            (``full``) damaged.
        StoreIOError: The file cannot be read.

    Cost: one read of the first two pages and one ``fstat``; a full read of the file
    (about 16 ms per MB) with ``full``, or when it is shorter than its meta page says.
    """
    data = os.path.join(path, DATA_FILE)
    problem = ""
    for _attempt in range(_VERIFY_ATTEMPTS):
        try:
            with open(data, "rb") as file:
                head = file.read(2 * 65536)
                size = os.fstat(file.fileno()).st_size  # after the metas: it only grows
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreIOError(path, "open") from exc
        if size == 0:
            return
        meta = _committed_meta(head, size)
        if isinstance(meta, str):
            raise _damaged(path, meta)
        page_size, last = meta
        if size >= (last + 1) * page_size and not full:
            return
        try:
            problems: list[str] = lmdb.verify.verify(path)  # type: ignore[no-untyped-call]
        except (lmdb.verify.VerifyError, OSError) as exc:
            problems = [str(exc)]
        if not problems:
            return
        problem = f"{size} bytes, {last + 1} pages in use; the verifier reports: {problems[0]}"
    raise _damaged(path, problem)


class ResizeLock:
    """Many transactions at once, or one resize alone (a writer-preferring RW lock)."""

    __slots__ = ("_active", "_cond", "_resizing")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._resizing = False

    def acquire_shared(self) -> None:
        """Enter a transaction; waits while a resize runs. Cost: one lock round trip."""
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._active += 1

    def release_shared(self) -> None:
        """Leave a transaction. Cost: one lock round trip."""
        with self._cond:
            self._active -= 1
            if self._resizing and self._active == 0:
                self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        """Wait until no transaction is open and block new ones (the caller holds none)."""
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            while self._active:
                self._cond.wait()

    def pause(self) -> bool:
        """Stop new transactions from starting; the caller may still hold one.

        Aborting a write transaction while other threads keep starting read transactions
        can stall inside py-lmdb indefinitely (observed with py-lmdb 3.0 after
        ``MapFullError``), so the writer pauses readers before it aborts.

        Returns:
            Whether this call paused; if so the caller must end with
            :meth:`complete_exclusive` then :meth:`release_exclusive`, or with
            :meth:`release_exclusive` alone. ``False``: someone else already paused.
        """
        with self._cond:
            if self._resizing:
                return False
            self._resizing = True
            return True

    def complete_exclusive(self) -> None:
        """After :meth:`pause` returned ``True``, wait until no transaction is open."""
        with self._cond:
            while self._active:
                self._cond.wait()

    def release_exclusive(self) -> None:
        """Let transactions start again."""
        with self._cond:
            self._resizing = False
            self._cond.notify_all()


class SharedEnvironment:
    """One open LMDB environment, its sub-databases, and who uses it.

    Attributes:
        path: The environment's real path.
        env: The py-lmdb environment.
        dbs: The sub-databases, keyed by name (see ``DATABASES``).
        durability: ``"durable"`` or ``"relaxed"``, as opened.
        lock: Held shared by every transaction, exclusively by a resize.
        closed: Set once the environment is closed (under the exclusive lock).
    """

    def __init__(self, path: str, env: Any, dbs: dict[bytes, Any], durability: str) -> None:
        self.path = path
        self.env = env
        self.dbs = dbs
        self.durability = durability
        self.lock = ResizeLock()
        self.closed = False
        self.refs = 0

    def map_size(self) -> int:
        """Return the current map size in bytes. Cost: O(1)."""
        size: int = self.env.info()["map_size"]
        return size

    def verify(self) -> None:
        """Walk every page of the data file (see :func:`check_data_file` with ``full``).

        Raises:
            CorruptRecordError: The file is damaged.
            StoreIOError: It cannot be read.

        Cost: one read transaction held while the whole file is read (~16 ms per MB).
        """
        self.lock.acquire_shared()
        try:
            with self.env.begin():  # pins the snapshot the verifier walks
                check_data_file(self.path, full=True)
        except lmdb.Error as exc:
            raise StoreIOError(self.path, "verify") from exc
        finally:
            self.lock.release_shared()

    def reclaim_readers(self) -> int:
        """Free the reader slots of processes that died; return how many were freed.

        Cost: one scan of the reader table and one lock probe per other process.
        """
        try:
            freed: int = self.env.reader_check()
        except lmdb.Error as exc:
            raise StoreIOError(self.path, "reader check") from exc
        if freed:
            _log.info("store.readers_reclaimed", path=self.path, slots=freed)
        return freed

    def resize(self, new_size: int, *, paused: bool = False) -> None:
        """Set the map size to ``new_size`` (0: adopt the size another process set).

        Waits until no transaction of this process is open; the caller must hold none.

        Args:
            new_size: The new map size in bytes, or 0.
            paused: The caller already paused transactions (:meth:`ResizeLock.pause`).

        Raises:
            StoreIOError: LMDB refused.

        Cost: blocks transactions for one remap.
        """
        if paused:
            self.lock.complete_exclusive()
        else:
            self.lock.acquire_exclusive()
        try:
            old = self.map_size()
            self.env.set_mapsize(new_size)
            _log.info("store.map_resized", path=self.path, old=old, new=self.map_size())
        except lmdb.Error as exc:
            raise StoreIOError(self.path, "resize") from exc
        finally:
            self.lock.release_exclusive()


class _Registry:
    """The environments open in this process, by real path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, SharedEnvironment] = {}

    def acquire(
        self, path: str, *, durability: str, map_size: int, verify: bool = False
    ) -> SharedEnvironment:
        """Return the shared environment at ``path``, opening it on first use.

        ``verify``: walk the whole file first (see :meth:`SharedEnvironment.verify`).

        Raises:
            ValidationError: The path is already open here with another durability.
            CorruptRecordError: The data file is damaged.
            StoreIOError: LMDB could not open it.
        """
        real = os.path.realpath(path)
        with self._lock:
            shared = self._open.get(real)
            if shared is None:
                shared = self._open_env(real, durability, map_size, verify)
                self._open[real] = shared
            elif shared.durability != durability:
                raise ValidationError(
                    f"store at {real} is already open in this process with "
                    f"durability={shared.durability!r}, not {durability!r}"
                )
            elif verify:
                shared.verify()
            shared.refs += 1
            return shared

    def release(self, shared: SharedEnvironment) -> None:
        """Drop one reference; close the environment when it was the last."""
        with self._lock:
            shared.refs -= 1
            if shared.refs > 0:
                return
            del self._open[shared.path]
        shared.lock.acquire_exclusive()
        try:
            shared.closed = True
            shared.env.close()
        finally:
            shared.lock.release_exclusive()
        _log.debug("store.env_closed", path=shared.path)

    @staticmethod
    def _open_env(real: str, durability: str, map_size: int, verify: bool) -> SharedEnvironment:
        durable = durability == "durable"
        attempt = 0
        while True:
            try:
                os.makedirs(real, exist_ok=True)
                env = lmdb.open(
                    real,
                    map_size=map_size,
                    max_dbs=len(DATABASES),
                    max_readers=MAX_READERS,
                    sync=durable,
                    metasync=durable,
                    readahead=False,
                    lock=True,
                )
                break
            except lmdb.MapResizedError as exc:
                # py-lmdb's own first transaction saw a map grown since LMDB read the
                # meta page: opening again reads the new size.
                attempt += 1
                if attempt >= _OPEN_ATTEMPTS:
                    raise StoreIOError(real, "open") from exc
            except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError) as exc:
                check_data_file(real)  # names the damage, if it can
                raise _damaged(real, str(exc)) from exc
            except (lmdb.Error, OSError) as exc:
                raise StoreIOError(real, "open") from exc
        try:
            # LMDB read the meta pages with pread and holds the lock file, so the file
            # is initialised; nothing has been read through the map yet.
            check_data_file(real)
            shared = SharedEnvironment(real, env, {}, durability)
            shared.reclaim_readers()
            if verify:
                shared.verify()
            shared.dbs.update(_open_databases(shared))
        except BaseException:
            env.close()
            raise
        _log.debug("store.env_opened", path=real, durability=durability, map_size=map_size)
        return shared


def _open_databases(shared: SharedEnvironment) -> dict[bytes, Any]:
    """Open the sub-databases (creating them the first time) in an explicit write transaction.

    Waits for LMDB's write lock if another process holds it, with the GIL released, so
    the opener's other threads keep running (see the module comment).

    Raises:
        CorruptRecordError: LMDB found the main database damaged.
        StoreIOError: LMDB failed.

    Cost: one write transaction; it writes (and syncs) only when it creates them.
    """
    env = shared.env
    while True:
        try:
            with env.begin(write=True) as txn:
                return {name: env.open_db(name, txn=txn) for name in DATABASES}
        except lmdb.MapResizedError:
            env.set_mapsize(0)  # another process grew the map: adopt its size
        except (lmdb.CorruptedError, lmdb.PageNotFoundError) as exc:
            raise _damaged(shared.path, str(exc)) from exc
        except lmdb.Error as exc:
            raise StoreIOError(shared.path, "open") from exc


#: The process-wide registry (see the module comment for why it exists).
REGISTRY: Final = _Registry()
