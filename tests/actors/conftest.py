"""Fixtures of the actor tests: every Hub opened here is closed, and no thread of ours leaks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sharedesk.actors import THREAD_PREFIX, Hub

HubFactory = Callable[..., Hub]


def our_threads() -> list[str]:
    """Names of the live threads the Hub starts (actors and the reaper)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX))


@pytest.fixture
def open_hub(tmp_path: Path) -> Iterator[HubFactory]:
    """Open Hubs (in memory, or on LMDB with ``on_disk=True``); all are closed afterwards."""
    hubs: list[Hub] = []

    def factory(*, on_disk: bool = False, path: Path | None = None, **options: Any) -> Hub:
        if on_disk or path is not None:
            hub = Hub.open(path if path is not None else tmp_path / "store", **options)
        else:
            hub = Hub.open(None, **options)
        hubs.append(hub)
        return hub

    yield factory
    for hub in hubs:
        hub.close()
    assert [] == our_threads()


@pytest.fixture(params=["memory", "lmdb"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each store backend the Hub runs over."""
    name: str = request.param
    return name


@pytest.fixture
def hub(open_hub: HubFactory, backend: str) -> Hub:
    """A Hub over each backend, closed after the test."""
    return open_hub(on_disk=backend == "lmdb", ask_timeout=10.0)


@pytest.fixture
def memory_hub(open_hub: HubFactory) -> Hub:
    """An in-memory Hub, closed after the test."""
    return open_hub(ask_timeout=10.0)
