"""TranscriptBuilder: ordering, roles, streaming, tool pairs, truncation, store reads."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol import (
    Agent,
    Event,
    Operator,
    Person,
    RunFinished,
    RunStarted,
    SessionAuthor,
    StoreClosedError,
    System,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Transcript,
    TranscriptMessage,
    ValidationError,
)
from sharedesk.store.memory import MemoryStore

OPERATOR = Operator()
ALICE = Person(id="alice", label="Alice")
BOB = Person(id="bob", label="Bob")
BOT = Agent(id="bot", label="Bot")
PEER = Agent(id="peer", label="Peer")
PROMPT = System(kind="prompt", label="Prompt")

SESSION = "desk-1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# -- helpers ---------------------------------------------------------------------------


def stamped(*events: Event) -> list[Event]:
    """Return ``events`` as a store would: sequences from 1, timestamps one second apart."""
    return [
        msgspec.structs.replace(event, sequence=n, timestamp=T0 + timedelta(seconds=n))
        for n, event in enumerate(events, start=1)
    ]


def build(events: Iterable[Event], **options: Any) -> Transcript:
    return TranscriptBuilder.from_events(events, session_id=SESSION, **options)


def contents(transcript: Transcript) -> list[str | None]:
    return [message.content for message in transcript.messages]


def roles(transcript: Transcript) -> list[str]:
    return [message.role for message in transcript.messages]


def event_ids(transcript: Transcript) -> list[str]:
    return [message.metadata["event_id"] for message in transcript.messages]


def text(author: SessionAuthor, content: str, **fields: Any) -> Event:
    return Event(author, Text(content), **fields)


def delta(author: SessionAuthor, chunk: str, **fields: Any) -> Event:
    return Event(author, TextDelta(chunk), **fields)


def call(call_id: str, name: str = "search", **tool_input: Any) -> Event:
    return Event(BOT, ToolCall(tool_call_id=call_id, tool_name=name, tool_input=tool_input))


def result(call_id: str, output: Any = "ok", *, is_error: bool = False) -> Event:
    return Event(BOT, ToolResult(tool_call_id=call_id, output=output, is_error=is_error))


class RecordingStore(MemoryStore):
    """A MemoryStore that records the arguments of every ``read``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[dict[str, Any]] = []

    def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        self.reads.append(
            {
                "session_id": session_id,
                "after": after,
                "before": before,
                "limit": limit,
                "newest_first": newest_first,
            }
        )
        return super().read(
            session_id, after=after, before=before, limit=limit, newest_first=newest_first
        )


@pytest.fixture
def store() -> Iterator[RecordingStore]:
    with RecordingStore() as opened:
        yield opened


# -- session id and argument checks ----------------------------------------------------


class TestSessionId:
    def test_from_events_without_session_id_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="session_id is required"):
            TranscriptBuilder.from_events(stamped(text(ALICE, "hi")))

    def test_from_events_without_session_id_raises_even_with_no_events(self) -> None:
        with pytest.raises(ValidationError):
            TranscriptBuilder.from_events([])

    def test_from_events_names_the_transcript_after_the_given_session(self) -> None:
        transcript = build(stamped(text(ALICE, "hi")))

        assert SESSION == transcript.session_id

    def test_from_events_with_empty_session_id_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError):
            TranscriptBuilder.from_events([], session_id="")

    def test_from_store_with_non_str_session_id_raises_validation_error(
        self, store: RecordingStore
    ) -> None:
        with pytest.raises(ValidationError):
            TranscriptBuilder.from_store(store, 42)  # type: ignore[arg-type]

        assert [] == store.reads


BUDGETS = ["max_messages", "max_chars", "max_tokens_approx"]
BAD_BUDGET_VALUES = [-1, 1.5, "3", True]


class TestArgumentChecks:
    @pytest.mark.parametrize("name", BUDGETS)
    @pytest.mark.parametrize("value", BAD_BUDGET_VALUES)
    def test_from_events_rejects_a_budget_that_is_not_a_non_negative_int(
        self, name: str, value: Any
    ) -> None:
        with pytest.raises(ValidationError, match=name):
            build([], **{name: value})

    @pytest.mark.parametrize("name", BUDGETS)
    @pytest.mark.parametrize("value", BAD_BUDGET_VALUES)
    def test_from_store_rejects_a_bad_budget_before_reading(
        self, store: RecordingStore, name: str, value: Any
    ) -> None:
        with pytest.raises(ValidationError, match=name):
            TranscriptBuilder.from_store(store, SESSION, **{name: value})

        assert [] == store.reads

    @pytest.mark.parametrize("name", BUDGETS)
    @pytest.mark.parametrize("value", BAD_BUDGET_VALUES)
    def test_update_from_store_rejects_a_bad_budget_before_reading(
        self, store: RecordingStore, name: str, value: Any
    ) -> None:
        transcript = TranscriptBuilder.from_store(store, SESSION)
        store.reads.clear()

        with pytest.raises(ValidationError, match=name):
            TranscriptBuilder.update_from_store(store, transcript, **{name: value})

        assert [] == store.reads

    @pytest.mark.parametrize("value", BAD_BUDGET_VALUES)
    def test_from_store_rejects_a_limit_that_is_not_a_non_negative_int(
        self, store: RecordingStore, value: Any
    ) -> None:
        with pytest.raises(ValidationError, match="limit"):
            TranscriptBuilder.from_store(store, SESSION, limit=value)

    def test_a_keyword_that_names_no_budget_is_a_type_error(self) -> None:
        with pytest.raises(TypeError, match="max_lines"):
            build([], max_lines=3)

    def test_zero_budgets_are_accepted(self) -> None:
        transcript = build(stamped(text(ALICE, "hi")), max_messages=0, max_chars=0)

        assert [] == transcript.messages

    def test_events_that_are_not_iterable_raise_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="iterable of Event"):
            build(42)  # type: ignore[arg-type]

    def test_a_single_event_instead_of_a_list_raises_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="iterable of Event"):
            build(text(ALICE, "hi"))  # type: ignore[arg-type]

    def test_an_element_that_is_not_an_event_raises_validation_error_naming_its_index(
        self,
    ) -> None:
        with pytest.raises(ValidationError, match=r"events\[1\]"):
            build([text(ALICE, "hi"), "hello"])  # type: ignore[list-item]

    def test_a_viewer_that_is_not_an_author_raises_validation_error(self) -> None:
        with pytest.raises(
            ValidationError,
            match=r"^viewer must be an Operator, Person, Agent, System or None, got str$",
        ):
            build([], viewer="bot")

    def test_update_from_store_rejects_what_is_not_a_transcript(
        self, store: RecordingStore
    ) -> None:
        with pytest.raises(ValidationError, match="Transcript"):
            TranscriptBuilder.update_from_store(store, {"session_id": SESSION})  # type: ignore[arg-type]

    def test_events_may_be_any_iterable(self) -> None:
        events = stamped(text(ALICE, "a"), text(BOB, "b"))

        assert build(events) == build(iter(events))


