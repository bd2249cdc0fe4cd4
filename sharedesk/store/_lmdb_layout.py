r"""The key layout of an ``LmdbStore``: session prefixes, keys, meta records, walks and reads.

One LMDB environment (a directory) holds seven sub-databases. Every key starts with the
session's *prefix*: the UTF-8 session id preceded by its length as 2 big-endian bytes.
Because the length comes first, no session's keys can fall inside another's range,
whatever the ids hold (ids that prefix each other, ``/``, ``\x00``, non-ASCII).

=========  ==========================================  ===============================
database   key                                         value
=========  ==========================================  ===============================
events     prefix + sequence (8 bytes, big-endian)     the stored event (msgpack map)
ids        prefix + 0x00 + id, or 0x01 + blake2b(id)   sequence (8 bytes)
meta       prefix                                      last sequence, Text rows, last
                                                       activity (3 x 8 bytes)
texts      prefix + sequence                           empty: the ``Text`` row index
sharing    prefix + blake2b(viewer, conversation)      the sharing state (msgpack)
replies    prefix + sequence of a root ``Text`` row    its first non-blank reply's
                                                       sequence (8 bytes), or empty
runs       prefix                                      the session's state (msgpack,
                                                       see ``projection/runstate``)
runs       prefix + 0x01 + blake2b(run id) + sequence  empty: the run index
=========  ==========================================  ===============================

The ``replies`` entry of a root is written with the root (empty) and set by the
transaction that appends its first non-blank reply, so one key read says whether a row
is a root ``Text`` row and whether it is answered. LMDB's unnamed database holds the
sub-databases and the format record (see ``_lmdb_env``). The records and the id, run
and sharing keys are :mod:`sharedesk.protocol.records`'s.

LMDB trusts its file, so the open checks it first with plain file I/O, never through the
map (:func:`check_data_file`, :func:`tree_problem`): damage LMDB would meet as SIGBUS or
SIGABRT is ``CorruptRecordError`` instead. An empty ``data.mdb`` is a new environment.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Final, NamedTuple, TypeVar

import lmdb
import lmdb.verify
import msgspec

from sharedesk.protocol.errors import CorruptRecordError, StoreIOError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import SessionInfo
from sharedesk.protocol.records import LogRecord, decode_record

#: A sequence as stored in keys and values: 8 bytes, big-endian.
SEQ: Final = struct.Struct(">Q")
#: A session's meta record: last sequence, ``Text`` rows, last activity (microseconds).
META: Final = struct.Struct(">QQq")
#: The largest sequence a key can hold.
MAX_SEQ: Final = 2**64 - 1
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND: Final = timedelta(microseconds=1)

_Record = TypeVar("_Record", Event, LogRecord)


def session_prefix(session_id: str) -> bytes:
    """Return the prefix of every key of ``session_id``: its UTF-8 length (2 bytes), then it."""
    raw = session_id.encode("utf-8")
    return len(raw).to_bytes(2, "big") + raw


def session_of(key: bytes) -> str:
    """Return the session id a key (of any database) starts with."""
    return key[2 : 2 + int.from_bytes(key[:2], "big")].decode("utf-8")


def decode_info(session_id: str, raw: bytes) -> SessionInfo:
    """Return the :class:`SessionInfo` a meta record holds."""
    last_sequence, text_count, micros = META.unpack(raw)
    return SessionInfo(session_id, last_sequence, text_count, EPOCH + micros * MICROSECOND)


def walk(
    cursor: Any, prefix: bytes, low: int, high: int, *, newest_first: bool
) -> Iterator[tuple[int, bytes]]:
    """Yield (sequence, value) of ``prefix``'s keys with ``low < sequence < high``, in order."""
    if newest_first:
        found = cursor.prev() if cursor.set_range(prefix + SEQ.pack(high)) else cursor.last()
        items = cursor.iterprev(keys=True, values=True)
    else:
        found = low < MAX_SEQ and cursor.set_range(prefix + SEQ.pack(low + 1))
        items = cursor.iternext(keys=True, values=True)
    if not found:
        return
    size = len(prefix) + 8
    for key, value in items:
        if len(key) != size or not key.startswith(prefix):
            return
        sequence = int.from_bytes(key[-8:], "big")
        if not low < sequence < high:
            return
        yield sequence, value


def record_at(
    txn: Any,
    dbs: Mapping[bytes, Any],
    session_id: str,
    prefix: bytes,
    sequence: int,
    decoder: msgspec.msgpack.Decoder[_Record],
) -> _Record:
    """Return the record an index names at ``sequence`` (``CorruptRecordError``)."""
    raw = txn.get(prefix + SEQ.pack(sequence), db=dbs[b"events"])
    if raw is None:
        raise CorruptRecordError(session_id, sequence, "indexed but missing")
    return decode_record(decoder, session_id, sequence, raw)


#: The data file in an environment directory.
DATA_FILE: Final = "data.mdb"

# LMDB's meta page (64-bit builds, host byte order), after the page header: magic,
# version, fixed address, map size, the free and main databases' records (48 bytes each;
# the page size is the free database's first field), last used page, transaction id.
_MAGIC: Final = 0xBEEFC0DE
_META_PAGE: Final = struct.Struct("=IIQQI44x48xQQ")
_P_META: Final = 0x08
# Page header size -> the data version it goes with: LMDB 0.9 (16 bytes), 1.0 (24).
_LAYOUTS: Final = MappingProxyType({16: 1, 24: 3})
VERIFY_ATTEMPTS: Final = 3
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


