"""One LMDB environment per path per process, shared by every LmdbStore on that path.

py-lmdb refuses to open one environment twice in a process, so stores on the same
(real) path share one :class:`SharedEnvironment`, reference-counted and closed when the
last store releases it. This registry is the one piece of process-wide mutable state in
sharedesk: it exists because the environment itself is process-wide.

Resizing the map (``set_mapsize``) is only safe while no transaction of this process is
open, because LMDB remaps the file. Every transaction, read or write, therefore holds
the environment's :class:`ResizeLock` in shared mode, and a resize (or adopting a map
grown by another process, ``MapResizedError``) holds it exclusively.

Several processes. Opening an existing file never takes LMDB's write lock, so it never
waits for another process's writer (nor for ever, for one stopped while it holds the
lock). The sub-databases and the format record (:data:`FORMAT_KEY`, in LMDB's unnamed
database) are created together, in one write transaction, by the open of a new file;
any other content is refused (``StoreFormatError``). A sub-database handle is usable by
every transaction only once it is *published*, and py-lmdb publishes only from a write
transaction (its ``commit()`` of a read-only one is ``mdb_txn_reset``, which drops the
handles opened in it). So the first write publishes them, which takes the lock anyway;
until then each read opens the handles it uses in its own transaction, one such read at
a time in this process, as LMDB requires of ``mdb_dbi_open`` (:meth:`SharedEnvironment.read`).

Reader slots left by processes that died are reclaimed (``reader_check``) at open,
whenever a read finds the reader table full, and by each store's writer every
``READER_CHECK_COMMITS`` commits (a stale slot pins the oldest snapshot: no page is
reused and the file grows). py-lmdb reads inside ``lmdb.open``, before there is an
environment to reclaim slots with, so a process that finds every slot held by dead
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
from sharedesk.store._lmdb_layout import (
    VERIFY_ATTEMPTS,
    check_data_file,
    damaged,
    tree_problem,
)

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
    """One open LMDB environment, its sub-databases, and who uses it.

    Attributes:
        path: The environment's real path.
        env: The py-lmdb environment.
        published: The handles every transaction may use, once published (else ``None``).
        durability: ``"durable"`` or ``"relaxed"``, as opened.
        lock: Held shared by every transaction, exclusively by a resize.
        closed: Set once the environment is closed (under the exclusive lock).
    """

    def __init__(self, path: str, env: Any, durability: str) -> None:
        self.path = path
        self.env = env
        self.durability = durability
        self.lock = ResizeLock()
        self.closed = False
        self.refs = 0
        self.published: dict[bytes, Any] | None = None
        # Held by a read transaction that opens its own handles, for its whole life, and
        # by the publishing write transaction while it opens them (mdb_dbi_open).
        self._handles_lock = threading.RLock()

    @contextlib.contextmanager
    def read(self) -> Iterator[tuple[Any, dict[bytes, Any]]]:
        """Run a read-only transaction; yield it and the sub-database handles to use in it.

        Before publication, such reads run one at a time in this process, each opening
        the handles it uses (``open_db(create=False)``: no write lock). The caller holds
        :attr:`lock` shared.

        Cost: one read transaction; before publication, one main-database lookup per
        sub-database used, and waiting for other such reads.
        """
        published = self.published
        if published is not None:
            with self.env.begin(buffers=False) as txn:
                yield txn, published
            return
        with self._handles_lock, self.env.begin(buffers=False) as txn:
            yield txn, self.published or _OwnHandles(self.env, txn)

    def publish(self) -> None:
        """Open every sub-database for all transactions; on a new file, create them.

        Takes LMDB's write lock (it waits while another process writes, with the GIL
        released). Done once per environment: by the open of a new file, else by the
        first write.

        Raises:
            StoreFormatError: Another process wrote a file of another format meanwhile.
            CorruptRecordError: LMDB found the main database damaged.
            StoreIOError: LMDB failed.

        Cost: one write transaction; it writes (and syncs) only on a new file.
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

    def check_format(self) -> bool:
        """Check the file's format record, without the write lock; return whether it is new.

        Raises:
            StoreFormatError: The file holds another format, or no record beside data.
            CorruptRecordError: LMDB found the main database damaged.
            StoreIOError: LMDB failed.

        Cost: one read transaction, one main-database lookup per sub-database.
        """

        def attempt() -> bool:
            with self.env.begin(buffers=False) as txn:
                return self._format(txn) is None

        return self.run("open", attempt)

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
        """Return ``attempt()``, run under :attr:`lock` shared, as the file allows.

        A map grown by another process (``MapResizedError``) is adopted and ``attempt``
        runs again; a full reader table runs it once more after freeing the slots of dead
        processes.

        Raises:
            CorruptRecordError: With ``damage``, LMDB found the main database damaged.
            StoreIOError: ``operation`` failed in LMDB; the cause is chained.
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
        """Return the current map size in bytes. Cost: O(1)."""
        size: int = self.env.info()["map_size"]
        return size

    def check_pages(self, *, full: bool) -> None:
        """Refuse a damaged file: walk its branch pages, or (``full``) every page.

        Each walk runs in a read transaction, which keeps the pages it reads from being
        reused by other writers; a problem seen while another process writes is walked
        again (up to three times) before the file is refused.

        Raises:
            CorruptRecordError: A page is damaged (see :func:`tree_problem`,
                :func:`check_data_file`).
            StoreIOError: The file cannot be read.

        Cost: a walk of the branch pages (about 0.3 ms per MB of small events); ``full``:
        a read of the whole file (2.5 to 10 ms per MB).
        """

        def attempt() -> str | None:
            with self.env.begin():  # pins the snapshot the walk reads
                if full:
                    check_data_file(self.path, full=True)
                    return None
                return tree_problem(self.path)

        problem: str | None = None
        for _attempt in range(VERIFY_ATTEMPTS):
            problem = self.run("verify" if full else "open", attempt, damage=False)
            if problem is None:
                return
        raise damaged(self.path, problem or "")

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

        Waits until no transaction of this process is open; the caller must hold none
        (``paused``: it already paused them, :meth:`ResizeLock.pause`).

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
        self,
        path: str,
        *,
        durability: str,
        map_size: int,
        verify: bool = False,
        environment: OpenEnvironment = lmdb.open,
    ) -> SharedEnvironment:
        """Return the shared environment at ``path``, opening it on first use.

        ``verify``: walk the whole file first (see :meth:`SharedEnvironment.check_pages`).
        ``environment``: opens the environment on first use (``lmdb.open``'s signature);
        a path already open here keeps the environment it was opened with.

        Raises:
            ValidationError: The path is already open here with another durability.
            StoreFormatError: The file holds another format.
            CorruptRecordError: The data file is damaged.
            StoreIOError: LMDB could not open it.
        """
        real = os.path.realpath(path)
        with self._lock:
            shared = self._open.get(real)
            if shared is None:
                shared = self._open_env(real, durability, map_size, verify, environment)
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

    @staticmethod
    def _open_env(
        real: str, durability: str, map_size: int, verify: bool, environment: OpenEnvironment
    ) -> SharedEnvironment:
        durable = durability == "durable"
        attempt = 0
        while True:
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
                # py-lmdb's own first transaction saw a map grown since LMDB read the
                # meta page: opening again reads the new size.
                attempt += 1
                if attempt >= _OPEN_ATTEMPTS:
                    raise StoreIOError(real, "open") from exc
            except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError) as exc:
                check_data_file(real)  # names the damage, if it can
                raise damaged(real, str(exc)) from exc
            except (lmdb.Error, OSError) as exc:
                raise StoreIOError(real, "open") from exc
        try:
            # LMDB read the meta pages with pread and holds the lock file, so the file
            # is initialised; nothing has been read through the map yet.
            check_data_file(real)
            shared = SharedEnvironment(real, env, durability)
            shared.reclaim_readers()
            shared.check_pages(full=verify)
            if shared.check_format():
                shared.publish()  # a new file: the only open that takes the write lock
        except BaseException:
            env.close()
            raise
        _log.debug("store.env_opened", path=real, durability=durability, map_size=map_size)
        return shared


#: The process-wide registry (see the module comment for why it exists).
REGISTRY: Final = _Registry()
