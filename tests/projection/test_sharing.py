"""Continuous sharing: initialized_state, note_present and prepare_delta, rule by rule."""

from __future__ import annotations

import copy

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedesk.projection import initialized_state, note_present, prepare_delta
from sharedesk.protocol import (
    PRESENT_SET_LIMIT,
    SCAN_LIMIT,
    Conversation,
    Delta,
    Event,
    LogMessage,
    LogReadError,
    PageNotDescending,
    PresentSetOverflow,
    PresentSetTooLarge,
    Reinitialize,
    ReinitializeReason,
    RunStarted,
    SharingQuery,
    SharingState,
    Text,
    ValidationError,
    WatermarkRegression,
)
from sharedesk.store import MemoryStore
from tests.projection.logs import (
    ALICE,
    BOT,
    CONTENTS,
    DESKS,
    OPERATOR,
    Read,
    RecordingLog,
    ScriptedLog,
    as_messages,
    blank,
    delta_qualifies,
    long_row_lists,
    page,
    reference_delta,
    row,
    row_lists,
    sequences,
)

CHANNEL = Conversation("d")
THREAD = Conversation("d", 2)


def query(before: int, conversation: Conversation = CHANNEL) -> SharingQuery:
    return SharingQuery(requested=conversation, bound=conversation, before=before)


def state(
    watermark: int, present: frozenset[int] = frozenset(), conversation: Conversation = CHANNEL
) -> SharingState:
    return SharingState(conversation, watermark, present)


def oversized(limit: int = PRESENT_SET_LIMIT) -> SharingState:
    """A state holding ``limit + 1`` present sequences, built past the struct's own check."""
    built = state(0)
    msgspec.structs.force_setattr(built, "present_above_watermark", frozenset(range(1, limit + 2)))
    return built


class TestInitializedState:
    def test_holds_the_conversation_and_watermark_with_an_empty_present_set(self) -> None:
        assert SharingState(THREAD, 7, frozenset()) == initialized_state(THREAD, 7)

    def test_a_negative_watermark_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="watermark"):
            initialized_state(CHANNEL, -1)

    def test_a_conversation_of_the_wrong_type_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="Conversation"):
            initialized_state("d", 0)  # type: ignore[arg-type]


class TestNotePresent:
    def test_returns_a_state_holding_the_sequence(self) -> None:
        assert state(5, frozenset({8, 9})) == note_present(state(5, frozenset({8})), 9)

    def test_never_changes_the_given_state(self) -> None:
        given_state = state(5, frozenset({8}))

        note_present(given_state, 9)

        assert state(5, frozenset({8})) == given_state

    def test_a_sequence_at_or_below_the_watermark_changes_nothing(self) -> None:
        given_state = state(5)

        assert (given_state, given_state) == (
            note_present(given_state, 5),
            note_present(given_state, 1),
        )

    def test_a_sequence_already_present_changes_nothing(self) -> None:
        given_state = state(5, frozenset({8}))

        assert given_state == note_present(given_state, 8)

    def test_filling_the_set_to_the_limit_is_allowed(self) -> None:
        full = state(0, frozenset(range(1, PRESENT_SET_LIMIT)))

        assert PRESENT_SET_LIMIT == len(note_present(full, 1000).present_above_watermark)

    def test_adding_one_beyond_the_limit_raises_present_set_overflow(self) -> None:
        full = state(0, frozenset(range(1, PRESENT_SET_LIMIT + 1)))

        with pytest.raises(PresentSetOverflow) as caught:
            note_present(full, 1000)

        assert (PRESENT_SET_LIMIT, 1000) == (caught.value.limit, caught.value.sequence)

    def test_a_full_set_still_accepts_a_sequence_it_holds(self) -> None:
        full = state(0, frozenset(range(1, PRESENT_SET_LIMIT + 1)))

        assert full == note_present(full, 3)

    def test_a_state_already_over_the_limit_raises_present_set_too_large(self) -> None:
        with pytest.raises(PresentSetTooLarge) as caught:
            note_present(oversized(), 1000)

        assert (PRESENT_SET_LIMIT, PRESENT_SET_LIMIT + 1) == (
            caught.value.limit,
            caught.value.actual,
        )

    def test_building_a_state_over_the_limit_raises_present_set_too_large(self) -> None:
        with pytest.raises(PresentSetTooLarge):
            state(0, frozenset(range(1, PRESENT_SET_LIMIT + 2)))

    def test_decoding_a_state_over_the_limit_raises_present_set_too_large(self) -> None:
        """msgspec must not rewrap the invariant as its own ValidationError."""
        raw = msgspec.json.encode(
            {
                "conversation": {"desk": "d", "thread_root": None},
                "watermark": 0,
                "present_above_watermark": list(range(1, PRESENT_SET_LIMIT + 2)),
            }
        )

        with pytest.raises(PresentSetTooLarge):
            msgspec.json.decode(raw, type=SharingState)

    def test_a_sequence_that_is_not_an_int_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="sequence"):
            note_present(state(0), "9")  # type: ignore[arg-type]


