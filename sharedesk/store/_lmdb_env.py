"""One LMDB environment per path per process, shared by every LmdbStore on that path.

py-lmdb refuses to open one environment twice in a process, so stores on one (real) path
share a reference-counted :class:`SharedEnvironment`, closed with its last store: the one
piece of process-wide mutable state, because the environment itself is process-wide.
Resizing the map remaps the file, so every transaction holds the :class:`ResizeLock`
shared, and a resize (or adopting a map another process grew) holds it exclusively.

Opening an existing file never takes LMDB's write lock, so it never waits for another
process's writer. The open of a new file creates the sub-databases and the format record
(:data:`FORMAT_KEY`) in one write transaction; other content is ``StoreFormatError``.
py-lmdb publishes sub-database handles only from a write transaction, so the first write
publishes them; until then each read opens its own, one such read at a time, as LMDB
requires of ``mdb_dbi_open``. The open reclaims dead processes' reader slots too, but
py-lmdb reads inside ``lmdb.open``: a process that finds every slot held by dead
processes fails to open (``StoreIOError``) until an open one reclaims them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

import lmdb

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import StoreFormatError, StoreIOError, ValidationError
from sharedesk.store._lmdb_layout import check_data_file, damaged, retried, tree_problem

_log = logger()

T = TypeVar("T")

#: The sub-databases of a store (see :mod:`sharedesk.store._lmdb_layout`).
DATABASES: Final = (b"events", b"ids", b"meta", b"texts", b"sharing", b"replies", b"runs")
#: The key of the format record in LMDB's unnamed database, and the format written.
FORMAT_KEY: Final = b"sharedesk:format"
FORMAT_VERSION: Final = 1
#: Opens an ``lmdb.Environment``: ``lmdb.open``'s signature (the seam fault tests use).
OpenEnvironment = Callable[..., Any]
#: A store's writer reclaims dead processes' reader slots once per this many commits.
READER_CHECK_COMMITS: Final = 32
#: The slots of LMDB's reader table (one per open read transaction, in every process).
MAX_READERS: Final = 1024
# Opens that may each find the map grown by another process before giving up.
_OPEN_ATTEMPTS: Final = 100


class ResizeLock:
    """Many transactions at once, or one resize alone (a writer-preferring RW lock)."""

    __slots__ = ("_active", "_cond", "_resizing")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._resizing = False

    def acquire_shared(self) -> None:
        """Enter a transaction; waits while a resize runs."""
        with self._cond:
            self._cond.wait_for(lambda: not self._resizing)
            self._active += 1

    def release_shared(self) -> None:
        """Leave a transaction."""
        with self._cond:
            self._active -= 1
            if self._resizing and self._active == 0:
                self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        """Wait until no transaction is open and block new ones (the caller holds none)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._resizing)
            self._resizing = True
        self.complete_exclusive()

    def pause(self) -> bool:
        """Stop new transactions from starting (the caller may hold one); return whether it did.

        Aborting a write transaction while other threads keep starting read transactions
        can stall inside py-lmdb (seen with 3.0 after ``MapFullError``), so the writer
        pauses readers before it aborts; it ends with :meth:`release_exclusive`.
        """
        with self._cond:
            if self._resizing:
                return False
            self._resizing = True
            return True

    def complete_exclusive(self) -> None:
        """Once paused, wait until no transaction is open."""
        with self._cond:
            self._cond.wait_for(lambda: not self._active)

    def release_exclusive(self) -> None:
        """Let transactions start again."""
        with self._cond:
            self._resizing = False
            self._cond.notify_all()


class _OwnHandles(dict[bytes, Any]):
    """The handles of one read transaction before publication, each opened on first use."""

    def __init__(self, env: Any, txn: Any) -> None:
        super().__init__()
        self._env = env
        self._txn = txn

    def __missing__(self, name: bytes) -> Any:
        handle = self[name] = self._env.open_db(name, txn=self._txn, create=False)
        return handle


