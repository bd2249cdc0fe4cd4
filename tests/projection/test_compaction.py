"""Compaction and late joiners in the folds: the summary row, deltas across it, paged turns."""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sharedesk.projection import TranscriptBuilder, project_session
from sharedesk.projection.compaction import (
    CompactedLog,
    compaction_covers,
    compaction_event,
    fold_compactions,
    summary_row,
)
from sharedesk.projection.messages import MessageFold
from sharedesk.projection.turns import TurnPlan, plan_turn
from sharedesk.protocol import (
    SCAN_LIMIT,
    SESSION_WINDOW,
    Conversation,
    Event,
    LogMessage,
    Operator,
    SessionAuthor,
    SessionQuery,
    SharingState,
    Text,
    ValidationError,
    same_participant,
)
from sharedesk.protocol.events import Compaction
from sharedesk.store import MemoryStore
from tests.projection.logs import (
    ALICE,
    AUTHORS,
    BOT,
    RecordingLog,
    reference_channel,
    reference_thread,
    row,
    row_lists,
    sequences,
)
from tests.projection.test_transcript import (
    SESSION,
    RecordingStore,
    optional_budget,
    unstamped_events,
)
from tests.projection.test_turns import DictReplies

CHANNEL = Conversation("d")
COMPACTOR = Operator()


def compaction(through: int, thread_root: int | None = None, sequence: int = 10_000) -> Event:
    return Event(
        COMPACTOR,
        Compaction(through, "summary", (ALICE,), thread_root),
        sequence=sequence,
    )


def well_formed(rows: Sequence[LogMessage]) -> list[LogMessage]:
    """The rows a store accepts: a parent names an earlier root of the same desk."""
    roots = {(r.sequence, r.desk) for r in rows if r.parent is None}
    return [r for r in rows if r.parent is None or (r.parent, r.desk) in roots]


def as_compacted(rows: Sequence[LogMessage], mark: Event) -> list[LogMessage]:
    """The naive reference: the rows above ``through``, then the summary in their place."""
    body = mark.body
    assert isinstance(body, Compaction)
    return [summary_row(mark, "d"), *(r for r in rows if r.sequence > body.through)]


def plan(
    rows: Sequence[LogMessage],
    state: SharingState | None,
    conversation: Conversation = CHANNEL,
    *,
    mark: Event | None = None,
    start_after: int | None = None,
    last: int | None = None,
    viewer: SessionAuthor = BOT,
) -> TurnPlan:
    top = max((r.sequence for r in rows), default=0) if last is None else last
    return plan_turn(
        RecordingLog(rows),
        state,
        conversation,
        viewer,
        top,
        DictReplies(rows),
        compaction=mark,
        start_after=start_after,
    )


def naive_view_above(
    rows: Sequence[LogMessage], conversation: Conversation, watermark: int, viewer: SessionAuthor
) -> list[int]:
    root = conversation.thread_root
    view = reference_channel(rows, "d") if root is None else reference_thread(rows, "d", root)
    return [
        r.sequence
        for r in view
        if r.sequence > watermark and not same_participant(r.author, viewer)
    ]


class TestSummaryRow:
    def test_a_channel_view_serves_the_summary_in_place_of_the_rows_at_or_below_through(
        self,
    ) -> None:
        rows = [row(1), row(2), row(3), row(4)]
        log = CompactedLog(RecordingLog(rows), compaction(2), "d")

        view = project_session(log, SessionQuery(CHANNEL))

        assert [2, 3, 4] == sequences(view.messages)
        assert (COMPACTOR, "summary", (ALICE,)) == (
            view.messages[0].author,
            view.messages[0].content,
            view.messages[0].covers,
        )
        assert () == view.messages[1].covers

    def test_a_thread_summary_is_a_reply_to_the_root_unless_it_compacts_the_root_only(
        self,
    ) -> None:
        assert 1 == summary_row(compaction(3, thread_root=1), "d").parent
        assert summary_row(compaction(1, thread_root=1), "d").parent is None

    def test_the_compacted_log_never_reads_below_through(self) -> None:
        rows = [row(n) for n in range(1, 200)]
        inner = RecordingLog(rows)

        project_session(CompactedLog(inner, compaction(190), "d"), SessionQuery(CHANNEL))

        assert all(read.before is None or read.before > 191 for read in inner.reads)

    @settings(max_examples=200)
    @given(
        rows=row_lists(max_rows=40),
        through=st.integers(1, 130),
        root_choice=st.integers(0, 130),
        window=st.integers(0, 12),
    )
    def test_a_view_is_the_view_of_the_rows_above_through_with_the_summary_below(
        self, rows: list[LogMessage], through: int, root_choice: int, window: int
    ) -> None:
        thread = None if root_choice % 3 == 0 else min(root_choice, through)
        mark = compaction(through, thread)
        conversation = Conversation("d", thread)
        query = SessionQuery(conversation, window=window)

        compacted = project_session(CompactedLog(RecordingLog(rows), mark, "d"), query)

        assert project_session(RecordingLog(as_compacted(rows, mark)), query) == compacted


