"""One LMDB environment per path per process, shared by every LmdbStore on that path.

py-lmdb refuses to open one environment twice in a process, so stores on the same
(real) path share one :class:`SharedEnvironment`, reference-counted and closed when the
last store releases it. This registry is the one piece of process-wide mutable state in
sharedesk: it exists because the environment itself is process-wide.

Resizing the map (``set_mapsize``) is only safe while no transaction of this process is
open, because LMDB remaps the file. Every transaction, read or write, therefore holds
the environment's :class:`ResizeLock` in shared mode, and a resize (or adopting a map
grown by another process) holds it exclusively.

Several processes. Opening an existing file never takes LMDB's write lock, so it never
waits for another process's writer (nor for ever, for one stopped while it holds the
lock). The sub-databases and the format record (:data:`FORMAT_KEY`, in LMDB's unnamed
database) are created together, in one write transaction, by the open that finds a new
file: the only open that takes the write lock. A file that holds anything else (another
format, or sub-databases without the record) is refused as
:class:`~sharedesk.protocol.errors.StoreFormatError`. A sub-database handle is usable by
every transaction only once it is *published* to the environment, and py-lmdb 3.0
publishes only from a write transaction: its ``commit()`` of a read-only transaction is
``mdb_txn_reset``, which drops the handles opened in it (LMDB's own ``mdb_txn_commit``
would keep them), and its ``open_db`` without a transaction begins a write transaction
(holding the GIL while it waits for the lock) unless the whole environment is read-only.
So the handles are published by the first write transaction, which takes the lock anyway
(or by the open that creates the file). Until then a read opens the handles it uses
inside its own read-only transaction (``open_db(create=False)``), and, as LMDB requires
of ``mdb_dbi_open``, such reads run one at a time in this process
(:meth:`SharedEnvironment.read`). Appends wait for the write lock, as they must.

A map grown by another process (``MapResizedError``) is adopted (``set_mapsize(0)``)
and the open or transaction retried. Reader slots left by processes that died are reclaimed
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
Then the trees' branch pages are walked, with the header of every page they point at
(:func:`tree_problem`): LMDB asserts, and so aborts the process, when a cursor steps
from a branch onto a page that is not a leaf, so a garbled leaf is refused at open as
:class:`CorruptRecordError` too. What the walk does not read (the nodes inside a leaf,
overflow pages) LMDB still trusts; ``verify`` reads every page.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

import lmdb
import lmdb.verify

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import (
    CorruptRecordError,
    StoreFormatError,
    StoreIOError,
    ValidationError,
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
# The page header of LMDB 0.9 (the layout the tree walk reads): page number, pad, flags,
# lower and upper bounds of the free space; then the node offsets.
_PAGE_HEADER: Final = struct.Struct("=QHHHH")
# A node: size (or child page) low and high halves, flags (or the child's top half),
# key size; then the key and the data.
_NODE: Final = struct.Struct("=HHHH")
# A database record (in a meta page, or a named sub-database's node): pad, flags, depth,
# branch, leaf and overflow pages, entries, root page.
_DB_RECORD: Final = struct.Struct("=IHHQQQQQ")
_P_BRANCH: Final = 0x01
_P_LEAF: Final = 0x02
_F_SUBDATA: Final = 0x02
_NO_ROOT: Final = 2**64 - 1
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
    (2.5 to 10 ms per MB) with ``full``, or when it is shorter than its meta page says.
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


def _page_kind(buf: bytes, pgno: int, page_size: int) -> tuple[int, int] | str:
    """Check a tree page's header; return (branch or leaf flag, node count) or what is wrong."""
    header = _PAGE_HEADER.size
    if len(buf) < header:
        return f"page {pgno} lies past the end of the file"
    number, _pad, flags, lower, upper = _PAGE_HEADER.unpack_from(buf)
    kind = flags & 0x0F  # branch, leaf, overflow, meta: a tree page is one of the first two
    if number != pgno or kind not in (_P_BRANCH, _P_LEAF):
        return f"page {pgno} is damaged (it says page {number}, flags {flags:#x})"
    if not header <= lower <= upper <= page_size or (lower - header) % 2:
        return f"page {pgno} is damaged (free space {lower}..{upper})"
    return kind, (lower - header) // 2