# -- ordering --------------------------------------------------------------------------


class TestOrdering:
    def test_events_are_ordered_by_sequence_whatever_their_input_order(self) -> None:
        first, second, third = stamped(text(ALICE, "1"), text(ALICE, "2"), text(ALICE, "3"))

        assert ["1", "2", "3"] == contents(build([third, first, second]))

    def test_events_with_a_sequence_come_before_events_without_one(self) -> None:
        unstored = text(ALICE, "unstored", timestamp=T0 - timedelta(days=1))
        stored = text(ALICE, "stored", sequence=9, timestamp=T0)

        assert ["stored", "unstored"] == contents(build([unstored, stored]))

    def test_events_without_a_sequence_are_ordered_by_timestamp(self) -> None:
        late = text(ALICE, "late", timestamp=T0 + timedelta(seconds=2))
        early = text(ALICE, "early", timestamp=T0 + timedelta(seconds=1))

        assert ["early", "late"] == contents(build([late, early]))

    def test_events_with_the_same_sequence_are_ordered_by_timestamp(self) -> None:
        late = text(ALICE, "late", sequence=1, timestamp=T0 + timedelta(seconds=2))
        early = text(ALICE, "early", sequence=1, timestamp=T0 + timedelta(seconds=1))

        assert ["early", "late"] == contents(build([late, early]))

    def test_events_without_a_timestamp_come_after_those_with_one(self) -> None:
        undated = text(ALICE, "undated", id="a")
        dated = text(ALICE, "dated", id="b", timestamp=T0)

        assert ["dated", "undated"] == contents(build([undated, dated]))

    def test_naive_timestamps_are_read_as_utc_and_compare_with_aware_ones(self) -> None:
        naive_later = text(ALICE, "naive", timestamp=datetime(2026, 1, 1, 12, 0, 1))
        aware_earlier = text(
            ALICE,
            "aware",
            timestamp=datetime(2026, 1, 1, 13, 0, tzinfo=timezone(timedelta(hours=1))),
        )

        assert ["aware", "naive"] == contents(build([naive_later, aware_earlier]))

    def test_events_equal_in_sequence_and_timestamp_are_ordered_by_id(self) -> None:
        b = text(ALICE, "b", id="b", sequence=1, timestamp=T0)
        a = text(ALICE, "a", id="a", sequence=1, timestamp=T0)

        assert ["a", "b"] == contents(build([b, a]))

    def test_events_equal_in_sequence_timestamp_and_id_keep_their_input_order(self) -> None:
        second = text(ALICE, "second", id="x")
        first = text(BOB, "first", id="x")

        assert ["second", "first"] == contents(build([second, first]))


# -- roles -----------------------------------------------------------------------------


class TestRoles:
    def test_text_by_the_viewer_is_assistant(self) -> None:
        assert ["assistant"] == roles(build(stamped(text(BOT, "mine")), viewer=BOT))

    def test_the_viewer_is_recognised_by_id_whatever_the_label(self) -> None:
        renamed = Agent(id="bot", label="Renamed Bot")

        assert ["assistant"] == roles(build(stamped(text(renamed, "mine")), viewer=BOT))

    def test_text_by_another_agent_is_user(self) -> None:
        assert ["user"] == roles(build(stamped(text(PEER, "theirs")), viewer=BOT))

    def test_text_by_a_person_is_user_for_an_agent_viewer(self) -> None:
        assert ["user"] == roles(build(stamped(text(ALICE, "hi")), viewer=BOT))

    def test_text_by_another_person_is_user_for_a_person_viewer(self) -> None:
        assert ["user"] == roles(build(stamped(text(BOB, "hi")), viewer=ALICE))

    def test_text_by_the_operator_is_user_for_another_viewer(self) -> None:
        assert ["user"] == roles(build(stamped(text(OPERATOR, "go")), viewer=BOT))

    def test_text_by_the_operator_is_assistant_when_the_operator_views(self) -> None:
        assert ["assistant"] == roles(build(stamped(text(OPERATOR, "go")), viewer=OPERATOR))

    def test_text_by_a_system_author_is_system_for_a_viewer(self) -> None:
        assert ["system"] == roles(build(stamped(text(PROMPT, "be brief")), viewer=BOT))

    def test_text_by_a_system_author_is_system_without_viewer(self) -> None:
        assert ["system"] == roles(build(stamped(text(PROMPT, "be brief"))))

    def test_text_by_a_system_viewer_itself_is_assistant(self) -> None:
        """The viewer rule is checked first, for a System viewer too."""
        assert ["assistant"] == roles(build(stamped(text(PROMPT, "notice")), viewer=PROMPT))

    def test_without_viewer_agents_are_assistant(self) -> None:
        assert ["assistant", "assistant"] == roles(build(stamped(text(BOT, "a"), text(PEER, "b"))))

    def test_without_viewer_people_are_user(self) -> None:
        assert ["user"] == roles(build(stamped(text(ALICE, "hi"))))

    def test_without_viewer_the_operator_is_user(self) -> None:
        assert ["user"] == roles(build(stamped(text(OPERATOR, "go"))))

    def test_a_streamed_message_takes_the_role_a_text_by_its_author_would(self) -> None:
        assert ["user"] == roles(build(stamped(delta(PEER, "str"), delta(PEER, "eam")), viewer=BOT))

    def test_a_tool_call_is_assistant_whoever_views(self) -> None:
        assert ["assistant"] == roles(build(stamped(call("c1")), viewer=ALICE))

    def test_every_message_keeps_its_author(self) -> None:
        events = stamped(
            text(PROMPT, "p"), text(ALICE, "a"), text(OPERATOR, "o"), text(BOT, "b"), call("c1")
        )

        authors = [message.author for message in build(events, viewer=BOT).messages]

        assert [PROMPT, ALICE, OPERATOR, BOT, BOT] == authors

    def test_role_of_agrees_with_the_roles_of_built_messages(self) -> None:
        for author in (OPERATOR, ALICE, BOT, PEER, PROMPT):
            for viewer in (None, OPERATOR, ALICE, BOT, PROMPT):
                built = build(stamped(text(author, "x")), viewer=viewer)

                assert [TranscriptBuilder.role_of(author, viewer)] == roles(built)


