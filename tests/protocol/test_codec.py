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
)
from sharedesk.protocol.records import ENCODER, decode_state


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

        assert event == decode_event(ENCODER.encode(event))

    @pytest.mark.parametrize("author", AUTHORS, ids=lambda a: type(a).__name__)
    def test_every_author_kind_round_trips_through_json(self, author: object) -> None:
        event = Event(author, Text("hi"), parent=1, run_id="r", metadata={"k": [1]})  # type: ignore[arg-type]

        assert event == msgspec.json.decode(msgspec.json.encode(event), type=Event)

    def test_authors_are_tagged_on_the_type_field(self) -> None:
        assert b'"type":"person"' in msgspec.json.encode(Person("p", "P"))

    def test_a_record_missing_later_fields_decodes_with_their_defaults(self) -> None:
        raw = ENCODER.encode(
            {"author": {"type": "operator"}, "body": {"type": "text", "content": "x"}, "id": "i"}
        )

        assert Event(Operator(), Text("x"), id="i") == decode_event(raw)


class TestSharingStateCodec:
    def test_a_state_round_trips_through_msgpack_and_json(self) -> None:
        state = SharingState(Conversation("d", 4), 10, frozenset({12, 15}))

        assert state == decode_state("d", ENCODER.encode(state))
        assert state == msgspec.json.decode(msgspec.json.encode(state), type=SharingState)

    def test_json_decodes_any_protocol_type(self) -> None:
        assert Conversation("d") == msgspec.json.decode('{"desk":"d"}', type=Conversation)
