"""What the backends not yet on :class:`~sharedesk.store.base.StoreBase` still import.

Everything here lives elsewhere now (``projection/append``, ``protocol/``, the base).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from sharedesk.projection.append import (
    AppendPlan,
    StoredRow,
    not_a_root_error,
    plan_append,
)
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import CompletionSink, SessionInfo, WriteTicket
from sharedesk.protocol.records import private_copy
from sharedesk.protocol.validation import (
    check_bool,
    check_optional_int,
    check_roots,
    check_share,
    check_text,
)
from sharedesk.protocol.views import SharingState
from sharedesk.protocol.writes import Share

__all__ = [
    "AppendPlan",
    "CommitGroup",
    "GroupCommitter",
    "Request",
    "wake",
    "wake_all",
    "SessionInfo",
    "StoredRow",
    "check_log_args",
    "check_read_args",
    "check_roots",
    "check_sharing_args",
    "check_viewer",
    "hand_over",
    "not_a_root_error",
    "plan_append",
    "private_copy",
    "watermark_of",
]

_log = logger()

#: One settled submitted write: its ticket, the stored events or ``None``, the error.
Outcome = tuple[WriteTicket, "list[Event] | None", "BaseException | None"]


def hand_over(outcomes: Iterable[Outcome]) -> None:
    """Settle each ticket with its outcome, in order, then deliver them: one call per sink.

    The tail of every store's submitted writes (``SubmittingStore``), on its writer
    thread. Never raises: a failing ticket or sink is logged (its awaiting side is lost,
    the writer goes on).

    Cost: O(len(outcomes)); one ``deliver`` per distinct sink.
    """
    by_sink: dict[int, tuple[CompletionSink, list[WriteTicket]]] = {}
    for ticket, result, error in outcomes:
        try:
            ticket.settle(result, error)
            sink = ticket.sink
        except Exception:
            _log.exception("store.ticket_failed")
            continue
        entry = by_sink.get(id(sink))
        if entry is None:
            by_sink[id(sink)] = (sink, [ticket])
        else:
            entry[1].append(ticket)
    for sink, tickets in by_sink.values():
        try:
            sink.deliver(tickets)
        except Exception:
            _log.exception("store.sink_failed")


def check_sharing_args(
    viewer: Any, state: Any, expected_state: Any
) -> tuple[str, SharingState, SharingState | None]:
    """Validate ``append_and_share``'s sharing arguments.

    Raises:
        ValidationError: ``viewer`` not a non-empty ``str``; ``state`` not a valid
            :class:`SharingState` (see ``check_sharing_state``); ``expected_state``
            neither ``None`` nor a valid ``SharingState`` of the same conversation.

    Cost: O(1).
    """
    check_share(Share(viewer, state, expected_state))
    return viewer, state, expected_state


def check_viewer(viewer: Any) -> str:
    """Return ``viewer`` if it is a non-empty ``str``.

    Raises:
        ValidationError: Not a ``str``, empty, or holding a lone surrogate.

    Cost: O(len(viewer)).
    """
    return check_text("viewer", viewer, empty=False)


def watermark_of(state: SharingState | None) -> int:
    """Return the watermark of ``state``, or -1 for no state (as ``SharingStateConflict``)."""
    return -1 if state is None else state.watermark


def check_read_args(
    after: int | None, before: int | None, limit: int | None, newest_first: bool = False
) -> tuple[int | None, int | None, int | None]:
    """Validate ``read``'s bounds and order.

    Raises:
        ValidationError: A bound that is not a non-negative int, ``limit`` < 0, or a
            ``newest_first`` that is not a bool.
    """
    check_bool("newest_first", newest_first)
    return (
        check_optional_int("after", after),
        check_optional_int("before", before),
        check_optional_int("limit", limit),
    )


def check_log_args(before: int | None, limit: int) -> tuple[int | None, int]:
    """Validate ``read_before``'s arguments.

    Raises:
        ValidationError: ``before`` not ``None`` or a non-negative int; ``limit`` not a
            non-negative int.
    """
    checked_before = check_optional_int("before", before)
    checked_limit = check_optional_int("limit", limit)
    if checked_limit is None:
        raise ValidationError("limit must be an int, got None")
    return checked_before, checked_limit


# -- the group committer of the backends not yet on StoreBase ---------------------------
#
# ``Request`` objects woken in relay, and tickets handed to sinks (re-exported by
# ``_group_commit`` for the old imports).


class Request:
    """One write waiting for the writer thread: its outcome, and how its caller is woken.

    A store subclasses it with what the write holds. The caller blocks in :meth:`wait`
    on ``_done``, a lock acquired at creation (by the caller's thread) and released once
    the outcome is settled and the request's turn in the relay comes (see the module
    docstring). A request with a ``ticket`` has no waiting thread and no lock.

    Attributes:
        result: The stored events, once settled without error.
        error: The error, once settled with one.
        settled: Whether the outcome is recorded.
        ticket: Gets the outcome instead of a waiting thread (``None``: a caller waits).
    """

    __slots__ = (
        "_batons",
        "_done",
        "_main",
        "_next",
        "error",
        "result",
        "settled",
        "ticket",
    )

    def __init__(self, ticket: WriteTicket | None = None) -> None:
        self.result: list[Event] | None = None
        self.error: BaseException | None = None
        self.settled = False
        self._next: Request | None = None
        self._batons: collections.deque[Request] | None = None
        self.ticket = ticket
        if ticket is None:
            self._main = threading.current_thread() is threading.main_thread()
            self._done = threading.Lock()
            self._done.acquire()
        # A request with a ticket has no caller to wake: no lock (one object fewer for
        # the collector per submitted write in flight; nothing reads _done or _main).

    @property
    def woken(self) -> bool:
        """Whether the caller may run (its lock is free). Cost: O(1); never blocks."""
        return self.ticket is not None or not self._done.locked()

    def settle(self, result: list[Event] | None = None, error: BaseException | None = None) -> None:
        """Record the outcome (a result or an error); the caller is woken by :func:`wake`."""
        self.result = result
        self.error = error
        self.settled = True

    def fail(self, error: BaseException) -> None:
        """Settle with ``error`` and wake the caller now (requests never taken by the writer)."""
        self.settle(error=error)
        ticket = self.ticket
        if ticket is None:
            self._done.release()
        else:
            _hand_over([self])

    def wait(self) -> list[Event]:
        """Block until woken; hand on the baton; return the result or raise (repeatable).

        Raises:
            BaseException: The error the request was settled with.

        Cost: blocks until the request's turn in the relay; O(1) after.
        """
        self._done.acquire()
        relay = self._next
        if relay is not None:
            self._next = None
            if self._batons is None:
                relay._done.release()
            else:
                self._batons.append(relay)
        self._done.release()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


R = TypeVar("R", bound=Request)

#: The commit function: write the group in one transaction, call ``before_commit()``
#: just before committing (or once the transaction fails), commit, settle each request.
CommitGroup = Callable[[list[R], Callable[[], None]], None]


def _hand_over(requests: list[Request]) -> None:
    """Settle the tickets of settled ``requests`` and deliver them: one call per sink."""
    hand_over((r.ticket, r.result, r.error) for r in requests if r.ticket is not None)


def wake(group: list[R]) -> int:
    """Wake the callers of a settled group: main-thread callers directly, others in relay.

    Requests with a ticket have no caller waiting: their tickets are settled, in group
    order, and delivered to their sinks, one ``deliver`` per sink.

    Returns how many callers will wait for a baton in the committer's queue (successors
    of requests that hand theirs on there).

    Cost: O(len(group)) lock releases and ticket settlements; never blocks.
    """
    relay: Request | None = None
    handed = 0
    submitted: list[Request] = [request for request in group if request.ticket is not None]
    if submitted:
        _hand_over(submitted)
        if len(submitted) == len(group):
            return 0
    for request in reversed(group):
        if request.ticket is not None:
            continue
        if request._main:
            request._done.release()
        else:
            if relay is not None and request._batons is not None:
                handed += 1
            request._next = relay
            relay = request
    if relay is not None:
        relay._done.release()
    return handed


def wake_all(batons: collections.deque[Request]) -> int:
    """Wake every request waiting for a baton and every successor in its chain.

    Returns the number of requests woken. Cost: O(requests woken); never blocks.
    """
    woken = 0
    while True:
        try:
            request: Request | None = batons.popleft()
        except IndexError:
            return woken
        while request is not None:
            successor, request._next = request._next, None
            request._done.release()
            request = successor
            woken += 1


class GroupCommitter(Generic[R]):
    """A queue of write requests and the writer thread that commits them in groups.

    Thread-safe: any number of threads submit; one thread (the writer, started here)
    calls the commit function, one group at a time.
    """

    def __init__(
        self,
        commit: CommitGroup[R],
        *,
        group_wait: float,
        pipeline: bool = True,
        name: str,
        closed_error: Callable[[], BaseException],
        path: str | None = None,
    ) -> None:
        """Start the writer thread.

        Args:
            commit: The commit function (see :data:`CommitGroup`); it settles every
                request of the group, or raises (the group's unsettled requests then
                get that error).
            group_wait: Most seconds the writer gathers, once a request is waiting (see
                the module docstring); 0 commits at once, and hands no batons.
            pipeline: Whether a committed group's callers are left asleep until the
                next group's commit when requests are already waiting (see the module
                docstring); ``False`` wakes them once their group is committed, so the
                next group gathers all of them (for a store whose commit costs more
                than the callers' work between two appends).
            name: The writer thread's name.
            closed_error: Makes the error a request gets once the committer is closed.
            path: Named in the log record of a failing commit function.

        Cost: starts one daemon thread.
        """
        self._commit = commit
        self._group_wait = group_wait
        self._pipeline = pipeline
        self._closed_error = closed_error
        self._path = path
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[R] = []
        # Relay successors handed on as batons (woken callers append without the lock),
        # and how many callers of woken groups still wait for their baton (under _cond).
        self._batons: collections.deque[Request] = collections.deque()
        self._relaying = 0
        self._target = 1
        self._last_commit = 0.0
        # A committed group whose callers are woken just before the next commit (the
        # writer's only; see _commit_group).
        self._pending: list[R] | None = None
        #: Whether :meth:`close` was called (set under the queue's lock).
        self.closed = False
        self._writer = threading.Thread(target=self._run, name=name, daemon=True)
        self._writer.start()

    @property
    def queued(self) -> int:
        """How many requests wait for the writer to take them. Cost: O(1)."""
        return len(self._queue)

    @property
    def relaying(self) -> int:
        """How many woken callers still wait for their baton. Cost: O(1)."""
        return self._relaying

    @property
    def writer(self) -> threading.Thread:
        """The writer thread (it ends once :meth:`close` returns)."""
        return self._writer

    def submit(self, request: R) -> list[Event]:
        """Queue ``request`` (made on this thread, without a ticket) and wait for it.

        Returns:
            The stored events the commit function settled it with.

        Raises:
            BaseException: The error it was settled with, or ``closed_error()`` when the
                committer is closed (also when it closes while the request is queued).

        Cost: blocks until the group this request joins is committed and its turn in
        the relay comes (under load: once the next group is written, see the module
        docstring).
        """
        with self._cond:
            if self.closed:
                raise self._closed_error()
            queue = self._queue
            queue.append(request)
            # Wake the writer only when it has something to decide: the first request,
            # or the group it is gathering is complete.
            if len(queue) == 1 or len(queue) >= self._target:
                self._cond.notify()
            if self._group_wait > 0:
                request._batons = self._batons
            if self._batons:  # this thread is about to block: a woken caller runs instead
                self._batons.popleft()._done.release()
                self._relaying -= 1
        return request.wait()

    def enqueue(self, request: R) -> None:
        """Queue ``request``, which has a ticket, without waiting; the ticket gets the outcome.

        Raises:
            BaseException: ``closed_error()``: the committer is closed; nothing was queued.

        Cost: one queue append under the committer's lock; never blocks on the writer.
        """
        with self._lock:  # the condition's own lock (its __enter__ is a Python call)
            if self.closed:
                raise self._closed_error()
            queue = self._queue
            queue.append(request)
            if len(queue) == 1 or len(queue) >= self._target:
                self._cond.notify()

    def close(self) -> bool:
        """Fail the queued requests, let the group being written complete, end the writer.

        Returns:
            Whether this call closed it (``False``: closed already).

        Cost: waits for the group in progress, if any, and joins the writer thread.
        """
        with self._cond:
            if self.closed:
                return False
            self.closed = True
            pending, self._queue = self._queue, []
            self._cond.notify_all()
        for request in pending:
            request.fail(self._closed_error())
        self._writer.join()
        return True

    def _run(self) -> None:
        """Body of the writer thread: gather waiting requests, commit them as a group.

        While the callers of the last group are left asleep for the next commit (see
        ``_commit_group``), requests are waiting already: the writer takes them at once,
        without gathering.

        Batons: a caller still waiting for its baton when the writer takes a group stays
        in line (the first caller woken after that group's commit hands it on): waking
        it at once would set it running against the writer, and would split the next
        group (measured: 7% fewer appends per second). When no request arrives within
        the gathering window, the writer wakes every baton still waiting, so a caller
        whose predecessor never comes back waits at most one window (and one commit)
        longer.
        """
        cond = self._cond
        batons = self._batons
        while True:
            with cond:
                if self._pending is not None and not self._queue:  # emptied by close
                    self._relaying += wake(self._pending)
                    self._pending = None
                while not self._queue and not self.closed:
                    if self._relaying <= 0:
                        cond.wait()
                    elif not cond.wait(min(self._group_wait, self._last_commit or 1.0)):
                        self._relaying -= wake_all(batons)
                gather = self._pending is None and len(self._queue) < self._target
                if self._queue and gather and not self.closed:
                    deadline = time.monotonic() + min(self._group_wait, self._last_commit)
                    while len(self._queue) < self._target and not self.closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        cond.wait(remaining)
                if not self._queue:
                    self._relaying -= wake_all(batons)
                    while self._relaying > 0:  # closed: see every woken group's relay through
                        cond.wait(0.001)
                        self._relaying -= wake_all(batons)
                    return
                group, self._queue = self._queue, []
                self._target = len(group)
            started = time.monotonic()
            self._commit_group(group)
            self._last_commit = time.monotonic() - started
            if not self._pipeline:
                with cond:  # the callers just woken come back: gather them with the queued
                    self._target = len(group) + len(self._queue)

    def _commit_group(self, group: list[R]) -> None:
        """Commit ``group`` and settle every request (never raises).

        This group's callers are woken now, unless requests are already waiting: then
        they are left asleep (``_pending``) while the writer takes the waiting requests
        and writes them, and are woken just before that next commit (or as soon as it
        fails), so they run while it syncs instead of taking the GIL from the writer at
        each put. No caller waits for more than the writing of the group after its own
        (and, when another store or process holds LMDB's write lock, for that writer's
        transaction, which the next group's ``begin`` waits for).
        """
        try:
            self._commit(group, self._wake_pending)
        except BaseException as exc:  # never leave a caller hanging
            _log.exception("store.writer_failed", path=self._path)
            for request in group:
                if not request.settled:
                    request.settle(error=exc)
        self._wake_pending()  # in case this group failed before its commit
        with self._cond:
            defer = self._pipeline and bool(self._queue) and not self.closed
        self._pending = group
        if not defer:
            self._wake_pending()

    def _wake_pending(self) -> None:
        """Wake the callers of the group left for the next commit, if any."""
        group, self._pending = self._pending, None
        if group is not None:
            handed = wake(group)
            if handed:
                with self._cond:
                    self._relaying += handed
