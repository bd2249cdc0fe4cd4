"""Fixtures of the adapter tests, shared with the runs, async and integration tests."""

from tests.aio.conftest import arun, backend, store_path
from tests.integrations.conftest import hub
from tests.runs.conftest import memory_store, store

__all__ = ["arun", "backend", "hub", "memory_store", "store", "store_path"]
