"""One group commit serves sync and async writers; one loop wake-up answers a whole group."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sharedesk import (
    AsyncHub,
    Event,
    LmdbStore,
    MemoryStore,
    Person,
)
from tests.aio.conftest import our_threads

ANN = Person(id="ann", label="Ann")


class _CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the callbacks handed to it from other threads."""

    hops = 0

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.Handle:
        self.hops += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


class _Sink:
    def __init__(self) -> None:
        self.deliveries: list[list[Any]] = []
        self.done = threading.Event()
        self.expected = 0

    def deliver(self, tickets: Sequence[Any]) -> None:
        self.deliveries.append(list(tickets))
        if sum(len(d) for d in self.deliveries) >= self.expected:
            self.done.set()


class _Ticket:
    def __init__(self, sink: _Sink, hold: threading.Event | None = None) -> None:
        self.sink = sink
        self.outcome: tuple[Any, Any] | None = None
        self._hold = hold

    def settle(self, result: list[Event] | None, error: BaseException | None) -> None:
        if self._hold is not None:  # keep the writer here while more writes queue up
            assert self._hold.wait(10)
        self.outcome = (result, error)

    def resolve(self) -> None:
        raise AssertionError("the sink resolves, not the store")


@pytest.fixture
def store(store_path: Path | None) -> Iterator[Any]:
    """A store of the test's backend that takes submitted writes, closed afterwards."""
    opened: Any = MemoryStore() if store_path is None else LmdbStore(store_path)
    with opened:
        yield opened


class TestOneHopPerGroup:
    def test_many_concurrent_appends_wake_the_loop_far_fewer_times_than_appends(
        self, store_path: Path | None
    ) -> None:
        async def main() -> tuple[int, list[int]]:
            loop = asyncio.get_running_loop()
            assert isinstance(loop, _CountingLoop)
            async with AsyncHub.open(store_path) as hub:
                sessions = [f"desk-{i}" for i in range(200)]
                await asyncio.gather(*(hub.post(s, ANN, "warm") for s in sessions))
                before = loop.hops
                await asyncio.gather(*(hub.post(s, ANN, "x") for s in sessions))
                hops = loop.hops - before
                return hops, [await hub.last_sequence(s) for s in sessions]

        with asyncio.Runner(loop_factory=_CountingLoop) as runner:
            hops, lasts = runner.run(main())

        assert [2] * 200 == lasts
        assert hops <= 20
        assert [] == our_threads()