# -- streaming -------------------------------------------------------------------------


class TestStreaming:
    def test_consecutive_deltas_of_one_author_and_run_merge_into_one_message(self) -> None:
        events = stamped(delta(BOT, "Hel", run_id="r"), delta(BOT, "lo", run_id="r"))

        assert ["Hello"] == contents(build(events))

    def test_deltas_of_two_runs_do_not_merge(self) -> None:
        events = stamped(delta(BOT, "a", run_id="r1"), delta(BOT, "b", run_id="r2"))

        assert ["a", "b"] == contents(build(events))

    def test_deltas_without_a_run_merge_with_each_other(self) -> None:
        assert ["ab"] == contents(build(stamped(delta(BOT, "a"), delta(BOT, "b"))))

    def test_deltas_of_two_authors_do_not_merge(self) -> None:
        events = stamped(delta(BOT, "a", run_id="r"), delta(PEER, "b", run_id="r"))

        assert ["a", "b"] == contents(build(events))

    def test_deltas_of_one_participant_merge_whatever_the_label(self) -> None:
        renamed = Agent(id="bot", label="Renamed")
        events = stamped(delta(BOT, "a", run_id="r"), delta(renamed, "b", run_id="r"))

        assert ["ab"] == contents(build(events))

    def test_deltas_with_another_message_between_them_do_not_merge(self) -> None:
        events = stamped(
            delta(BOT, "a", run_id="r"), text(ALICE, "hm"), delta(BOT, "b", run_id="r")
        )

        assert ["a", "hm", "b"] == contents(build(events))

    def test_a_tool_call_between_deltas_ends_the_stream(self) -> None:
        events = stamped(delta(BOT, "a"), call("c1"), delta(BOT, "b"))

        assert ["a", None, "b"] == contents(build(events))

    def test_lifecycle_events_between_deltas_do_not_interrupt_the_stream(self) -> None:
        events = stamped(
            delta(BOT, "a", run_id="r"),
            Event(PEER, RunStarted(provider="p"), run_id="other"),
            delta(BOT, "b", run_id="r"),
        )

        assert ["ab"] == contents(build(events))

    def test_a_following_text_of_the_same_author_and_run_closes_the_stream_with_its_content(
        self,
    ) -> None:
        events = stamped(
            delta(BOT, "draf", run_id="r"),
            delta(BOT, "t", run_id="r"),
            text(BOT, "final", run_id="r"),
        )

        assert ["final"] == contents(build(events))

    def test_a_following_empty_text_closes_the_stream_keeping_the_streamed_content(
        self,
    ) -> None:
        events = stamped(delta(BOT, "stream", run_id="r"), text(BOT, "", run_id="r"))

        assert ["stream"] == contents(build(events))

    def test_a_text_of_another_run_does_not_close_the_stream(self) -> None:
        events = stamped(delta(BOT, "a", run_id="r1"), text(BOT, "b", run_id="r2"))

        assert ["a", "b"] == contents(build(events))

    def test_a_delta_after_a_closing_text_starts_a_new_message(self) -> None:
        events = stamped(
            delta(BOT, "a", run_id="r"), text(BOT, "A", run_id="r"), delta(BOT, "b", run_id="r")
        )

        assert ["A", "b"] == contents(build(events))

    def test_a_text_after_a_closed_stream_is_a_message_of_its_own(self) -> None:
        events = stamped(
            delta(BOT, "a", run_id="r"), text(BOT, "A", run_id="r"), text(BOT, "B", run_id="r")
        )

        assert ["A", "B"] == contents(build(events))

    def test_a_merged_message_keeps_its_first_events_id_and_sequence(self) -> None:
        events = stamped(delta(BOT, "a", run_id="r"), delta(BOT, "b", run_id="r"))

        metadata = build(events).messages[0].metadata

        assert (events[0].id, 1, "r") == (
            metadata["event_id"],
            metadata["sequence"],
            metadata["run_id"],
        )

    def test_a_merged_message_names_its_last_event(self) -> None:
        events = stamped(delta(BOT, "a"), delta(BOT, "b"), text(BOT, ""))

        metadata = build(events).messages[0].metadata

        assert (events[2].id, 3) == (metadata["last_event_id"], metadata["last_sequence"])

    def test_a_merged_message_merges_each_events_own_metadata_later_winning(self) -> None:
        events = stamped(
            delta(BOT, "a", metadata={"x": 1, "y": 1}), delta(BOT, "b", metadata={"y": 2})
        )

        metadata = build(events).messages[0].metadata

        assert (1, 2) == (metadata["x"], metadata["y"])


# -- tool calls and results ------------------------------------------------------------


class TestToolMessages:
    def test_a_tool_call_becomes_an_assistant_message_with_the_call_fields(self) -> None:
        event = stamped(call("c1", "search", query="lmdb"))[0]

        message = build([event]).messages[0]

        assert (
            TranscriptMessage(
                role="assistant",
                tool_call_id="c1",
                tool_name="search",
                tool_input={"query": "lmdb"},
                metadata={"event_id": event.id, "sequence": 1},
                author=BOT,
            )
            == message
        )

    def test_a_tool_result_becomes_a_tool_message_with_the_output(self) -> None:
        events = stamped(call("c1"), result("c1", {"hits": 3}))

        message = build(events).messages[1]

        assert (
            TranscriptMessage(
                role="tool",
                tool_call_id="c1",
                tool_output={"hits": 3},
                metadata={"event_id": events[1].id, "sequence": 2, "is_error": False},
                author=BOT,
            )
            == message
        )

    def test_a_failed_tool_result_keeps_is_error_in_its_metadata(self) -> None:
        events = stamped(call("c1"), result("c1", "boom", is_error=True))

        assert True is build(events).messages[1].metadata["is_error"]

    def test_a_result_without_an_earlier_call_gives_no_message(self) -> None:
        events = stamped(text(ALICE, "hi"), result("c1"))

        assert ["hi"] == contents(build(events))

    def test_a_result_before_its_call_gives_no_message(self) -> None:
        events = stamped(result("c1"), call("c1"))

        assert ["assistant"] == roles(build(events))

    def test_a_second_result_to_an_answered_call_gives_no_message(self) -> None:
        events = stamped(call("c1"), result("c1", "first"), result("c1", "second"))

        assert ["first"] == [m.tool_output for m in build(events).messages if m.role == "tool"]

    def test_run_started_and_run_finished_give_no_message(self) -> None:
        events = stamped(
            Event(BOT, RunStarted(provider="scripted"), run_id="r"),
            Event(BOT, RunFinished(status="completed"), run_id="r"),
        )

        assert [] == build(events).messages

    def test_the_tool_input_of_a_message_is_not_the_events_dict(self) -> None:
        event = stamped(call("c1", q="x"))[0]

        message = build([event]).messages[0]
        assert message.tool_input is not None
        message.tool_input["q"] = "changed"

        assert {"q": "x"} == event.body.tool_input  # type: ignore[union-attr]


