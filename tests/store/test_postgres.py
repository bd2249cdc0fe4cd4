"""PostgresStore runs the store contract suite unchanged, plus its PostgreSQL-specific rules.

Every test gets a fresh, empty database on the test session's throwaway server (the
``postgres_dsn`` fixture); the server itself is never restarted here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedesk.store.postgres import PostgresStore
from tests.store.contract import ContractStore, StoreContract


class TestPostgresStore(StoreContract):
    """The contract, on PostgreSQL."""

    dsn: str

    @pytest.fixture(autouse=True)
    def _database(self, postgres_dsn: str) -> None:
        self.dsn = postgres_dsn

    def make_store(self, path: Path) -> ContractStore:
        return PostgresStore(self.dsn)


del StoreContract