class TestTurnsAcrossACompaction:
    def test_a_watermark_below_through_gets_the_compacted_full_window(self) -> None:
        rows = [row(n) for n in range(1, 6)]

        turn = plan(rows, SharingState(CHANNEL, 1), mark=compaction(3))

        assert ("compacted", [3, 4, 5]) == (turn.reason, sequences(turn.messages))
        assert 5 == turn.next_state.watermark

    def test_a_first_turn_holds_the_summary_and_what_follows(self) -> None:
        rows = [row(n) for n in range(1, 6)]

        turn = plan(rows, None, mark=compaction(3))

        assert ("initial", [3, 4, 5]) == (turn.reason, sequences(turn.messages))

    def test_a_channel_reply_to_a_root_below_through_is_in_neither_view_nor_delta(self) -> None:
        rows = [row(1), row(2), row(3), row(4, parent=1)]

        turn = plan(rows, SharingState(CHANNEL, 3), mark=compaction(2))

        assert (None, []) == (turn.reason, sequences(turn.messages))

    @settings(max_examples=200)
    @given(
        rows=row_lists(max_rows=40),
        through=st.integers(1, 130),
        above=st.integers(0, 130),
        root_choice=st.integers(0, 130),
        viewer=st.sampled_from(AUTHORS),
    )
    def test_a_delta_after_through_drops_and_repeats_no_row(
        self,
        rows: list[LogMessage],
        through: int,
        above: int,
        root_choice: int,
        viewer: SessionAuthor,
    ) -> None:
        rows = well_formed(rows)
        last = max((r.sequence for r in rows), default=0)
        through = min(through, max(last, 1))
        watermark = min(through + above, max(last, through))
        thread = None if root_choice % 3 == 0 else min(root_choice, through)
        conversation = Conversation("d", thread)
        mark = compaction(through, thread)

        turn = plan(
            rows,
            SharingState(conversation, watermark),
            conversation,
            mark=mark,
            last=max(last, through),
            viewer=viewer,
        )

        expected = naive_view_above(as_compacted(rows, mark), conversation, watermark, viewer)
        assert (None, expected) == (turn.reason, sequences(turn.messages))


