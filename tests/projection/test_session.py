"""project_session: the rules of the contract's Projection section, one test each."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedesk.projection import project_session
from sharedesk.projection.session import in_conversation
from sharedesk.projection.session import is_blank as the_blank_rule
from sharedesk.protocol import (
    PAGE_SIZE,
    SCAN_LIMIT,
    SESSION_WINDOW,
    Conversation,
    CursorAfterOldest,
    CursorDidNotAdvance,
    DuplicateSequence,
    EmptyPageCursor,
    Event,
    LogMessage,
    LogReadError,
    PageError,
    PageNotDescending,
    PageOutOfRange,
    PageTooLarge,
    Projection,
    RunStarted,
    SessionPage,
    SessionQuery,
    Text,
    ValidationError,
)
from sharedesk.store import MemoryStore
from tests.projection.logs import (
    BOT,
    Read,
    RecordingLog,
    ScriptedLog,
    as_messages,
    below,
    blank,
    is_blank,
    long_row_lists,
    page,
    reference_channel,
    reference_channel_pending,
    reference_thread,
    row,
    row_lists,
    sequences,
)

CHANNEL = Conversation("d")


def channel(window: int = SESSION_WINDOW, before: int | None = None) -> SessionQuery:
    return SessionQuery(conversation=CHANNEL, before=before, window=window)


def thread(root: int, window: int = SESSION_WINDOW, before: int | None = None) -> SessionQuery:
    return SessionQuery(conversation=Conversation("d", root), before=before, window=window)


def filler(first: int, last: int, desk: str = "x") -> list[LogMessage]:
    """Roots of another desk, ``first`` to ``last`` inclusive."""
    return [row(s, desk=desk) for s in range(first, last + 1)]


class TestReads:
    def test_window_zero_returns_no_messages_and_reads_nothing(self) -> None:
        log = RecordingLog([row(1), row(2)])

        result = project_session(log, channel(window=0))

        assert Projection(messages=[], partial=False) == result
        assert [] == log.reads

    def test_first_read_asks_64_rows_before_the_query_bound(self) -> None:
        log = RecordingLog([row(s) for s in range(1, 101)])

        project_session(log, channel(window=3, before=90))

        assert [Read(90, 64)] == log.reads

    def test_reads_double_from_64_up_to_page_size_and_stop_at_scan_limit(self) -> None:
        log = RecordingLog(filler(1, 5000))

        project_session(log, channel())

        asked = [read.limit for read in log.reads]
        assert [64, 128, 256, 512, 512, 512, 64] == asked

    def test_walk_reads_exactly_scan_limit_rows_from_a_longer_log(self) -> None:
        log = RecordingLog(filler(1, 5000))

        project_session(log, channel())

        assert SCAN_LIMIT == log.rows_read

    def test_each_read_continues_at_the_previous_pages_cursor(self) -> None:
        log = RecordingLog(filler(1, 300))

        project_session(log, channel())

        assert [Read(None, 64), Read(237, 128), Read(109, 256)] == log.reads

    def test_last_read_asks_only_the_rows_left_under_the_scan_limit(self) -> None:
        """A host serving short pages (99 rows) makes the walk end with a read of 4 rows."""

        class ShortPages(RecordingLog):
            def read_before(self, before: int | None, limit: int) -> SessionPage:
                result = super().read_before(before, min(limit, 99))
                self.reads[-1] = Read(before, limit)
                return result

        log = ShortPages(filler(1, 5000))

        result = project_session(log, channel())

        assert Read(log.reads[-2].before - 99, 4) == log.reads[-1]  # type: ignore[operator]
        assert (SCAN_LIMIT, True) == (log.rows_read, result.partial)

    def test_no_read_asks_for_more_than_page_size_rows(self) -> None:
        log = RecordingLog(filler(1, 5000))

        project_session(log, channel())

        assert PAGE_SIZE == max(read.limit for read in log.reads)

    def test_short_channel_window_over_a_long_log_reads_one_page(self) -> None:
        log = RecordingLog([row(s) for s in range(1, 20_001)])

        result = project_session(log, channel())

        assert [Read(None, 64)] == log.reads
        assert list(range(19_971, 20_001)) == sequences(result.messages)

    def test_blank_rows_and_other_desks_count_toward_the_scan_limit(self) -> None:
        rows = [blank(s) for s in range(2, 1500)] + filler(1500, 3000) + [row(1)]

        result = project_session(RecordingLog(rows), channel())

        assert Projection(messages=[], partial=True) == result


class TestThreadQuery:
    def test_returns_the_root_and_its_direct_replies_oldest_first(self) -> None:
        rows = [row(1), row(2, parent=1), row(3), row(4, parent=1)]

        result = project_session(RecordingLog(rows), thread(1))

        assert as_messages([rows[0], rows[1], rows[3]]) == result.messages

    def test_leaves_out_replies_to_replies(self) -> None:
        rows = [row(1), row(2, parent=1), row(3, parent=2)]

        result = project_session(RecordingLog(rows), thread(1))

        assert [1, 2] == sequences(result.messages)

    def test_leaves_out_other_threads_and_roots(self) -> None:
        rows = [row(1), row(2), row(3, parent=2), row(4, parent=1), row(5)]

        result = project_session(RecordingLog(rows), thread(1))

        assert [1, 4] == sequences(result.messages)

    def test_leaves_out_blank_replies_and_replies_of_other_desks(self) -> None:
        rows = [row(1), blank(2, parent=1), row(3, parent=1, desk="e"), row(4, parent=1)]

        result = project_session(RecordingLog(rows), thread(1))

        assert [1, 4] == sequences(result.messages)

    def test_returns_content_exactly_as_stored(self) -> None:
        rows = [row(1, "  root \n"), row(2, "\treply ", parent=1)]

        result = project_session(RecordingLog(rows), thread(1))

        assert ["  root \n", "\treply "] == [m.content for m in result.messages]

    def test_keeps_the_author_and_parent_of_each_row(self) -> None:
        rows = [row(1), row(2, parent=1, author=BOT)]

        result = project_session(RecordingLog(rows), thread(1))

        assert (BOT, 1) == (result.messages[1].author, result.messages[1].parent)

    def test_stops_reading_on_reaching_the_root(self) -> None:
        rows = [*filler(1, 136), row(137), *filler(138, 199), row(200, parent=137)]
        log = RecordingLog(rows)

        result = project_session(log, thread(137))

        assert ([137, 200], [Read(None, 64)]) == (sequences(result.messages), log.reads)

    def test_stops_at_the_root_even_when_the_root_is_blank(self) -> None:
        rows = [*filler(1, 136), blank(137), *filler(138, 199), row(200, parent=137)]
        log = RecordingLog(rows)

        result = project_session(log, thread(137))

        assert ([200], [Read(None, 64)]) == (sequences(result.messages), log.reads)

    def test_stops_at_a_root_of_another_desk_without_returning_it(self) -> None:
        rows = [*filler(1, 300), row(301, parent=250)]
        log = RecordingLog(rows)

        result = project_session(log, thread(250))

        assert ([301], [Read(None, 64)]) == (sequences(result.messages), log.reads)

    def test_stops_at_the_first_row_below_a_root_that_is_not_in_the_log(self) -> None:
        rows = [*filler(1, 136), *filler(138, 199), row(200, parent=137)]
        log = RecordingLog(rows)

        result = project_session(log, thread(137))

        assert ([200], [Read(None, 64)]) == (sequences(result.messages), log.reads)

    def test_when_the_window_fills_first_returns_the_newest_replies_without_the_root(
        self,
    ) -> None:
        rows = [row(1)] + [row(s, parent=1) for s in range(2, 7)]

        result = project_session(RecordingLog(rows), thread(1, window=3))

        assert [4, 5, 6] == sequences(result.messages)

    def test_returns_the_root_when_it_is_the_last_row_that_fits_the_window(self) -> None:
        rows = [row(1), row(2, parent=1), row(3, parent=1)]

        result = project_session(RecordingLog(rows), thread(1, window=3))

        assert [1, 2, 3] == sequences(result.messages)

    def test_a_bound_at_or_below_the_root_returns_nothing_and_reads_nothing(self) -> None:
        log = RecordingLog([row(1), row(2, parent=1)])

        result = project_session(log, thread(2, before=2))

        assert (Projection(messages=[], partial=False), []) == (result, log.reads)

    def test_only_replies_below_the_bound_are_returned(self) -> None:
        rows = [row(1), row(2, parent=1), row(3, parent=1)]

        result = project_session(RecordingLog(rows), thread(1, before=3))

        assert [1, 2] == sequences(result.messages)

    def test_is_partial_when_the_scan_limit_stops_the_walk_before_the_root(self) -> None:
        rows = [row(1), *filler(2, 3000), row(3001, parent=1)]

        result = project_session(RecordingLog(rows), thread(1))

        assert Projection(messages=as_messages(rows[-1:]), partial=True) == result

    def test_is_not_partial_when_the_log_ends_without_the_root(self) -> None:
        rows = [*filler(5, 10), row(11, parent=3)]

        result = project_session(RecordingLog(rows), thread(3))

        assert Projection(messages=as_messages(rows[-1:]), partial=False) == result


class TestChannelQuery:
    def test_returns_roots_and_the_first_reply_of_each_root(self) -> None:
        rows = [row(1), row(2, parent=1), row(3), row(4, parent=3), row(5, parent=1)]

        result = project_session(RecordingLog(rows), channel())

        assert [1, 2, 3, 4] == sequences(result.messages)

    def test_the_first_reply_is_the_lowest_non_blank_one(self) -> None:
        rows = [row(1), blank(2, parent=1), row(3, parent=1), row(4, parent=1)]

        result = project_session(RecordingLog(rows), channel())

        assert [1, 3] == sequences(result.messages)

    def test_a_reply_of_another_desk_is_not_a_first_reply(self) -> None:
        rows = [row(1), row(2, parent=1, desk="e"), row(3, parent=1)]

        result = project_session(RecordingLog(rows), channel())

        assert [1, 3] == sequences(result.messages)

    def test_never_returns_a_reply_to_a_reply(self) -> None:
        rows = [row(1), row(2, parent=1), row(3, parent=2)]

        result = project_session(RecordingLog(rows), channel())

        assert [1, 2] == sequences(result.messages)

    def test_never_returns_a_reply_to_a_root_of_another_desk(self) -> None:
        rows = [row(1, desk="e"), row(2, parent=1)]

        result = project_session(RecordingLog(rows), channel())

        assert [] == result.messages

    def test_returns_the_first_reply_of_a_blank_root_without_the_root(self) -> None:
        """A blank root is reached like any other: its first reply is known to be first."""
        rows = [blank(1), row(2, parent=1), row(3, parent=1)]

        result = project_session(RecordingLog(rows), channel())

        assert [2] == sequences(result.messages)

    def test_never_returns_a_reply_whose_root_the_walk_did_not_reach(self) -> None:
        rows = [row(1), *filler(2, 3000), row(3001, parent=1)]

        result = project_session(RecordingLog(rows), channel())

        assert Projection(messages=[], partial=True) == result

    def test_never_returns_a_reply_whose_parent_is_not_in_the_log(self) -> None:
        rows = [row(2), row(5, parent=4)]

        result = project_session(RecordingLog(rows), channel())

        assert [2] == sequences(result.messages)

    def test_never_returns_a_reply_that_lies_below_its_own_parent(self) -> None:
        """Only a host log can hold one (stores refuse it); the walk reached the root first."""
        rows = [row(3, parent=7), row(5), row(7)]

        result = project_session(RecordingLog(rows), channel())

        assert [5, 7] == sequences(result.messages)

    def test_leaves_out_blank_rows_and_rows_of_other_desks(self) -> None:
        rows = [row(1), blank(2), row(3, desk="e"), row(4)]

        result = project_session(RecordingLog(rows), channel())

        assert [1, 4] == sequences(result.messages)

    def test_returns_the_newest_window_when_more_qualify(self) -> None:
        rows = [row(s) for s in range(1, 11)]

        result = project_session(RecordingLog(rows), channel(window=4))

        assert [7, 8, 9, 10] == sequences(result.messages)

    def test_fills_the_window_across_pages(self) -> None:
        rows = [row(1), row(2), *filler(3, 400), row(401)]

        result = project_session(RecordingLog(rows), channel(window=3))

        assert Projection(messages=as_messages([rows[0], rows[1], rows[-1]]), partial=False) == (
            result
        )

    def test_returns_fewer_than_the_window_only_when_the_log_ended(self) -> None:
        rows = [row(1), *filler(2, 100)]

        result = project_session(RecordingLog(rows), channel(window=3))

        assert Projection(messages=as_messages(rows[:1]), partial=False) == result

    def test_reads_on_while_a_pending_reply_could_enter_the_window(self) -> None:
        """Roots 151-153 fill the window, but reply 154 (to root 1) is newer than all."""
        rows = [row(1), *filler(2, 150), row(151), row(152), row(153), row(154, parent=1)]
        log = RecordingLog(rows)

        result = project_session(log, channel(window=3))

        assert ([152, 153, 154], 2) == (sequences(result.messages), len(log.reads))

    def test_stops_reading_once_the_window_is_full_with_nothing_pending(self) -> None:
        rows = [row(1), *filler(2, 150), row(151), row(152), row(153)]
        log = RecordingLog(rows)

        result = project_session(log, channel(window=3))

        assert ([151, 152, 153], 1) == (sequences(result.messages), len(log.reads))

    def test_stops_when_a_lower_reply_shows_the_pending_one_is_not_first(self) -> None:
        rows = [
            row(1),
            *filler(2, 199),
            row(200, parent=1),
            row(201),
            row(202),
            row(203),
            row(204, parent=1),
        ]
        log = RecordingLog(rows)

        result = project_session(log, channel(window=3))

        assert ([201, 202, 203], 1) == (sequences(result.messages), len(log.reads))

    def test_stops_when_a_newer_reply_pushes_a_pending_one_out_of_the_window(self) -> None:
        """Reply 500 enters when root 320 is reached; then reply 498 can no longer enter."""
        rows = [
            row(10),
            *filler(11, 319),
            row(320),
            *filler(321, 496),
            row(497),
            row(498, parent=10),
            row(499),
            row(500, parent=320),
        ]
        log = RecordingLog(rows)

        result = project_session(log, channel(window=2))

        assert ([499, 500], 2) == (sequences(result.messages), len(log.reads))

    def test_drops_a_pending_reply_whose_parent_turns_out_to_be_a_reply(self) -> None:
        rows = [row(1), row(2, parent=1), *filler(3, 199), row(200), row(201), row(202, parent=2)]
        log = RecordingLog(rows)

        result = project_session(log, channel(window=2))

        assert ([200, 201], 3) == (sequences(result.messages), len(log.reads))

    def test_stops_once_past_the_parent_of_a_pending_reply_that_is_not_in_the_log(
        self,
    ) -> None:
        rows = filler(1, 99) + filler(101, 199) + [row(200), row(201), row(202, parent=100)]
        log = RecordingLog(rows)

        result = project_session(log, channel(window=2))

        assert ([200, 201], 2) == (sequences(result.messages), len(log.reads))


class TestPageErrors:
    """Each page rule, then the order in which they are checked."""

    def test_more_rows_than_asked_raise_page_too_large(self) -> None:
        rows = [row(s) for s in range(65, 0, -1)]

        with pytest.raises(PageTooLarge) as caught:
            project_session(ScriptedLog([page(*rows)]), channel())

        assert (64, 65) == (caught.value.requested, caught.value.actual)

    def test_an_empty_page_with_a_cursor_raises_empty_page_cursor(self) -> None:
        with pytest.raises(EmptyPageCursor) as caught:
            project_session(ScriptedLog([page(next_before=5)]), channel())

        assert 5 == caught.value.next_before

    def test_an_empty_page_without_a_cursor_ends_the_log(self) -> None:
        result = project_session(ScriptedLog([page()]), channel())

        assert Projection(messages=[], partial=False) == result

    def test_a_sequence_seen_earlier_in_the_page_raises_duplicate_sequence(self) -> None:
        with pytest.raises(DuplicateSequence) as caught:
            project_session(ScriptedLog([page(row(5), row(5))]), channel())

        assert 5 == caught.value.sequence

    def test_a_sequence_seen_on_an_earlier_page_raises_duplicate_sequence(self) -> None:
        script = [page(row(10), row(9), next_before=9), page(row(9))]

        with pytest.raises(DuplicateSequence) as caught:
            project_session(ScriptedLog(script), channel())

        assert 9 == caught.value.sequence

    def test_a_row_at_the_exclusive_cursor_raises_page_out_of_range(self) -> None:
        with pytest.raises(PageOutOfRange) as caught:
            project_session(ScriptedLog([page(row(10))]), channel(before=10))

        assert (10, 10) == (caught.value.sequence, caught.value.before)

    def test_a_row_above_the_cursor_of_a_later_page_raises_page_out_of_range(self) -> None:
        script = [page(row(10), row(8), next_before=8), page(row(9))]

        with pytest.raises(PageOutOfRange) as caught:
            project_session(ScriptedLog(script), channel())

        assert (9, 8) == (caught.value.sequence, caught.value.before)

    def test_a_row_not_below_the_previous_one_raises_page_not_descending(self) -> None:
        with pytest.raises(PageNotDescending) as caught:
            project_session(ScriptedLog([page(row(5), row(7))]), channel())

        assert (5, 7) == (caught.value.previous, caught.value.next)

    def test_a_cursor_at_the_cursor_asked_raises_cursor_did_not_advance(self) -> None:
        with pytest.raises(CursorDidNotAdvance) as caught:
            project_session(ScriptedLog([page(row(9), next_before=10)]), channel(before=10))

        assert (10, 10) == (caught.value.before, caught.value.next_before)

    def test_a_cursor_above_the_oldest_row_raises_cursor_after_oldest(self) -> None:
        with pytest.raises(CursorAfterOldest) as caught:
            project_session(ScriptedLog([page(row(9), row(8), next_before=9)]), channel())

        assert (9, 8) == (caught.value.next_before, caught.value.oldest)

    def test_a_cursor_equal_to_the_oldest_row_is_accepted(self) -> None:
        script = [page(row(9), row(8), next_before=8), page(row(7))]

        result = project_session(ScriptedLog(script), channel())

        assert [7, 8, 9] == sequences(result.messages)

    def test_every_page_rule_raises_a_page_error(self) -> None:
        assert all(
            issubclass(error, PageError)
            for error in (
                PageTooLarge,
                EmptyPageCursor,
                DuplicateSequence,
                PageOutOfRange,
                PageNotDescending,
                CursorDidNotAdvance,
                CursorAfterOldest,
            )
        )

    def test_size_is_checked_before_row_order(self) -> None:
        rows = [row(1)] * 65

        with pytest.raises(PageTooLarge):
            project_session(ScriptedLog([page(*rows)]), channel())

    def test_duplicate_is_checked_before_range(self) -> None:
        script = [page(row(10), row(9), next_before=9), page(row(10))]

        with pytest.raises(DuplicateSequence):
            project_session(ScriptedLog(script), channel())

    def test_range_is_checked_before_order(self) -> None:
        with pytest.raises(PageOutOfRange) as caught:
            project_session(ScriptedLog([page(row(8), row(12))]), channel(before=10))

        assert 12 == caught.value.sequence

    def test_rows_are_checked_in_page_order(self) -> None:
        with pytest.raises(PageNotDescending) as caught:
            project_session(ScriptedLog([page(row(5), row(7), row(7))]), channel())

        assert (5, 7) == (caught.value.previous, caught.value.next)

    def test_rows_are_checked_before_the_cursor(self) -> None:
        with pytest.raises(PageNotDescending):
            project_session(ScriptedLog([page(row(5), row(7), next_before=9)]), channel())

    def test_advance_is_checked_before_the_oldest_row(self) -> None:
        script = [page(row(9), row(8), next_before=12)]

        with pytest.raises(CursorDidNotAdvance):
            project_session(ScriptedLog(script), channel(before=10))

    def test_a_page_is_checked_whole_before_any_row_is_used(self) -> None:
        """A broken row late in the page fails the walk even after the window could fill."""
        rows = [row(s) for s in range(64, 1, -1)] + [row(64)]

        with pytest.raises(DuplicateSequence):
            project_session(ScriptedLog([page(*rows)]), channel(window=1))


class TestHostFailures:
    def test_an_error_raised_by_the_log_becomes_log_read_error_with_its_cause(self) -> None:
        cause = OSError("disk gone")

        with pytest.raises(LogReadError) as caught:
            project_session(ScriptedLog([cause]), channel(before=7))

        assert (cause, 7, 64) == (
            caught.value.__cause__,
            caught.value.before,
            caught.value.limit,
        )

    def test_a_log_read_error_on_a_later_page_names_that_read(self) -> None:
        script = [page(*[row(s) for s in range(100, 36, -1)], next_before=37), KeyError("x")]

        with pytest.raises(LogReadError) as caught:
            project_session(ScriptedLog(script), channel(window=100))

        assert (37, 128) == (caught.value.before, caught.value.limit)

    def test_a_page_that_is_not_a_session_page_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="expected a SessionPage"):
            project_session(ScriptedLog([{"messages": []}]), channel())

    def test_messages_that_are_not_a_list_raise_validation_error(self) -> None:
        bad = SessionPage(messages=None, next_before=None)  # type: ignore[arg-type]

        with pytest.raises(ValidationError, match="messages"):
            project_session(ScriptedLog([bad]), channel())

    def test_a_row_that_is_not_a_log_message_raises_validation_error(self) -> None:
        bad = SessionPage(messages=[row(2), "row 1"], next_before=None)  # type: ignore[list-item]

        with pytest.raises(ValidationError, match=r"messages\[1\] is a str"):
            project_session(ScriptedLog([bad]), channel())

    @pytest.mark.parametrize(
        ("field", "value"),
        [("sequence", "5"), ("sequence", True), ("content", None), ("desk", 3), ("parent", "1")],
    )
    def test_a_row_with_a_mistyped_field_raises_validation_error(
        self, field: str, value: object
    ) -> None:
        fields: dict[str, object] = {"sequence": 5, "content": "x", "desk": "d", "parent": None}
        fields[field] = value
        bad = LogMessage(author=BOT, **fields)  # type: ignore[arg-type]

        with pytest.raises(ValidationError, match=rf"messages\[0\]\.{field} is a"):
            project_session(ScriptedLog([page(bad)]), channel())

    def test_a_row_of_a_log_message_subclass_with_str_subclass_fields_is_accepted(
        self,
    ) -> None:
        class HostStr(str):
            pass

        class HostRow(LogMessage, frozen=True):
            pass

        host_row = HostRow(sequence=1, author=BOT, content=HostStr("hi"), desk=HostStr("d"))

        result = project_session(ScriptedLog([page(host_row)]), channel())

        assert [1] == sequences(result.messages)

    def test_a_mistyped_cursor_raises_validation_error(self) -> None:
        bad = SessionPage(messages=[row(2)], next_before="1")  # type: ignore[arg-type]

        with pytest.raises(ValidationError, match="next_before"):
            project_session(ScriptedLog([bad]), channel())

    def test_a_log_without_read_before_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="read_before"):
            project_session(object(), channel())  # type: ignore[arg-type]


class TestQueryValidation:
    @pytest.mark.parametrize("window", [-1, True, 2.0, None])
    def test_a_window_that_is_not_a_non_negative_int_raises_validation_error(
        self, window: object
    ) -> None:
        query = SessionQuery(conversation=CHANNEL, window=window)  # type: ignore[arg-type]

        with pytest.raises(ValidationError, match="window"):
            project_session(RecordingLog([]), query)

    def test_a_bound_that_is_not_an_int_raises_validation_error(self) -> None:
        query = SessionQuery(conversation=CHANNEL, before="9")  # type: ignore[arg-type]

        with pytest.raises(ValidationError, match="before"):
            project_session(RecordingLog([]), query)

    def test_a_query_that_is_not_a_session_query_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="SessionQuery"):
            project_session(RecordingLog([]), CHANNEL)  # type: ignore[arg-type]

    def test_a_mistyped_thread_root_raises_validation_error(self) -> None:
        query = SessionQuery(conversation=Conversation("d", "1"))  # type: ignore[arg-type]

        with pytest.raises(ValidationError, match="thread_root"):
            project_session(RecordingLog([]), query)


# --- properties ------------------------------------------------------------------------


@st.composite
def queries(draw: st.DrawFn, rows: list[LogMessage]) -> SessionQuery:
    """A channel or thread query over ``rows``, with a random bound and a small window."""
    top = rows[-1].sequence + 2 if rows else 3
    before = draw(st.none() | st.integers(1, top))
    window = draw(st.integers(0, 7))
    if draw(st.booleans()) and rows:
        root = draw(st.sampled_from(rows).map(lambda r: r.sequence) | st.integers(1, top))
        return SessionQuery(Conversation("d", root), before=before, window=window)
    return SessionQuery(CHANNEL, before=before, window=window)


def expected(rows: list[LogMessage], query: SessionQuery) -> list[LogMessage]:
    """The naive answer for a log that the walk reads through (shorter than SCAN_LIMIT)."""
    candidates = below(rows, query.before)
    root = query.conversation.thread_root
    if root is None:
        found = reference_channel(candidates, "d")
    else:
        found = reference_thread(candidates, "d", root)
    return found[-query.window :] if query.window else []


class TestProperties:
    @given(st.data())
    def test_projection_equals_the_naive_reference(self, data: st.DataObject) -> None:
        rows = data.draw(row_lists())
        query = data.draw(queries(rows))

        result = project_session(RecordingLog(rows), query)

        assert Projection(messages=as_messages(expected(rows, query)), partial=False) == result

    @given(st.data())
    def test_projection_is_oldest_first_within_the_window_and_of_the_desk_only(
        self, data: st.DataObject
    ) -> None:
        rows = data.draw(row_lists())
        query = data.draw(queries(rows))
        by_sequence = {r.sequence: r for r in rows}

        result = project_session(RecordingLog(rows), query)

        seqs = sequences(result.messages)
        assert sorted(set(seqs)) == seqs
        assert len(seqs) <= query.window
        assert all(by_sequence[s].desk == "d" for s in seqs)
        assert not any(is_blank(m.content) for m in result.messages)

    @given(st.data())
    def test_projection_never_shows_another_threads_interior_or_a_second_reply(
        self, data: st.DataObject
    ) -> None:
        rows = data.draw(row_lists())
        query = data.draw(queries(rows))
        by_sequence = {r.sequence: r for r in rows}

        result = project_session(RecordingLog(rows), query)

        root = query.conversation.thread_root
        replies = [m for m in result.messages if m.parent is not None]
        if root is not None:
            assert all(m.parent == root for m in replies if m.sequence != root)
        else:
            parents = [m.parent for m in replies]
            assert len(set(parents)) == len(parents)
            assert all(by_sequence[p].parent is None for p in parents if p is not None)

    @given(st.data())
    def test_every_read_asks_within_the_growing_bounds(self, data: st.DataObject) -> None:
        rows = data.draw(long_row_lists())
        query = SessionQuery(CHANNEL, window=data.draw(st.integers(1, 40)))
        log = RecordingLog(rows)

        project_session(log, query)

        scanned = 0
        for read, returned in zip(log.reads, log.returned, strict=True):
            left = SCAN_LIMIT - scanned
            assert min(64, left) <= read.limit <= min(PAGE_SIZE, left)
            scanned += returned
        assert scanned <= SCAN_LIMIT

    @given(st.data())
    def test_channel_over_a_long_log_equals_the_reference_over_the_rows_read(
        self, data: st.DataObject
    ) -> None:
        rows = data.draw(long_row_lists())
        window = data.draw(st.integers(1, 40))
        log = RecordingLog(rows)

        result = project_session(log, channel(window=window))

        read = below(rows, None)[: log.rows_read]
        assert as_messages(reference_channel(read, "d")[-window:]) == result.messages
        if result.partial:
            assert log.rows_read == SCAN_LIMIT < len(rows)
            assert reference_channel_pending(read, "d", window)
        else:
            assert log.rows_read == len(rows) or not reference_channel_pending(read, "d", window)

    @given(st.data())
    def test_thread_over_a_long_log_equals_the_reference_over_the_rows_read(
        self, data: st.DataObject
    ) -> None:
        rows = data.draw(long_row_lists())
        threads = [r for r in rows if r.desk != "x"] or rows  # not the filler
        root = data.draw(st.sampled_from(threads)).sequence
        window = data.draw(st.integers(1, 40))
        log = RecordingLog(rows)

        result = project_session(log, thread(root, window=window))

        read = below(rows, None)[: log.rows_read]
        found = reference_thread(read, "d", root)
        reached = any(r.sequence <= root for r in read)
        cut_off = not reached and len(found) < window and log.rows_read < len(rows)
        assert Projection(messages=as_messages(found[-window:]), partial=cut_off) == result

    @given(st.data())
    def test_channel_window_is_full_whenever_enough_rows_qualify_within_the_scan_limit(
        self, data: st.DataObject
    ) -> None:
        rows = data.draw(long_row_lists())
        window = data.draw(st.integers(1, 40))

        result = project_session(RecordingLog(rows), channel(window=window))

        reachable = reference_channel(below(rows, None)[:SCAN_LIMIT], "d")
        if len(reachable) >= window:
            assert window == len(result.messages)

    @given(st.data())
    def test_channel_reads_a_page_only_when_a_row_could_still_change_the_window(
        self, data: st.DataObject
    ) -> None:
        rows = data.draw(data.draw(st.sampled_from([row_lists(max_rows=300), long_row_lists()])))
        window = data.draw(st.integers(1, 40))
        log = RecordingLog(rows)

        project_session(log, channel(window=window))

        newest_first = below(rows, None)
        for index in range(1, len(log.reads)):
            already = newest_first[: sum(log.returned[:index])]
            assert reference_channel_pending(already, "d", window)

    @given(row_lists(), st.integers(0, 7))
    def test_projection_never_changes_its_inputs(self, rows: list[LogMessage], window: int) -> None:
        log = RecordingLog(rows)
        kept = copy.deepcopy(log.rows)
        query = channel(window=window)

        project_session(log, query)

        assert (kept, channel(window=window)) == (log.rows, query)

    @given(st.text(max_size=8))
    def test_blank_means_strip_is_empty(self, content: str) -> None:
        """The fold's copy-free blank test agrees with the contract's definition."""
        rows = [LogMessage(sequence=1, author=BOT, content=content, desk="d")]

        result = project_session(RecordingLog(rows), channel())

        assert is_blank(content) == (result.messages == [])


class TestOverMemoryStore:
    """The fold over the real in-memory store's log (gaps where non-Text events sit)."""

    def test_projects_a_channel_and_a_thread_of_a_stored_session(self) -> None:
        with MemoryStore() as store:
            store.append(
                "desk",
                [
                    Event(BOT, Text("question")),  # 1
                    Event(BOT, RunStarted(provider="p")),  # 2: not a log row
                    Event(BOT, Text("answer"), parent=1),  # 3
                    Event(BOT, Text("second answer"), parent=1),  # 4
                    Event(BOT, Text("news")),  # 5
                ],
            )
            log = store.log("desk")

            whole = project_session(log, SessionQuery(Conversation("desk")))
            one_thread = project_session(log, SessionQuery(Conversation("desk", 1)))

        assert ([1, 3, 5], [1, 3, 4]) == (
            sequences(whole.messages),
            sequences(one_thread.messages),
        )


class TestIsBlank:
    @given(st.text(alphabet=st.sampled_from(" \t\n\r\x0b\x0c\x1c\x85\xa0\u2003\u3000ab")))
    def test_is_blank_is_strip_equals_empty(self, content: str) -> None:
        """One blank-row rule: ``content.strip() == ""``, for every kind of whitespace."""
        assert (content.strip() == "") == the_blank_rule(content)

    @given(st.text())
    def test_is_blank_agrees_with_strip_on_any_text(self, content: str) -> None:
        assert (content.strip() == "") == the_blank_rule(content)


class TestInConversation:
    def test_the_channel_holds_the_roots_only(self) -> None:
        assert (True, False) == (in_conversation(None, 5, None), in_conversation(None, 6, 5))

    def test_a_thread_holds_its_root_and_its_direct_replies_only(self) -> None:
        assert (True, True, False, False) == (
            in_conversation(5, 5, None),
            in_conversation(5, 6, 5),
            in_conversation(5, 7, None),
            in_conversation(5, 8, 7),
        )
