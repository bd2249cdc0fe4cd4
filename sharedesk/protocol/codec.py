"""Codecs: msgpack for storage, JSON for the wire.

Every decoder here turns malformed bytes into :class:`~sharedesk.ValidationError`, the
msgspec error chained.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from sharedesk.protocol.errors import SharedeskError, ValidationError
from sharedesk.protocol.views import SharingState

T = TypeVar("T")

_MSGPACK_ENCODER: Final = msgspec.msgpack.Encoder()
_JSON_ENCODER: Final = msgspec.json.Encoder()
_STATE_MSGPACK: Final = msgspec.msgpack.Decoder(SharingState)


def _decode(decoder: Any, data: bytes | bytearray | memoryview, what: str) -> Any:
    try:
        return decoder.decode(data)
    except SharedeskError:
        raise
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValidationError(f"malformed {what}: {exc}") from exc


def encode_msgpack(value: Any) -> bytes:
    """Encode any protocol value as msgpack (the storage format). Cost: O(size)."""
    return _MSGPACK_ENCODER.encode(value)


def encode_json(value: Any) -> bytes:
    """Encode any protocol value as JSON (the wire format). Cost: O(size)."""
    return _JSON_ENCODER.encode(value)


def decode_sharing_state(data: bytes | bytearray | memoryview) -> SharingState:
    """Decode one stored (msgpack) sharing state.

    Raises:
        ValidationError: The bytes are not a well-formed state.
        PresentSetTooLarge: The state holds more than ``PRESENT_SET_LIMIT`` present rows.
    """
    state: SharingState = _decode(_STATE_MSGPACK, data, "sharing state")
    return state


def decode_json_as(data: bytes | str, type_: type[T]) -> T:
    """Decode JSON into any protocol type (builds a decoder per call).

    Raises:
        ValidationError: The text does not match ``type_``.
    """
    raw = data.encode() if isinstance(data, str) else data
    value: T = _decode(msgspec.json.Decoder(type_), raw, type_.__name__)
    return value
