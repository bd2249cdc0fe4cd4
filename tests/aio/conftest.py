"""Fixtures of the async tests: each test body runs in its own event loop on a fresh AsyncHub.

``arun(body, **options)`` opens an :class:`~sharedesk.AsyncHub` over the test's backend
(in memory, or durable LMDB in the test's directory), awaits ``body(hub)``, closes the
hub and returns what ``body`` returned. After the test no thread of ours is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sharedesk import AsyncHub
from sharedesk.actors import THREAD_PREFIX

T = TypeVar("T")

Body = Callable[[AsyncHub], Awaitable[Any]]
Runner = Callable[..., Any]


def our_threads() -> list[str]:
    """Names of the live threads sharedesk started (actors, writers, workers)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX))


@pytest.fixture(params=["memory", "lmdb"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each store backend: in memory, and durable LMDB."""
    name: str = request.param
    return name


@pytest.fixture
def store_path(backend: str, tmp_path: Path) -> Path | None:
    """Where the test's store lives (``None``: in memory)."""
    return None if backend == "memory" else tmp_path / "store"


@pytest.fixture
def arun(store_path: Path | None) -> Iterator[Runner]:
    """Run ``body(hub)`` in a new event loop on a fresh AsyncHub; return its result."""

    def run(body: Body, **options: Any) -> Any:
        async def main() -> Any:
            async with AsyncHub.open(store_path, ask_timeout=10.0, **options) as hub:
                return await body(hub)

        return asyncio.run(main())

    yield run
    assert [] == our_threads()


class Heartbeat:
    """A task that ticks every millisecond, to tell whether the loop stayed free."""

    def __init__(self) -> None:
        self.ticks: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        while True:
            self.ticks.append(time.perf_counter())
            await asyncio.sleep(0.001)

    async def __aenter__(self) -> Heartbeat:
        self._task = asyncio.create_task(self._beat())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def between(self, start: float, end: float) -> int:
        """Count the ticks strictly between two ``perf_counter`` readings."""
        return sum(1 for tick in self.ticks if start < tick < end)


async def ticks_during(heartbeat: Heartbeat, call: Awaitable[T]) -> tuple[T, int]:
    """Await ``call`` and return its result and how many heartbeats ran meanwhile."""
    start = time.perf_counter()
    result = await call
    return result, heartbeat.between(start, time.perf_counter())
