from datetime import UTC, datetime

import pytest

from sharedesk.protocol import (
    Conversation,
    Event,
    Operator,
    RunFinished,
    SharingState,
    Text,
    ValidationError,
)
from sharedesk.protocol.validation import (
    MAX_SESSION_ID_BYTES,
    check_author,
    check_conversation,
    check_event_sequence,
    check_events,
    check_optional_int,
    check_parents,
    check_session_id,
    check_write,
)
from sharedesk.protocol.writes import Share


class TestSessionId:
    @pytest.mark.parametrize(
        "session_id", ["a", "a/b", "a\x00b", "désk", "x" * MAX_SESSION_ID_BYTES]
    )
    def test_any_non_empty_text_within_the_size_limit_is_accepted(self, session_id: str) -> None:
        assert session_id == check_session_id(session_id)

    @pytest.mark.parametrize(
        "session_id", ["", None, 3, b"a", "x" * (MAX_SESSION_ID_BYTES + 1), "\ud800"]
    )
    def test_anything_else_is_refused(self, session_id: object) -> None:
        with pytest.raises(ValidationError):
            check_session_id(session_id)


class TestOptionalInt:
    @pytest.mark.parametrize("value", [True, 1.0, "1", -1])
    def test_bools_floats_strings_and_negatives_are_refused(self, value: object) -> None:
        with pytest.raises(ValidationError):
            check_optional_int("after", value)

    def test_none_and_non_negative_ints_pass(self) -> None:
        assert (None, 0, 7) == tuple(check_optional_int("x", v) for v in (None, 0, 7))


class TestEvents:
    def test_a_plain_string_is_not_a_sequence_of_events(self) -> None:
        with pytest.raises(ValidationError):
            check_events("abc")

    def test_a_single_event_must_be_wrapped_in_a_list(self) -> None:
        with pytest.raises(ValidationError):
            check_events(Event(Operator(), Text("x")))

    def test_a_non_event_element_is_named_by_its_index(self) -> None:
        with pytest.raises(ValidationError, match=r"events\[1\]"):
            check_events([Event(Operator(), Text("x")), {"body": "x"}])

    @pytest.mark.parametrize(
        ("event", "field"),
        [
            (Event(Operator(), Text("a\udc80")), "events[0].body.content"),
            (
                Event(Operator(), Text("x"), metadata={"k": ["a", "\udc80"]}),
                "events[0].metadata['k'][1]",
            ),
            (Event(Operator(), Text("x"), metadata={"k\udc80": 1}), "events[0].metadata key"),
        ],
        ids=["content", "nested-value", "key"],
    )
    def test_a_lone_surrogate_is_refused_naming_its_field(self, event: Event, field: str) -> None:
        with pytest.raises(ValidationError) as raised:
            check_events([event])
        assert str(raised.value).startswith(f"{field}")
        assert "lone surrogate" in str(raised.value)

    def test_a_field_of_the_wrong_type_is_refused(self) -> None:
        with pytest.raises(ValidationError):
            check_events([Event(Operator(), Text(5))])  # type: ignore[arg-type]

    def test_an_event_stamped_with_a_sequence_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="stamps"):
            check_events([Event(Operator(), Text("x"), sequence=1)])

    def test_an_event_stamped_with_a_timestamp_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="stamps"):
            check_events([Event(Operator(), Text("x"), timestamp=datetime(2026, 1, 1, tzinfo=UTC))])

    def test_an_empty_id_is_refused(self) -> None:
        with pytest.raises(ValidationError):
            check_events([Event(Operator(), Text("x"), id="")])

    def test_a_parent_below_one_is_refused(self) -> None:
        with pytest.raises(ValidationError):
            check_events([Event(Operator(), Text("x"), parent=0)])

    def test_an_unknown_run_status_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="status"):
            check_events([Event(Operator(), RunFinished("done"))])

    def test_a_parent_must_name_an_earlier_row(self) -> None:
        with pytest.raises(ValidationError, match="earlier"):
            check_parents([Event(Operator(), Text("x"), parent=5)], first_sequence=5)

    def test_an_int_outside_the_storable_range_is_refused(self) -> None:
        with pytest.raises(ValidationError):
            check_events([Event(Operator(), Text("x"), metadata={"n": -(2**63) - 1})])

    def test_text_that_is_not_valid_unicode_is_refused(self) -> None:
        with pytest.raises(ValidationError):
            check_events([Event(Operator(), Text("\ud800"))])

    def test_a_body_that_is_no_body_kind_is_refused(self) -> None:
        with pytest.raises(ValidationError, match=r"events\[0\]"):
            check_events([Event(Operator(), 5)])  # type: ignore[arg-type]


