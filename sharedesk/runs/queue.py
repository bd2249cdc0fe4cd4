"""RunQueue: per-session FIFO execution of runs, with bounded concurrency and waiting.

Each session has a lane: a FIFO of waiting runs and the driver threads running them; a
driver takes the lane's next run when its run ends and stops when the lane is empty. A
run's input is stored when it is submitted, so the lane's order is the order of the
inputs in the session. The queue keeps only scheduling state: a queue lost with its
process loses no history (its runs stay pending).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Self, Unpack

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import QueueClosed, QueueFull
from sharedesk.protocol.ports import EventStore
from sharedesk.protocol.validation import check_int, check_session_id
from sharedesk.runs import execute
from sharedesk.runs.rules import ExecuteOptions, RunOptions, check_options
from sharedesk.runs.types import Adapter, Run, RunQueueStatus, RunResult

#: How long ``close()`` waits for running runs before cancelling them, in seconds.
DEFAULT_CLOSE_TIMEOUT: float = 10.0


class RunFuture(Future[RunResult]):
    """The future of a submitted run: a :class:`concurrent.futures.Future` with its ids.

    ``cancel()`` succeeds only while the run waits (and records it as cancelled); cancel
    a running run with ``SessionManager.cancel_run(store, future.run_id)``, and the
    future then raises ``RunCancelled``.

    Attributes:
        run_id: The run's id.
        session_id: The run's session.
    """

    def __init__(self, run_id: str, session_id: str, interrupt: Callable[[], None]) -> None:
        super().__init__()
        self.run_id = run_id
        self.session_id = session_id
        self._interrupt = interrupt

    def result(self, timeout: float | None = None) -> RunResult:
        """Wait for the run's result; a ``KeyboardInterrupt`` while waiting cancels the run."""
        try:
            return super().result(timeout)
        except KeyboardInterrupt:
            self._interrupt()
            raise


@dataclass(eq=False)
class _Job:
    run: Run
    adapter: Adapter
    options: RunOptions
    future: RunFuture


@dataclass(eq=False)
class _Lane:
    waiting: deque[_Job] = field(default_factory=deque)
    reserved: int = 0
    drivers: int = 0
    #: Held from storing a submitted run's input to queueing it (the lane's order).
    submitting: threading.Lock = field(default_factory=threading.Lock)

    def idle(self) -> bool:
        return not self.waiting and self.reserved == 0 and self.drivers == 0


