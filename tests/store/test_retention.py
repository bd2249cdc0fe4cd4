"""Retention, written once and run on every backend: what goes, where it goes, what stays.

:class:`RetentionContract` holds the rules; ``TestMemoryRetention``, ``TestLmdbRetention``
and ``TestPostgresRetention`` supply only the ``store`` fixture. Each test runs a Hub over the
store, as applications do.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from sharedesk import Hub, MemoryStore, RetentionPolicy
from sharedesk.protocol.authors import Agent, Person
from sharedesk.protocol.errors import RowsArchived, ValidationError
from sharedesk.protocol.events import Event, Text, TextDelta
from sharedesk.protocol.views import Conversation
from sharedesk.runs import ScriptedAdapter, SessionManager
from sharedesk.store.archive import archive_file, read_archive
from sharedesk.store.base import StoreBase
from sharedesk.store.lmdb import LmdbStore
from sharedesk.store.retention import apply_retention
from tests.cli.test_cli import location, open_store
from tests.store.conftest import ChildFactory

__all__ = ["location"]  # the fixture: an LMDB directory, or an empty PostgreSQL database

ANN = Person(id="ann", label="Ann")
BOT = Agent(id="bot", label="Bot")
DESK = "desk/one"


def fill(hub: Hub, count: int, session_id: str = DESK) -> None:
    """Append ``count`` rows, Ann's and the bot's in turn, contents ``m1``, ``m2``, ..."""
    start = hub.last_sequence(session_id)
    events = [
        Event(ANN if n % 2 else BOT, Text(f"m{n}")) for n in range(start + 1, start + count + 1)
    ]
    hub.append(session_id, events)


class RetentionContract:
    """Every retention rule; a backend's class supplies the ``store`` fixture."""

    @pytest.fixture
    def hub(self, store: StoreBase) -> Iterator[Hub]:
        with Hub(store) as hub:
            yield hub

    def compacted(self, hub: Hub, rows: int = 100, through: int = 90) -> None:
        fill(hub, rows)
        hub.compact(DESK, "what was said", through=through, author=BOT)

    def test_rows_at_or_below_the_compaction_go_and_the_others_keep_their_sequences(
        self, hub: Hub
    ) -> None:
        self.compacted(hub)

        report = hub.apply_retention(RetentionPolicy())

        assert report.removed == {DESK: 90}
        assert hub.archived_through(DESK) == 90
        assert [e.sequence for e in hub.read(DESK, after=90)] == list(range(91, 102))

    def test_a_read_below_archived_through_raises_rows_archived(self, hub: Hub) -> None:
        self.compacted(hub)
        hub.apply_retention(RetentionPolicy())

        with pytest.raises(RowsArchived) as raised:
            hub.read(DESK, after=50)

        assert (raised.value.session_id, raised.value.archived_through) == (DESK, 90)

    def test_a_whole_read_of_a_retained_desk_raises_rows_archived(self, hub: Hub) -> None:
        self.compacted(hub)
        hub.apply_retention(RetentionPolicy())

        with pytest.raises(RowsArchived):
            hub.read(DESK)

    def test_a_read_bounded_below_archived_through_raises_rows_archived(self, hub: Hub) -> None:
        self.compacted(hub)
        hub.apply_retention(RetentionPolicy())

        with pytest.raises(RowsArchived):
            hub.read(DESK, after=10, before=20)

    def test_a_newest_first_read_without_after_ends_above_archived_through(self, hub: Hub) -> None:
        self.compacted(hub)
        hub.apply_retention(RetentionPolicy())

        rows = hub.read(DESK, newest_first=True, limit=50)

        assert [e.sequence for e in rows] == list(range(101, 90, -1))

    def test_each_row_removed_is_archived_first_and_decodes_to_the_stored_event(
        self, hub: Hub, tmp_path: Path
    ) -> None:
        self.compacted(hub)
        stored = hub.read(DESK, before=91)

        hub.apply_retention(RetentionPolicy(archive=tmp_path / "archive"))

        assert list(read_archive(archive_file(tmp_path / "archive", DESK))) == stored

    def test_keep_last_keeps_the_desks_newest_rows(self, hub: Hub) -> None:
        self.compacted(hub)

        hub.apply_retention(RetentionPolicy(keep_last=30))

        assert hub.archived_through(DESK) == 71
        assert len(hub.read(DESK, after=71)) == 30

    def test_prune_first_rows_do_not_count_toward_keep_last(self, hub: Hub) -> None:
        fill(hub, 10)
        hub.append(DESK, [Event(BOT, TextDelta("d")) for _ in range(5)])
        fill(hub, 5)
        hub.compact(DESK, "what was said", through=20, author=BOT)

        hub.apply_retention(RetentionPolicy(keep_last=7))

        # Kept: the compaction, m20 to m16 and m10; the deltas among them do not count.
        assert hub.archived_through(DESK) == 9

    def test_max_age_keeps_rows_younger_than_it(self, hub: Hub) -> None:
        fill(hub, 50)
        fill(hub, 50)
        hub.compact(DESK, "what was said", through=90, author=BOT)
        older, younger = hub.read(DESK, after=49, limit=2)
        assert older.timestamp is not None and younger.timestamp is not None
        assert older.timestamp < younger.timestamp  # two commits

        report = apply_retention(
            hub.store,
            RetentionPolicy(max_age=timedelta(hours=1)),
            DESK,
            now=younger.timestamp + timedelta(hours=1),
        )

        assert report.archived_through == {DESK: 50}

    def test_a_second_run_removes_nothing_and_archives_no_line_twice(
        self, hub: Hub, tmp_path: Path
    ) -> None:
        self.compacted(hub)
        policy = RetentionPolicy(archive=tmp_path / "archive")
        hub.apply_retention(policy)

        report = hub.apply_retention(policy)

        assert report.removed == {DESK: 0}
        sequences = [e.sequence for e in read_archive(archive_file(tmp_path / "archive", DESK))]
        assert sequences == list(range(1, 91))

    def test_rows_go_in_chunks_with_the_same_outcome(self, hub: Hub, tmp_path: Path) -> None:
        self.compacted(hub)
        policy = RetentionPolicy(archive=tmp_path / "archive")

        report = apply_retention(hub.store, policy, DESK, chunk=7)

        assert (report.removed, hub.archived_through(DESK)) == ({DESK: 90}, 90)
        assert len(list(read_archive(archive_file(tmp_path / "archive", DESK)))) == 90

    def test_views_turns_and_transcripts_serve_the_summary_after_retention(self, hub: Hub) -> None:
        self.compacted(hub)
        hub.apply_retention(RetentionPolicy())

        view = hub.view(DESK, ANN)
        turn = hub.turn(DESK, ANN)
        transcript = hub.transcript(DESK, ANN)

        assert view.messages[0].content == "what was said"
        assert turn.messages[0].content == "what was said"
        assert transcript.messages[0].content == "what was said"
        assert [m.content for m in view.messages[-2:]] == ["m99", "m100"]

    def test_a_policy_that_keeps_nothing_of_an_uncompacted_desk_is_refused(
        self, hub: Hub, tmp_path: Path
    ) -> None:
        fill(hub, 10)

        with pytest.raises(ValidationError, match="no compaction"):
            hub.apply_retention(RetentionPolicy(archive=tmp_path / "archive"), DESK)

        assert len(hub.read(DESK)) == 10
        assert not (tmp_path / "archive").exists()

    def test_every_desk_leaves_an_uncompacted_desk_as_it_is(self, hub: Hub) -> None:
        self.compacted(hub)
        fill(hub, 10, "other")

        report = hub.apply_retention(RetentionPolicy())

        assert report.removed == {DESK: 90, "other": 0}
        assert len(hub.read("other")) == 10

    def test_an_unknown_desk_is_refused(self, hub: Hub) -> None:
        with pytest.raises(ValidationError, match="unknown"):
            hub.apply_retention(RetentionPolicy(keep_last=5), "nobody")

    def test_removing_above_the_newest_compaction_is_refused(self, hub: Hub) -> None:
        self.compacted(hub)
        store = hub.store
        assert isinstance(store, StoreBase)

        with pytest.raises(ValidationError, match="above the newest compaction"):
            store.remove_archived(DESK, 95)

        assert hub.archived_through(DESK) == 0

    def test_removing_below_archived_through_removes_nothing(self, hub: Hub) -> None:
        self.compacted(hub)
        hub.apply_retention(RetentionPolicy())
        store = hub.store
        assert isinstance(store, StoreBase)

        assert store.remove_archived(DESK, 50) == 0
        assert hub.archived_through(DESK) == 90

    def test_appends_continue_after_retention(self, hub: Hub) -> None:
        self.compacted(hub)
        hub.apply_retention(RetentionPolicy())

        fill(hub, 3)

        assert [e.sequence for e in hub.read(DESK, after=101)] == [102, 103, 104]

    def test_a_reply_to_a_root_retention_removed_raises_rows_archived_and_writes_nothing(
        self, hub: Hub
    ) -> None:
        self.compacted(hub)
        hub.apply_retention(RetentionPolicy())

        with pytest.raises(RowsArchived) as raised:
            hub.append(DESK, [Event(ANN, Text("a late reply"), parent=1)])

        assert (raised.value.session_id, raised.value.archived_through) == (DESK, 90)
        assert hub.last_sequence(DESK) == 101

    def test_a_thread_compaction_does_not_let_rows_go(self, hub: Hub) -> None:
        fill(hub, 5)
        hub.append(DESK, [Event(BOT, Text("reply"), parent=1)])
        hub.compact(
            DESK, "thread", through=6, author=BOT, conversation=Conversation(DESK, thread_root=1)
        )

        report = hub.apply_retention(RetentionPolicy())

        assert report.removed == {DESK: 0}

    def test_the_session_info_counts_the_text_rows_left(self, hub: Hub) -> None:
        self.compacted(hub)

        hub.apply_retention(RetentionPolicy())

        store = hub.store
        assert isinstance(store, StoreBase)
        info = store.session_info(DESK)
        assert info is not None and (info.last_sequence, info.text_count) == (101, 10)

    def ran(self, hub: Hub) -> str:
        """Rows 1-10, then a run of one reply (rows 11-14), then rows 15-20; its id."""
        fill(hub, 10)
        result = SessionManager.run_once(
            hub.store, ScriptedAdapter(["done"]), "go", session_id=DESK
        )
        fill(hub, 6)
        assert [e.sequence for e in hub.run_events(DESK, result.run_id)] == [11, 12, 13, 14]
        return result.run_id

    def test_a_run_whose_first_rows_were_archived_raises_rows_archived(self, hub: Hub) -> None:
        run_id = self.ran(hub)
        hub.compact(DESK, "what was said", through=12, author=BOT)
        hub.apply_retention(RetentionPolicy())

        with pytest.raises(RowsArchived) as raised:
            hub.run_events(DESK, run_id)

        assert (raised.value.session_id, raised.value.archived_through) == (DESK, 12)

    def test_a_run_whose_first_rows_were_archived_is_rows_archived_to_the_runs_layer(
        self, hub: Hub
    ) -> None:
        run_id = self.ran(hub)
        hub.compact(DESK, "what was said", through=12, author=BOT)
        hub.apply_retention(RetentionPolicy())

        with pytest.raises(RowsArchived):
            SessionManager.get_run(hub.store, run_id)

    def test_a_run_whose_rows_were_all_archived_raises_rows_archived_not_unknown_run(
        self, hub: Hub
    ) -> None:
        run_id = self.ran(hub)
        hub.compact(DESK, "what was said", through=18, author=BOT)
        hub.apply_retention(RetentionPolicy())

        with pytest.raises(RowsArchived):
            SessionManager.get_run(hub.store, run_id)

    def test_a_run_above_archived_through_reads_whole(self, hub: Hub) -> None:
        run_id = self.ran(hub)
        hub.compact(DESK, "what was said", through=10, author=BOT)
        hub.apply_retention(RetentionPolicy())

        run = SessionManager.get_run(hub.store, run_id)

        assert (run.status, run.input) == ("completed", [{"role": "user", "content": "go"}])

    def threaded(self, hub: Hub) -> Conversation:
        """Rows 1-5, a reply to row 1 (row 6), rows 7-10; the channel compacted through 8."""
        fill(hub, 5)
        hub.append(DESK, [Event(BOT, Text("in thread"), parent=1)])
        fill(hub, 4)
        hub.compact(DESK, "what was said", through=8, author=BOT)
        return Conversation(DESK, thread_root=1)

    def test_a_thread_view_whose_rows_were_archived_raises_rows_archived(self, hub: Hub) -> None:
        thread = self.threaded(hub)
        hub.append(DESK, [Event(ANN, Text("later in thread"), parent=1)])
        hub.apply_retention(RetentionPolicy())

        with Hub(hub.store) as fresh, pytest.raises(RowsArchived) as raised:
            fresh.view(DESK, ANN, thread)

        assert raised.value.archived_through == 8

    def test_a_thread_turn_whose_rows_were_archived_raises_rows_archived(self, hub: Hub) -> None:
        thread = self.threaded(hub)
        hub.apply_retention(RetentionPolicy())

        with Hub(hub.store) as fresh, pytest.raises(RowsArchived):
            fresh.turn(DESK, ANN, thread)

    def test_compacting_a_thread_whose_rows_were_archived_raises_rows_archived(
        self, hub: Hub
    ) -> None:
        thread = self.threaded(hub)
        hub.append(DESK, [Event(ANN, Text("later in thread"), parent=1)])
        hub.apply_retention(RetentionPolicy())
        last = hub.last_sequence(DESK)

        with pytest.raises(RowsArchived):
            hub.compact(DESK, "the thread", through=last, author=ANN, conversation=thread)

        assert hub.last_sequence(DESK) == last

    def test_a_thread_turn_caught_up_above_archived_through_gets_its_delta(self, hub: Hub) -> None:
        fill(hub, 5)
        hub.append(DESK, [Event(BOT, Text("in thread"), parent=1)])
        thread = Conversation(DESK, thread_root=1)
        hub.compact(DESK, "what was said", through=6, author=BOT)  # every Text row
        hub.turn(DESK, ANN, thread).commit()  # Ann's watermark: 7, the compaction
        hub.append(DESK, [Event(BOT, Text("later in thread"), parent=1)])
        hub.apply_retention(RetentionPolicy())

        with Hub(hub.store) as fresh:
            turn = fresh.turn(DESK, ANN, thread)

        assert (turn.reason, [m.content for m in turn.messages]) == (None, ["later in thread"])

    def test_a_thread_whose_root_lies_above_archived_through_reads_as_before(
        self, hub: Hub
    ) -> None:
        self.threaded(hub)
        hub.append(DESK, [Event(ANN, Text("later in thread"), parent=10)])
        hub.apply_retention(RetentionPolicy())

        with Hub(hub.store) as fresh:
            view = fresh.view(DESK, ANN, Conversation(DESK, thread_root=10))

        assert [m.content for m in view.messages] == ["m10", "later in thread"]

    def test_a_thread_compacted_at_or_above_archived_through_reads_through_its_summary(
        self, hub: Hub
    ) -> None:
        thread = self.threaded(hub)
        hub.compact(DESK, "the thread", through=9, author=ANN, conversation=thread)
        hub.append(DESK, [Event(ANN, Text("later in thread"), parent=1)])
        hub.apply_retention(RetentionPolicy())

        with Hub(hub.store) as fresh:
            view = fresh.view(DESK, ANN, thread)

        assert [m.content for m in view.messages] == ["the thread", "later in thread"]