class TestPrepareDeltaChecks:
    """The answers given without reading the log."""

    @pytest.mark.parametrize(
        ("requested", "bound", "stored"),
        [(THREAD, CHANNEL, CHANNEL), (CHANNEL, THREAD, CHANNEL), (CHANNEL, CHANNEL, THREAD)],
    )
    def test_a_conversation_that_differs_reinitializes_without_reading(
        self, requested: Conversation, bound: Conversation, stored: Conversation
    ) -> None:
        log = RecordingLog([row(1), row(2)])
        asked = SharingQuery(requested=requested, bound=bound, before=3)

        result = prepare_delta(log, state(1, conversation=stored), asked)

        assert (Reinitialize(ReinitializeReason.CONVERSATION_CHANGED), []) == (result, log.reads)

    def test_another_desk_is_a_different_conversation(self) -> None:
        asked = SharingQuery(requested=Conversation("e"), bound=Conversation("e"), before=3)

        result = prepare_delta(RecordingLog([]), state(1), asked)

        assert Reinitialize(ReinitializeReason.CONVERSATION_CHANGED) == result

    def test_a_bound_below_the_watermark_raises_watermark_regression_without_reading(
        self,
    ) -> None:
        log = RecordingLog([row(1), row(2)])

        with pytest.raises(WatermarkRegression) as caught:
            prepare_delta(log, state(5), query(4))

        assert (4, 5, []) == (caught.value.before, caught.value.watermark, log.reads)

    def test_a_bound_at_the_watermark_returns_an_empty_delta_and_the_same_state(self) -> None:
        log = RecordingLog([row(1), row(2)])
        given_state = state(5, frozenset({7}))

        result = prepare_delta(log, given_state, query(5))

        assert (Delta(messages=[], next_state=given_state), []) == (result, log.reads)

    def test_the_conversation_is_checked_before_the_watermark(self) -> None:
        asked = SharingQuery(requested=THREAD, bound=THREAD, before=1)

        result = prepare_delta(RecordingLog([]), state(5), asked)

        assert Reinitialize(ReinitializeReason.CONVERSATION_CHANGED) == result

    def test_a_query_that_is_not_a_sharing_query_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="SharingQuery"):
            prepare_delta(RecordingLog([]), state(0), CHANNEL)  # type: ignore[arg-type]

    def test_a_negative_bound_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="before"):
            prepare_delta(RecordingLog([]), state(0), query(-1))

    def test_a_state_that_is_not_a_sharing_state_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="SharingState"):
            prepare_delta(RecordingLog([]), CHANNEL, query(1))  # type: ignore[arg-type]

    def test_a_state_over_the_present_limit_raises_present_set_too_large(self) -> None:
        with pytest.raises(PresentSetTooLarge):
            prepare_delta(RecordingLog([]), oversized(), query(1))


