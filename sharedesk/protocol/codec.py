"""The wire codec: protocol values as JSON (the storage codec is :mod:`.records`)."""

from __future__ import annotations

from typing import Any, Final

import msgspec

_JSON_ENCODER: Final = msgspec.json.Encoder()


def encode_json(value: Any) -> bytes:
    """Encode any protocol value as JSON (the wire format). Cost: O(size)."""
    return _JSON_ENCODER.encode(value)
