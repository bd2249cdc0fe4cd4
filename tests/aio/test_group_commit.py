"""One group commit serves sync and async writers; one loop wake-up answers a whole group."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sharedesk import (
    AsyncHub,
    Event,
    LmdbStore,
    MemoryStore,
    Person,
    StoreClosedError,
    Text,
    ValidationError,
)
from tests.aio.conftest import our_threads

ANN = Person(id="ann", label="Ann")


class _CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the callbacks handed to it from other threads."""

    hops = 0

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.Handle:
        self.hops += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


class _Sink:
    def __init__(self) -> None:
        self.deliveries: list[list[Any]] = []
        self.done = threading.Event()
        self.expected = 0

    def deliver(self, tickets: Sequence[Any]) -> None:
        self.deliveries.append(list(tickets))
        if sum(len(d) for d in self.deliveries) >= self.expected:
            self.done.set()


class _Ticket:
    def __init__(self, sink: _Sink, hold: threading.Event | None = None) -> None:
        self.sink = sink
        self.outcome: tuple[Any, Any] | None = None
        self._hold = hold

    def settle(self, result: list[Event] | None, error: BaseException | None) -> None:
        if self._hold is not None:  # keep the writer here while more writes queue up
            assert self._hold.wait(10)
        self.outcome = (result, error)

    def resolve(self) -> None:
        raise AssertionError("the sink resolves, not the store")


@pytest.fixture
def store(store_path: Path | None) -> Iterator[Any]:
    """A store of the test's backend that takes submitted writes, closed afterwards."""
    opened: Any = MemoryStore() if store_path is None else LmdbStore(store_path)
    with opened:
        yield opened


class TestOneHopPerGroup:
    def test_many_concurrent_appends_wake_the_loop_far_fewer_times_than_appends(
        self, store_path: Path | None
    ) -> None:
        async def main() -> tuple[int, list[int]]:
            loop = asyncio.get_running_loop()
            assert isinstance(loop, _CountingLoop)
            async with AsyncHub.open(store_path) as hub:
                sessions = [f"desk-{i}" for i in range(200)]
                await asyncio.gather(*(hub.post(s, ANN, "warm") for s in sessions))
                before = loop.hops
                await asyncio.gather(*(hub.post(s, ANN, "x") for s in sessions))
                hops = loop.hops - before
                return hops, [await hub.last_sequence(s) for s in sessions]

        with asyncio.Runner(loop_factory=_CountingLoop) as runner:
            hops, lasts = runner.run(main())

        assert [2] * 200 == lasts
        assert hops <= 20
        assert [] == our_threads()


class TestSubmittedWrites:
    def test_a_group_of_submitted_writes_is_delivered_once_per_sink(self, store: Any) -> None:
        sink = _Sink()
        sink.expected = 50
        queued = threading.Event()
        # The first write's settling holds the writer until all are queued, so that
        # however the threads are scheduled the other 49 wait for it together.
        tickets = [_Ticket(sink, queued)] + [_Ticket(sink) for _ in range(49)]
        for i, ticket in enumerate(tickets):
            store.submit_append(
                f"s{i}", [Event(ANN, Text("x"))], expected_version=None, ticket=ticket
            )
        queued.set()
        assert sink.done.wait(10)

        assert 50 == sum(len(d) for d in sink.deliveries)
        assert len(sink.deliveries) < 50
        assert all(t.outcome is not None and t.outcome[0][0].sequence == 1 for t in tickets)

    def test_a_failing_check_settles_only_its_own_ticket_with_the_error(self, store: Any) -> None:
        store.append("s", [Event(ANN, Text("x"))])
        sink = _Sink()
        sink.expected = 2
        stale, fine = _Ticket(sink), _Ticket(sink)
        store.submit_append("s", [Event(ANN, Text("y"))], expected_version=0, ticket=stale)
        store.submit_append("t", [Event(ANN, Text("z"))], expected_version=None, ticket=fine)
        assert sink.done.wait(10)

        assert stale.outcome is not None and stale.outcome[0] is None
        assert "ConcurrencyError" == type(stale.outcome[1]).__name__
        assert fine.outcome is not None and fine.outcome[1] is None
        assert 1 == store.last_sequence("s")

    def test_bad_input_raises_at_submit_and_queues_nothing(self, store: Any) -> None:
        with pytest.raises(ValidationError):
            store.submit_append(
                "s", [Event(ANN, Text("x"))], expected_version=-1, ticket=_Ticket(_Sink())
            )

        assert 0 == store.last_sequence("s")

    def test_a_closed_store_refuses_a_submitted_write(self, store: Any) -> None:
        store.close()

        with pytest.raises(StoreClosedError):
            store.submit_append(
                "s", [Event(ANN, Text("x"))], expected_version=None, ticket=_Ticket(_Sink())
            )
