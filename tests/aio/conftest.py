"""Fixtures of the async tests: each test body runs in its own event loop on a fresh AsyncHub.

``arun(body, **options)`` opens an :class:`~sharedesk.AsyncHub` over the test's backend
(in memory, or durable LMDB in the test's directory), awaits ``body(hub)``, closes the
hub and returns what ``body`` returned. After the test no thread of ours is left.
"""

from __future__ import annotations

import asyncio
import threading
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