class TestMemoryRetention(RetentionContract):
    """Retention on the in-memory backend."""

    @pytest.fixture
    def store(self) -> Iterator[StoreBase]:
        with MemoryStore() as store:
            yield store


class TestLmdbRetention(RetentionContract):
    """Retention on LMDB."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[StoreBase]:
        with LmdbStore(tmp_path / "store", durability="relaxed") as store:
            yield store


class TestPostgresRetention(RetentionContract):
    """Retention on PostgreSQL, a fresh database per test."""

    @pytest.fixture
    def store(self, postgres_dsn: str) -> Iterator[StoreBase]:
        from sharedesk.store.postgres import PostgresStore

        with PostgresStore(postgres_dsn) as store:
            yield store


class TestRetentionPolicy:
    """The policy checks itself as it is made."""

    def test_a_negative_keep_last_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="keep_last"):
            RetentionPolicy(keep_last=-1)

    def test_a_max_age_that_is_not_a_positive_timedelta_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="max_age"):
            RetentionPolicy(max_age=timedelta(0))

    def test_an_unknown_prune_first_kind_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="prune_first"):
            RetentionPolicy(prune_first=("Nothing",))

    def test_a_hub_refuses_what_is_not_a_policy(self) -> None:
        with Hub.open() as hub, pytest.raises(ValidationError, match="RetentionPolicy"):
            hub.apply_retention({"keep_last": 3})  # type: ignore[arg-type]


@pytest.mark.slow
class TestRetentionCrash:
    def test_after_sigkill_every_row_is_in_the_store_or_in_the_archive(
        self, location: str, tmp_path: Path, spawn: ChildFactory
    ) -> None:
        """Kill a retaining process at random points, again and again: no row is lost,
        none is archived twice, and a rerun finishes the job exactly."""
        archive = tmp_path / "archive"
        with open_store(location) as store, Hub(store) as hub:
            fill(hub, 300)
            hub.compact(DESK, "what was said", through=290, author=BOT)
            expected = {e.sequence: e for e in hub.read(DESK)}
        rng = random.Random(20261202)
        for _cycle in range(12):
            child = spawn("-m", "tests.store.retain_child", location, str(archive), DESK)
            assert child.stdout is not None
            assert child.stdout.readline() == b"ready\n"
            for _ in range(rng.randint(0, 9)):
                child.stdout.readline()
            os.kill(child.pid, signal.SIGKILL)  # after a random number of lines
            child.communicate(timeout=30)
            assert_every_row_kept_once(location, archive, expected)

        finish = spawn("-m", "tests.store.retain_child", location, str(archive), DESK)
        out, _ = finish.communicate(timeout=120)

        assert out.endswith(b"done\n")
        assert_every_row_kept_once(location, archive, expected)
        lines = list(read_archive(archive_file(archive, DESK)))
        assert [e.sequence for e in lines] == list(range(1, 291))


def assert_every_row_kept_once(
    location: str, archive: Path, expected: dict[int | None, Event]
) -> None:
    with open_store(location) as store:
        archived = store.session_state(DESK).archived_through
        kept = {e.sequence: e for e in store.read(DESK, after=archived)}
    file = archive_file(archive, DESK)
    lines = list(read_archive(file)) if file.exists() else []
    sequences = [e.sequence or 0 for e in lines]
    assert sequences == sorted(set(sequences))  # none twice, in order
    assert set(range(1, archived + 1)) <= set(sequences)  # every removed row archived
    assert {e.sequence: e for e in lines} | kept == expected


def test_a_hub_behind_another_that_retained_serves_its_next_turn(tmp_path: Path) -> None:
    with Hub.open(tmp_path / "store") as behind, Hub.open(tmp_path / "store") as other:
        fill(behind, 100)
        behind.turn(DESK, BOT).commit()  # its tail is at 100
        fill(other, 500)
        other.compact(DESK, "what was said", through=550, author=ANN)
        other.apply_retention(RetentionPolicy(keep_last=20))

        turn = behind.turn(DESK, BOT)  # its tail lies below the rows retention removed

        assert turn.reason == "compacted"
        assert turn.messages[-1].content == "m600"
