"""The group committer, driven by a fake commit function: no LMDB, no disk.

The fake records each group it is handed, may hold a group (as if its commit were
syncing) or fail it, and settles every request with one event named after it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sharedesk.protocol import Event, StoreClosedError
from sharedesk.store._group_commit import GroupCommitter, Request, wake
from tests.store.contract import text


class Named(Request):
    """A request that carries only a name; the fake commit answers it with ``text(name)``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class FakeCommit:
    """A commit function: records groups, holds or fails the ones it is told to.

    Attributes:
        groups: The names of each group handed over, in order.
        woken_on_entry: Per call, whether every earlier caller was woken when it began.
        hold: Group index -> event the call waits for after ``before_commit()``.
        fail_before: Group index -> error raised before ``before_commit()``.
        refuse: Names settled with an error of their own (their group commits).
    """

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.woken_on_entry: list[bool] = []
        self.hold: dict[int, threading.Event] = {}
        self.fail_before: dict[int, BaseException] = {}
        self.refuse: set[str] = set()
        self._seen: list[Named] = []

    def __call__(self, group: list[Named], before_commit: Callable[[], None]) -> None:
        index = len(self.groups)
        self.woken_on_entry.append(all(request.woken for request in self._seen))
        self._seen.extend(group)
        self.groups.append([request.name for request in group])
        if index in self.fail_before:
            raise self.fail_before[index]
        before_commit()
        release = self.hold.get(index)
        if release is not None:
            assert release.wait(30)
        for request in group:
            if request.name in self.refuse:
                request.settle(error=ValueError(f"refused {request.name}"))
            else:
                request.settle(result=[text(request.name)])


def closed() -> BaseException:
    return StoreClosedError("fake")


@pytest.fixture
def fake() -> FakeCommit:
    return FakeCommit()


@pytest.fixture
def committer(fake: FakeCommit) -> Iterator[GroupCommitter[Named]]:
    writer: GroupCommitter[Named] = GroupCommitter(
        fake, group_wait=0.002, name="test-group-commit", closed_error=closed
    )
    yield writer
    writer.close()
    assert not writer.writer.is_alive()


@contextlib.contextmanager
def unpipelined(fake: FakeCommit, *, group_wait: float) -> Iterator[GroupCommitter[Named]]:
    """A committer built with ``pipeline=False``, closed when the block ends."""
    writer: GroupCommitter[Named] = GroupCommitter(
        fake, group_wait=group_wait, pipeline=False, name="test-unpipelined", closed_error=closed
    )
    try:
        yield writer
    finally:
        writer.close()


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Start ``call`` in a thread; the list receives its result or exception."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def wait_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (a state change in another thread) for up to 30 s."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.001)


def submit(committer: GroupCommitter[Named], name: str) -> Callable[[], list[Event]]:
    """A call that makes a request on the calling thread and submits it."""
    return lambda: committer.submit(Named(name))


def queued_is(committer: GroupCommitter[Named], count: int) -> bool:
    return committer.queued == count


def contents(events: list[Event]) -> list[str]:
    return [getattr(event.body, "content", "") for event in events]


def hold_first_group(
    committer: GroupCommitter[Named], fake: FakeCommit
) -> tuple[threading.Event, tuple[threading.Thread, list[Any]]]:
    """Submit ``first`` and hold its commit; returns the release event and its thread."""
    release = fake.hold[0] = threading.Event()
    first = in_thread(submit(committer, "first"))
    wait_until(lambda: len(fake.groups) == 1)
    return release, first


