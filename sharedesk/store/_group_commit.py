"""The writer of the stores with a writer thread: one queue, one thread, futures.

:class:`GroupWriter` owns a queue of ``(write, future)`` pairs and one thread. Callers
:meth:`~GroupWriter.put` a checked write with its future and wait on
``future.result()`` (or add a done callback); the thread takes every write waiting,
hands the group to its store (``StoreBase._run_group``: one transaction, planned by
:func:`plan_group`) and the store completes each future once. There is no other path:
a sync caller and an event loop wait on the same kind of future.

Gathering: the callers answered by the last commit usually come straight back, so once
a write is waiting the thread waits for as many writes as the last group held, but no
longer than the last commit took (waiting longer than a commit costs more than
committing twice) nor than ``group_wait``. One caller alone never waits (its last group
held one write).

:func:`plan_group` is what a group's transaction runs, in every store (the write path
of :mod:`sharedesk.store.base`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import Protocol

from sharedesk.projection.append import Facts, StoredRow, Wants, WritePlan, plan_write, wants_of
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import SharedeskError
from sharedesk.protocol.events import Event
from sharedesk.protocol.writes import Write

__all__ = ["GroupWriter", "WriteTxn", "plan_group"]

_log = logger()


#: What a :class:`GroupWriter` hands its store: a group of writes and their futures,
#: each future already set running; the store commits them and completes every future.
RunGroup = Callable[[list[tuple[Write, "Future[list[Event]]"]]], None]


class GroupWriter:
    """The one group-committing writer: one queue, one thread, futures completed once.

    Any number of threads :meth:`put` a write with its future; the writer thread takes
    every write waiting (gathering as the module header says) and hands the group to
    ``run_group``, which commits it and completes each future. A future cancelled
    before the writer takes its write is dropped, and its write never runs.

    Args:
        run_group: Commits a group and completes its futures; must not raise.
        group_wait: Most seconds to gather once a write is waiting (0: commit at once).
        name: The writer thread's name.
        closed_error: Makes the error a write gets once the writer is closed.

    Cost: starts one daemon thread.
    """

    def __init__(
        self,
        run_group: RunGroup,
        *,
        group_wait: float,
        name: str,
        closed_error: Callable[[], BaseException],
    ) -> None:
        self._run_group = run_group
        self._group_wait = group_wait
        self._closed_error = closed_error
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[tuple[Write, Future[list[Event]]]] = []
        self._target = 1
        self._last_commit = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, write: Write, future: Future[list[Event]]) -> None:
        """Queue ``write``; the writer completes ``future`` (at once when closed).

        Cost: one queue append under the writer's lock; never blocks on a commit.
        """
        with self._cond:
            if not self._closed:
                queue = self._queue
                queue.append((write, future))
                # Wake the writer only when it has something to decide: the first
                # write, or the group it gathers is complete.
                if len(queue) == 1 or len(queue) >= self._target:
                    self._cond.notify()
                return
        if future.set_running_or_notify_cancel():
            future.set_exception(self._closed_error())

    def close(self) -> None:
        """Fail the queued writes, let the group being written complete, end the thread.

        Idempotent. Cost: waits for the group in progress, if any; joins the thread
        (unless called from it, by an ``on_commit`` callback).
        """
        with self._cond:
            pending, self._queue = self._queue, []
            self._closed = True
            self._cond.notify_all()
        for _, future in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(self._closed_error())
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._queue and not self._closed:
                    cond.wait()
                if self._queue and len(self._queue) < self._target and not self._closed:
                    deadline = time.monotonic() + min(self._group_wait, self._last_commit)
                    while len(self._queue) < self._target and not self._closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        cond.wait(remaining)
                group, self._queue = self._queue, []
                if not group:
                    return
                self._target = len(group)
            started = time.monotonic()
            items = [item for item in group if item[1].set_running_or_notify_cancel()]
            try:
                if items:
                    self._run_group(items)
            except BaseException as exc:  # never leave a caller hanging
                _log.exception("store.writer_failed")
                for _, future in items:
                    if not future.done():
                        future.set_exception(exc)
            self._last_commit = time.monotonic() - started


class WriteTxn(Protocol):
    """A backend's open write transaction, as the writer uses it (see the module header)."""

    def facts(self, wants: Mapping[str, Wants]) -> dict[str, Facts]:
        """Return the facts of each session in ``wants``, read in this transaction."""
        ...

    def put(self, plans: Sequence[WritePlan]) -> None:
        """Write ``plans`` in this transaction, in order."""
        ...


def _absorb(facts: Facts, plan: WritePlan) -> None:
    """Add what ``plan`` stores to ``facts``, so that the group's next write sees it."""
    known, rows = facts.known, facts.rows
    for event in plan.new:
        assert event.sequence is not None
        known[event.id] = event
        rows[event.sequence] = StoredRow(type(event.body).__name__, event.parent)
    facts.last += len(plan.new)
    if plan.first_replies:
        facts.answered.update(plan.first_replies)
    if plan.state is not None:
        facts.state = plan.state
    share = plan.write.share
    if share is not None:
        facts.sharing[(share.viewer, share.state.conversation)] = plan.sharing


def plan_group(
    txn: WriteTxn, writes: list[Write], now: datetime
) -> list[list[WritePlan] | SharedeskError]:
    """Plan and put a group of writes in the open transaction ``txn``; one outcome each.

    Reads the facts of every session the group touches at once, plans each write on top
    of the ones before (:func:`~sharedesk.projection.append.plan_write`), then puts the
    plans that passed and write something, in one ``txn.put``. A write with ``linked``
    writes passes only when every one of them does (they are of distinct sessions, so
    none is planned on top of another).

    Returns:
        Per write, its plans (its own first, then its linked writes') or the error a
        plan raised (then it writes nothing).

    Cost: one ``txn.facts`` and at most one ``txn.put``; O(events of the group).
    """
    wants: dict[str, Wants] = {}
    later: dict[str, int] = {}  # per session, how many of its writes are still to plan
    for write in writes:
        for member in (write, *write.linked):
            session_id = member.session_id
            wants[session_id] = wants_of(member, wants.get(session_id))
            later[session_id] = later.get(session_id, 0) + 1
    facts = txn.facts(wants)
    planned: list[list[WritePlan] | SharedeskError] = []
    plans: list[WritePlan] = []
    for write in writes:
        members = (write, *write.linked)
        for member in members:
            later[member.session_id] -= 1
        try:
            outcome = [plan_write(m, facts[m.session_id], now) for m in members]
        except SharedeskError as exc:
            planned.append(exc)
            continue
        for plan in outcome:
            session_id = plan.write.session_id
            if later[session_id]:  # a later write of the group plans on top of this one
                _absorb(facts[session_id], plan)
            if plan.new or plan.sharing is not None:
                plans.append(plan)
        planned.append(outcome)
    if plans:
        txn.put(plans)
    return planned
