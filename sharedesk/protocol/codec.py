"""Codecs: msgpack for storage, JSON for the wire."""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.records import ENCODER

T = TypeVar("T")

_JSON_ENCODER: Final = msgspec.json.Encoder()


def encode_msgpack(value: Any) -> bytes:
    """Encode any protocol value as msgpack (the storage format). Cost: O(size)."""
    return ENCODER.encode(value)


def encode_json(value: Any) -> bytes:
    """Encode any protocol value as JSON (the wire format). Cost: O(size)."""
    return _JSON_ENCODER.encode(value)


def decode_json_as(data: bytes | str, type_: type[T]) -> T:
    """Decode JSON into any protocol type.

    Raises:
        ValidationError: The text does not match ``type_`` (the msgspec error chained).
    """
    try:
        return msgspec.json.decode(data, type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValidationError(f"malformed {type_.__name__}: {exc}") from exc