# -- message metadata ------------------------------------------------------------------


class TestMessageMetadata:
    def test_metadata_holds_the_event_id_sequence_and_run_id(self) -> None:
        event = stamped(text(BOT, "hi", run_id="r"))[0]

        assert {"event_id": event.id, "sequence": 1, "run_id": "r"} == build([event]).messages[
            0
        ].metadata

    def test_metadata_has_no_sequence_for_an_unstored_event_nor_run_id_when_unset(
        self,
    ) -> None:
        event = text(ALICE, "hi")

        assert {"event_id": event.id} == build([event]).messages[0].metadata

    def test_metadata_is_merged_with_the_events_own_metadata(self) -> None:
        event = stamped(text(ALICE, "hi", metadata={"lang": "en"}))[0]

        assert "en" == build([event]).messages[0].metadata["lang"]

    def test_the_builders_keys_win_over_the_events_own_metadata(self) -> None:
        event = stamped(text(ALICE, "hi", metadata={"event_id": "forged", "sequence": 99}))[0]

        metadata = build([event]).messages[0].metadata

        assert (event.id, 1) == (metadata["event_id"], metadata["sequence"])


# -- last sequence and timestamp -------------------------------------------------------


class TestLastSequence:
    def test_last_sequence_and_timestamp_describe_the_events_read_not_the_cut(self) -> None:
        events = stamped(
            text(ALICE, "a"), text(ALICE, "b"), Event(BOT, RunFinished(status="completed"))
        )

        transcript = build(events, max_messages=1)

        assert (3, events[2].timestamp) == (transcript.last_sequence, transcript.last_timestamp)

    def test_no_events_give_no_last_sequence_nor_timestamp(self) -> None:
        transcript = build([])

        assert (None, None) == (transcript.last_sequence, transcript.last_timestamp)

    def test_last_timestamp_is_the_latest_whatever_the_order(self) -> None:
        late = text(ALICE, "a", sequence=1, timestamp=T0 + timedelta(hours=1))
        early = text(ALICE, "b", sequence=2, timestamp=T0)

        assert late.timestamp == build([late, early]).last_timestamp

    def test_last_timestamp_compares_naive_timestamps_as_utc(self) -> None:
        aware = text(ALICE, "a", timestamp=datetime(2026, 1, 1, 12, 30, tzinfo=UTC))
        naive = text(ALICE, "b", timestamp=datetime(2026, 1, 1, 12, 0))

        assert aware.timestamp == build([naive, aware]).last_timestamp

    def test_last_sequence_ignores_unstored_events(self) -> None:
        events = [text(ALICE, "a", sequence=4), text(ALICE, "b")]

        assert 4 == build(events).last_sequence


# -- truncation ------------------------------------------------------------------------


class TestMessageChars:
    def test_content_counts_its_characters(self) -> None:
        assert 5 == TranscriptBuilder.message_chars(TranscriptMessage(role="user", content="héllo"))

    def test_tool_input_counts_as_compact_json(self) -> None:
        message = TranscriptMessage(
            role="assistant", tool_call_id="c", tool_name="f", tool_input={"a": 1}
        )

        assert len('{"a":1}') == TranscriptBuilder.message_chars(message)

    def test_a_str_tool_output_counts_its_own_characters(self) -> None:
        message = TranscriptMessage(role="tool", tool_call_id="c", tool_output="done")

        assert 4 == TranscriptBuilder.message_chars(message)

    def test_another_tool_output_counts_as_compact_json(self) -> None:
        message = TranscriptMessage(role="tool", tool_call_id="c", tool_output=[1, 2])

        assert len("[1,2]") == TranscriptBuilder.message_chars(message)

    def test_ids_names_and_metadata_are_not_counted(self) -> None:
        message = TranscriptMessage(
            role="assistant",
            tool_call_id="long-call-id",
            tool_name="long_tool_name",
            tool_input={},
            metadata={"event_id": "x" * 100},
        )

        assert len("{}") == TranscriptBuilder.message_chars(message)

    def test_an_output_that_is_not_json_encodable_raises_validation_error(self) -> None:
        message = TranscriptMessage(role="tool", tool_call_id="c", tool_output=object())

        with pytest.raises(ValidationError, match="tool_output"):
            TranscriptBuilder.message_chars(message)

    def test_an_unencodable_output_is_only_counted_under_a_character_budget(self) -> None:
        events = stamped(call("c1"), result("c1", object()))

        assert 2 == len(build(events, max_messages=5).messages)


