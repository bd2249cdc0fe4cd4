"""Fixtures of the integration tests: a fresh AsyncHub per test, in memory and on LMDB."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharedesk.actors.aio import AsyncHub
from sharedesk.actors.hub import Hub


@pytest.fixture(params=["memory", "lmdb"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AsyncHub]:
    """An AsyncHub (in memory, or on a durable LMDB store), closed after the test."""
    opened = AsyncHub(Hub.open(None if request.param == "memory" else tmp_path / "desk"))
    try:
        yield opened
    finally:
        asyncio.run(opened.close())
