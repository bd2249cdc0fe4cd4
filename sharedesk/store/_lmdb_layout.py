r"""The key and record layout of an ``LmdbStore``: prefixes, keys, records, cursor walks.

Layout. One LMDB environment (a directory) holds seven sub-databases. Every key starts
with the session's *prefix*: the UTF-8 session id preceded by its length as 2 big-endian
bytes. Because the length comes first, no session's keys can fall inside another's range,
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

The ``replies`` index is written in the transaction that appends the root (empty) and
the one that appends its first non-blank reply, so a turn learns whether a reply is its
root's first with one key read, however far down the root lies, and a reply's parent is
checked to be a root ``Text`` row with the same read.

Ids up to ``MAX_RAW_ID`` bytes are kept as they are; longer ones are hashed (32-byte
blake2b) so every key stays under LMDB's 511-byte limit. Events are stored as msgpack
maps, so a record written before a field was added still decodes (the field takes its
default).

Everything here is a pure function of bytes and values (no environment, no thread): the
store (:mod:`sharedesk.store.lmdb`) builds its keys and decodes its records with it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

import msgspec

from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.codec import encode_msgpack
from sharedesk.protocol.errors import CorruptRecordError, SharedeskError
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.views import Conversation, SharingState
from sharedesk.store._common import SessionInfo

#: A sequence as stored in keys and values: 8 bytes, big-endian.
SEQ: Final = struct.Struct(">Q")
#: A session's meta record: last sequence, ``Text`` rows, last activity (microseconds).
META: Final = struct.Struct(">QQq")
#: The largest sequence a key can hold.
MAX_SEQ: Final = 2**64 - 1
#: Longest id (UTF-8 bytes) kept as it is in its key; longer ones are hashed.
MAX_RAW_ID: Final = 100
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND: Final = timedelta(microseconds=1)
EVENT_DECODER: Final = msgspec.msgpack.Decoder(Event)
STATE_DECODER: Final = msgspec.msgpack.Decoder(SharingState)
SESSION_STATE_DECODER: Final = msgspec.msgpack.Decoder(SessionState)
ENCODER: Final = msgspec.msgpack.Encoder()


def session_prefix(session_id: str) -> bytes:
    """Return the prefix of every key of ``session_id``: its UTF-8 length (2 bytes), then it."""
    raw = session_id.encode("utf-8")
    return len(raw).to_bytes(2, "big") + raw


def session_of(key: bytes) -> str:
    """Return the session id a key (of any database) starts with."""
    length = int.from_bytes(key[:2], "big")
    return key[2 : 2 + length].decode("utf-8")


def event_id_key(prefix: bytes, event_id: str) -> bytes:
    """Return the ``ids`` key of ``event_id`` (hashed past ``MAX_RAW_ID`` bytes)."""
    raw = event_id.encode("utf-8")
    if len(raw) <= MAX_RAW_ID:
        return prefix + b"\x00" + raw
    return prefix + b"\x01" + hashlib.blake2b(raw, digest_size=32).digest()


def run_index_key(prefix: bytes, run_id: str) -> bytes:
    """Return the start of the ``runs`` index keys of ``run_id`` (each adds a sequence)."""
    return prefix + b"\x01" + hashlib.blake2b(run_id.encode("utf-8"), digest_size=16).digest()


def sharing_key(prefix: bytes, viewer: str, conversation: Conversation) -> bytes:
    """Return the ``sharing`` key of (viewer, conversation) in the session of ``prefix``."""
    raw = viewer.encode("utf-8")
    digest = hashlib.blake2b(digest_size=32)
    digest.update(len(raw).to_bytes(4, "big") + raw)
    digest.update(encode_msgpack(conversation))
    return prefix + digest.digest()


class LogRecord(msgspec.Struct, frozen=True):
    """The fields of a stored ``Text`` event that a log row needs (others are skipped)."""

    author: SessionAuthor
    body: Text
    sequence: int
    parent: int | None = None


LOG_DECODER: Final = msgspec.msgpack.Decoder(LogRecord)
_Record = TypeVar("_Record", Event, LogRecord)


def decode_record(
    decoder: msgspec.msgpack.Decoder[_Record], session_id: str, sequence: int, raw: bytes
) -> _Record:
    """Decode the record stored at ``sequence``.

    Raises:
        CorruptRecordError: It does not decode, or holds another sequence.
    """
    try:
        record = decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptRecordError(session_id, sequence, str(exc)) from exc
    if record.sequence != sequence:
        raise CorruptRecordError(session_id, sequence, f"record holds sequence {record.sequence}")
    return record


def decode_state(session_id: str, raw: bytes) -> SharingState:
    """Decode a stored sharing state.

    Raises:
        CorruptRecordError: It does not decode (``sequence`` 0).
    """
    try:
        state: SharingState = STATE_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, SharedeskError) as exc:
        raise CorruptRecordError(session_id, 0, f"sharing state: {exc}") from exc
    return state


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