class TestPrepareDeltaWalk:
    def test_delivers_the_rows_between_the_watermark_and_the_bound_oldest_first(self) -> None:
        rows = [row(s) for s in range(1, 8)]

        result = prepare_delta(RecordingLog(rows), state(3), query(7))

        assert Delta(messages=as_messages(rows[3:6]), next_state=state(7)) == result

    def test_a_thread_delta_holds_the_root_and_its_direct_replies_only(self) -> None:
        rows = [
            row(1),
            row(2),
            row(3, parent=2),
            row(4, parent=3),
            row(5, parent=1),
            row(6),
            row(7, parent=2),
        ]

        result = prepare_delta(RecordingLog(rows), state(1, conversation=THREAD), query(8, THREAD))

        assert isinstance(result, Delta)
        assert [2, 3, 7] == sequences(result.messages)

    def test_a_channel_delta_holds_roots_only(self) -> None:
        rows = [row(1), row(2), row(3, parent=2), row(4), row(5, parent=4)]

        result = prepare_delta(RecordingLog(rows), state(1), query(6))

        assert isinstance(result, Delta)
        assert [2, 4] == sequences(result.messages)

    def test_blank_rows_and_rows_of_other_desks_are_never_delivered(self) -> None:
        rows = [row(1), blank(2), row(3, desk="e"), row(4)]

        result = prepare_delta(RecordingLog(rows), state(1), query(5))

        assert isinstance(result, Delta)
        assert [4] == sequences(result.messages)

    def test_content_is_delivered_exactly_as_stored(self) -> None:
        rows = [row(1), row(2, " spaced\n")]

        result = prepare_delta(RecordingLog(rows), state(1), query(3))

        assert isinstance(result, Delta)
        assert [" spaced\n"] == [m.content for m in result.messages]

    def test_rows_in_the_present_set_are_not_delivered(self) -> None:
        rows = [row(s) for s in range(1, 6)]

        result = prepare_delta(RecordingLog(rows), state(1, frozenset({3})), query(6))

        assert isinstance(result, Delta)
        assert [2, 4, 5] == sequences(result.messages)

    def test_next_state_drops_present_entries_at_or_below_the_bound(self) -> None:
        rows = [row(s) for s in range(1, 6)]

        result = prepare_delta(RecordingLog(rows), state(1, frozenset({3, 5, 9})), query(5))

        assert isinstance(result, Delta)
        assert state(5, frozenset({9})) == result.next_state

    def test_the_walk_stops_at_the_first_row_at_or_below_the_watermark(self) -> None:
        log = RecordingLog([row(s) for s in range(1, 1001)])

        prepare_delta(log, state(990), query(1000))

        assert [Read(1000, 64)] == log.reads

    def test_a_missing_watermark_row_is_crossed_by_the_next_row_below_it(self) -> None:
        rows = [row(1), row(2), row(4), row(5)]

        result = prepare_delta(RecordingLog(rows), state(3), query(6))

        assert isinstance(result, Delta)
        assert [4, 5] == sequences(result.messages)

    def test_reads_grow_from_64_toward_page_size(self) -> None:
        log = RecordingLog([row(s) for s in range(1, 1001)])

        prepare_delta(log, state(500), query(1000))

        assert [64, 128, 256, 512] == [read.limit for read in log.reads]

    def test_scan_limit_reached_first_reinitializes_with_gap_too_large(self) -> None:
        log = RecordingLog([row(s) for s in range(1, 5001)])

        result = prepare_delta(log, state(10), query(5000))

        assert Reinitialize(ReinitializeReason.GAP_TOO_LARGE) == result
        assert SCAN_LIMIT == log.rows_read

    def test_a_watermark_row_just_inside_the_scan_limit_gives_a_delta(self) -> None:
        log = RecordingLog([row(s) for s in range(1, 5001)])

        result = prepare_delta(log, state(5000 - SCAN_LIMIT), query(5000))

        assert isinstance(result, Delta)
        assert SCAN_LIMIT - 1 == len(result.messages)

    def test_the_log_ending_first_reinitializes_with_watermark_unavailable(self) -> None:
        rows = [row(s) for s in range(6, 11)]

        result = prepare_delta(RecordingLog(rows), state(3), query(11))

        assert Reinitialize(ReinitializeReason.WATERMARK_UNAVAILABLE) == result

    def test_the_log_ending_on_the_scan_limit_reinitializes_with_watermark_unavailable(
        self,
    ) -> None:
        rows = [row(s) for s in range(11, 11 + SCAN_LIMIT)]

        result = prepare_delta(RecordingLog(rows), state(10), query(11 + SCAN_LIMIT))

        assert Reinitialize(ReinitializeReason.WATERMARK_UNAVAILABLE) == result

    def test_a_watermark_of_zero_is_unavailable_once_the_log_has_rows(self) -> None:
        result = prepare_delta(RecordingLog([row(1), row(2)]), state(0), query(3))

        assert Reinitialize(ReinitializeReason.WATERMARK_UNAVAILABLE) == result

    def test_page_errors_propagate(self) -> None:
        with pytest.raises(PageNotDescending):
            prepare_delta(ScriptedLog([page(row(5), row(7))]), state(1), query(9))

    def test_a_failing_log_raises_log_read_error_with_its_cause(self) -> None:
        cause = TimeoutError("slow host")

        with pytest.raises(LogReadError) as caught:
            prepare_delta(ScriptedLog([cause]), state(1), query(9))

        assert (cause, 9, 64) == (caught.value.__cause__, caught.value.before, caught.value.limit)

    def test_never_changes_the_given_state(self) -> None:
        given_state = state(1, frozenset({3}))

        prepare_delta(RecordingLog([row(s) for s in range(1, 6)]), given_state, query(6))

        assert state(1, frozenset({3})) == given_state


# --- properties ------------------------------------------------------------------------