def _node_offsets(buf: bytes, pgno: int, count: int, page_size: int) -> list[int] | str:
    """Return the offsets of a page's nodes, or what is wrong with them."""
    first = _PAGE_HEADER.size + 2 * count
    offsets = list(struct.unpack_from(f"={count}H", buf, _PAGE_HEADER.size))
    if any(not first <= offset <= page_size - _NODE.size for offset in offsets):
        return f"page {pgno} holds a node outside the page"
    return offsets


def _walk_tree(
    fd: int, root: int, page_size: int, last: int, roots: list[int] | None
) -> str | None:
    """Walk one tree's branch pages and check the header of every page they point at.

    ``roots``: also read the leaves and collect the named sub-databases' roots (the main
    database). Returns what is wrong, or None.
    """
    if root == _NO_ROOT:
        return None
    stack, seen = [root], {root}
    while stack:
        pgno = stack.pop()
        buf = os.pread(fd, page_size, pgno * page_size)
        if len(buf) < page_size:
            return f"page {pgno} lies past the end of the file"
        kind = _page_kind(buf, pgno, page_size)
        if isinstance(kind, str):
            return kind
        flags, count = kind
        offsets = _node_offsets(buf, pgno, count, page_size)
        if isinstance(offsets, str):
            return offsets
        for offset in offsets:
            low, high, node_flags, key_size = _NODE.unpack_from(buf, offset)
            if flags == _P_LEAF:
                if roots is not None and node_flags & _F_SUBDATA:
                    at = offset + _NODE.size + key_size
                    if at + _DB_RECORD.size > page_size:
                        return f"page {pgno} holds a sub-database record outside the page"
                    roots.append(_DB_RECORD.unpack_from(buf, at)[7])
                continue
            child = low | high << 16 | node_flags << 32
            if not 2 <= child <= last or child in seen:
                return f"branch page {pgno} points at page {child} (pages 2 to {last} in use)"
            seen.add(child)
            child_kind = _page_kind(
                os.pread(fd, _PAGE_HEADER.size, child * page_size), child, page_size
            )
            if isinstance(child_kind, str):
                return child_kind
            if child_kind[0] == _P_BRANCH or roots is not None:
                stack.append(child)
    return None


