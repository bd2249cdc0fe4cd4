"""The Hub passes the events capability of the store contract, through its session actors.

A Hub serves the ``EventStore`` port itself (writes through each session's actor, reads
from the store), so it runs :class:`~tests.store.contract.EventsContract` unchanged, over
each backend. Every test leaves no thread of the Hub behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sharedesk.actors import Hub
from sharedesk.protocol.ports import EventStore
from tests.actors.conftest import our_threads
from tests.store.contract import EventsContract, RunIndexContract


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    yield
    assert [] == our_threads()


class TestHubOverMemoryAsEventStore(EventsContract):
    """The events contract, through an in-memory Hub."""

    def make_store(self, path: Path) -> EventStore:
        return Hub.open(None)


class TestHubOverLmdbAsEventStore(EventsContract):
    """The events contract, through a Hub over LMDB (relaxed durability keeps it fast)."""

    def make_store(self, path: Path) -> EventStore:
        return Hub.open(path, durability="relaxed")


del EventsContract


class TestHubOverMemoryAsRunIndex(RunIndexContract):
    """The run-index contract, through an in-memory Hub."""

    def make_store(self, path: Path) -> EventStore:
        return Hub.open(None)


class TestHubOverLmdbAsRunIndex(RunIndexContract):
    """The run-index contract, through a Hub over LMDB."""

    def make_store(self, path: Path) -> EventStore:
        return Hub.open(path, durability="relaxed")
