"""The writer of the stores with a writer thread: one queue, one thread, completions.

:class:`GroupWriter` queues checked writes with their :class:`Completion`; its thread
hands every write waiting to its store (``StoreBase._commit_group``, planned by
:func:`plan_group`) and completes each once. Once a write waits, the thread gathers as
many as the last group held, but no longer than the last commit took nor ``group_wait``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from sharedesk.projection.append import Facts, StoredRow, Wants, WritePlan, plan_write, wants_of
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import SharedeskError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import Completion, D
from sharedesk.protocol.writes import Write

__all__ = ["GroupWriter", "WriteTxn", "plan_group"]

_log = logger()

#: One write's outcome: its stored events (one per input event), or the error.
Outcome = list[Event] | BaseException
#: What a :class:`GroupWriter` hands its store: commits the writes, one outcome each.
RunGroup = Callable[[list[Write]], list[Outcome]]


class GroupWriter:
    """The one group-committing writer (a write not ``start``-ed, i.e. cancelled, never runs).

    ``run_group`` commits a group, one outcome per write, and must not raise;
    ``group_wait`` is the most seconds to gather; ``name`` the thread's name;
    ``closed_error`` makes the error of a write queued once the writer is closed.
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
        self._lock = threading.Lock()  # taken bare by ``submit``: the loop's hot path
        self._cond = threading.Condition(self._lock)
        self._queue: list[tuple[Write, Completion]] = []
        self._target = 1
        self._last_commit = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, write: Write, done: D) -> D:
        """Queue ``write``; return ``done`` (failed at once when closed). Never blocks."""
        with self._lock:
            if not self._closed:
                queue = self._queue
                queue.append((write, done))
                # Wake the writer only when it has something to decide: the first
                # write, or the group it gathers is complete.
                if len(queue) == 1 or len(queue) >= self._target:
                    self._cond.notify()
                return done
        if done.start():
            done.finish(self._closed_error())
        return done

    def close(self) -> None:
        """Fail the queued writes, let the group being written complete, end the thread."""
        with self._cond:
            pending, self._queue = self._queue, []
            self._closed = True
            self._cond.notify_all()
        for write, done in pending:
            self.submit(write, done)  # closed: fails it as a write queued now
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
            items = [item for item in group if item[1].start()]
            try:
                outcomes = self._run_group([write for write, _ in items]) if items else []
            except BaseException as exc:  # never leave a caller hanging
                _log.exception("store.writer_failed")
                outcomes = [exc] * len(items)
            for (_, done), outcome in zip(items, outcomes, strict=True):
                done.finish(outcome)
            self._last_commit = time.monotonic() - started


class WriteTxn(Protocol):
    """A backend's open write transaction, as the writer uses it."""

    def facts(self, wants: Mapping[str, Wants]) -> dict[str, Facts]:
        """Return the facts of each session in ``wants``, read in this transaction."""
        ...

    def put(self, plans: Sequence[WritePlan]) -> None:
        """Write ``plans`` in this transaction, in order."""
        ...

    def remove(self, session_id: str, through: int) -> int:
        """Do ``StoreBase.remove_archived`` in this transaction; return the rows removed."""
        ...


def _absorb(facts: Facts, plan: WritePlan) -> None:
    """Add what ``plan`` stores to ``facts`` (see ``Facts``), for the group's next write."""
    known, rows = facts.known or {}, facts.rows or {}
    for event in plan.new:
        assert event.sequence is not None
        known[event.id] = event
        rows[event.sequence] = StoredRow(type(event.body).__name__, event.parent)
    facts.known, facts.rows = known, rows
    facts.last += len(plan.new)
    if plan.first_replies:
        facts.answered = facts.answered or set()
        facts.answered.update(plan.first_replies)
    if plan.state is not None:
        facts.state = plan.state
    share = plan.write.share
    if share is not None:
        facts.sharing = facts.sharing or {}
        facts.sharing[(share.viewer, share.state.conversation)] = plan.sharing


def plan_group(
    txn: WriteTxn, writes: list[Write], now: datetime
) -> list[list[WritePlan] | SharedeskError]:
    """Plan and put ``writes`` in ``txn``; return each one's plans, or the error one raised.

    One ``txn.facts`` for the whole group, each write planned on top of the ones before,
    then one ``txn.put`` of the plans that passed and write something. A write's plans
    are its own, then its ``linked`` writes' (of distinct sessions): all pass or none.
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