def tree_problem(path: str) -> str | None:
    """Check the pages LMDB steps through without checking them itself; say what is wrong.

    LMDB asserts (aborting the process) that a page a cursor steps onto from its branch
    page is a leaf. So every branch page of the committed trees (the free database, the
    main database and every named sub-database) is read with plain file I/O, never
    through a map, and the header of every page they point at is checked: its own page
    number, branch or leaf, bounds within the page. The leaves' contents are not read
    (nor overflow pages), except the main database's. Files of other page layouts (LMDB
    1.0) are not walked. Call it inside a read transaction, which keeps the pages it
    walks from being reused by other writers.

    Returns:
        What is wrong, or None.

    Raises:
        StoreIOError: The file cannot be read.

    Cost: one read per branch page, one 16-byte read per leaf (about 0.3 ms per MB of
    small events, 0.02 ms per MB of large ones, whose values fill overflow pages).
    """
    try:
        fd = os.open(os.path.join(path, DATA_FILE), os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreIOError(path, "open") from exc
    try:
        header = _PAGE_HEADER.size
        head = os.pread(fd, header + _META_PAGE.size, 0)
        if len(head) < header + _META_PAGE.size:
            return None  # empty (check_data_file judges the metas)
        if _META_PAGE.unpack_from(head, header)[0] != _MAGIC:
            return None  # another layout (check_data_file judges the metas)
        page_size = _META_PAGE.unpack_from(head, header)[4]
        head = os.pread(fd, 2 * page_size, 0)
        metas = []
        for number in (0, 1):
            base = number * page_size + header
            *_, last, txn_id = _META_PAGE.unpack_from(head, base)
            free_root = _DB_RECORD.unpack_from(head, base + 24)[7]
            main_root = _DB_RECORD.unpack_from(head, base + 24 + _DB_RECORD.size)[7]
            metas.append((txn_id, last, free_root, main_root))
        _txn, last, free_root, main_root = max(metas)
        roots: list[int] = []
        problem = _walk_tree(fd, free_root, page_size, last, None)
        problem = problem or _walk_tree(fd, main_root, page_size, last, roots)
        for root in roots:
            problem = problem or _walk_tree(fd, root, page_size, last, None)
        return problem
    except struct.error:
        return "the meta pages end early"
    except OSError as exc:
        raise StoreIOError(path, "open") from exc
    finally:
        os.close(fd)


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


class Databases(Mapping[bytes, Any]):
    """The sub-database handles, keyed by name (see ``DATABASES``), as this thread sees them.

    Once the handles are published (:meth:`SharedEnvironment.publish`) every transaction
    uses them. Before, the read transaction running on this thread (there is at most one:
    :meth:`SharedEnvironment.read`) opens each one it uses, on first use.
    """

    __slots__ = ("_shared",)

    def __init__(self, shared: SharedEnvironment) -> None:
        self._shared = shared

    def __getitem__(self, name: bytes) -> Any:
        published = self._shared.published
        if published is not None:
            return published[name]
        return self._shared.own_handle(name)

    def __iter__(self) -> Iterator[bytes]:
        return iter(DATABASES)

    def __len__(self) -> int:
        return len(DATABASES)


class SharedEnvironment:
    """One open LMDB environment, its sub-databases, and who uses it.

    Attributes:
        path: The environment's real path.
        env: The py-lmdb environment.
        dbs: The sub-databases, keyed by name (see :class:`Databases`).
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
        self.dbs = Databases(self)
        # Held by the one read transaction that opens its own handles, for its whole
        # life, and by the publishing write transaction while it opens them: LMDB
        # allows no other transaction to open handles meanwhile (mdb_dbi_open).
        self._handles_lock = threading.RLock()
        # (thread, transaction, handles it opened) of that read transaction.
        self._own: tuple[int, Any, dict[bytes, Any]] | None = None

    @contextlib.contextmanager
    def read(self) -> Iterator[Any]:
        """Run a read-only transaction in which :attr:`dbs` gives usable handles.

        With published handles, a plain read transaction. Before, one read transaction
        at a time in this process (reads are serialised until the first write publishes
        the handles), each opening the handles it uses (``open_db(create=False)`` in the
        read transaction: no write lock); a read nested in it on the same thread runs in
        the same transaction. The caller holds :attr:`lock` shared.

        Cost: one read transaction; before publication, up to one handle open (a
        main-database lookup) per sub-database used, and waiting for other readers here.
        """
        if self.published is not None:
            with self.env.begin(buffers=False) as txn:
                yield txn
            return
        with self._handles_lock:
            own = self._own
            if own is not None:  # a read nested in this thread's own (the lock is ours)
                yield own[1]
                return
            with self.env.begin(buffers=False) as txn:
                if self.published is None:
                    self._own = (threading.get_ident(), txn, {})
                try:
                    yield txn
                finally:
                    self._own = None

    def own_handle(self, name: bytes) -> Any:
        """Open ``name`` in this thread's read transaction (before publication).

        Raises:
            StoreIOError: No read transaction of :meth:`read` runs on this thread.
            lmdb.Error: LMDB failed (``NotFoundError``: the sub-database is missing).
        """
        own = self._own
        if own is None or own[0] != threading.get_ident():
            raise StoreIOError(self.path, f"use sub-database {name!r} outside a transaction")
        handles = own[2]
        handle = handles.get(name)
        if handle is None:
            handle = handles[name] = self.env.open_db(name, txn=own[1], create=False)
        return handle

    def publish(self) -> None:
        """Open every sub-database for all transactions; on a new file, create them.

        py-lmdb publishes a handle to the environment only from a write transaction (it
        resets a read-only transaction on commit, which drops the handles it opened), so
        this takes LMDB's write lock: it waits while another process writes, with the
        GIL released (only the calling thread waits). Done once per environment: by the
        open of a new file (which writes the sub-databases and the format record), else
        by the first write, which takes the write lock anyway.

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

        self._adopting_growth("open", attempt)

    def check_format(self) -> bool:
        """Check the file's format record, read without the write lock.

        Returns:
            Whether the file is new (no record and no sub-database): :meth:`publish`
            creates them.

        Raises:
            StoreFormatError: The file holds another format, or no record beside data.
            CorruptRecordError: LMDB found the main database damaged.
            StoreIOError: LMDB failed.

        Cost: one read transaction, one main-database lookup per sub-database.
        """

        def attempt() -> bool:
            with self.env.begin(buffers=False) as txn:
                return self._format(txn) is None

        return self._adopting_growth("open", attempt)

    def _format(self, txn: Any) -> int | None:
        """Return the file's format (``None``: a new file), refusing any other."""
        raw = txn.get(FORMAT_KEY)
        if raw == str(FORMAT_VERSION).encode():
            if all(txn.get(name) is not None for name in DATABASES):
                return FORMAT_VERSION
            found = f"format {FORMAT_VERSION} with sub-databases missing"
        elif raw is None:
            present = [name.decode() for name in DATABASES if txn.get(name) is not None]
            if not present:
                return None
            found = f"no format record beside the sub-databases {present}"
        else:
            found = f"format record {bytes(raw)[:40]!r}"
        raise StoreFormatError(path=self.path, found=found, supported=FORMAT_VERSION)

    def _adopting_growth(
        self, operation: str, attempt: Callable[[], T], *, damaged: bool = True
    ) -> T:
        """Return ``attempt()``, run under :attr:`lock` shared, adopting a map grown meanwhile.

        On ``MapResizedError`` (another process grew the map) the new size is adopted
        (``resize(0)``) and ``attempt`` runs again.

        Raises:
            CorruptRecordError: With ``damaged``, LMDB found the main database damaged.
            StoreIOError: ``operation`` failed in LMDB (also a damaged database when not
                ``damaged``).
        """
        while True:
            self.lock.acquire_shared()
            try:
                return attempt()
            except lmdb.MapResizedError:
                pass
            except (lmdb.CorruptedError, lmdb.PageNotFoundError) as exc:
                if damaged:
                    raise _damaged(self.path, str(exc)) from exc
                raise StoreIOError(self.path, operation) from exc
            except lmdb.Error as exc:
                raise StoreIOError(self.path, operation) from exc
            finally:
                self.lock.release_shared()
            self.resize(0)  # another process grew the map: adopt its size

    def map_size(self) -> int:
        """Return the current map size in bytes. Cost: O(1)."""
        size: int = self.env.info()["map_size"]
        return size

    def verify(self) -> None:
        """Walk every page of the data file (see :func:`check_data_file` with ``full``).

        Raises:
            CorruptRecordError: The file is damaged.
            StoreIOError: It cannot be read.

        A map grown by another process meanwhile is adopted and the walk run again.

        Cost: one read transaction held while the whole file is read (2.5-10 ms per MB).
        """

        def attempt() -> None:
            with self.env.begin():  # pins the snapshot the verifier walks
                check_data_file(self.path, full=True)

        self._adopting_growth("verify", attempt, damaged=False)

    def check_trees(self) -> None:
        """Refuse a file with a damaged page LMDB would abort on (see :func:`tree_problem`).

        A problem seen while another process writes is checked again (up to three walks,
        each in a fresh read transaction) before the file is refused.

        Raises:
            CorruptRecordError: A branch page, or a page one points at, is damaged.
            StoreIOError: The file cannot be read.

        Cost: one read transaction and a walk of the branch pages (see
        :func:`tree_problem`).
        """
        problem: str | None = None
        for _attempt in range(_VERIFY_ATTEMPTS):
            problem = self._walk_pinned()
            if problem is None:
                return
        raise _damaged(self.path, problem or "")

    def _walk_pinned(self) -> str | None:
        """Run :func:`tree_problem` inside a read transaction, adopting a grown map."""

        def attempt() -> str | None:
            with self.env.begin():  # pins the snapshot the walk reads
                return tree_problem(self.path)

        return self._adopting_growth("open", attempt, damaged=False)

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
        self,
        path: str,
        *,
        durability: str,
        map_size: int,
        verify: bool = False,
        environment: OpenEnvironment = lmdb.open,
    ) -> SharedEnvironment:
        """Return the shared environment at ``path``, opening it on first use.

        ``verify``: walk the whole file first (see :meth:`SharedEnvironment.verify`).
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
                raise _damaged(real, str(exc)) from exc
            except (lmdb.Error, OSError) as exc:
                raise StoreIOError(real, "open") from exc
        try:
            # LMDB read the meta pages with pread and holds the lock file, so the file
            # is initialised; nothing has been read through the map yet.
            check_data_file(real)
            shared = SharedEnvironment(real, env, durability)
            shared.reclaim_readers()
            if verify:
                shared.verify()
            else:
                shared.check_trees()
            if shared.check_format():
                shared.publish()  # a new file: the only open that takes the write lock
        except BaseException:
            env.close()
            raise
        _log.debug("store.env_opened", path=real, durability=durability, map_size=map_size)
        return shared


#: The process-wide registry (see the module comment for why it exists).
REGISTRY: Final = _Registry()
