"""The group writer, driven through its ``run_group`` seam, and the planning of a group.

The fake ``run_group`` records each group it is handed, may hold one (as if its commit
were syncing) or fail it, and answers every write with no events. A
group is planned against a MemoryStore's data through a ``WriteTxn`` that records what
it is asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from datetime import UTC, datetime
from typing import Any

import pytest

from sharedesk.projection.append import Facts, Wants, WritePlan
from sharedesk.protocol import (
    ConcurrencyError,
    Conversation,
    Event,
    Person,
    SharingState,
    SharingStateConflict,
    StoreClosedError,
    Text,
)
from sharedesk.protocol.ports import WriteFuture
from sharedesk.protocol.validation import check_write
from sharedesk.protocol.writes import Share, Write
from sharedesk.store import MemoryStore
from sharedesk.store._group_commit import GroupWriter, plan_group

Item = tuple[Write, "Future[list[Event]]"]


class FakeGroups:
    """A ``run_group``: records groups, holds the first one until released, may raise.

    Attributes:
        groups: The session ids of each group handed over, in order.
        entered: Set once the first group is being run.
        release: The first group waits for it when ``hold`` is set.
        fail: Raised (once) instead of completing the next group, when set.
    """

    def __init__(self, *, hold: bool = False) -> None:
        self.groups: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.hold = hold
        self.fail: BaseException | None = None

    def __call__(self, writes: list[Write]) -> list[list[Event] | BaseException]:
        self.groups.append([write.session_id for write in writes])
        self.entered.set()
        if self.hold and len(self.groups) == 1:
            assert self.release.wait(10)
        if self.fail is not None:
            error, self.fail = self.fail, None
            raise error
        return [[] for _ in writes]


def closed() -> StoreClosedError:
    return StoreClosedError(None)


@pytest.fixture
def fake() -> FakeGroups:
    return FakeGroups(hold=True)


@pytest.fixture
def writer(fake: FakeGroups) -> Iterator[GroupWriter]:
    group_writer = GroupWriter(fake, group_wait=0.0, name="test-writer", closed_error=closed)
    try:
        yield group_writer
    finally:
        fake.release.set()
        group_writer.close()


def put(writer: GroupWriter, session_id: str) -> Future[list[Event]]:
    return writer.submit(check_write(session_id, []), WriteFuture())


class Recorded:
    """A ``Completion`` that is no future: records each outcome and the thread it came on."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[list[Event] | BaseException, str]] = []
        self.finished = threading.Event()

    def start(self) -> bool:
        return True

    def finish(self, outcome: list[Event] | BaseException) -> None:
        self.outcomes.append((outcome, threading.current_thread().name))
        self.finished.set()

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None:
        raise AssertionError("the writer finishes a completion; it never watches one")


