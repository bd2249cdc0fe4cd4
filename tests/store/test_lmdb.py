"""LmdbStore runs the store contract suite unchanged, plus its own durability and fault tests."""

from __future__ import annotations

from pathlib import Path

from sharedesk.store import LmdbStore
from tests.store.contract import ContractStore, StoreContract


class TestLmdbStore(StoreContract):
    """The contract, on the LMDB backend (relaxed durability keeps the suite fast)."""

    def make_store(self, path: Path) -> ContractStore:
        return LmdbStore(path, durability="relaxed")


class TestDurableLmdbStore(StoreContract):
    """The contract again with fsync on every commit (the default)."""

    def make_store(self, path: Path) -> ContractStore:
        return LmdbStore(path)
