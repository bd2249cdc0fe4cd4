"""One group commit serves sync and async writers; one loop wake-up answers a whole group."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sharedesk import (
    AsyncHub,
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
        # A group's futures complete one after another on the writer thread; the loop
        # may drain between two of them, so a group can cost more than one wake-up on a
        # busy machine. Without the bridge's coalescing it would cost one per append.
        assert hops <= 100
        assert [] == our_threads()
