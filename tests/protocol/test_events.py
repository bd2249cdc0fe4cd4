"""Event ids: what ``new_event_id`` promises and what ``Event`` uses by default."""

from __future__ import annotations

import string
import uuid

from sharedesk import Agent, Event, Text
from sharedesk.protocol.events import new_event_id


def test_new_event_id_is_a_random_uuid_in_32_lowercase_hex_digits() -> None:
    for _ in range(2000):
        event_id = new_event_id()
        parsed = uuid.UUID(hex=event_id)

        assert (32, True) == (len(event_id), set(event_id) <= set(string.hexdigits.lower()))
        assert (4, uuid.RFC_4122, event_id) == (parsed.version, parsed.variant, parsed.hex)


def test_new_event_ids_do_not_repeat() -> None:
    ids = [new_event_id() for _ in range(10_000)]

    assert len(set(ids)) == len(ids)


def test_new_event_ids_vary_in_every_random_hex_digit() -> None:
    ids = [new_event_id() for _ in range(2000)]
    # Digit 12 holds the version and digit 16 the variant; the other 30 are random.
    varying = [i for i in range(32) if len({event_id[i] for event_id in ids}) > 1]

    assert [i for i in range(32) if i != 12] == varying


def test_each_event_gets_its_own_id_by_default() -> None:
    author = Agent(id="a", label="A")

    first, second = Event(author, Text("x")), Event(author, Text("x"))

    assert first.id != second.id
    assert 4 == uuid.UUID(hex=first.id).version
