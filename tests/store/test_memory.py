"""MemoryStore runs the store contract suite unchanged, and writes on the caller's thread."""

from __future__ import annotations

import threading
from pathlib import Path

from sharedesk.protocol import Event, Person, Text
from sharedesk.protocol.ports import WriteFuture
from sharedesk.protocol.validation import check_write
from sharedesk.store import MemoryStore
from tests.store.contract import ContractStore, StoreContract, WritesContract

ANN = Person(id="ann", label="Ann")


class TestMemoryStore(StoreContract, WritesContract):
    """The contract, on the in-memory backend."""

    def make_store(self, path: Path) -> ContractStore:
        return MemoryStore()


class TestMemoryWrites:
    def test_submit_returns_a_future_already_completed(self) -> None:
        with MemoryStore() as store:
            future = store.submit(check_write("s", [Event(ANN, Text("x"))]), WriteFuture())

            assert future.done()

    def test_a_commit_callback_runs_on_the_appending_thread(self) -> None:
        threads: list[threading.Thread] = []
        with MemoryStore() as store:
            store.on_commit(lambda _session_id, _new: threads.append(threading.current_thread()))
            store.append("s", [Event(ANN, Text("x"))])

        assert [threading.current_thread()] == threads

    def test_no_thread_is_started_by_writes(self) -> None:
        before = set(threading.enumerate())
        with MemoryStore() as store:
            store.append("s", [Event(ANN, Text("x"))])

            assert set() == set(threading.enumerate()) - before


del StoreContract, WritesContract
