"""``sharedesk retain STORE``: archive and remove a store's compacted rows, LMDB or PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from sharedesk import Agent, Event, Hub, Text
from sharedesk.cli import EXIT_USAGE
from sharedesk.store.archive import archive_file, read_archive
from tests.cli.test_cli import DESK, location, open_store, sharedesk

__all__ = ["location"]  # the fixture, shared with the other CLI tests

BOT = Agent(id="bot", label="Bot")


def compacted_desk(where: str) -> None:
    """A desk of 20 rows compacted through 15."""
    with open_store(where) as store, Hub(store) as hub:
        hub.append(DESK, [Event(BOT, Text(f"m{n}")) for n in range(1, 21)])
        hub.compact(DESK, "what was said", through=15, author=BOT)


def test_retain_archives_and_removes_the_compacted_rows_the_policy_lets_go(
    location: str, tmp_path: Path
) -> None:
    compacted_desk(location)
    archive = tmp_path / "archive"

    done = sharedesk("retain", location, "--keep-last", "10", "--archive", str(archive))

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{DESK}: removed 11 rows, archived through 11\n"
    sequences = [e.sequence for e in read_archive(archive_file(archive, DESK))]
    assert sequences == list(range(1, 12))
    with open_store(location) as store:
        assert store.session_state(DESK).archived_through == 11


def test_retain_of_an_unknown_desk_is_a_one_line_error(location: str) -> None:
    compacted_desk(location)

    done = sharedesk("retain", location, "--desk", "nobody")

    assert done.returncode == EXIT_USAGE
    assert "unknown session 'nobody'" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_retain_with_a_negative_keep_last_writes_nothing(location: str) -> None:
    compacted_desk(location)

    done = sharedesk("retain", location, "--keep-last", "-1")

    assert done.returncode == EXIT_USAGE
    assert "keep_last" in done.stderr
    with open_store(location) as store:
        assert store.session_state(DESK).archived_through == 0


def test_inspect_of_a_retained_desk_prints_the_rows_left(location: str) -> None:
    compacted_desk(location)
    assert sharedesk("retain", location).returncode == 0

    done = sharedesk("inspect", location, DESK)

    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 6  # m16 to m20 and the compaction
