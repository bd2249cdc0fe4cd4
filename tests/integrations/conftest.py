"""Fixtures of the integration tests: a fresh async hub per test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from sharedesk.actors.hub import Hub
from sharedesk.protocol.events import Event


class ThreadedAsyncHub:
    """The coroutine ``append``/``read`` of an async hub over a ``Hub`` (worker threads)."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def append(
        self, session_id: str, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        return await asyncio.to_thread(
            self.hub.append, session_id, events, expected_version=expected_version
        )

    async def read(self, session_id: str, **bounds: Any) -> list[Event]:
        return await asyncio.to_thread(self.hub.read, session_id, **bounds)


@pytest.fixture
def hub() -> Iterator[ThreadedAsyncHub]:
    """An in-memory hub, closed after the test."""
    with Hub.open(None) as opened:
        yield ThreadedAsyncHub(opened)
