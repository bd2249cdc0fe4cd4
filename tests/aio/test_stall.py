"""No coroutine of AsyncHub blocks the event loop, and a burst is handed off in chunks.

Each stall test holds the store (:class:`~tests.aio.stores.Held`: its writer and its
reads wait) and starts one coroutine; once the store says the call reached it, the
test, still running on the loop, checks that the coroutine is pending, then lets the
store go. A coroutine that blocked the loop would hold it inside the store call, so the
check could only run after the call ended (the probe below shows it).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, Unpack

import pytest

from sharedesk import Agent, AsyncHub, Event, Hub, HubOptions, MemoryStore, Person, Text
from sharedesk.actors._handles import AppendOptions
from sharedesk.actors.aio import CHUNK
from sharedesk.protocol.ports import D
from sharedesk.protocol.writes import Write
from tests.aio.conftest import our_threads
from tests.aio.stores import held_hub

T = TypeVar("T")

ANN = Person(id="ann", label="Ann")
BOT = Agent(id="bot", label="Bot")

Scenario = Callable[[AsyncHub], Awaitable[Any]]


class _Blocking(AsyncHub):
    """An AsyncHub that runs every Hub call on the loop's thread (what must not happen)."""

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    async def append(
        self, session_id: str, events: Sequence[Event], **options: Unpack[AppendOptions]
    ) -> list[Event]:
        return self.hub.append(session_id, events, **options)


SCENARIOS: dict[str, Scenario] = {
    "append": lambda hub: hub.append("desk", [Event(ANN, Text("x"))]),
    "post": lambda hub: hub.post("desk", ANN, "x"),
    "read": lambda hub: hub.read("desk"),
    "last_sequence": lambda hub: hub.last_sequence("desk"),
    "view": lambda hub: hub.view("desk", BOT),
    "turn": lambda hub: hub.turn("desk", BOT),
    "transcript": lambda hub: hub.transcript("desk", BOT),
    "wait_turn": lambda hub: hub.wait_turn("desk", BOT, timeout=10),
}


def _pending_while_held(scenario: Scenario, *, blocking: bool = False) -> tuple[bool, bool]:
    """Return whether the call reached the held store, and was pending there."""

    async def main() -> tuple[bool, bool]:
        hub, store = held_hub(ask_timeout=10.0)
        if blocking:
            hub = _Blocking(hub.hub)
            store.patience = 0.2
        try:
            await hub.post("desk", ANN, "warm")
            store.hold()
            task = asyncio.ensure_future(scenario(hub))
            reached = await asyncio.to_thread(store.entered.acquire, True, 10)
            pending = not task.done()
            store.release()
            await task
            return reached, pending
        finally:
            await hub.close()

    result = asyncio.run(main())
    assert [] == our_threads()
    return result


class TestTheLoopStaysFree:
    @pytest.mark.parametrize("name", sorted(SCENARIOS))
    def test_a_call_held_in_the_store_leaves_the_loop_running(self, name: str) -> None:
        assert (True, True) == _pending_while_held(SCENARIOS[name])

    def test_a_held_commit_leaves_the_loop_running(self) -> None:
        async def main() -> tuple[bool, bool]:
            hub, store = held_hub(ask_timeout=10.0)
            try:
                await hub.post("desk", ANN, "question")
                turn = await hub.turn("desk", BOT)
                store.hold()
                task = asyncio.ensure_future(turn.commit("answer"))
                reached = await asyncio.to_thread(store.entered.acquire, True, 10)
                pending = not task.done()
                store.release()
                await task
                return reached, pending
            finally:
                await hub.close()

        assert (True, True) == asyncio.run(main())


class TestTheProbe:
    @pytest.mark.parametrize("name", ["append", "read", "view", "turn"])
    def test_a_blocking_implementation_is_caught(self, name: str) -> None:
        """The check above fails an AsyncHub that runs its Hub calls on the loop."""
        assert (True, False) == _pending_while_held(SCENARIOS[name], blocking=True)


class _Counting(MemoryStore):
    """A store that records, for each write handed to it, the loop's step."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.handed: list[int] = []

    def submit(self, write: Write, done: D) -> D:
        self.handed.append(self.step)
        return super().submit(write, done)


async def _count_steps(store: _Counting) -> None:
    """Advance ``store.step`` once per iteration of the loop."""
    while True:
        await asyncio.sleep(0)
        store.step += 1


class TestABurstOfWrites:
    """A thousand tasks started at once append in chunks, not all in one loop iteration."""

    BURST = 10 * CHUNK

    def _burst(self) -> tuple[list[int], list[int]]:
        async def main() -> tuple[list[int], list[int]]:
            store = _Counting()
            hub = AsyncHub(Hub(store, HubOptions(ask_timeout=10.0)))
            try:
                sessions = [f"desk-{i}" for i in range(self.BURST)]
                await asyncio.gather(*(hub.post(s, ANN, "warm") for s in sessions))
                store.handed.clear()
                steps = asyncio.create_task(_count_steps(store))
                await asyncio.gather(*(hub.post(s, ANN, "x") for s in sessions))
                steps.cancel()
                per_step = list(collections.Counter(store.handed).values())
                return per_step, [await hub.last_sequence(s) for s in sessions]
            finally:
                await hub.close()

        result = asyncio.run(main())
        assert [] == our_threads()
        return result

    def test_no_loop_iteration_hands_off_more_than_two_chunks_of_a_burst(self) -> None:
        per_step, _ = self._burst()

        assert self.BURST == sum(per_step)
        assert max(per_step) <= 2 * CHUNK

    def test_every_write_of_a_burst_is_written_once(self) -> None:
        _, lasts = self._burst()

        assert [2] * self.BURST == lasts


class TestStuckWrites:
    """Reads never wait behind writes the store holds up."""

    @pytest.mark.parametrize("stuck", [8, 200])
    def test_reads_go_on_while_appends_are_stuck_in_the_store(self, stuck: int) -> None:
        async def main() -> tuple[list[bool], int, bool]:
            hub, store = held_hub(ask_timeout=10.0)
            try:
                await hub.post("desk", ANN, "before")
                store.gate.clear()
                writes = [asyncio.create_task(hub.post(f"d{n}", ANN, "x")) for n in range(stuck)]
                async with asyncio.timeout(10):
                    answers = [
                        await hub.read("desk"),
                        await hub.last_sequence("desk"),
                        await hub.view("desk", BOT),
                        await hub.turn("desk", BOT),
                        await hub.transcript("desk", BOT),
                        await hub.wait_turn("desk", BOT),
                    ]
                still_stuck = not any(write.done() for write in writes)
                store.gate.set()
                await asyncio.gather(*writes)
                return [bool(a) for a in answers], await hub.last_sequence("d0"), still_stuck
            finally:
                await hub.close()

        assert ([True] * 6, 1, True) == asyncio.run(main())
        assert [] == our_threads()
