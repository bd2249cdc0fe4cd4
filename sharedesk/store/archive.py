"""The retention archive: one JSON-lines file per desk, one stored event a line.

A line is the event as :func:`encode_line` writes it (``msgspec.json``, sequence and
timestamp included), and :func:`read_archive` decodes a file back to events equal to the
ones stored. :func:`append_archive` is idempotent by sequence: it writes only the events
above the file's last whole line (a line cut short by a crash is dropped first), so a
retention run again after a crash between archiving and removing writes no line twice.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Final
from urllib.parse import quote

import msgspec

from sharedesk.protocol.errors import CorruptRecordError, StoreIOError
from sharedesk.protocol.events import Event

__all__ = ["append_archive", "archive_file", "decode_line", "encode_line", "read_archive"]

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(Event)
#: Longest file name kept as the quoted desk id; longer ones end in a hash.
_MAX_NAME: Final = 200
_TAIL: Final = 65536


def encode_line(event: Event) -> bytes:
    """Return ``event`` as one archive line (JSON, newline-terminated)."""
    return _ENCODER.encode(event) + b"\n"


def decode_line(line: bytes) -> Event:
    """Return the event an archive line holds (``msgspec.DecodeError`` if none)."""
    return _DECODER.decode(line)


def archive_file(archive: str | os.PathLike[str], session_id: str) -> Path:
    """Return the archive file of ``session_id``: ``<archive>/<quoted id>.jsonl``.

    The id is percent-quoted (every character but letters, digits and ``_.-~``), so
    ``urllib.parse.unquote`` of the stem gives it back; past 200 characters the name is
    cut and a blake2b of the id added.
    """
    name = quote(session_id, safe="")
    if len(name) > _MAX_NAME:
        digest = hashlib.blake2b(session_id.encode("utf-8"), digest_size=16).hexdigest()
        name = f"{name[:_MAX_NAME]}.{digest}"
    return Path(archive) / f"{name}.jsonl"


def append_archive(path: Path, events: Iterable[Event]) -> int:
    """Append the ``events`` (oldest first) above the file's last sequence; fsync; return it.

    Returns the sequence of the file's last line afterwards (0: empty). Raises
    ``StoreIOError`` when the file cannot be written, ``CorruptRecordError`` when its
    last whole line is not an event. Cost: a read of the file's tail, the lines written,
    one fsync of the file (and of the directory when the file is new).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a+b") as file:
            last = _last_sequence(file, path)
            for event in events:
                assert event.sequence is not None
                if event.sequence > last:
                    file.write(encode_line(event))
                    last = event.sequence
            file.flush()
            os.fsync(file.fileno())
        if new:
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    except OSError as exc:
        raise StoreIOError(str(path), "archive") from exc
    return last


def _last_sequence(file: BinaryIO, path: Path) -> int:
    """Drop a cut-short last line of ``file`` (open ``a+b``); return its last line's sequence."""
    size = start = file.seek(0, os.SEEK_END)
    tail = b""
    while start > 0:  # read back until the last whole line is in ``tail``
        start = max(0, start - _TAIL)
        file.seek(start)
        tail = file.read(size - start)
        end = tail.rfind(b"\n")
        if end >= 0 and (start == 0 or tail.rfind(b"\n", 0, end) >= 0):
            break
    end = tail.rfind(b"\n")
    if start + end + 1 < size:
        file.truncate(start + end + 1)
    if end < 0:
        return 0
    try:
        sequence = decode_line(tail[tail.rfind(b"\n", 0, end) + 1 : end]).sequence
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(path.stem, 0, f"{path}: its last line is no event") from exc
    return sequence or 0


def read_archive(path: str | os.PathLike[str]) -> Iterator[Event]:
    """Yield the events of an archive file, oldest first (``CorruptRecordError``: a bad line)."""
    with Path(path).open("rb") as file:
        for number, line in enumerate(file, 1):
            try:
                yield decode_line(line)
            except msgspec.DecodeError as exc:
                raise CorruptRecordError(Path(path).stem, number, f"{path}: line {number}") from exc
