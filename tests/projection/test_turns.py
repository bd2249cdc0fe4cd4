"""plan_turn and fold_views: what a turn offers, and what a pushed row does to a view."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedesk.projection import project_session
from sharedesk.projection.sharing import rows_above_watermark
from sharedesk.projection.turns import CachedView, TurnPlan, fold_views, plan_turn
from sharedesk.protocol import (
    SCAN_LIMIT,
    SESSION_WINDOW,
    Agent,
    Conversation,
    LogMessage,
    Reinitialize,
    ReinitializeReason,
    SessionAuthor,
    SessionQuery,
    SharingState,
    WatermarkRegression,
    same_participant,
)
from tests.projection.logs import (
    ALICE,
    AUTHORS,
    BOT,
    RecordingLog,
    as_messages,
    blank,
    reference_channel,
    reference_thread,
    row,
    row_lists,
    sequences,
)

CHANNEL = Conversation("d")


class DictReplies:
    """A first-reply index over fixed rows (the store's, computed naively) that records calls."""

    def __init__(self, rows: Sequence[LogMessage]) -> None:
        roots = {r.sequence for r in rows if r.parent is None and r.desk == "d"}
        self.first: dict[int, int] = {}
        for r in sorted(rows, key=lambda r: r.sequence):
            if r.parent in roots and r.desk == "d" and r.content.strip():
                self.first.setdefault(r.parent, r.sequence)
        self.calls: list[list[int]] = []

    def first_replies(self, roots: Collection[int]) -> dict[int, int]:
        self.calls.append(list(roots))
        return {root: self.first[root] for root in roots if root in self.first}


def plan(
    rows: Sequence[LogMessage],
    state: SharingState | None,
    conversation: Conversation = CHANNEL,
    viewer: SessionAuthor = BOT,
    last: int | None = None,
) -> TurnPlan:
    top = max((r.sequence for r in rows), default=0) if last is None else last
    return plan_turn(RecordingLog(rows), state, conversation, viewer, top, DictReplies(rows))


def state(
    watermark: int, conversation: Conversation = CHANNEL, present: Sequence[int] = ()
) -> SharingState:
    return SharingState(conversation, watermark, frozenset(present))


class TestFullWindow:
    def test_a_first_turn_is_the_view_with_the_viewers_own_rows(self) -> None:
        rows = [row(1, author=BOT), row(2), row(3, parent=1, author=BOT)]

        turn = plan(rows, None)

        expected = project_session(RecordingLog(rows), SessionQuery(conversation=CHANNEL))
        assert ("initial", expected.messages) == (turn.reason, turn.messages)
        assert [1, 2, 3] == sequences(turn.messages)

    def test_a_gap_beyond_the_scan_limit_gives_the_view_with_its_reason(self) -> None:
        rows = [row(n) for n in range(1, SCAN_LIMIT + 3)]

        turn = plan(rows, state(1))

        assert ReinitializeReason.GAP_TOO_LARGE.value == turn.reason
        assert SESSION_WINDOW == len(turn.messages)

    def test_the_next_state_has_the_last_sequence_as_watermark(self) -> None:
        turn = plan([row(1), row(2)], None, last=5)

        assert state(5) == turn.next_state
        assert turn.expected_state is None


class TestThreadDelta:
    def test_a_thread_delta_offers_the_root_that_arrived_above_the_watermark(self) -> None:
        """A thread taken before its root existed gets the root when it comes (case 3)."""
        thread = Conversation("d", 2)
        rows = [row(1), row(2), row(3, parent=2)]

        turn = plan(rows, state(1, thread), thread)

        assert (None, [2, 3]) == (turn.reason, sequences(turn.messages))

    def test_a_thread_delta_offers_direct_replies_only(self) -> None:
        thread = Conversation("d", 1)
        rows = [row(1), row(2, parent=1), row(3), row(4, parent=3), row(5, parent=1)]

        assert [2, 5] == sequences(plan(rows, state(1, thread), thread).messages)


class TestChannelDelta:
    def test_a_first_reply_whose_root_is_below_the_watermark_is_offered(self) -> None:
        rows = [row(1), row(2, parent=1), row(3)]

        assert [2, 3] == sequences(plan(rows, state(1)).messages)

    def test_a_second_reply_is_not_offered(self) -> None:
        rows = [row(1), row(2, parent=1), row(3, parent=1)]

        assert [] == plan(rows, state(2)).messages

    def test_a_blank_reply_is_never_first_and_the_next_non_blank_one_is(self) -> None:
        rows = [row(1), blank(2, parent=1), row(3, parent=1)]

        assert [3] == sequences(plan(rows, state(1)).messages)

    def test_the_reply_index_is_asked_once_for_the_parents_of_the_replies_walked(self) -> None:
        rows = [row(1), row(2), row(3, parent=2), row(4, parent=1), row(5, parent=2)]
        replies = DictReplies(rows)

        plan_turn(RecordingLog(rows), state(2), CHANNEL, BOT, 5, replies)

        assert [[1, 2]] == replies.calls

    def test_the_reply_index_is_not_asked_when_no_reply_was_walked(self) -> None:
        rows = [row(1), row(2), row(3, parent=1)]
        replies = DictReplies(rows)

        plan_turn(RecordingLog(rows), state(3), CHANNEL, BOT, 3, replies)
        plan_turn(RecordingLog(rows), state(1), Conversation("d", 1), BOT, 3, replies)

        assert [] == replies.calls


class TestDeltaLeavesOut:
    def test_a_delta_leaves_out_the_viewers_own_rows_whatever_their_label(self) -> None:
        rows = [row(1), row(2, author=BOT), row(3, author=Agent(id="bot", label="B2")), row(4)]

        assert [4] == sequences(plan(rows, state(1)).messages)

    def test_a_delta_leaves_out_the_present_set(self) -> None:
        rows = [row(1), row(2), row(3)]

        turn = plan(rows, state(1, present=[2, 9]))

        assert ([3], frozenset({9})) == (
            sequences(turn.messages),
            turn.next_state.present_above_watermark,
        )


class TestLogEnds:
    def test_a_log_ending_above_the_watermark_gives_a_delta(self) -> None:
        """Every row above the watermark was walked: a delta, not watermark_unavailable."""
        rows = [row(5), row(6)]

        turn = plan(rows, state(3))

        assert (None, [5, 6]) == (turn.reason, sequences(turn.messages))

    def test_the_walk_reports_the_log_ending_above_the_watermark_by_default(self) -> None:
        walked = rows_above_watermark(RecordingLog([row(5)]), 6, 3)

        assert Reinitialize(reason=ReinitializeReason.WATERMARK_UNAVAILABLE) == walked

    def test_the_walk_returns_the_rows_when_the_log_ends_at_the_watermark(self) -> None:
        walked = rows_above_watermark(RecordingLog([row(5)]), 6, 3, log_ends_at_watermark=True)

        assert [row(5)] == walked

    def test_the_walk_stops_at_the_first_row_at_or_below_the_watermark(self) -> None:
        log = RecordingLog([row(n) for n in range(1, 200)])

        walked = rows_above_watermark(log, 200, 190)

        assert isinstance(walked, list)
        assert (list(range(191, 200)), 64) == (sequences(walked), log.rows_read)

    def test_a_turn_with_nothing_new_reads_nothing(self) -> None:
        log = RecordingLog([row(1), row(2)])

        turn = plan_turn(log, state(2), CHANNEL, BOT, 2, DictReplies([]))

        assert (None, [], []) == (turn.reason, turn.messages, log.reads)

    def test_a_last_sequence_below_the_watermark_raises(self) -> None:
        with pytest.raises(WatermarkRegression):
            plan([row(1)], state(4), last=3)


def naive_delta(
    rows: Sequence[LogMessage], st_: SharingState, viewer: SessionAuthor, last: int
) -> list[int]:
    """Every row of the whole log's view above the watermark, not own, not present."""
    root = st_.conversation.thread_root
    view = reference_channel(rows, "d") if root is None else reference_thread(rows, "d", root)
    return [
        r.sequence
        for r in view
        if st_.watermark < r.sequence <= last
        and not same_participant(r.author, viewer)
        and r.sequence not in st_.present_above_watermark
    ]


class TestDeltaProperty:
    @settings(max_examples=150)
    @given(
        rows=row_lists(max_rows=40),
        cut=st.integers(0, 130),
        root_choice=st.integers(0, 130),
        viewer=st.sampled_from(AUTHORS),
        present=st.frozensets(st.integers(1, 130), max_size=5),
    )
    def test_a_delta_is_the_views_rows_above_the_watermark_minus_own_and_present(
        self,
        rows: list[LogMessage],
        cut: int,
        root_choice: int,
        viewer: SessionAuthor,
        present: frozenset[int],
    ) -> None:
        last = max((r.sequence for r in rows), default=0)
        watermark = min(cut, last)
        thread = None if root_choice % 3 == 0 else root_choice % (last + 2) or None
        conversation = Conversation("d", thread)
        before = msgspec.structs.replace(
            state(watermark, conversation), present_above_watermark=present
        )

        turn = plan(rows, before, conversation, viewer, last)

        assert (None, naive_delta(rows, before, viewer, last)) == (
            turn.reason,
            sequences(turn.messages),
        )
        assert before == turn.expected_state


# -- the projector's fold ----------------------------------------------------------------


def fresh(rows: Sequence[LogMessage], conversation: Conversation, window: int) -> CachedView:
    log = RecordingLog(rows)
    return CachedView(
        project_session(log, SessionQuery(conversation=conversation, window=window)),
        log.rows_read,
    )


class TestFoldView:
    def test_a_thread_root_arriving_after_the_view_was_built_is_folded_in(self) -> None:
        """A thread viewed before its root existed shows the root once it comes (case 3)."""
        thread = Conversation("d", 2)
        view = fresh([row(1)], thread, 30)

        folded = fold_views(view, [row(2), row(3, parent=2)], thread, 30)

        assert folded is not None and [2, 3] == sequences(folded.projection.messages)

    def test_a_blank_row_leaves_the_view_as_it_was(self) -> None:
        view = fresh([row(1)], CHANNEL, 30)

        folded = fold_views(view, [blank(2)], CHANNEL, 30)

        assert folded is not None and view.projection == folded.projection

    def test_a_channel_reply_needs_a_walk(self) -> None:
        assert fold_views(fresh([row(1)], CHANNEL, 30), [row(2, parent=1)], CHANNEL, 30) is None

    def test_a_new_root_pushes_the_oldest_message_out_of_a_full_window(self) -> None:
        view = fresh([row(1), row(2)], CHANNEL, 2)

        folded = fold_views(view, [row(3)], CHANNEL, 2)

        assert folded is not None and [2, 3] == sequences(folded.projection.messages)

    @settings(max_examples=150)
    @given(
        rows=row_lists(max_rows=30),
        split=st.integers(0, 30),
        root_choice=st.integers(0, 100),
        window=st.sampled_from([0, 1, 3, 30]),
    )
    def test_folding_rows_gives_what_a_fresh_walk_gives(
        self, rows: list[LogMessage], split: int, root_choice: int, window: int
    ) -> None:
        rows = [msgspec.structs.replace(r, desk="d") for r in rows]  # a tail is one desk
        last = max((r.sequence for r in rows), default=0)
        thread = None if root_choice % 3 == 0 else root_choice % (last + 3) or None
        conversation = Conversation("d", thread)
        view = fresh(rows[:split], conversation, window)
        for index in range(split, len(rows)):
            folded = fold_views(view, [rows[index]], conversation, window)
            expected = fresh(rows[: index + 1], conversation, window)
            if folded is not None:
                assert expected.projection == folded.projection
                assert expected.needed <= folded.needed
            view = expected if folded is None else folded


class TestInputsAreNotChanged:
    def test_plan_turn_leaves_its_state_as_it_was(self) -> None:
        before = state(1, present=[5])
        copy = msgspec.structs.replace(before)

        plan([row(1), row(2, author=ALICE)], before)

        assert copy == before

    def test_turn_messages_carry_their_parent_and_author(self) -> None:
        rows = [row(1), row(2, parent=1, author=ALICE)]

        assert as_messages(rows[1:]) == plan(rows, state(1)).messages