class TestLateJoiner:
    def test_a_late_joiner_gets_the_oldest_window_after_start_after(self) -> None:
        rows = [row(n) for n in range(1, 101)]

        turn = plan(rows, None, start_after=10)

        assert list(range(11, 11 + SESSION_WINDOW)) == sequences(turn.messages)
        assert (None, 10 + SESSION_WINDOW, True) == (
            turn.reason,
            turn.next_state.watermark,
            turn.next_state.paged,
        )
        assert turn.expected_state is None

    def test_the_last_page_ends_the_paging(self) -> None:
        rows = [row(n) for n in range(1, 21)]

        turn = plan(rows, None, start_after=10)

        assert (list(range(11, 21)), 20, False) == (
            sequences(turn.messages),
            turn.next_state.watermark,
            turn.next_state.paged,
        )

    def test_a_page_walks_past_spans_that_offer_nothing(self) -> None:
        rows = [row(n) for n in range(1, 5001)]
        rows[4000] = row(4001, parent=1)
        thread = Conversation("d", 1)

        turn = plan(rows, None, thread, start_after=1)

        assert ([4001], 2 * (SCAN_LIMIT - 1) + 1, True) == (
            sequences(turn.messages),
            turn.next_state.watermark,
            turn.next_state.paged,
        )

    @pytest.mark.parametrize("start_after", [21, 1000])
    def test_start_after_beyond_the_last_sequence_is_refused(self, start_after: int) -> None:
        with pytest.raises(ValidationError, match="beyond the last sequence"):
            plan([row(n) for n in range(1, 21)], None, start_after=start_after)

    def test_start_after_with_sharing_state_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="already stand"):
            plan([row(1), row(2)], SharingState(CHANNEL, 1), start_after=0)

    def test_start_after_below_a_compaction_gets_the_compacted_full_window(self) -> None:
        rows = [row(n) for n in range(1, 6)]

        turn = plan(rows, None, mark=compaction(3), start_after=1)

        assert ("compacted", [3, 4, 5], False) == (
            turn.reason,
            sequences(turn.messages),
            turn.next_state.paged,
        )

    @settings(max_examples=100)
    @given(
        rows=row_lists(max_rows=120, gaps=False),
        start=st.integers(0, 130),
        root_choice=st.integers(0, 130),
        viewer=st.sampled_from(AUTHORS),
    )
    def test_pages_bring_every_row_after_start_after_once_in_order(
        self, rows: list[LogMessage], start: int, root_choice: int, viewer: SessionAuthor
    ) -> None:
        rows = well_formed(rows)
        last = max((r.sequence for r in rows), default=0)
        start = min(start, last)
        thread = None if root_choice % 3 == 0 else root_choice % (last + 2) or None
        conversation = Conversation("d", thread)

        turn = plan(rows, None, conversation, start_after=start, viewer=viewer)
        delivered = sequences(turn.messages)
        pages = 1
        while turn.next_state.paged:
            assert len(turn.messages) <= SESSION_WINDOW
            turn = plan(rows, turn.next_state, conversation, viewer=viewer)
            delivered += sequences(turn.messages)
            pages += 1
            assert pages <= len(rows) + 1

        assert naive_view_above(rows, conversation, start, viewer) == delivered
        assert last == turn.next_state.watermark


ROWS = (row(1, author=ALICE), row(2, author=BOT), row(3, author=ALICE), row(4))


class TestCompactionEvent:
    def event(
        self,
        through: object,
        previous: Event | None = None,
        *,
        summary: object = "sum",
        last: int = 4,
        conversation: Conversation = CHANNEL,
    ) -> Event:
        log = RecordingLog(ROWS)
        return compaction_event(log, conversation, summary, through, COMPACTOR, last, previous)

    def test_covers_names_each_author_of_the_compacted_rows_once(self) -> None:
        body = self.event(3).body

        assert Compaction(3, "sum", (ALICE, BOT)) == body

    def test_covers_keeps_the_previous_compactions_authors(self) -> None:
        previous = Event(COMPACTOR, Compaction(1, "old", (COMPACTOR,)), sequence=5)

        body = self.event(2, previous).body

        assert isinstance(body, Compaction)
        assert (COMPACTOR, BOT) == body.covers

    @pytest.mark.parametrize(
        ("through", "kw", "match"),
        [
            (5, {}, "beyond the last sequence"),
            (0, {}, "at least 1"),
            ("3", {}, "must be an int"),
            (2, {"summary": "  "}, "non-blank"),
            (2, {"last": 0}, "unknown"),
            (1, {"conversation": Conversation("d", 2)}, "below the thread's root"),
        ],
    )
    def test_bad_input_is_refused(self, through: object, kw: dict[str, object], match: str) -> None:
        with pytest.raises(ValidationError, match=match):
            self.event(through, **kw)  # type: ignore[arg-type]

    def test_through_at_or_below_the_previous_compaction_is_refused(self) -> None:
        previous = Event(COMPACTOR, Compaction(3, "old"), sequence=5)

        with pytest.raises(ValidationError, match="previous compaction"):
            self.event(3, previous)

    def test_the_session_state_keeps_the_highest_compaction_per_conversation(self) -> None:
        first, stale, thread = compaction(3), compaction(2), compaction(4, thread_root=1)

        kept = fold_compactions(fold_compactions(fold_compactions((), first), stale), thread)

        assert (first, thread) == kept

    def test_covers_walks_only_down_to_the_previous_compaction(self) -> None:
        log = RecordingLog([row(n) for n in range(1, 2000)])
        previous = Event(COMPACTOR, Compaction(1900, "old"), sequence=2000)

        compaction_covers(log, CHANNEL, 1950, previous)

        assert 1 == len(log.reads)


