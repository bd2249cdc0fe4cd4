"""AsyncHub over a following store: other processes' appends wake ``wait_turn``.

The store is :class:`~tests.actors.following.FollowingMemoryStore` (another process is
played by ``append_elsewhere``, its notice by ``fire``). Submitted writes (the path that
reads nothing on the store's writer thread) still push consecutive events when others
appended in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from sharedesk import AsyncHub
from sharedesk.actors import Hub
from sharedesk.protocol import Person
from tests.actors.following import WAIT, FollowingMemoryStore, Recorder, said
from tests.aio.conftest import our_threads

ALICE = Person(id="alice", label="Alice")


@pytest.fixture
def store() -> Iterator[FollowingMemoryStore]:
    store = FollowingMemoryStore()
    yield store
    assert [] == our_threads()


class TestWaitTurnFollowsOtherProcesses:
    def test_wait_turn_wakes_when_another_process_posts(self, store: FollowingMemoryStore) -> None:
        async def main() -> list[str]:
            async with AsyncHub(Hub(store)) as hub:
                await (await hub.turn("desk", ALICE)).commit()
                assert await asyncio.to_thread(store.plans.acquire, True, WAIT)
                waiting = asyncio.create_task(hub.wait_turn("desk", ALICE, timeout=WAIT))
                # The task listens before it plans: once it planned, a post wakes it.
                assert await asyncio.to_thread(store.plans.acquire, True, WAIT)
                (event,) = store.append_elsewhere("desk", [said("from elsewhere")])
                store.fire("desk", event.sequence or 0)
                turn = await waiting
                return [m.content for m in turn.messages]

        assert ["from elsewhere"] == asyncio.run(main())

    def test_wait_turn_times_out_when_nothing_is_told(self, store: FollowingMemoryStore) -> None:
        async def main() -> None:
            async with AsyncHub(Hub(store)) as hub:
                await (await hub.turn("desk", ALICE)).commit()
                await hub.wait_turn("desk", ALICE, timeout=0.05)

        with pytest.raises(TimeoutError):
            asyncio.run(main())


class TestSubmittedWritesAfterOthersAppended:
    def test_a_submitted_append_pushes_the_events_appended_elsewhere_first(
        self, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()

        async def main() -> None:
            async with AsyncHub(Hub(store)) as hub:
                hub.hub.listen("desk", recorder)
                await hub.append("desk", [said("one", ALICE)])  # the actor knows its last
                store.append_elsewhere("desk", [said("two"), said("three")])  # no notice yet
                await hub.append("desk", [said("four", ALICE)])
                recorder.wait_through(4)

        asyncio.run(main())

        assert [1, 2, 3, 4] == [sequence for push in recorder.pushes for sequence in push]