class TestGroupWriter:
    def test_the_writer_finishes_any_completion_once_on_its_own_thread(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        fake.release.set()
        done = writer.submit(check_write("a", []), Recorded())

        assert done.finished.wait(10)
        writer.close()
        assert [([], "test-writer")] == done.outcomes

    def test_a_lone_write_is_run_alone_and_its_future_completed(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        fake.release.set()

        assert [] == put(writer, "a").result(timeout=10)
        assert [["a"]] == fake.groups

    def test_writes_queued_while_a_group_is_written_form_the_next_group(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        first = put(writer, "a")
        assert fake.entered.wait(10)
        rest = [put(writer, name) for name in "bcde"]

        fake.release.set()

        assert [] == first.result(timeout=10)
        assert [[], [], [], []] == [future.result(timeout=10) for future in rest]
        assert [["a"], ["b", "c", "d", "e"]] == fake.groups

    def test_close_fails_the_queued_writes_and_lets_the_group_being_written_complete(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        first = put(writer, "a")
        assert fake.entered.wait(10)
        queued = put(writer, "b")
        closing = threading.Thread(target=writer.close)
        closing.start()

        assert isinstance(queued.exception(timeout=10), StoreClosedError)
        fake.release.set()
        closing.join(10)
        assert [] == first.result(timeout=10)
        assert [["a"]] == fake.groups

    def test_a_write_put_after_close_gets_the_closed_error(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        fake.release.set()
        writer.close()

        assert isinstance(put(writer, "a").exception(timeout=10), StoreClosedError)
        assert [] == fake.groups

    def test_a_write_whose_future_was_cancelled_while_queued_is_never_run(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        put(writer, "a")
        assert fake.entered.wait(10)
        cancelled = put(writer, "b")
        assert cancelled.cancel()

        fake.release.set()
        put(writer, "c").result(timeout=10)

        assert ["b"] not in fake.groups
        assert "b" not in [name for group in fake.groups for name in group]

    def test_a_thread_waiting_on_a_queued_write_wakes_when_it_is_cancelled(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        put(writer, "a")
        assert fake.entered.wait(10)
        queued = put(writer, "b")
        woken: list[str] = []

        def wait() -> None:
            with pytest.raises(CancelledError):
                queued.result(timeout=10)
            woken.append("cancelled")

        waiting = threading.Thread(target=wait)
        waiting.start()

        assert queued.cancel()
        waiting.join(10)

        assert ["cancelled"] == woken
        fake.release.set()

    def test_a_wait_on_a_write_still_queued_times_out(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        put(writer, "a")
        assert fake.entered.wait(10)

        with pytest.raises(TimeoutError):
            put(writer, "b").result(timeout=0.01)
        fake.release.set()

    def test_a_raising_group_fails_its_futures_and_the_writer_goes_on(
        self, writer: GroupWriter, fake: FakeGroups
    ) -> None:
        fake.fail = RuntimeError("commit bug")
        failed = put(writer, "a")
        fake.release.set()

        assert isinstance(failed.exception(timeout=10), RuntimeError)
        assert [] == put(writer, "b").result(timeout=10)

    def test_close_ends_the_writer_thread(self, writer: GroupWriter, fake: FakeGroups) -> None:
        fake.release.set()
        writer.close()

        assert "test-writer" not in [thread.name for thread in threading.enumerate()]


class RecordingTxn:
    """A ``WriteTxn`` over a MemoryStore's data that records what the writer asks of it."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.facts_calls: list[set[str]] = []
        self.puts: list[list[str]] = []

    def facts(self, wants: Mapping[str, Wants]) -> dict[str, Facts]:
        self.facts_calls.append(set(wants))
        return self.store.facts(wants)

    def put(self, plans: Sequence[WritePlan]) -> None:
        self.puts.append([plan.write.session_id for plan in plans])
        self.store.put(plans)

    def remove(self, session_id: str, through: int) -> int:
        return self.store.remove(session_id, through)


@pytest.fixture
def txn() -> Iterator[RecordingTxn]:
    with MemoryStore() as store:
        yield RecordingTxn(store)


NOW = datetime(2026, 1, 1, tzinfo=UTC)
ANN = Person(id="ann", label="Ann")


def msg(content: str = "x", **fields: Any) -> Event:
    return Event(ANN, Text(content), **fields)


class TestPlanGroup:
    def test_a_group_reads_its_facts_once_and_puts_once(self, txn: RecordingTxn) -> None:
        writes = [check_write("a", [msg()]), check_write("b", [msg()]), check_write("a", [msg()])]

        plan_group(txn, writes, NOW)

        assert [{"a", "b"}] == txn.facts_calls
        assert [["a", "b", "a"]] == txn.puts

    def test_a_later_write_of_the_group_is_planned_on_top_of_an_earlier_one(
        self, txn: RecordingTxn
    ) -> None:
        writes = [
            check_write("s", [msg("root", id="r")]),
            check_write("s", [msg("reply", parent=1)], expected_version=1, unless_stored="x"),
        ]

        planned = plan_group(txn, writes, NOW)

        assert [[1], [2]] == [[e.sequence for e in p[0].result] for p in planned]  # type: ignore[index]
        assert {1: 2} == txn.store.first_replies("s", [1])

    def test_a_write_failing_its_plan_writes_nothing_and_the_others_go_on(
        self, txn: RecordingTxn
    ) -> None:
        writes = [
            check_write("s", [msg()]),
            check_write("s", [msg()], expected_version=0),  # stale after the first
            check_write("s", [msg()]),
        ]

        planned = plan_group(txn, writes, NOW)

        assert isinstance(planned[1], ConcurrencyError)
        assert [1, 2] == [e.sequence for e in txn.store.read("s")]

    def test_an_id_stored_by_an_earlier_write_of_the_group_is_not_stored_again(
        self, txn: RecordingTxn
    ) -> None:
        writes = [check_write("s", [msg(id="x")]), check_write("s", [msg(id="x")])]

        planned = plan_group(txn, writes, NOW)

        assert [1, 1] == [p[0].result[0].sequence for p in planned]  # type: ignore[index]
        assert [["s"]] == txn.puts

    def test_a_commit_compares_with_the_state_an_earlier_commit_of_the_group_stored(
        self, txn: RecordingTxn
    ) -> None:
        first = SharingState(Conversation("s"), 0)
        second = SharingState(Conversation("s"), 1)
        writes = [
            check_write("s", [msg()], share=Share("v", first, None)),
            check_write("s", [], share=Share("v", second, None)),  # planned from no state
        ]

        planned = plan_group(txn, writes, NOW)

        assert isinstance(planned[1], SharingStateConflict)
        assert first == txn.store.get_sharing_state("s", "v", Conversation("s"))

    def test_a_write_and_its_linked_writes_are_put_together(self, txn: RecordingTxn) -> None:
        linked = (check_write("u", [msg()]), check_write("a", [msg()]))
        writes = [check_write("s", [msg()], linked=linked)]

        planned = plan_group(txn, writes, NOW)

        assert ["s", "u", "a"] == [p.write.session_id for p in planned[0]]  # type: ignore[union-attr]
        assert [1, 1, 1] == [txn.store.last_sequence(s) for s in ("s", "u", "a")]

    def test_a_linked_write_failing_its_plan_fails_the_whole_write(self, txn: RecordingTxn) -> None:
        linked = (check_write("u", [msg()]), check_write("a", [msg()], expected_version=5))
        writes = [check_write("s", [msg()], linked=linked), check_write("u", [msg()])]

        planned = plan_group(txn, writes, NOW)

        assert isinstance(planned[0], ConcurrencyError)
        assert [0, 1, 0] == [txn.store.last_sequence(s) for s in ("s", "u", "a")]