class SharedEnvironment:
    """One open LMDB environment (at its real ``path``), its sub-databases, who uses it."""

    def __init__(self, path: str, env: Any, durability: str) -> None:
        self.path = path
        self.env = env
        self.durability = durability  # as opened
        self.lock = ResizeLock()  # shared by every transaction, exclusive for a resize
        self.closed = False  # set under the exclusive lock
        self.refs = 0
        self.published: dict[bytes, Any] | None = None  # the handles, once published
        # Held by a read transaction that opens its own handles, for its whole life, and
        # by the publishing write transaction while it opens them (mdb_dbi_open).
        self._handles_lock = threading.RLock()

    @classmethod
    def open(
        cls, real: str, durability: str, map_size: int, verify: bool, environment: OpenEnvironment
    ) -> SharedEnvironment:
        """Open the environment at ``real`` and check its file (``_Registry.acquire``)."""
        durable = durability == "durable"
        for attempt in range(1, _OPEN_ATTEMPTS + 1):
            try:
                os.makedirs(real, exist_ok=True)
                env = environment(
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
                # py-lmdb's first transaction saw the map grown since LMDB read the meta
                # page: opening again reads the new size.
                if attempt == _OPEN_ATTEMPTS:
                    raise StoreIOError(real, "open") from exc
            except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError) as exc:
                check_data_file(real)  # names the damage, if it can
                raise damaged(real, str(exc)) from exc
            except (lmdb.Error, OSError) as exc:
                raise StoreIOError(real, "open") from exc
        try:
            # LMDB read the meta pages with pread and holds the lock file, so the file is
            # initialised; nothing has been read through the map yet.
            check_data_file(real)
            shared = cls(real, env, durability)
            shared.reclaim_readers()
            shared.check_pages(full=verify)
            if shared.run("open", shared._is_new):
                shared.publish()  # a new file: the only open that takes the write lock
        except BaseException:
            env.close()
            raise
        _log.debug("store.env_opened", path=real, durability=durability, map_size=map_size)
        return shared

    @contextlib.contextmanager
    def read(self) -> Iterator[tuple[Any, dict[bytes, Any]]]:
        """Yield a read-only transaction and its sub-database handles (caller holds ``lock``)."""
        lock = self._handles_lock if self.published is None else contextlib.nullcontext()
        with lock, self.env.begin(buffers=False) as txn:
            yield txn, self.published or _OwnHandles(self.env, txn)

    def publish(self) -> None:
        """Open (on a new file, create) every sub-database for all transactions, once.

        Takes LMDB's write lock. Raises as :meth:`run`, or ``StoreFormatError``.
        """
        if self.published is not None:
            return

        def attempt() -> None:
            with self.env.begin(write=True) as txn, self._handles_lock:
                if self.published is None:
                    if self._format(txn) is None:
                        txn.put(FORMAT_KEY, str(FORMAT_VERSION).encode())
                    handles = {name: self.env.open_db(name, txn=txn) for name in DATABASES}
                    txn.commit()
                    self.published = handles

        self.run("open", attempt)

    def _is_new(self) -> bool:
        with self.env.begin(buffers=False) as txn:
            return self._format(txn) is None

    def _format(self, txn: Any) -> int | None:
        """Return the file's format (``None``: a new file), refusing any other."""
        raw = txn.get(FORMAT_KEY)
        present = [name.decode() for name in DATABASES if txn.get(name) is not None]
        if raw == str(FORMAT_VERSION).encode() and len(present) == len(DATABASES):
            return FORMAT_VERSION
        if raw is None and not present:
            return None
        found = (
            f"no format record beside the sub-databases {present}"
            if raw is None
            else f"format record {bytes(raw)[:40]!r} with the sub-databases {present}"
        )
        raise StoreFormatError(path=self.path, found=found, supported=FORMAT_VERSION)

    def run(self, operation: str, attempt: Callable[[], T], *, damage: bool = True) -> T:
        """Return ``attempt()`` run under :attr:`lock` shared, as the file allows.

        A map grown by another process is adopted and ``attempt`` runs again, and once
        more after freeing dead processes' reader slots. An LMDB error is ``StoreIOError``
        naming ``operation``, or (``damage``) ``CorruptRecordError`` for a damaged file.
        """
        reclaimed = False
        while True:
            self.lock.acquire_shared()
            try:
                return attempt()
            except lmdb.MapResizedError:
                full = False
            except lmdb.ReadersFullError as exc:
                if reclaimed:
                    raise StoreIOError(self.path, operation) from exc
                full = True
            except (lmdb.CorruptedError, lmdb.PageNotFoundError) as exc:
                if damage:
                    raise damaged(self.path, str(exc)) from exc
                raise StoreIOError(self.path, operation) from exc
            except lmdb.Error as exc:
                raise StoreIOError(self.path, operation) from exc
            finally:
                self.lock.release_shared()
            if full:  # slots of dead processes: free them and try once more
                reclaimed = True
                self.reclaim_readers()
            else:
                self.resize(0)  # another process grew the map: adopt its size

    def map_size(self) -> int:
        """Return the current map size in bytes."""
        size: int = self.env.info()["map_size"]
        return size

    def check_pages(self, *, full: bool) -> None:
        """Refuse a damaged file: walk its branch pages, or (``full``) every page, in a read txn."""

        def attempt() -> str | None:
            with self.env.begin():  # pins the snapshot the walk reads
                if full:
                    check_data_file(self.path, full=True)
                    return None
                return tree_problem(self.path)

        retried(self.path, lambda: self.run("verify" if full else "open", attempt, damage=False))

    def reclaim_readers(self) -> None:
        """Free the reader slots of processes that died."""
        try:
            freed = self.env.reader_check()
        except lmdb.Error as exc:
            raise StoreIOError(self.path, "reader check") from exc
        if freed:
            _log.info("store.readers_reclaimed", path=self.path, slots=freed)

    def resize(self, new_size: int, *, paused: bool = False) -> None:
        """Set the map size to ``new_size`` (0: adopt another process's) once no txn is open.

        The caller holds no transaction (``paused``: it paused them, ``ResizeLock.pause``).
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
        self,
        path: str,
        *,
        durability: str,
        map_size: int,
        verify: bool = False,
        environment: OpenEnvironment = lmdb.open,
    ) -> SharedEnvironment:
        """Return the shared environment at ``path``, opened with ``environment`` on first use.

        ``verify`` walks the whole file. Raises as ``LmdbStore`` does (``ValidationError``:
        the path is open here with another durability).
        """
        real = os.path.realpath(path)
        with self._lock:
            shared = self._open.get(real)
            if shared is None:
                shared = SharedEnvironment.open(real, durability, map_size, verify, environment)
                self._open[real] = shared
            elif shared.durability != durability:
                raise ValidationError(
                    f"store at {real} is already open in this process with "
                    f"durability={shared.durability!r}, not {durability!r}"
                )
            elif verify:
                shared.check_pages(full=True)
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


#: The process-wide registry (see the module header).
REGISTRY: Final = _Registry()
