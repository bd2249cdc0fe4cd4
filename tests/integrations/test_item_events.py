"""The Item and Retracted body kinds: stored exactly, invisible to views, turns, transcripts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sharedesk.actors.hub import Hub
from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol.authors import Agent, Person
from sharedesk.protocol.events import Event, Item, Retracted, Text
from sharedesk.protocol.ports import EventStore
from sharedesk.protocol.records import ENCODER
from sharedesk.store.lmdb import LmdbStore
from sharedesk.store.memory import MemoryStore

ADA = Agent(id="ada", label="Ada")
PAT = Person(id="pat", label="Pat")
ITEM: dict[str, Any] = {
    "type": "function_call",
    "call_id": "c1",
    "name": "lookup",
    "arguments": '{"q": [1, 2.5, null, true]}',
    "nested": {"deep": [{"x": "é"}]},
}


@pytest.fixture(params=["memory", "lmdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    opened: EventStore = (
        MemoryStore() if request.param == "memory" else LmdbStore(tmp_path / "store")
    )
    with opened:
        yield opened


class TestStorage:
    def test_an_item_reads_back_equal_to_what_was_appended(self, store: EventStore) -> None:
        event = Event(ADA, Item(ITEM), metadata={"k": 1})

        stored = store.append("s", [event])[0]

        assert [stored] == store.read("s")
        assert (ITEM, {"k": 1}) == (store.read("s")[0].body.item, stored.metadata)  # type: ignore[union-attr]

    def test_a_retraction_reads_back_equal_to_what_was_appended(self, store: EventStore) -> None:
        store.append("s", [Event(ADA, Item(ITEM), id="e1")])

        stored = store.append(
            "s", [Event(ADA, Retracted(target="e1")), Event(ADA, Retracted(through=1))]
        )

        assert stored == store.read("s")[1:]

    @pytest.mark.parametrize("body", [Item(ITEM), Retracted(target="e1", through=3)])
    def test_both_kinds_round_trip_through_msgpack_and_json(self, body: Item | Retracted) -> None:
        event = Event(ADA, body, id="x")

        assert (event, event) == (
            msgspec.msgpack.decode(ENCODER.encode(event), type=Event),
            msgspec.json.decode(msgspec.json.encode(event), type=Event),
        )


class TestViews:
    def test_item_and_retraction_rows_leave_a_desks_view_and_turn_unchanged(self) -> None:
        with Hub.open(None) as plain, Hub.open(None) as mixed:
            for hub, extra in ((plain, []), (mixed, [Event(ADA, Item(ITEM), id="i")])):
                hub.session("d").append([Event(PAT, Text("hello"))])
                hub.session("d").append([*extra, Event(ADA, Text("hi Pat"))])
                if extra:
                    hub.session("d").append([Event(ADA, Retracted(target="i"))])

            views = [
                [(m.author, m.content) for m in h.view("d", PAT).messages] for h in (plain, mixed)
            ]
            turns = [[m.content for m in h.turn("d", PAT).messages] for h in (plain, mixed)]

        assert views[0] == views[1]
        assert turns[0] == turns[1]

    def test_item_and_retraction_rows_give_no_transcript_message(self) -> None:
        events = [
            Event(PAT, Text("hello"), sequence=1),
            Event(ADA, Item(ITEM), sequence=2),
            Event(ADA, Retracted(through=2), sequence=3),
            Event(ADA, Text("hi"), sequence=4),
        ]

        transcript = TranscriptBuilder.from_events(events, session_id="d", viewer=ADA)

        assert [("user", "hello"), ("assistant", "hi")] == [
            (m.role, m.content) for m in transcript.messages
        ]