class RunQueue:
    """Executes each session's runs FIFO, at most ``max_concurrent_runs`` at once; thread-safe."""

    def __init__(
        self, store: EventStore, *, max_concurrent_runs: int = 1, max_queued_runs: int = 100
    ) -> None:
        """Create the queue over ``store`` (or a Hub); it starts no thread until a submit.

        Args:
            store: The store (or Hub) the runs live in.
            max_concurrent_runs: Most runs of one session executing at once (>= 1).
            max_queued_runs: Most runs of one session waiting for a slot (>= 0).
        """
        check_int("max_concurrent_runs", max_concurrent_runs, minimum=1)
        check_int("max_queued_runs", max_queued_runs)
        self._store = store
        self._max_concurrent = max_concurrent_runs
        self._max_queued = max_queued_runs
        self._cond = threading.Condition()
        self._lanes: dict[str, _Lane] = {}
        self._running: dict[threading.Thread, _Job] = {}  # each driver and its run
        self._closed = False

    def submit(
        self, session_id: str, adapter: Adapter, input: Any, **options: Unpack[ExecuteOptions]
    ) -> RunFuture:
        """Start a run of ``session_id`` now; execute it when its lane has a slot.

        ``input`` and ``options`` are those of ``SessionManager.run_once``; the future
        resolves to the :class:`RunResult`, or raises what ``execute_run`` raised. Raises
        ``QueueFull`` (every slot busy and ``max_queued_runs`` waiting) or ``QueueClosed``
        with nothing written (a close while the input was stored cancels the run).

        Cost: one append (the input), under the session's submit lock (submits of one
        session take turns); does not block on the run.
        """
        check_session_id(session_id)
        checked = check_options(adapter, sync=True, **options)
        with self._cond:
            if self._closed:
                raise QueueClosed(session_id)
            lane = self._lanes.setdefault(session_id, _Lane())
            waiting = len(lane.waiting) + lane.reserved
            if lane.drivers >= self._max_concurrent and waiting >= self._max_queued:
                logger().info("queue.full", session_id=session_id, max_queued_runs=self._max_queued)
                raise QueueFull(session_id, self._max_queued)
            lane.reserved += 1
        with lane.submitting:
            try:
                run = execute.start_run(self._store, session_id, input)
            except BaseException:
                with self._cond:
                    lane.reserved -= 1
                    self._forget_if_idle(session_id)
                raise
            future = RunFuture(run.id, session_id, lambda: self._stop(job))
            job = _Job(run, adapter, checked, future)
            future.add_done_callback(lambda _: self._on_done(job))
            with self._cond:
                lane.reserved -= 1
                closed = self._closed
                if not closed:
                    lane.waiting.append(job)
                    self._pump(session_id, lane)
                else:
                    self._forget_if_idle(session_id)
        if closed:
            future.cancel()
            raise QueueClosed(session_id)
        logger().debug("queue.submitted", session_id=session_id, run_id=run.id)
        return future

    def status(self, session_id: str) -> RunQueueStatus:
        """Return how many runs of ``session_id`` run and wait now. Cost: O(1); no I/O."""
        with self._cond:
            lane = self._lanes.get(session_id) or _Lane()
            return RunQueueStatus(
                session_id=session_id,
                running=lane.drivers,
                queued=len(lane.waiting) + lane.reserved,
                max_concurrent_runs=self._max_concurrent,
                max_queued_runs=self._max_queued,
                closed=self._closed,
            )

    def drain(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` s (``None``: no bound) until no run waits or runs; say if so."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._lanes, timeout)

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Stop the queue (idempotent): cancel waiting runs, then wait for running ones.

        Runs still running after ``timeout`` seconds are cancelled (their futures raise
        ``RunCancelled``; their adapters are abandoned); every driver thread is joined.
        Cost: one append per run cancelled; blocks up to ``timeout`` s (+ <= 100 ms).
        """
        with self._cond:
            self._closed = True
            waiting = [job for lane in self._lanes.values() for job in lane.waiting]
            for lane in self._lanes.values():
                lane.waiting.clear()
            for session_id in list(self._lanes):
                self._forget_if_idle(session_id)
        for job in waiting:
            job.future.cancel()  # its done-callback records the cancel in the store
        with self._cond:
            self._cond.wait_for(lambda: not self._running, timeout)
            running = list(self._running.values())
            threads = list(self._running)
        for job in running:
            self._stop(job)
        for thread in threads:
            thread.join(max(timeout, 1.0))
            if thread.is_alive():  # pragma: no cover - a store that hangs
                logger().warning("queue.thread_stuck", thread=thread.name)
        logger().debug("queue.closed", cancelled=len(waiting) + len(running))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _pump(self, session_id: str, lane: _Lane) -> None:
        """Give the lane's next waiting run a driver if a slot is free (lock held)."""
        if lane.waiting and lane.drivers < self._max_concurrent:
            job = lane.waiting.popleft()
            lane.drivers += 1
            thread = threading.Thread(
                target=self._drive,
                args=(session_id, lane, job),
                name=f"sharedesk-queue-{session_id[:16]}",
                daemon=True,
            )
            self._running[thread] = job
            thread.start()

    def _forget_if_idle(self, session_id: str) -> None:
        """Drop an idle lane and wake ``drain`` waiters (lock held)."""
        lane = self._lanes.get(session_id)
        if lane is not None and lane.idle():
            del self._lanes[session_id]
        self._cond.notify_all()

    def _drive(self, session_id: str, lane: _Lane, job: _Job | None) -> None:
        """Execute ``job``, then the lane's next runs, until the lane is empty."""
        driver = threading.current_thread()
        while job is not None:
            if job.future.set_running_or_notify_cancel():
                try:
                    result = execute.execute_run(self._store, job.adapter, job.run.id, job.options)
                except BaseException as exc:
                    job.future.set_exception(exc)
                else:
                    job.future.set_result(result)
            # else: cancelled before it ran; _on_done recorded it.
            with self._cond:
                job = lane.waiting.popleft() if lane.waiting else None
                if job is not None:
                    self._running[driver] = job
                else:
                    del self._running[driver]
                    lane.drivers -= 1
                    self._forget_if_idle(session_id)  # wakes close() and drain()

    def _stop(self, job: _Job) -> None:
        """Cancel ``job``: its future while it waits (``_on_done`` records it), else its run."""
        if not job.future.cancel():
            execute.try_cancel(self._store, job.run.id)

    def _on_done(self, job: _Job) -> None:
        """Record a future cancelled while waiting as a cancelled run (any thread)."""
        if not job.future.cancelled():
            return
        with self._cond:
            lane = self._lanes.get(job.run.session_id)
            if lane is not None and job in lane.waiting:
                lane.waiting.remove(job)
                self._forget_if_idle(job.run.session_id)
        execute.try_cancel(self._store, job.run.id)