class TestGrouping:
    def test_requests_waiting_together_are_handed_over_as_one_group(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        waiting = [in_thread(submit(committer, f"r{index}")) for index in range(10)]
        wait_until(lambda: committer.queued == 10)

        release.set()
        for thread, _ in [first, *waiting]:
            thread.join(30)

        assert [["first"], sorted(f"r{index}" for index in range(10))] == [
            fake.groups[0],
            sorted(fake.groups[1]),
        ]

    def test_the_commit_function_is_called_once_per_group(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        waiting = [in_thread(submit(committer, f"r{index}")) for index in range(3)]
        wait_until(lambda: committer.queued == 3)

        release.set()
        for thread, _ in [first, *waiting]:
            thread.join(30)

        assert [1, 3] == [len(group) for group in fake.groups]

    def test_a_group_keeps_the_order_its_requests_were_queued_in(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        waiting = []
        for index in range(5):
            waiting.append(in_thread(submit(committer, f"r{index}")))
            wait_until(functools.partial(queued_is, committer, index + 1))

        release.set()
        for thread, _ in [first, *waiting]:
            thread.join(30)

        assert [f"r{index}" for index in range(5)] == fake.groups[1]

    def test_each_caller_gets_the_outcome_of_its_own_request(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        waiting = {name: in_thread(submit(committer, name)) for name in ("a", "b", "c")}
        wait_until(lambda: committer.queued == 3)

        release.set()
        for thread, _ in [first, *waiting.values()]:
            thread.join(30)

        assert {name: [name] for name in waiting} == {
            name: contents(outcome[0]) for name, (_, outcome) in waiting.items()
        }

    def test_a_lone_request_is_committed_when_the_writer_expects_a_larger_group(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        eight = [in_thread(submit(committer, f"r{index}")) for index in range(8)]
        wait_until(lambda: committer.queued == 8)
        release.set()
        for thread, _ in [first, *eight]:
            thread.join(30)

        late, outcome = in_thread(submit(committer, "late"))  # the last group held eight
        late.join(30)

        assert not late.is_alive()
        assert ["late"] == contents(outcome[0])


class TestFailures:
    def test_a_failing_commit_fails_only_its_group(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        fake.fail_before[1] = OSError("simulated disk failure")
        release, first = hold_first_group(committer, fake)
        second = in_thread(submit(committer, "second"))
        wait_until(lambda: committer.queued == 1)

        release.set()
        for thread, _ in (first, second):
            thread.join(30)
        third = committer.submit(Named("third"))

        assert ["first"] == contents(first[1][0])
        assert isinstance(second[1][0], OSError)
        assert ["third"] == contents(third)

    def test_a_request_settled_with_an_error_fails_alone(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        fake.refuse.add("bad")
        release, first = hold_first_group(committer, fake)
        bad = in_thread(submit(committer, "bad"))
        good = in_thread(submit(committer, "good"))
        wait_until(lambda: committer.queued == 2)

        release.set()
        for thread, _ in (first, bad, good):
            thread.join(30)

        assert isinstance(bad[1][0], ValueError)
        assert ["good"] == contents(good[1][0])
        assert 1 == sum("bad" in group for group in fake.groups)


class TestPipelining:
    def test_a_group_committed_while_requests_wait_is_woken_at_the_next_commit(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        second = in_thread(submit(committer, "second"))
        wait_until(lambda: committer.queued == 1)

        release.set()
        for thread, _ in (first, second):
            thread.join(30)

        assert [True, False] == fake.woken_on_entry
        assert (["first"], ["second"]) == (contents(first[1][0]), contents(second[1][0]))

    def test_a_group_is_answered_when_the_group_behind_it_fails_before_its_commit(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        fake.fail_before[1] = OSError("simulated begin failure")
        release, first = hold_first_group(committer, fake)
        second = in_thread(submit(committer, "second"))
        wait_until(lambda: committer.queued == 1)

        release.set()
        for thread, _ in (first, second):
            thread.join(30)

        assert ["first"] == contents(first[1][0])
        assert isinstance(second[1][0], OSError)

    def test_without_pipelining_a_group_is_woken_once_committed_though_requests_wait(
        self, fake: FakeCommit
    ) -> None:
        with unpipelined(fake, group_wait=0.002) as committer:
            release, first = hold_first_group(committer, fake)
            second = in_thread(submit(committer, "second"))
            wait_until(lambda: committer.queued == 1)

            release.set()
            for thread, _ in (first, second):
                thread.join(30)

        assert [True, True] == fake.woken_on_entry
        assert (["first"], ["second"]) == (contents(first[1][0]), contents(second[1][0]))

    def test_without_pipelining_the_callers_of_a_group_merge_with_the_requests_queued(
        self, fake: FakeCommit
    ) -> None:
        """A caller split off by a late commit joins the next group instead of its own."""
        with unpipelined(fake, group_wait=5.0) as committer:
            release, first = hold_first_group(committer, fake)
            thread = first[0]

            def first_caller_again() -> list[Event]:  # once answered, "first"'s caller goes on
                thread.join(30)
                return committer.submit(Named("third"))

            again = in_thread(first_caller_again)
            second = in_thread(submit(committer, "second"))
            wait_until(lambda: committer.queued == 1)
            time.sleep(0.2)  # the commit takes a while: the gathering window is as long

            release.set()
            for waiting, _ in (first, second, again):
                waiting.join(30)

        assert [["first"], ["second", "third"]] == fake.groups


class TestWakeUps:
    def test_callers_of_a_group_are_woken_in_relay(self) -> None:
        """The writer wakes the first caller; each caller wakes the next when it runs."""
        made, group = in_thread(lambda: [Named(str(index)) for index in range(3)])
        made.join(30)
        requests: list[Named] = group[0]
        for request in requests:
            request.settle(result=[text(request.name)])

        wake(requests)

        assert (True, False, False) == tuple(r.woken for r in requests)
        requests[0].wait()
        assert (True, True, False) == tuple(r.woken for r in requests)
        assert [["1"], ["2"]] == [contents(r.wait()) for r in requests[1:]]

    def test_main_thread_callers_are_woken_directly_not_in_relay(self) -> None:
        main = Named("main")
        made, other = in_thread(lambda: Named("other"))
        made.join(30)
        for request in (main, other[0]):
            request.settle(result=[])

        wake([other[0], main])

        assert (True, True) == (main.woken, other[0].woken)

    def test_a_woken_caller_leaves_its_successor_to_the_next_thread_that_blocks(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        pair = [in_thread(submit(committer, name)) for name in ("b", "c")]
        wait_until(lambda: committer.queued == 2)
        fake.hold[1] = hold_pair = threading.Event()
        release.set()
        wait_until(lambda: len(fake.groups) == 2)
        fake.hold[2] = busy = threading.Event()  # the writer is busy: only a caller wakes
        later = in_thread(submit(committer, "d"))
        wait_until(lambda: committer.queued == 1)
        hold_pair.set()  # b and c are woken before d's commit, which is held
        wait_until(lambda: committer.relaying == 1)
        b_thread, c_thread = pair[0][0], pair[1][0]
        b_thread.join(30)
        c_waits_for_its_baton = c_thread.is_alive()

        blocker = in_thread(submit(committer, "e"))
        c_thread.join(30)
        relaying = committer.relaying
        busy.set()
        for thread, _ in (first, later, blocker):
            thread.join(30)

        assert (True, False, 0) == (c_waits_for_its_baton, c_thread.is_alive(), relaying)

    def test_the_writer_wakes_a_caller_whose_predecessor_never_comes_back(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        pair = [in_thread(submit(committer, name)) for name in ("b", "c")]
        wait_until(lambda: committer.queued == 2)

        release.set()  # b and c commit as one group; nobody submits again
        for thread, _ in [first, *pair]:
            thread.join(30)

        assert [False, False] == [thread.is_alive() for thread, _ in pair]
        assert [["b"], ["c"]] == [contents(outcome[0]) for _, outcome in pair]

    def test_main_and_worker_threads_in_one_group_all_return(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        workers = [in_thread(submit(committer, f"w{index}")) for index in range(3)]
        wait_until(lambda: committer.queued == 3)

        def release_when_all_queued() -> None:
            wait_until(lambda: committer.queued == 4)
            release.set()

        releaser = in_thread(release_when_all_queued)
        mine = committer.submit(Named("main"))
        for thread, _ in [first, releaser, *workers]:
            thread.join(30)

        assert [[f"w{index}"] for index in range(3)] == [contents(o[0]) for _, o in workers]
        assert (["main"], 2) == (contents(mine), len(fake.groups))


class TestClose:
    def test_close_fails_the_requests_still_queued_and_completes_the_group_in_progress(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        queued = in_thread(submit(committer, "queued"))
        wait_until(lambda: committer.queued == 1)

        closer = in_thread(committer.close)
        queued[0].join(30)
        release.set()
        for thread, _ in (first, closer):
            thread.join(30)

        assert isinstance(queued[1][0], StoreClosedError)
        assert ["first"] == contents(first[1][0])
        assert [["first"]] == fake.groups

    def test_close_wakes_callers_still_waiting_for_a_baton(
        self, committer: GroupCommitter[Named], fake: FakeCommit
    ) -> None:
        release, first = hold_first_group(committer, fake)
        pair = [in_thread(submit(committer, name)) for name in ("b", "c")]
        wait_until(lambda: committer.queued == 2)
        fake.hold[1] = hold_pair = threading.Event()
        release.set()
        wait_until(lambda: len(fake.groups) == 2)
        fake.hold[2] = busy = threading.Event()
        later = in_thread(submit(committer, "d"))
        wait_until(lambda: committer.queued == 1)
        hold_pair.set()
        wait_until(lambda: committer.relaying == 1)  # c waits for the baton b handed on

        closer = in_thread(committer.close)
        busy.set()
        for thread, _ in [first, later, closer, *pair]:
            thread.join(30)

        assert (False, 0) == (pair[1][0].is_alive(), committer.relaying)
        assert ["c"] == contents(pair[1][1][0])

    def test_a_request_submitted_after_close_gets_the_closed_error(
        self, committer: GroupCommitter[Named]
    ) -> None:
        committer.close()

        with pytest.raises(StoreClosedError):
            committer.submit(Named("late"))

    def test_close_is_idempotent_and_ends_the_writer(
        self, committer: GroupCommitter[Named]
    ) -> None:
        assert (True, False, False) == (
            committer.close(),
            committer.close(),
            committer.writer.is_alive(),
        )


def settled_chain(committer: GroupCommitter[Named], size: int) -> list[Named]:
    """A settled group of ``size`` worker-thread requests, woken by ``wake`` and counted as
    the writer counts them (the writer is not told): reaches into the baton queue."""
    made, out = in_thread(lambda: [Named(str(index)) for index in range(size)])
    made.join(30)
    group: list[Named] = out[0]
    for request in group:
        request._batons = committer._batons
        request.settle(result=[text(request.name)])
    with committer._cond:
        committer._relaying += wake(group)
    return group


class TestBatonsWhileGathering:
    def test_a_caller_waiting_for_its_baton_stays_in_line_when_the_writer_takes_a_group(
        self, fake: FakeCommit
    ) -> None:
        committer: GroupCommitter[Named] = GroupCommitter(
            fake, group_wait=1.0, name="test-group-commit", closed_error=closed
        )
        try:
            committer._last_commit = 1.0  # the writer gathers for a whole second
            committer._target = 2
            release = fake.hold[0] = threading.Event()
            lone, _ = in_thread(submit(committer, "lone"))
            wait_until(lambda: committer.queued == 1)
            first, second = settled_chain(committer, 2)
            first.wait()

            wait_until(lambda: len(fake.groups) == 1)  # gave up gathering, took the lone one
            still_waiting = not second.woken
            release.set()
            lone.join(30)
            wait_until(lambda: second.woken)  # woken once the writer idles
        finally:
            committer.close()

        assert still_waiting
