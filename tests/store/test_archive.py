"""The retention archive file: one event a line, appended idempotently by sequence."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote

import pytest

from sharedesk import Agent, CorruptRecordError, Event, Text, ToolCall
from sharedesk.store.archive import append_archive, archive_file, encode_line, read_archive

BOT = Agent(id="bot", label="Bot")
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def stored(sequence: int, body: Text | ToolCall | None = None) -> Event:
    """An event as a store returns it: sequence and timestamp set."""
    return Event(BOT, body or Text(f"m{sequence}"), sequence=sequence, timestamp=WHEN)


def test_an_archive_line_decodes_to_an_equal_event(tmp_path: Path) -> None:
    event = stored(1, ToolCall("call-1", "search", {"q": ["a", "b"]}))
    path = tmp_path / "desk.jsonl"

    append_archive(path, [event])

    assert list(read_archive(path)) == [event]


def test_appending_skips_the_sequences_the_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "desk.jsonl"
    append_archive(path, [stored(1), stored(2)])

    last = append_archive(path, [stored(2), stored(3)])

    assert last == 3
    assert [e.sequence for e in read_archive(path)] == [1, 2, 3]


def test_a_line_cut_short_is_dropped_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "desk.jsonl"
    append_archive(path, [stored(1)])
    with path.open("ab") as file:
        file.write(encode_line(stored(2))[:-9])  # a crash mid-line

    append_archive(path, [stored(2)])

    assert [e.sequence for e in read_archive(path)] == [1, 2]


def test_a_damaged_last_line_is_a_corrupt_record(tmp_path: Path) -> None:
    path = tmp_path / "desk.jsonl"
    path.write_bytes(b"not json\n")

    with pytest.raises(CorruptRecordError):
        append_archive(path, [stored(1)])


def test_the_file_name_gives_the_desk_back() -> None:
    path = archive_file("archive", "team/desk #1")

    assert unquote(path.stem) == "team/desk #1"
    assert path.parent == Path("archive")
