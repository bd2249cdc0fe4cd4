"""The stored record codec and key hashing every durable backend shares.

Records are msgpack maps, so one written before a field was added still decodes (with
the field's default). Ids up to ``MAX_RAW_ID`` UTF-8 bytes stay as they are in keys;
longer ones, and run ids, are hashed with blake2b, so keys stay bounded (LMDB: 511
bytes). A key function takes the bytes the backend puts first (``LmdbStore``'s session
prefix, ``b""`` for PostgreSQL).
"""

from __future__ import annotations

import hashlib
from typing import Final, TypeVar

import msgspec

from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.errors import CorruptRecordError, SharedeskError
from sharedesk.protocol.events import Event, RunStarted, Text, TextDelta
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SessionState
from sharedesk.protocol.views import Conversation, SharingState

#: Longest id (UTF-8 bytes) kept as it is in its key; longer ones are hashed.
MAX_RAW_ID: Final = 100
EVENT_DECODER: Final = msgspec.msgpack.Decoder(Event)
_STATE_DECODER: Final = msgspec.msgpack.Decoder(SharingState)
_SESSION_STATE_DECODER: Final = msgspec.msgpack.Decoder(SessionState)
ENCODER: Final = msgspec.msgpack.Encoder()
#: Bodies whose fields are all immutable (str, bool, None): shared safely.
_IMMUTABLE_BODIES: Final = (Text, TextDelta, RunStarted)


def event_id_key(prefix: bytes, event_id: str) -> bytes:
    """Return the key of ``event_id`` after ``prefix``: ``0x00`` + the id, or ``0x01`` + its hash.

    Cost: O(len(event_id)); one blake2b past ``MAX_RAW_ID`` bytes.
    """
    raw = event_id.encode("utf-8")
    if len(raw) <= MAX_RAW_ID:
        return prefix + b"\x00" + raw
    return prefix + b"\x01" + hashlib.blake2b(raw, digest_size=32).digest()


def run_index_key(prefix: bytes, run_id: str) -> bytes:
    """Return the start of the run index keys of ``run_id`` (each adds a sequence). Cost: O(len)."""
    return prefix + b"\x01" + hashlib.blake2b(run_id.encode("utf-8"), digest_size=16).digest()


def sharing_key(prefix: bytes, viewer: str, conversation: Conversation) -> bytes:
    """Return the key of the sharing state of (viewer, conversation) after ``prefix``."""
    raw = viewer.encode("utf-8")
    digest = hashlib.blake2b(digest_size=32)
    digest.update(len(raw).to_bytes(4, "big") + raw)
    digest.update(ENCODER.encode(conversation))
    return prefix + digest.digest()


class LogRecord(msgspec.Struct, frozen=True):
    """The fields of a stored ``Text`` event that a log row needs (others are skipped)."""

    author: SessionAuthor
    body: Text
    sequence: int
    parent: int | None = None


LOG_DECODER: Final = msgspec.msgpack.Decoder(LogRecord)
_Record = TypeVar("_Record", Event, LogRecord)
_T = TypeVar("_T")


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


def _decode_stored(
    decoder: msgspec.msgpack.Decoder[_T], session_id: str, raw: bytes, what: str
) -> _T:
    try:
        return decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, SharedeskError) as exc:
        raise CorruptRecordError(session_id, 0, f"{what}: {exc}") from exc


def decode_state(session_id: str, raw: bytes) -> SharingState:
    """Decode a stored sharing state; :class:`CorruptRecordError` (sequence 0) if it cannot."""
    return _decode_stored(_STATE_DECODER, session_id, raw, "sharing state")


def decode_session_state(session_id: str, raw: bytes | None) -> SessionState:
    """Decode a stored session state (``None``: the empty state), as :func:`decode_state`."""
    if raw is None:
        return EMPTY_SESSION_STATE
    return _decode_stored(_SESSION_STATE_DECODER, session_id, raw, "session state")


def private_copy(event: Event) -> Event:
    """Return a copy of a stored event that shares no mutable object with it.

    Cost: O(1) for a plain message (a fresh ``metadata``); otherwise one msgpack round
    trip (what a store keeps is that encoding's result already, so the copy is equal).
    """
    if not event.metadata and isinstance(event.body, _IMMUTABLE_BODIES):
        return msgspec.structs.replace(event, metadata={})
    return EVENT_DECODER.decode(ENCODER.encode(event))
