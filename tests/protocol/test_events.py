"""Event ids: what ``new_event_id`` promises and what ``Event`` uses by default."""

from __future__ import annotations

import os
import string
import threading
import uuid

from sharedesk import Agent, Event, Text
from sharedesk.protocol.events import EventIds, new_event_id


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


def test_ids_drawn_by_many_threads_at_once_do_not_repeat() -> None:
    ids, start = EventIds(), threading.Barrier(8)
    drawn: list[list[str]] = [[] for _ in range(8)]

    def draw(mine: list[str]) -> None:
        start.wait(10)
        mine.extend(ids() for _ in range(5000))

    threads = [threading.Thread(target=draw, args=(mine,)) for mine in drawn]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    every = [event_id for mine in drawn for event_id in mine]
    assert (40_000, 40_000) == (len(every), len(set(every)))


def test_a_forked_child_never_draws_the_ids_its_parent_draws() -> None:
    ids = EventIds()
    ids()  # the parent holds a block of randomness now
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: send its next id, and leave without pytest's exit
        os.write(write, ids().encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        childs = pipe.read()
    os.waitpid(child, 0)

    assert (32, False) == (len(childs), childs == ids())