class TestEventSequence:
    def test_a_tuple_of_events_is_a_batch(self) -> None:
        batch = (Event(Operator(), Text("x")),)

        assert batch is check_event_sequence(batch)

    @pytest.mark.parametrize("events", ["abc", b"abc", Event(Operator(), Text("x")), 3, None])
    def test_text_a_lone_event_and_non_sequences_are_not_batches(self, events: object) -> None:
        with pytest.raises(ValidationError, match="sequence of Event"):
            check_event_sequence(events)


class TestWriteOrder:
    def test_the_session_id_is_checked_before_the_events(self) -> None:
        with pytest.raises(ValidationError, match="session_id"):
            check_write("", "not events")

    def test_the_events_are_checked_before_the_expected_version(self) -> None:
        with pytest.raises(ValidationError, match="sequence of Event"):
            check_write("s", "not events", expected_version=-1)

    def test_a_negative_expected_version_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="expected_version"):
            check_write("s", [], expected_version=-1)


class TestAuthor:
    def test_every_author_kind_passes(self) -> None:
        from sharedesk.protocol import Agent, Person, System

        authors = [Operator(), Person("p", "P"), Agent("a", "A"), System("k", "K")]

        assert authors == [check_author(a) for a in authors]

    def test_anything_else_is_refused_under_the_name_given(self) -> None:
        with pytest.raises(ValidationError, match=r"^viewer must be an Operator"):
            check_author("agent:a", "viewer")


class TestConversation:
    def test_a_channel_and_a_thread_pass(self) -> None:
        from sharedesk.protocol import Conversation

        assert [Conversation("d"), Conversation("d", 3)] == [
            check_conversation(Conversation("d")),
            check_conversation(Conversation("d", 3)),
        ]

    @pytest.mark.parametrize("value", ["d", None, {"desk": "d"}])
    def test_anything_but_a_conversation_is_refused(self, value: object) -> None:
        with pytest.raises(ValidationError, match="must be a Conversation"):
            check_conversation(value)

    def test_a_thread_root_that_is_not_an_int_is_refused(self) -> None:
        from sharedesk.protocol import Conversation

        with pytest.raises(ValidationError, match="thread_root"):
            check_conversation(Conversation("d", "3"))  # type: ignore[arg-type]

    def test_a_thread_root_of_zero_is_refused_as_no_sequence(self) -> None:
        from sharedesk.protocol import Conversation

        with pytest.raises(ValidationError, match=r"thread_root must be in \[1, 2\*\*63\)"):
            check_conversation(Conversation("d", 0))


class TestCheckWrite:
    STATE = SharingState(Conversation("s"), 0)

    def test_a_write_holds_private_copies_of_the_events(self) -> None:
        event = Event(Operator(), Text("x"), metadata={"k": [1]})

        write = check_write("s", [event])

        assert [event] == write.events
        assert write.events[0].metadata is not event.metadata

    def test_a_write_keeps_its_guards_and_share(self) -> None:
        share = Share("viewer", self.STATE, None, reply_present=True)

        write = check_write("s", [], expected_version=2, unless_stored="x", share=share)

        assert (2, "x", share) == (write.expected_version, write.unless_stored, write.share)

    @pytest.mark.parametrize(
        "share",
        [
            "not a share",
            Share("", STATE, None),
            Share("viewer", "not a state", None),  # type: ignore[arg-type]
            Share("viewer", STATE, "not a state"),  # type: ignore[arg-type]
            Share("viewer", STATE, SharingState(Conversation("other"), 0)),
            Share("viewer", STATE, None, reply_present="yes"),  # type: ignore[arg-type]
        ],
        ids=["not_a_share", "empty_viewer", "bad_state", "bad_expected", "other_desk", "flag"],
    )
    def test_a_malformed_share_is_refused(self, share: object) -> None:
        with pytest.raises(ValidationError):
            check_write("s", [], share=share)

    @pytest.mark.parametrize("guard", ["", 3])
    def test_an_unless_stored_that_is_not_a_non_empty_str_is_refused(self, guard: object) -> None:
        with pytest.raises(ValidationError):
            check_write("s", [], unless_stored=guard)