class TestTruncation:
    def test_max_messages_keeps_the_newest_messages(self) -> None:
        events = stamped(text(ALICE, "1"), text(ALICE, "2"), text(ALICE, "3"))

        assert ["2", "3"] == contents(build(events, max_messages=2))

    def test_max_chars_keeps_the_newest_messages_that_fit(self) -> None:
        events = stamped(text(ALICE, "aaaa"), text(ALICE, "bbb"), text(ALICE, "cc"))

        assert ["bbb", "cc"] == contents(build(events, max_chars=6))

    def test_max_tokens_approx_allows_four_characters_a_token(self) -> None:
        events = stamped(text(ALICE, "aaaa"), text(ALICE, "bbbb"), text(ALICE, "cccc"))

        assert ["bbbb", "cccc"] == contents(build(events, max_tokens_approx=2))

    def test_max_chars_wins_when_lower_than_the_token_budget(self) -> None:
        events = stamped(text(ALICE, "aaaa"), text(ALICE, "bbbb"))

        assert ["bbbb"] == contents(build(events, max_chars=4, max_tokens_approx=2))

    def test_max_tokens_approx_wins_when_lower_than_max_chars(self) -> None:
        events = stamped(text(ALICE, "aaaa"), text(ALICE, "bbbb"))

        assert ["bbbb"] == contents(build(events, max_chars=100, max_tokens_approx=1))

    def test_max_messages_and_a_character_budget_both_apply(self) -> None:
        events = stamped(text(ALICE, "a"), text(ALICE, "b"), text(ALICE, "c"))

        assert ["c"] == contents(build(events, max_messages=1, max_chars=100))

    def test_a_newest_message_larger_than_the_budget_leaves_nothing(self) -> None:
        events = stamped(text(ALICE, "a"), text(ALICE, "too long"))

        assert [] == build(events, max_chars=4).messages

    def test_no_budget_keeps_every_message(self) -> None:
        events = stamped(*(text(ALICE, str(n)) for n in range(50)))

        assert 50 == len(build(events).messages)

    def test_max_messages_drops_a_call_and_its_result_together(self) -> None:
        events = stamped(text(ALICE, "q"), call("c1"), result("c1"), text(BOT, "a"))

        assert ["a"] == contents(build(events, max_messages=2))

    def test_max_chars_drops_a_call_and_its_result_together(self) -> None:
        events = stamped(call("c1", q="xy"), result("c1", "out"), text(BOT, "answer"))

        assert ["answer"] == contents(build(events, max_chars=9))

    def test_max_tokens_approx_drops_a_call_and_its_result_together(self) -> None:
        events = stamped(call("c1", q="xy"), result("c1", "out"), text(BOT, "answer"))

        assert ["answer"] == contents(build(events, max_tokens_approx=3))

    def test_a_pair_that_fits_is_kept_together(self) -> None:
        events = stamped(text(ALICE, "q"), call("c1"), result("c1"), text(BOT, "a"))

        assert ["c1", "c1"] == [
            m.tool_call_id for m in build(events, max_messages=3).messages if m.tool_call_id
        ]

    def test_a_call_whose_result_is_not_in_the_transcript_may_be_kept_alone(self) -> None:
        events = stamped(text(ALICE, "q"), text(BOT, "let me look"), call("c1"))

        assert ["assistant"] == roles(build(events, max_messages=1))

    def test_the_cut_moves_past_every_pair_it_would_split(self) -> None:
        events = stamped(call("c1"), call("c2"), result("c1"), result("c2"), text(BOT, "done"))

        assert ["done"] == contents(build(events, max_messages=3))

    def test_messages_between_a_split_pair_are_dropped_with_it(self) -> None:
        """The kept messages are a suffix: the cut never skips over a message."""
        events = stamped(call("c1"), text(ALICE, "while waiting"), result("c1"), text(BOT, "a"))

        assert ["a"] == contents(build(events, max_messages=3))

    def test_a_result_answers_the_latest_unanswered_call_of_its_id(self) -> None:
        """A reused id: the older call stays unanswered, so the pair is the newest two."""
        events = stamped(call("c1"), text(ALICE, "meanwhile"), call("c1"), result("c1", ""))

        assert [("assistant", "c1"), ("tool", "c1")] == [
            (m.role, m.tool_call_id) for m in build(events, max_chars=2).messages
        ]


# -- reading from a store --------------------------------------------------------------


class TestFromStore:
    def test_from_store_folds_every_event_of_the_session(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, "a"), text(BOT, "b")])
        store.append("other", [text(ALICE, "elsewhere")])

        assert ["a", "b"] == contents(TranscriptBuilder.from_store(store, SESSION))

    def test_from_store_equals_from_events_of_the_stored_events(
        self, store: RecordingStore
    ) -> None:
        stored = store.append(SESSION, [text(ALICE, "a"), call("c1"), result("c1")])

        assert build(stored, viewer=BOT) == TranscriptBuilder.from_store(store, SESSION, viewer=BOT)

    def test_without_limit_the_session_is_read_once_oldest_first(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [text(ALICE, "a")])

        TranscriptBuilder.from_store(store, SESSION)

        assert [
            {
                "session_id": SESSION,
                "after": None,
                "before": None,
                "limit": None,
                "newest_first": False,
            }
        ] == store.reads

    def test_limit_zero_reads_no_event(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, "a")])

        transcript = TranscriptBuilder.from_store(store, SESSION, limit=0)

        assert ([], None) == (transcript.messages, transcript.last_sequence)

    def test_limit_keeps_the_newest_events(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, str(n)) for n in range(1, 6)])

        assert ["4", "5"] == contents(TranscriptBuilder.from_store(store, SESSION, limit=2))

    def test_limit_reads_only_the_newest_events_newest_first(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, str(n)) for n in range(1, 6)])

        TranscriptBuilder.from_store(store, SESSION, limit=2)

        assert [
            {"session_id": SESSION, "after": None, "before": None, "limit": 2, "newest_first": True}
        ] == store.reads

    def test_limit_keeps_the_last_sequence_of_the_session(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, str(n)) for n in range(1, 6)])

        assert 5 == TranscriptBuilder.from_store(store, SESSION, limit=2).last_sequence

    def test_a_result_whose_call_lies_beyond_the_limit_gives_no_message(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [call("c1"), result("c1"), text(BOT, "a")])

        assert ["a"] == contents(TranscriptBuilder.from_store(store, SESSION, limit=2))

    def test_an_empty_session_gives_an_empty_transcript(self, store: RecordingStore) -> None:
        transcript = TranscriptBuilder.from_store(store, SESSION)

        assert ([], None, None) == (
            transcript.messages,
            transcript.last_sequence,
            transcript.last_timestamp,
        )

    def test_a_closed_store_raises_its_typed_error(self) -> None:
        closed = MemoryStore()
        closed.close()

        with pytest.raises(StoreClosedError):
            TranscriptBuilder.from_store(closed, SESSION)

    def test_budgets_apply_to_a_store_read(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, str(n)) for n in range(1, 6)])

        assert ["5"] == contents(TranscriptBuilder.from_store(store, SESSION, max_messages=1))