class TestTranscript:
    def text(self, sequence: int, content: str, author: SessionAuthor = ALICE) -> Event:
        return Event(author, Text(content), sequence=sequence)

    def test_a_compaction_replaces_the_messages_at_or_below_through_by_its_summary(
        self,
    ) -> None:
        fold = MessageFold(BOT)
        mark = Event(COMPACTOR, Compaction(2, "short", (ALICE,)), sequence=4)

        fold.add_all([self.text(1, "a"), self.text(2, "b"), self.text(3, "c"), mark])

        messages = fold.finish()[0]
        assert [("short", "user"), ("c", "user")] == [(m.content, m.role) for m in messages]
        assert (["person:alice"], COMPACTOR) == (messages[0].metadata["covers"], messages[0].author)

    def test_a_later_compaction_replaces_the_earlier_summary_and_a_stale_one_changes_nothing(
        self,
    ) -> None:
        fold = MessageFold(BOT)
        first = Event(COMPACTOR, Compaction(1, "first"), sequence=3)
        second = Event(COMPACTOR, Compaction(3, "second"), sequence=5)
        stale = Event(COMPACTOR, Compaction(2, "stale"), sequence=6)

        fold.add_all([self.text(1, "a"), self.text(2, "b"), first, self.text(4, "c")])
        fold.add_all([second, stale])

        assert ["second", "c"] == [m.content for m in fold.finish()[0]]

    def test_a_thread_compaction_leaves_the_transcript_as_it_is(self) -> None:
        fold = MessageFold(BOT)
        mark = Event(COMPACTOR, Compaction(2, "short", (), thread_root=1), sequence=3)

        fold.add_all([self.text(1, "a"), self.text(2, "b"), mark])

        assert ["a", "b"] == [m.content for m in fold.finish()[0]]


def test_a_paged_state_round_trips_through_msgpack() -> None:
    state = SharingState(CHANNEL, 3, frozenset({5}), paged=True)

    assert state == msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=SharingState)


class TestTranscriptFromStore:
    def store_with_compaction(self, before: int, after: int) -> RecordingStore:
        store = RecordingStore()
        store.append(SESSION, [Event(ALICE, Text(f"old {n}")) for n in range(before)])
        store.append(SESSION, [Event(COMPACTOR, Compaction(before, "gist", (ALICE,)))])
        store.append(SESSION, [Event(ALICE, Text(f"new {n}")) for n in range(after)])
        store.reads.clear()
        return store

    def test_a_whole_transcript_reads_nothing_at_or_below_through(self) -> None:
        store = self.store_with_compaction(500, 3)

        transcript = TranscriptBuilder.from_store(store, SESSION)

        assert ["gist", "new 0", "new 1", "new 2"] == [m.content for m in transcript.messages]
        assert [500] == [read["after"] for read in store.reads]

    def test_a_budgeted_tail_read_stops_at_through(self) -> None:
        store = self.store_with_compaction(5000, 3)

        transcript = TranscriptBuilder.from_store(store, SESSION, max_messages=1000)

        assert ["gist", "new 0", "new 1", "new 2"] == [m.content for m in transcript.messages]
        assert 1 == len(store.reads)

    @settings(max_examples=100)
    @given(
        unstamped_events,
        st.integers(0, 30),
        st.integers(0, 10),
        optional_budget,
        optional_budget,
        st.integers(1, 4),
    )
    def test_a_tail_read_keeps_what_a_full_fold_keeps_across_a_compaction(
        self,
        events: list[Event],
        at: int,
        lag: int,
        max_messages: int | None,
        max_chars: int | None,
        first_page: int,
    ) -> None:
        at = min(at, len(events))
        assume(at >= 1)  # a compaction names rows stored before it
        mark = Event(COMPACTOR, Compaction(max(1, at - lag), "gist", ()))
        with (
            MemoryStore() as store,
            mock.patch("sharedesk.projection.transcript.FIRST_PAGE", first_page),
        ):
            store.append(SESSION, [*events[:at], mark, *events[at:]])
            full = TranscriptBuilder.from_events(
                store.read(SESSION),
                session_id=SESSION,
                max_messages=max_messages,
                max_chars=max_chars,
            )

            tail = TranscriptBuilder.from_store(
                store, SESSION, max_messages=max_messages, max_chars=max_chars
            )

            assert full.messages == tail.messages


def test_a_compaction_reaching_its_own_sequence_is_ignored_by_the_session_state() -> None:
    assert () == fold_compactions((), compaction(7, sequence=7))
