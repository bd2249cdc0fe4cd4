"""The backends the Google ADK session service is tested on: memory, LMDB, PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations.google_adk import DeskSessionService

BACKENDS = ["memory", "lmdb", "postgres"]


def target(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """Return what ``AsyncHub.open`` takes for the backend ``request.param``."""
    backend = request.param
    if backend == "memory":
        return None
    if backend == "lmdb":
        return str(tmp_path / "desk")
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


@pytest.fixture(params=BACKENDS)
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """Where a hub of each backend lives (``None``: in memory)."""
    return target(request, tmp_path)


@pytest_asyncio.fixture
async def hub(store_target: str | None) -> AsyncIterator[AsyncHub]:
    """A fresh AsyncHub on each backend, closed after the test."""
    async with AsyncHub.open(store_target) as opened:
        yield opened


@pytest_asyncio.fixture
async def service(hub: AsyncHub) -> DeskSessionService:
    """A DeskSessionService (``stale="raise"``) on a fresh hub of each backend."""
    return DeskSessionService(hub)
