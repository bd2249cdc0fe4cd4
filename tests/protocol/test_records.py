"""The stored record codec and key hashing shared by the durable backends."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sharedesk.protocol import (
    Conversation,
    CorruptRecordError,
    Event,
    Person,
    SharingState,
    Text,
    ToolCall,
)
from sharedesk.protocol.records import (
    ENCODER,
    EVENT_DECODER,
    LOG_DECODER,
    MAX_RAW_ID,
    decode_record,
    decode_session_state,
    decode_state,
    event_id_key,
    private_copy,
    run_index_key,
    sharing_key,
)
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE

ANN = Person(id="ann", label="Ann")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def stored(body: Text | ToolCall, sequence: int = 3, **fields: object) -> Event:
    return Event(ANN, body, sequence=sequence, timestamp=NOW, **fields)  # type: ignore[arg-type]


class TestKeys:
    def test_an_id_up_to_the_raw_limit_is_kept_as_it_is(self) -> None:
        event_id = "x" * MAX_RAW_ID

        assert b"p\x00" + event_id.encode() == event_id_key(b"p", event_id)

    def test_a_longer_id_is_hashed_to_a_fixed_size(self) -> None:
        key = event_id_key(b"p", "x" * (MAX_RAW_ID + 1))

        assert (b"p\x01", 2 + 32) == (key[:2], len(key))

    def test_two_long_ids_differing_at_the_end_get_different_keys(self) -> None:
        base = "x" * (MAX_RAW_ID * 3)

        assert event_id_key(b"", base + "a") != event_id_key(b"", base + "b")

    def test_a_run_key_does_not_depend_on_the_id_length(self) -> None:
        assert len(run_index_key(b"", "r")) == len(run_index_key(b"", "r" * 1000))

    def test_sharing_keys_tell_viewers_and_conversations_apart(self) -> None:
        keys = {
            sharing_key(b"", viewer, Conversation("d", root))
            for viewer in ("a", "ab")
            for root in (None, 1)
        }

        assert 4 == len(keys)


class TestRecords:
    def test_a_stored_event_decodes_to_itself(self) -> None:
        event = stored(Text("hello"), metadata={"k": [1]})

        assert event == decode_record(EVENT_DECODER, "s", 3, ENCODER.encode(event))

    def test_a_log_record_keeps_only_what_a_log_row_needs(self) -> None:
        record = decode_record(LOG_DECODER, "s", 3, ENCODER.encode(stored(Text("hi"))))

        assert ("hi", 3, ANN) == (record.body.content, record.sequence, record.author)

    def test_garbage_bytes_are_a_corrupt_record(self) -> None:
        with pytest.raises(CorruptRecordError):
            decode_record(EVENT_DECODER, "s", 3, b"\xc1garbage")

    def test_a_record_holding_another_sequence_is_corrupt(self) -> None:
        with pytest.raises(CorruptRecordError, match="holds sequence 3"):
            decode_record(EVENT_DECODER, "s", 4, ENCODER.encode(stored(Text("x"))))

    def test_a_stored_sharing_state_decodes_to_itself(self) -> None:
        state = SharingState(Conversation("d", 2), 5, frozenset({7}))

        assert state == decode_state("s", ENCODER.encode(state))

    def test_an_undecodable_sharing_state_is_corrupt(self) -> None:
        with pytest.raises(CorruptRecordError):
            decode_state("s", b"\x01")

    def test_no_stored_session_state_is_the_empty_state(self) -> None:
        assert EMPTY_SESSION_STATE == decode_session_state("s", None)

    def test_an_undecodable_session_state_is_corrupt(self) -> None:
        with pytest.raises(CorruptRecordError, match="session state"):
            decode_session_state("s", b"\x01")


class TestPrivateCopy:
    def test_a_copy_of_a_plain_message_has_its_own_metadata(self) -> None:
        event = stored(Text("x"))

        copy = private_copy(event)

        assert event == copy and copy.metadata is not event.metadata

    def test_a_copy_shares_no_container_with_a_tool_calls_input(self) -> None:
        event = stored(ToolCall("c", "search", {"q": ["a"]}))

        copy = private_copy(event)

        assert isinstance(copy.body, ToolCall) and isinstance(event.body, ToolCall)
        assert event == copy and copy.body.tool_input["q"] is not event.body.tool_input["q"]