@st.composite
def delta_cases(draw: st.DrawFn, rows: list[LogMessage]) -> tuple[SharingState, SharingQuery]:
    """A state and query over ``rows``: random conversation, watermark, present set, bound."""
    top = rows[-1].sequence + 2 if rows else 3
    conversation = CHANNEL
    if draw(st.booleans()):
        conversation = Conversation(draw(st.sampled_from(DESKS)), draw(st.integers(1, top)))
    watermark = draw(st.integers(0, top))
    before = draw(st.integers(watermark, top + 2))
    present = draw(st.frozensets(st.integers(watermark + 1, top + 3), max_size=PRESENT_SET_LIMIT))
    return state(watermark, present, conversation), query(before, conversation)


class TestProperties:
    @given(st.data())
    def test_prepare_delta_equals_the_naive_reference(self, data: st.DataObject) -> None:
        rows = data.draw(data.draw(st.sampled_from([row_lists(), long_row_lists()])))
        given_state, asked = data.draw(delta_cases(rows))

        result = prepare_delta(RecordingLog(rows), given_state, asked)

        wanted = reference_delta(rows, given_state, asked.before)
        if asked.before == given_state.watermark:
            assert Delta(messages=[], next_state=given_state) == result
        elif isinstance(wanted, str):
            assert Reinitialize(ReinitializeReason(wanted)) == result
        else:
            kept = frozenset(s for s in given_state.present_above_watermark if s > asked.before)
            next_state = state(asked.before, kept, given_state.conversation)
            assert Delta(messages=as_messages(wanted), next_state=next_state) == result

    @given(st.data())
    def test_prepare_delta_never_changes_its_inputs(self, data: st.DataObject) -> None:
        rows = data.draw(row_lists())
        given_state, asked = data.draw(delta_cases(rows))
        log = RecordingLog(rows)
        kept = (copy.deepcopy(log.rows), copy.deepcopy(given_state), copy.deepcopy(asked))

        prepare_delta(log, given_state, asked)

        assert kept == (log.rows, given_state, asked)

    @given(
        row_lists(max_rows=15, gaps=False).filter(bool),
        st.booleans(),
        st.lists(
            st.tuples(
                st.sampled_from(("other", "own", "turn")),
                st.sampled_from(DESKS),
                st.none() | st.integers(0, 10_000),
                st.sampled_from(CONTENTS),
            ),
            max_size=40,
        ),
    )
    def test_deltas_turn_after_turn_deliver_every_qualifying_row_exactly_once(
        self,
        seed: list[LogMessage],
        in_thread: bool,
        actions: list[tuple[str, str, int | None, str]],
    ) -> None:
        """The participant (BOT) replies on each turn and notes the rows it posts between."""
        rows = list(seed)
        watermark = rows[-1].sequence
        conversation = Conversation("d", seed[0].sequence) if in_thread else CHANNEL
        sharing = initialized_state(conversation, watermark)
        delivered: list[int] = []

        def append(author: object, desk: str, parent: int | None, content: str) -> int:
            sequence = rows[-1].sequence + 1
            rows.append(LogMessage(sequence, author, content, desk, parent))  # type: ignore[arg-type]
            return sequence

        for kind, desk, pick, content in [*actions, ("turn", "d", None, "bye")]:
            parent = None if pick is None else rows[pick % len(rows)].sequence
            if kind == "other":
                append(ALICE if (pick or 0) % 2 else OPERATOR, desk, parent, content)
            elif kind == "own":
                sharing = note_present(sharing, append(BOT, desk, parent, content))
            else:
                before = rows[-1].sequence + 1
                result = prepare_delta(RecordingLog(rows), sharing, query(before, conversation))
                assert isinstance(result, Delta)
                delivered += sequences(result.messages)
                append(BOT, "d", conversation.thread_root, "reply")  # lands at `before`
                sharing = result.next_state

        wanted = [
            r.sequence
            for r in rows
            if r.sequence > watermark and r.author != BOT and delta_qualifies(r, conversation)
        ]
        assert wanted == delivered


class TestOverMemoryStore:
    def test_turns_over_a_stored_session_deliver_the_others_rows_only(self) -> None:
        desk = Conversation("desk")
        with MemoryStore() as store:
            store.append("desk", [Event(OPERATOR, Text("hello"))])  # 1, already shown
            store.append("desk", [Event(OPERATOR, Text("question"))])  # 2
            first = prepare_delta(store.log("desk"), initialized_state(desk, 1), query(3, desk))
            assert isinstance(first, Delta)
            store.append("desk", [Event(BOT, Text("answer"))])  # 3, claimed by before=3
            store.append("desk", [Event(BOT, RunStarted(provider="p"))])  # 4, not a log row
            store.append("desk", [Event(OPERATOR, Text("thanks"))])  # 5
            second = prepare_delta(store.log("desk"), first.next_state, query(6, desk))

        assert isinstance(second, Delta)
        assert ([2], [5]) == (sequences(first.messages), sequences(second.messages))
