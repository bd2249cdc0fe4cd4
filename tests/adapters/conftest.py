"""Fixtures of the adapter tests: the runs tests' in-memory store, the integrations' AsyncHub."""

from tests.integrations.conftest import hub
from tests.runs.conftest import memory_store, store

__all__ = ["hub", "memory_store", "store"]