def damaged(path: str, detail: str) -> CorruptRecordError:
    """Return the error for a damaged data file (no session: ``session_id`` is ``""``)."""
    return CorruptRecordError("", 0, f"{os.path.join(path, DATA_FILE)}: {detail}")


def retried(path: str, check: Callable[[], str | None]) -> None:
    """Refuse the file when ``check`` finds a problem each time (another process may write)."""
    problem: str | None = None
    for _attempt in range(VERIFY_ATTEMPTS):
        problem = check()
        if problem is None:
            return
    raise damaged(path, problem or "")


@contextlib.contextmanager
def _data_file(path: str) -> Iterator[tuple[int, bytes, int] | None]:
    """Yield the data file's fd, first bytes, size (``None``: none); OSError: StoreIOError."""
    try:
        fd = os.open(os.path.join(path, DATA_FILE), os.O_RDONLY)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:
        raise StoreIOError(path, "open") from exc
    try:
        head = os.pread(fd, 2 * 65536, 0)
        yield fd, head, os.fstat(fd).st_size  # the size after the metas: it only grows
    except OSError as exc:
        raise StoreIOError(path, "open") from exc
    finally:
        os.close(fd)


class _Meta(NamedTuple):
    """The committed meta page (the one with the higher transaction id)."""

    header: int  # the page header's size: 16 for LMDB 0.9's layout, 24 for 1.0's
    page_size: int
    last: int  # the last page in use
    free_root: int
    main_root: int


def _committed_meta(head: bytes, size: int) -> _Meta | str:
    """Parse both meta pages from the file's first bytes; return the committed one, or why not."""
    for header in _LAYOUTS:
        fits = len(head) >= header + _META_PAGE.size
        if fits and _META_PAGE.unpack_from(head, header)[0] == _MAGIC:
            break
    else:
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
        free_root = _DB_RECORD.unpack_from(head, offset + header + 24)[7]
        main_root = _DB_RECORD.unpack_from(head, offset + header + 24 + _DB_RECORD.size)[7]
        metas.append((txn_id, _Meta(header, page_size, last, free_root, main_root)))
    meta = max(metas)[1]
    if meta.last < 1:
        return f"the committed meta page names last page {meta.last}"
    return meta


def check_data_file(path: str, *, full: bool = False) -> None:
    """Refuse a data file that LMDB could not read without a signal (SIGBUS: a missing page).

    A file shorter than its committed meta page says is refused unless py-lmdb's offline
    verifier finds every page in use within it (LMDB may leave free pages unwritten);
    ``full`` verifies every page. Cost: a read of the first two pages; with the verifier,
    of the whole file (2.5 to 10 ms per MB).
    """

    def attempt() -> str | None:
        with _data_file(path) as opened:
            if opened is None or opened[2] == 0:
                return None
            _fd, head, size = opened
        meta = _committed_meta(head, size)
        if isinstance(meta, str):
            raise damaged(path, meta)
        if size >= (meta.last + 1) * meta.page_size and not full:
            return None
        try:
            problems: list[str] = lmdb.verify.verify(path)  # type: ignore[no-untyped-call]
        except (lmdb.verify.VerifyError, OSError) as exc:
            problems = [str(exc)]
        if not problems:
            return None
        return f"{size} bytes, {meta.last + 1} pages in use; the verifier reports: {problems[0]}"

    retried(path, attempt)


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


def _walk_tree(
    fd: int, root: int, page_size: int, last: int, roots: list[int] | None
) -> str | None:
    """Check one tree's pages (``roots``: read the leaves, collect sub-database roots)."""
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
        first = _PAGE_HEADER.size + 2 * count
        offsets = struct.unpack_from(f"={count}H", buf, _PAGE_HEADER.size)
        if any(not first <= offset <= page_size - _NODE.size for offset in offsets):
            return f"page {pgno} holds a node outside the page"
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
    """Say what is wrong with the pages LMDB steps through without checking them, or None.

    A cursor stepping from a branch onto a page that is not a leaf trips LMDB's assertion
    (SIGABRT). Every branch page of the committed trees is read, and the header of every
    page it points at checked (its number, branch or leaf, bounds); leaves are not read,
    except the main database's; nodes inside a leaf and overflow pages LMDB still trusts.
    Cost: about 0.3 ms per MB of small events.
    """
    with _data_file(path) as opened:
        if opened is None:
            return None
        fd, head, size = opened
        try:
            meta = _committed_meta(head, size)
            if isinstance(meta, str) or meta.header != _PAGE_HEADER.size:
                return None  # check_data_file judges the metas; LMDB 1.0's pages are not walked
            page_size, last = meta.page_size, meta.last
            roots: list[int] = []
            problem = _walk_tree(fd, meta.free_root, page_size, last, None)
            problem = problem or _walk_tree(fd, meta.main_root, page_size, last, roots)
            for root in roots:
                problem = problem or _walk_tree(fd, root, page_size, last, None)
            return problem
        except struct.error:
            return "the meta pages end early"
