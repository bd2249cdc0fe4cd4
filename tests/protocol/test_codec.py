from datetime import UTC, datetime

import msgspec
import pytest

from sharedesk.protocol import (
    Agent,
    Conversation,
    Event,
    Operator,
    Person,
    RunFinished,
    RunStarted,
    SharingState,
    System,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    ValidationError,
)
from sharedesk.protocol.codec import (
    decode_json_as,
    encode_json,
    encode_msgpack,
)
from sharedesk.protocol.records import decode_state


def decode_event(data: bytes) -> Event:
    """Decode a stored event as the stores do (a typed msgpack decoder)."""
    return msgspec.msgpack.decode(data, type=Event)


BODIES = [
    Text("hello"),
    TextDelta("hel"),
    ToolCall("c1", "search", {"q": "x", "n": 3}),
    ToolResult("c1", {"hits": [1, 2]}, is_error=True),
    RunStarted("scripted", model="m", provider_session_id="p"),
    RunFinished("failed", error_code="boom", error_message="it broke", token_usage={"in": 3}),
]
AUTHORS = [Operator(), Person("p1", "Pat"), Agent("a1", "Ada"), System("prompt", "System")]


class TestEventCodec:
    @pytest.mark.parametrize("body", BODIES, ids=lambda b: type(b).__name__)
    def test_every_body_kind_round_trips_through_msgpack(self, body: object) -> None:
        event = Event(Agent("a", "A"), body, sequence=3, timestamp=datetime(2026, 1, 1, tzinfo=UTC))  # type: ignore[arg-type]

        assert event == decode_event(encode_msgpack(event))

    @pytest.mark.parametrize("author", AUTHORS, ids=lambda a: type(a).__name__)
    def test_every_author_kind_round_trips_through_json(self, author: object) -> None:
        event = Event(author, Text("hi"), parent=1, run_id="r", metadata={"k": [1]})  # type: ignore[arg-type]

        assert event == decode_json_as(encode_json(event), Event)

    def test_authors_are_tagged_on_the_type_field(self) -> None:
        assert b'"type":"person"' in encode_json(Person("p", "P"))

    def test_malformed_bytes_raise_validation_error_with_the_cause_chained(self) -> None:
        with pytest.raises(ValidationError) as caught:
            decode_json_as(b"\xc1not json", SharingState)

        assert caught.value.__cause__ is not None

    def test_an_unknown_body_tag_raises_validation_error(self) -> None:
        raw = b'{"author":{"type":"operator"},"body":{"type":"nope"},"id":"x"}'

        with pytest.raises(ValidationError):
            decode_json_as(raw, Event)

    def test_a_record_missing_later_fields_decodes_with_their_defaults(self) -> None:
        raw = encode_msgpack(
            {"author": {"type": "operator"}, "body": {"type": "text", "content": "x"}, "id": "i"}
        )

        assert Event(Operator(), Text("x"), id="i") == decode_event(raw)


class TestSharingStateCodec:
    def test_a_state_round_trips_through_msgpack_and_json(self) -> None:
        state = SharingState(Conversation("d", 4), 10, frozenset({12, 15}))

        assert state == decode_state("d", encode_msgpack(state))
        assert state == decode_json_as(encode_json(state), SharingState)

    def test_json_as_decodes_any_protocol_type(self) -> None:
        assert Conversation("d") == decode_json_as('{"desk":"d"}', Conversation)

    def test_json_as_rejects_a_mismatched_document(self) -> None:
        with pytest.raises(ValidationError):
            decode_json_as('{"desk":1}', Conversation)