class TestUpdateFromStore:
    def test_update_reads_only_the_events_after_last_sequence(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, "a"), text(BOT, "b")])
        transcript = TranscriptBuilder.from_store(store, SESSION)
        store.append(SESSION, [text(ALICE, "c")])
        store.reads.clear()

        TranscriptBuilder.update_from_store(store, transcript)

        assert [
            {
                "session_id": SESSION,
                "after": 2,
                "before": None,
                "limit": None,
                "newest_first": False,
            }
        ] == store.reads

    def test_update_equals_a_fresh_from_store(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, "a"), call("c1"), delta(BOT, "x", run_id="r")])
        transcript = TranscriptBuilder.from_store(store, SESSION, viewer=BOT)
        store.append(SESSION, [result("c1"), delta(BOT, "y", run_id="r"), text(ALICE, "b")])

        assert TranscriptBuilder.from_store(
            store, SESSION, viewer=BOT
        ) == TranscriptBuilder.update_from_store(store, transcript, viewer=BOT)

    def test_update_continues_an_open_stream_across_the_boundary(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [delta(BOT, "Hel", run_id="r")])
        transcript = TranscriptBuilder.from_store(store, SESSION)
        store.append(SESSION, [delta(BOT, "lo", run_id="r")])

        assert ["Hello"] == contents(TranscriptBuilder.update_from_store(store, transcript))

    def test_update_closes_an_open_stream_with_a_text_across_the_boundary(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [delta(BOT, "draft", run_id="r")])
        transcript = TranscriptBuilder.from_store(store, SESSION)
        store.append(SESSION, [text(BOT, "final", run_id="r"), delta(BOT, "new", run_id="r")])

        assert ["final", "new"] == contents(TranscriptBuilder.update_from_store(store, transcript))

    def test_update_continues_a_stream_that_the_budget_had_cut(self, store: RecordingStore) -> None:
        store.append(SESSION, [delta(BOT, "long draft", run_id="r")])
        transcript = TranscriptBuilder.from_store(store, SESSION, max_chars=5)
        store.append(SESSION, [text(BOT, "final", run_id="r")])

        updated = TranscriptBuilder.update_from_store(store, transcript, max_chars=5)

        assert ([], ["final"]) == (transcript.messages, contents(updated))

    def test_update_drops_a_result_whose_call_was_cut_as_a_fresh_build_does(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [call("c1"), text(ALICE, "a"), text(ALICE, "b")])
        transcript = TranscriptBuilder.from_store(store, SESSION, max_messages=2)
        store.append(SESSION, [result("c1")])

        updated = TranscriptBuilder.update_from_store(store, transcript, max_messages=2)

        assert (TranscriptBuilder.from_store(store, SESSION, max_messages=2), []) == (
            updated,
            updated.messages,
        )

    def test_update_without_new_events_returns_an_equal_transcript(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [text(ALICE, "a"), delta(BOT, "b")])
        transcript = TranscriptBuilder.from_store(store, SESSION, max_messages=1)

        assert transcript == TranscriptBuilder.update_from_store(store, transcript, max_messages=1)

    def test_update_of_an_empty_transcript_reads_the_whole_session(
        self, store: RecordingStore
    ) -> None:
        transcript = TranscriptBuilder.from_store(store, SESSION)
        store.append(SESSION, [text(ALICE, "a")])

        assert ["a"] == contents(TranscriptBuilder.update_from_store(store, transcript))

    def test_update_keeps_last_sequence_and_timestamp_when_nothing_is_new(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [text(ALICE, "a")])
        transcript = TranscriptBuilder.from_store(store, SESSION)

        updated = TranscriptBuilder.update_from_store(store, transcript)

        assert (transcript.last_sequence, transcript.last_timestamp) == (
            updated.last_sequence,
            updated.last_timestamp,
        )

    def test_update_for_another_viewer_raises_validation_error(self, store: RecordingStore) -> None:
        transcript = TranscriptBuilder.from_store(store, SESSION, viewer=BOT)

        with pytest.raises(ValidationError, match="viewer"):
            TranscriptBuilder.update_from_store(store, transcript, viewer=PEER)

    def test_update_of_a_transcript_decoded_from_json_continues_its_stream(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [delta(BOT, "Hel", run_id="r")])
        transcript = TranscriptBuilder.from_store(store, SESSION)
        decoded = msgspec.json.decode(msgspec.json.encode(transcript), type=Transcript)
        store.append(SESSION, [delta(BOT, "lo", run_id="r")])

        assert ["Hello"] == contents(TranscriptBuilder.update_from_store(store, decoded))

    def test_update_of_a_transcript_without_builder_metadata_appends_new_messages(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [text(ALICE, "a")])
        handmade = Transcript(
            session_id=SESSION,
            messages=[TranscriptMessage(role="user", content="earlier")],
            last_sequence=1,
            last_timestamp=None,
        )
        store.append(SESSION, [text(ALICE, "b")])

        assert ["earlier", "b"] == contents(TranscriptBuilder.update_from_store(store, handmade))

    def test_a_built_transcript_keeps_its_fold_state_out_of_its_metadata(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [delta(BOT, "a", run_id="r")])
        transcript = TranscriptBuilder.update_from_store(
            store, TranscriptBuilder.from_store(store, SESSION, viewer=BOT), viewer=BOT
        )

        assert {} == transcript.metadata

    def test_update_rejects_an_open_text_that_is_not_the_last_message(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [delta(BOT, "a")])
        transcript = TranscriptBuilder.from_store(store, SESSION)
        forged = msgspec.structs.replace(
            transcript, messages=[TranscriptMessage(role="user", content="other")]
        )

        with pytest.raises(ValidationError, match="open_text"):
            TranscriptBuilder.update_from_store(store, forged)

    def test_update_rejects_an_open_text_without_an_author(self, store: RecordingStore) -> None:
        store.append(SESSION, [delta(BOT, "b", run_id="r")])
        transcript = TranscriptBuilder.from_store(store, SESSION)
        assert transcript._fold is not None and transcript._fold.open_text is not None
        open_text = msgspec.structs.replace(transcript._fold.open_text, author=None)
        forged = msgspec.structs.replace(
            transcript,
            messages=[open_text],
            _fold=msgspec.structs.replace(transcript._fold, open_text=open_text),
        )

        with pytest.raises(ValidationError, match="open_text has no author"):
            TranscriptBuilder.update_from_store(store, forged)

    def test_update_never_changes_the_given_transcript(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, "a"), delta(BOT, "b", run_id="r")])
        transcript = TranscriptBuilder.from_store(store, SESSION)
        before = copy.deepcopy(transcript)
        store.append(SESSION, [delta(BOT, "c", run_id="r"), call("c1"), result("c1")])

        TranscriptBuilder.update_from_store(store, transcript, max_messages=1)

        assert before == transcript


# -- properties ------------------------------------------------------------------------

AUTHORS: list[SessionAuthor] = [OPERATOR, ALICE, BOT, PEER, PROMPT]
CALL_IDS = ["c1", "c2", "c3"]

