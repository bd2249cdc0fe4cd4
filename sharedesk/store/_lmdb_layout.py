r"""The key layout of an ``LmdbStore``: session prefixes, keys, meta records, cursor walks.

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
and sharing keys are :mod:`sharedesk.protocol.records`'s; the rest is here, as pure
functions of bytes and values.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sharedesk.protocol.ports import SessionInfo

#: A sequence as stored in keys and values: 8 bytes, big-endian.
SEQ: Final = struct.Struct(">Q")
#: A session's meta record: last sequence, ``Text`` rows, last activity (microseconds).
META: Final = struct.Struct(">QQq")
#: The largest sequence a key can hold.
MAX_SEQ: Final = 2**64 - 1
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND: Final = timedelta(microseconds=1)


def session_prefix(session_id: str) -> bytes:
    """Return the prefix of every key of ``session_id``: its UTF-8 length (2 bytes), then it."""
    raw = session_id.encode("utf-8")
    return len(raw).to_bytes(2, "big") + raw


def session_of(key: bytes) -> str:
    """Return the session id a key (of any database) starts with."""
    length = int.from_bytes(key[:2], "big")
    return key[2 : 2 + length].decode("utf-8")


def decode_info(session_id: str, raw: bytes) -> SessionInfo:
    """Return the :class:`SessionInfo` a meta record holds."""
    last, texts, micros = META.unpack(raw)
    return SessionInfo(
        session_id=session_id,
        last_sequence=last,
        text_count=texts,
        last_activity=EPOCH + micros * MICROSECOND,
    )


def position_below(cursor: Any, prefix: bytes, high: int) -> bool:
    """Put ``cursor`` on the last key below ``prefix + high``; return whether there is one."""
    if cursor.set_range(prefix + SEQ.pack(high)):
        return bool(cursor.prev())
    return bool(cursor.last())


def walk_down(cursor: Any, prefix: bytes, high: int, low: int) -> Iterator[tuple[int, bytes]]:
    """Yield (sequence, value) of ``prefix``'s keys with ``low < sequence < high``, newest first."""
    if not position_below(cursor, prefix, high):
        return
    size = len(prefix) + 8
    for key, value in cursor.iterprev(keys=True, values=True):
        if len(key) != size or not key.startswith(prefix):
            return
        sequence = int.from_bytes(key[-8:], "big")
        if sequence <= low:
            return
        yield sequence, value


def walk_up(cursor: Any, prefix: bytes, low: int, high: int) -> Iterator[tuple[int, bytes]]:
    """Yield (sequence, value) of ``prefix``'s keys with ``low < sequence < high``, oldest first."""
    if low >= MAX_SEQ or not cursor.set_range(prefix + SEQ.pack(low + 1)):
        return
    size = len(prefix) + 8
    for key, value in cursor.iternext(keys=True, values=True):
        if len(key) != size or not key.startswith(prefix):
            return
        sequence = int.from_bytes(key[-8:], "big")
        if sequence >= high:
            return
        yield sequence, value
