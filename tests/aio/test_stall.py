"""No coroutine of AsyncHub blocks the event loop: a heartbeat keeps running meanwhile.

Each test makes the store take 0.3 s per call (on whichever thread calls it) and counts
the 1 ms heartbeats that ran while the coroutine was awaited. A blocking implementation
lets none run (the probe itself is checked against one); ours lets the heartbeat run
throughout. The figures asserted are structural (at least a few heartbeats), not times.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sharedesk import Agent, AsyncHub, Event, Hub, HubOptions, LmdbStore, MemoryStore, Person, Text
from sharedesk.actors.aio import ADMIT_CHUNK
from sharedesk.protocol.ports import WriteTicket
from tests.aio.conftest import Heartbeat, our_threads, ticks_during
from tests.aio.stores import wrapped_hub

T = TypeVar("T")

ANN = Person(id="ann", label="Ann")
BOT = Agent(id="bot", label="Bot")
DELAY = 0.3
#: Fewest heartbeats a free loop runs during one 0.3 s call (a blocked one runs none).
FREE = 5


class _Blocking(AsyncHub):
    """An AsyncHub that runs every Hub call on the loop's thread (what must not happen)."""

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    async def _write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    async def append(
        self, session_id: str, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        return self.hub.append(session_id, events, expected_version=expected_version)


Scenario = Callable[[AsyncHub], Awaitable[Any]]


async def _append(hub: AsyncHub) -> Any:
    return await hub.append("desk", [Event(ANN, Text("x"))])


async def _post(hub: AsyncHub) -> Any:
    return await hub.post("desk", ANN, "x")


async def _read(hub: AsyncHub) -> Any:
    return await hub.read("desk")


async def _last_sequence(hub: AsyncHub) -> Any:
    return await hub.last_sequence("desk")


async def _view(hub: AsyncHub) -> Any:
    return await hub.view("desk", BOT)


async def _turn(hub: AsyncHub) -> Any:
    return await hub.turn("desk", BOT)


async def _transcript(hub: AsyncHub) -> Any:
    return await hub.transcript("desk", BOT)


SCENARIOS: dict[str, Scenario] = {
    "append": _append,
    "post": _post,
    "read": _read,
    "last_sequence": _last_sequence,
    "view": _view,
    "turn": _turn,
    "transcript": _transcript,
}


def _measure(store_path: Path | None, scenario: Scenario, *, blocking: bool = False) -> int:
    async def main() -> int:
        hub, store = wrapped_hub(True, store_path, ask_timeout=10.0)
        if blocking:
            hub = _Blocking(hub.hub)
        try:
            await hub.post("desk", ANN, "warm")  # the session actor knows its last sequence
            async with Heartbeat() as heartbeat:
                store.delay = DELAY
                _, ticks = await ticks_during(heartbeat, scenario(hub))
                store.delay = 0.0
            return ticks
        finally:
            await hub.close()

    ticks = asyncio.run(main())
    assert [] == our_threads()
    return ticks


class TestTheLoopStaysFree:
    @pytest.mark.parametrize("name", sorted(SCENARIOS))
    def test_the_heartbeat_runs_while_a_slow_store_call_is_awaited(
        self, name: str, store_path: Path | None
    ) -> None:
        assert _measure(store_path, SCENARIOS[name]) >= FREE

    def test_the_heartbeat_runs_while_a_slow_commit_is_awaited(
        self, store_path: Path | None
    ) -> None:
        async def main() -> int:
            hub, store = wrapped_hub(True, store_path, ask_timeout=10.0)
            try:
                await hub.post("desk", ANN, "hello")
                turn = await hub.turn("desk", BOT)
                async with Heartbeat() as heartbeat:
                    store.delay = DELAY
                    _, ticks = await ticks_during(heartbeat, turn.commit("hi"))
                    store.delay = 0.0
                return ticks
            finally:
                await hub.close()

        assert asyncio.run(main()) >= FREE

    def test_the_heartbeat_runs_while_wait_turn_waits(self, store_path: Path | None) -> None:
        async def main() -> int:
            hub, _ = wrapped_hub(True, store_path, ask_timeout=10.0)
            try:
                async with Heartbeat() as heartbeat:
                    waiter = asyncio.create_task(hub.wait_turn("desk", BOT, timeout=10))
                    start = time.perf_counter()
                    await asyncio.sleep(DELAY)
                    await hub.post("desk", ANN, "hello")
                    await waiter
                    return heartbeat.between(start, time.perf_counter())
            finally:
                await hub.close()

        assert asyncio.run(main()) >= FREE

    def test_the_heartbeat_runs_while_many_appends_are_awaited(
        self, store_path: Path | None
    ) -> None:
        async def main() -> int:
            hub, store = wrapped_hub(True, store_path, ask_timeout=10.0)
            try:
                sessions = [f"desk-{i}" for i in range(20)]
                await asyncio.gather(*(hub.post(s, ANN, "warm") for s in sessions))
                async with Heartbeat() as heartbeat:
                    store.delay = 0.05
                    calls = asyncio.gather(*(hub.post(s, ANN, "x") for s in sessions))
                    _, ticks = await ticks_during(heartbeat, calls)
                    store.delay = 0.0
                return ticks
            finally:
                await hub.close()

        assert asyncio.run(main()) >= FREE


class TestTheProbe:
    @pytest.mark.parametrize("name", sorted(SCENARIOS))
    def test_a_blocking_implementation_lets_no_heartbeat_run(
        self, name: str, store_path: Path | None
    ) -> None:
        """The measure above fails an AsyncHub that runs its Hub calls on the loop."""
        assert 0 == _measure(store_path, SCENARIOS[name], blocking=True)


class _CountingHub(Hub):
    """A Hub that records, for each write handed off without a thread, the loop's step."""

    def __init__(self, store: Any) -> None:
        super().__init__(store, HubOptions(ask_timeout=10.0))
        self.step = 0
        self.handed: list[int] = []

    def try_submit(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_version: int | None,
        ticket: WriteTicket,
    ) -> bool:
        self.handed.append(self.step)
        return super().try_submit(session_id, events, expected_version, ticket)


async def _count_steps(hub: _CountingHub) -> None:
    """Advance ``hub.step`` once per iteration of the loop."""
    while True:
        await asyncio.sleep(0)
        hub.step += 1


class TestABurstOfWrites:
    """A thousand tasks started at once append in chunks, not all in one loop iteration."""

    BURST = 10 * ADMIT_CHUNK

    def _burst(self, store_path: Path | None) -> tuple[list[int], list[int]]:
        async def main() -> tuple[list[int], list[int]]:
            store: Any = MemoryStore() if store_path is None else LmdbStore(store_path)
            counting = _CountingHub(store)
            hub = AsyncHub(counting)
            try:
                sessions = [f"desk-{i}" for i in range(self.BURST)]
                await asyncio.gather(*(hub.post(s, ANN, "warm") for s in sessions))
                counting.handed.clear()
                steps = asyncio.create_task(_count_steps(counting))
                await asyncio.gather(*(hub.post(s, ANN, "x") for s in sessions))
                steps.cancel()
                per_step = list(collections.Counter(counting.handed).values())
                return per_step, [await hub.last_sequence(s) for s in sessions]
            finally:
                await hub.close()

        result = asyncio.run(main())
        assert [] == our_threads()
        return result

    def test_no_loop_iteration_hands_off_more_than_two_chunks_of_a_burst(
        self, store_path: Path | None
    ) -> None:
        per_step, _ = self._burst(store_path)

        assert self.BURST == sum(per_step)
        assert max(per_step) <= 2 * ADMIT_CHUNK

    def test_every_write_of_a_burst_is_written_once(self, store_path: Path | None) -> None:
        _, lasts = self._burst(store_path)

        assert [2] * self.BURST == lasts