bodies = st.one_of(
    st.builds(Text, st.sampled_from(["", "ok", "a longer reply", "x" * 30])),
    st.builds(TextDelta, st.sampled_from(["", "a", "bc", "defg"])),
    st.builds(
        ToolCall,
        tool_call_id=st.sampled_from(CALL_IDS),
        tool_name=st.just("f"),
        tool_input=st.dictionaries(st.sampled_from(["q", "n"]), st.integers(0, 999), max_size=2),
    ),
    st.builds(
        ToolResult,
        tool_call_id=st.sampled_from(CALL_IDS),
        output=st.one_of(st.text(max_size=12), st.integers(-999, 999), st.none()),
        is_error=st.booleans(),
    ),
    st.builds(RunStarted, provider=st.just("p")),
    st.builds(RunFinished, status=st.just("completed")),
)

unstamped_events = st.lists(
    st.builds(
        Event,
        st.sampled_from(AUTHORS),
        bodies,
        run_id=st.sampled_from([None, "r1", "r2"]),
        metadata=st.dictionaries(st.sampled_from(["k", "event_id"]), st.integers(0, 9), max_size=1),
    ),
    max_size=30,
)

event_lists = unstamped_events.map(lambda events: stamped(*events))
optional_budget = st.none() | st.integers(min_value=0, max_value=40)
viewers = st.sampled_from([None, *AUTHORS])


def pairs(messages: Sequence[TranscriptMessage]) -> list[tuple[int, int]]:
    """Pair each result with the latest unanswered call of its id (reference pairing)."""
    waiting: dict[str, list[int]] = {}
    found: list[tuple[int, int]] = []
    for position, message in enumerate(messages):
        if message.role == "assistant" and message.tool_call_id is not None:
            waiting.setdefault(message.tool_call_id, []).append(position)
        elif message.role == "tool":
            queue = waiting.get(message.tool_call_id or "", [])
            assert queue, "a result without its call"
            found.append((queue.pop(), position))
    return found


def char_budget(max_chars: int | None, max_tokens: int | None) -> int | None:
    budgets = [
        b for b in (max_chars, None if max_tokens is None else 4 * max_tokens) if b is not None
    ]
    return min(budgets) if budgets else None


def naive_truncation(
    messages: list[TranscriptMessage], max_messages: int | None, chars: int | None
) -> list[TranscriptMessage]:
    """The longest suffix within the budgets that splits no pair, found by trying each."""
    found = pairs(messages)
    for start in range(len(messages) + 1):
        suffix = messages[start:]
        if max_messages is not None and len(suffix) > max_messages:
            continue
        if chars is not None and sum(map(TranscriptBuilder.message_chars, suffix)) > chars:
            continue
        if any(call < start <= res for call, res in found):
            continue
        return suffix
    raise AssertionError("the empty suffix always fits")  # pragma: no cover


class TestProperties:
    @given(event_lists, viewers)
    def test_the_input_order_of_stored_events_does_not_matter(
        self, events: list[Event], viewer: SessionAuthor | None
    ) -> None:
        shuffled = list(events)
        random.Random(len(events)).shuffle(shuffled)

        assert build(events, viewer=viewer) == build(shuffled, viewer=viewer)

    @given(event_lists)
    def test_an_untruncated_transcript_never_holds_a_result_without_its_call(
        self, events: list[Event]
    ) -> None:
        pairs(build(events).messages)  # asserts each result finds its call

    @given(event_lists, optional_budget, optional_budget, optional_budget)
    def test_truncation_never_leaves_a_call_or_result_without_its_partner(
        self,
        events: list[Event],
        max_messages: int | None,
        max_chars: int | None,
        max_tokens: int | None,
    ) -> None:
        full = build(events).messages
        kept = build(
            events, max_messages=max_messages, max_chars=max_chars, max_tokens_approx=max_tokens
        ).messages
        kept_ids = {message.metadata["event_id"] for message in kept}

        for call, res in pairs(full):
            assert (full[call].metadata["event_id"] in kept_ids) == (
                full[res].metadata["event_id"] in kept_ids
            )

    @given(event_lists, st.integers(0, 40))
    def test_truncation_respects_max_messages(self, events: list[Event], budget: int) -> None:
        assert len(build(events, max_messages=budget).messages) <= budget

    @given(event_lists, st.integers(0, 60))
    def test_truncation_respects_max_chars(self, events: list[Event], budget: int) -> None:
        kept = build(events, max_chars=budget).messages

        assert sum(map(TranscriptBuilder.message_chars, kept)) <= budget

    @given(event_lists, st.integers(0, 15))
    def test_truncation_respects_max_tokens_approx(self, events: list[Event], budget: int) -> None:
        kept = build(events, max_tokens_approx=budget).messages

        assert sum(map(TranscriptBuilder.message_chars, kept)) <= 4 * budget

    @given(event_lists, optional_budget, optional_budget, optional_budget)
    def test_truncation_keeps_a_suffix_of_the_untruncated_transcript(
        self,
        events: list[Event],
        max_messages: int | None,
        max_chars: int | None,
        max_tokens: int | None,
    ) -> None:
        full = build(events).messages
        kept = build(
            events, max_messages=max_messages, max_chars=max_chars, max_tokens_approx=max_tokens
        ).messages

        assert full[len(full) - len(kept) :] == kept

    @given(event_lists, optional_budget, optional_budget, optional_budget)
    def test_truncation_keeps_the_longest_suffix_a_naive_search_finds(
        self,
        events: list[Event],
        max_messages: int | None,
        max_chars: int | None,
        max_tokens: int | None,
    ) -> None:
        full = build(events).messages
        kept = build(
            events, max_messages=max_messages, max_chars=max_chars, max_tokens_approx=max_tokens
        ).messages

        assert naive_truncation(full, max_messages, char_budget(max_chars, max_tokens)) == kept

    @given(event_lists, viewers, optional_budget, optional_budget)
    def test_from_events_never_changes_its_input(
        self,
        events: list[Event],
        viewer: SessionAuthor | None,
        max_messages: int | None,
        max_chars: int | None,
    ) -> None:
        given_events = list(events)
        before = copy.deepcopy(events)

        build(given_events, viewer=viewer, max_messages=max_messages, max_chars=max_chars)

        assert (before, events) == (given_events, given_events)

    @given(unstamped_events, st.data(), viewers)
    def test_update_from_store_equals_a_fresh_from_store(
        self, events: list[Event], data: st.DataObject, viewer: SessionAuthor | None
    ) -> None:
        split = data.draw(st.integers(0, len(events)))
        with MemoryStore() as fresh_store:
            fresh_store.append(SESSION, events[:split])
            earlier = TranscriptBuilder.from_store(fresh_store, SESSION, viewer=viewer)
            fresh_store.append(SESSION, events[split:])

            assert TranscriptBuilder.from_store(
                fresh_store, SESSION, viewer=viewer
            ) == TranscriptBuilder.update_from_store(fresh_store, earlier, viewer=viewer)

    @given(unstamped_events, st.data(), viewers)
    def test_updates_after_every_append_equal_one_fresh_from_store(
        self, events: list[Event], data: st.DataObject, viewer: SessionAuthor | None
    ) -> None:
        cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=4)))
        with MemoryStore() as fresh_store:
            transcript = TranscriptBuilder.from_store(fresh_store, SESSION, viewer=viewer)
            for start, stop in zip([0, *cuts], [*cuts, len(events)], strict=True):
                fresh_store.append(SESSION, events[start:stop])
                transcript = TranscriptBuilder.update_from_store(
                    fresh_store, transcript, viewer=viewer
                )

            assert TranscriptBuilder.from_store(fresh_store, SESSION, viewer=viewer) == transcript

    @given(unstamped_events, st.data(), st.integers(0, 12))
    def test_update_from_store_equals_a_fresh_from_store_under_max_messages(
        self, events: list[Event], data: st.DataObject, budget: int
    ) -> None:
        split = data.draw(st.integers(0, len(events)))
        with MemoryStore() as fresh_store:
            fresh_store.append(SESSION, events[:split])
            earlier = TranscriptBuilder.from_store(fresh_store, SESSION, max_messages=budget)
            fresh_store.append(SESSION, events[split:])

            assert TranscriptBuilder.from_store(
                fresh_store, SESSION, max_messages=budget
            ) == TranscriptBuilder.update_from_store(fresh_store, earlier, max_messages=budget)

    @given(unstamped_events, st.data(), st.integers(0, 60))
    def test_update_from_store_equals_a_fresh_from_store_under_max_chars(
        self, events: list[Event], data: st.DataObject, budget: int
    ) -> None:
        """Holds unless the earlier cut fell on an open stream (the documented exception)."""
        split = data.draw(st.integers(0, len(events)))
        with MemoryStore() as fresh_store:
            fresh_store.append(SESSION, events[:split])
            earlier = TranscriptBuilder.from_store(fresh_store, SESSION, max_chars=budget)
            open_text = None if earlier._fold is None else earlier._fold.open_text
            assume(open_text is None or open_text in earlier.messages)
            fresh_store.append(SESSION, events[split:])

            assert TranscriptBuilder.from_store(
                fresh_store, SESSION, max_chars=budget
            ) == TranscriptBuilder.update_from_store(fresh_store, earlier, max_chars=budget)


