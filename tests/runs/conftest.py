"""Fixtures and test adapters of the runs tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sharedesk.actors.hub import Hub
from sharedesk.protocol.authors import Agent
from sharedesk.protocol.errors import SharedeskError
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.ports import EventStore
from sharedesk.runs import AdapterResult, Emit, Run, Session
from sharedesk.store.lmdb import LmdbStore
from sharedesk.store.memory import MemoryStore


@pytest.fixture
def memory_store() -> Iterator[EventStore]:
    """An in-memory store, closed after the test."""
    with MemoryStore() as memory:
        yield memory


@pytest.fixture(params=["memory", "lmdb", "hub"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    """Each way to reach storage through the port: MemoryStore, LmdbStore, Hub.open(None)."""
    opened: EventStore
    if request.param == "memory":
        opened = MemoryStore()
    elif request.param == "lmdb":
        opened = LmdbStore(tmp_path / "store", durability="relaxed")
    else:
        opened = Hub.open(None)
    with opened:
        yield opened


@pytest.fixture
def store(memory_store: EventStore) -> EventStore:
    """The store of a test: in memory unless a module overrides it (test_manager does)."""
    return memory_store


class BlockingAdapter:
    """Blocks in ``execute`` until released, then tries to emit a late reply.

    Records the worker thread, whether ``execute`` started, and what the late emit did.
    """

    native_continuation = False

    def __init__(self, name: str = "blocking") -> None:
        self.name = name
        self.started = threading.Event()
        self._count = threading.Condition()
        self.inputs: list[str] = []
        self.release = threading.Event()
        self.threads: list[threading.Thread] = []
        self.late_emit_error: SharedeskError | None = None
        self.late_emit_stored: Event | None = None

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        with self._count:
            self.threads.append(threading.current_thread())
            self.inputs.append(run.input[0]["content"])
            self._count.notify_all()
        self.started.set()
        self.release.wait(30)
        try:
            self.late_emit_stored = emit(
                Event(Agent(id=self.name, label=self.name), Text("late reply"))
            )
        except SharedeskError as exc:
            self.late_emit_error = exc
        return AdapterResult(output="late reply")

    def wait_started(self, count: int) -> bool:
        """Wait (up to 10 s) until ``execute`` was entered ``count`` times."""
        with self._count:
            return self._count.wait_for(lambda: len(self.threads) >= count, 10)

    def finish(self) -> None:
        """Release ``execute`` and join every worker thread it ran on."""
        self.release.set()
        for thread in self.threads:
            thread.join(10)


@pytest.fixture
def blocking() -> Iterator[BlockingAdapter]:
    """A blocking adapter whose worker threads are released and joined after the test."""
    adapter = BlockingAdapter()
    yield adapter
    adapter.finish()


class FailingAdapter:
    """Raises ``RuntimeError("provider exploded")`` from ``execute``."""

    name = "failing"
    native_continuation = False

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        raise RuntimeError("provider exploded")


class RecordingAdapter:
    """Emits one reply and records the run, session and opts it was given."""

    def __init__(self, name: str = "recording", *, native_continuation: bool = False) -> None:
        self.name = name
        self.native_continuation = native_continuation
        self.model = "model-x"
        self.seen: list[tuple[Run, Session, Mapping[str, Any]]] = []

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        self.seen.append((run, session, opts))
        emit(Event(Agent(id=self.name, label=self.name), Text("ok")))
        return AdapterResult(output="ok", token_usage={"input_tokens": 3, "output_tokens": 1})


class CoroutineExecute(RecordingAdapter):
    """An adapter whose ``execute`` is a coroutine function: for the async executor only."""

    async def execute(  # type: ignore[override]
        self, run: Run, session: Session, emit: Any, opts: Mapping[str, Any]
    ) -> AdapterResult:
        raise AssertionError("never executed")
