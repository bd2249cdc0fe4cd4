"""MemoryStore runs the store contract suite unchanged."""

from __future__ import annotations

from pathlib import Path

from sharedesk.store import MemoryStore
from tests.store.contract import ContractStore, StoreContract


class TestMemoryStore(StoreContract):
    """The contract, on the in-memory backend."""

    def make_store(self, path: Path) -> ContractStore:
        return MemoryStore()


del StoreContract