class TestBlankText:
    @pytest.mark.parametrize("blank", ["", " ", "\n\t "])
    def test_a_blank_text_gives_no_message(self, blank: str) -> None:
        transcript = build(stamped(text(ALICE, "a"), text(BOB, blank), text(ALICE, "b")))

        assert ["a", "b"] == contents(transcript)

    def test_a_blank_text_closing_its_own_stream_leaves_the_streamed_text(self) -> None:
        transcript = build(
            stamped(
                delta(BOT, "hel", run_id="r1"),
                delta(BOT, "lo", run_id="r1"),
                text(BOT, " ", run_id="r1"),
            )
        )

        assert ["hello"] == contents(transcript)

    def test_a_blank_text_of_someone_else_does_not_interrupt_a_stream(self) -> None:
        transcript = build(
            stamped(delta(BOT, "a", run_id="r1"), text(ALICE, ""), delta(BOT, "b", run_id="r1"))
        )

        assert ["ab"] == contents(transcript)


class TestFromStoreReadsTheTail:
    def test_max_messages_reads_one_page_from_the_tail(self, store: RecordingStore) -> None:
        store.append(SESSION, [text(ALICE, str(n)) for n in range(1000)])

        transcript = TranscriptBuilder.from_store(store, SESSION, max_messages=20)

        assert [str(n) for n in range(980, 1000)] == contents(transcript)
        assert [(None, 256, True)] == [
            (r["before"], r["limit"], r["newest_first"]) for r in store.reads
        ]

    def test_a_char_budget_reads_further_pages_until_it_is_met(self, store: RecordingStore) -> None:
        store.append(
            SESSION,
            [text(ALICE, "old"), text(ALICE, "xyz")]
            + [text(ALICE, "") for _ in range(600)]
            + [text(ALICE, "ab")],
        )

        transcript = TranscriptBuilder.from_store(store, SESSION, max_chars=3)

        assert (["ab"], [256, 512]) == (contents(transcript), [r["limit"] for r in store.reads])

    def test_a_result_read_before_its_call_keeps_the_walk_going(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [call("c1")] + [text(ALICE, "") for _ in range(300)] + [result("c1")])

        transcript = TranscriptBuilder.from_store(store, SESSION, max_messages=5)

        assert [None, "ok"] == [m.tool_output for m in transcript.messages]

    def test_exclude_run_id_leaves_the_runs_events_out_of_the_limit(
        self, store: RecordingStore
    ) -> None:
        store.append(SESSION, [text(ALICE, "a"), text(ALICE, "b"), text(BOT, "mine", run_id="r1")])

        transcript = TranscriptBuilder.from_store(store, SESSION, limit=1, exclude_run_id="r1")

        assert ["b"] == contents(transcript)

    @given(unstamped_events, optional_budget, optional_budget, st.integers(1, 4))
    @example(  # a reused id: pairing with an older call would need the whole session read
        [call("c3"), text(ALICE, "ok"), call("c3"), result("c3", "")], None, 2, 1
    )
    def test_a_tail_read_keeps_the_messages_a_full_fold_keeps(
        self,
        events: list[Event],
        max_messages: int | None,
        max_chars: int | None,
        first_page: int,
    ) -> None:
        with (
            MemoryStore() as fresh_store,
            mock.patch("sharedesk.projection.transcript.FIRST_PAGE", first_page),
        ):
            fresh_store.append(SESSION, events)
            full = build(fresh_store.read(SESSION), max_messages=max_messages, max_chars=max_chars)

            tail = TranscriptBuilder.from_store(
                fresh_store, SESSION, max_messages=max_messages, max_chars=max_chars
            )

            assert (full.messages, full.last_sequence) == (tail.messages, tail.last_sequence)
