"""The async executor: ``SessionManager.aexecute_run`` and ``arun_once``, never blocking.

The arguments, events written, results and errors are those of the sync executor
(:mod:`sharedesk.runs.execute`), and so is the bookkeeping: the run is claimed, watched
(time-out, ``cancel_run``) and finished by :meth:`~sharedesk.runs.execute.Execution.drive`
on a thread of its own, over the sync store (the given one, or an ``AsyncHub``'s
``.hub``). Only the adapter differs:

- one whose ``aexecute`` (preferred) or ``execute`` is a coroutine function runs as a
  task on the caller's loop, with an ``emit`` that is a coroutine function too (``await
  emit(event)``: the sync emit, on a worker thread);
- a synchronous one runs on the executor's worker thread, as in a sync run.

When the run ends first by its time-out or by ``cancel_run``, a coroutine adapter is
cancelled (a sync one is abandoned). When the task awaiting ``aexecute_run`` is
cancelled, the run is cancelled as by ``cancel_run`` (unless it finished first), the
adapter is stopped, and ``CancelledError`` is raised once the bookkeeping is done.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Final, TypeVar

from sharedesk.protocol.errors import RunStateError, ValidationError
from sharedesk.protocol.events import Event
from sharedesk.runs import execute
from sharedesk.runs.rules import RunOptions
from sharedesk.runs.types import RunResult

T = TypeVar("T")

#: Prefix of the threads that run an async run's bookkeeping.
THREAD_PREFIX: Final = "sharedesk-arun"


def sync_store(store: Any) -> Any:
    """Return the synchronous store of ``store``: itself, or an ``AsyncHub``'s ``.hub``.

    Raises:
        ValidationError: An async store that carries no synchronous one as ``.hub``.
    """
    if not inspect.iscoroutinefunction(getattr(store, "append", None)):
        return store
    underneath = getattr(store, "hub", None)
    append = getattr(underneath, "append", None)
    if callable(append) and not inspect.iscoroutinefunction(append):
        return underneath
    raise ValidationError(f"an async store must carry its sync store as .hub: {store!r}")


def coroutine_execute(adapter: Any) -> Callable[..., Coroutine[Any, Any, Any]] | None:
    """Return the adapter's coroutine ``aexecute`` (or ``execute``), else ``None``."""
    for name in ("aexecute", "execute"):
        method = getattr(adapter, name, None)
        if inspect.iscoroutinefunction(method):
            return method
    return None


async def aexecute_run(store: Any, adapter: Any, run_id: str, options: RunOptions) -> RunResult:
    """Execute a pending run with checked ``options`` (see the module docstring).

    Raises:
        CancelledError: The awaiting task was cancelled; the run was cancelled (or had
            finished) and its bookkeeping is done.
    """
    loop = asyncio.get_running_loop()
    store = sync_store(store)
    coroutine = coroutine_execute(adapter)
    lock = threading.Lock()
    scheduled: list[Future[Any]] = []
    stopped = threading.Event()

    def stop() -> None:  # any thread: the adapter's coroutine ends with the run
        with lock:
            stopped.set()
            for future in scheduled:
                future.cancel()

    def work() -> RunResult:
        execution, run, session = execute.prepare(store, adapter, run_id, options)

        def call() -> Any:
            if coroutine is None:
                return adapter.execute(run, session, execution.emit, options.opts)

            async def aemit(event: Event) -> Event:
                return await asyncio.to_thread(execution.emit, event)

            with lock:
                if stopped.is_set():
                    raise RunStateError(run_id, "cancelled", "execute")
                future = asyncio.run_coroutine_threadsafe(
                    coroutine(run, session, aemit, options.opts), loop
                )
                scheduled.append(future)
            return future.result()

        try:
            return execution.drive(call, adapter.name, options.timeout)
        finally:
            stop()

    job, thread = on_thread(work, f"{THREAD_PREFIX}-{run_id[:8]}")
    waiting = asyncio.wrap_future(job)
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        cancelling = asyncio.ensure_future(asyncio.to_thread(execute.try_cancel, store, run_id))
        await settle(cancelling)
        stop()  # after the cancel is recorded: the adapter's end is not a failure
        await settle(waiting)  # its outcome retrieved: CancelledError wins
        cancelling.result()
        raise
    finally:
        if job.done():
            await asyncio.to_thread(thread.join)


def on_thread(fn: Callable[[], T], name: str) -> tuple[Future[T], threading.Thread]:
    """Run ``fn`` on a daemon thread named ``name``; return the future of its result.

    The one bridge from a coroutine to a thread of its own (also ``AsyncHub``'s): the
    future is running from the start, so it cannot be recalled.
    """
    job: Future[T] = Future()
    job.set_running_or_notify_cancel()

    def run() -> None:
        try:
            job.set_result(fn())
        except BaseException as exc:
            job.set_exception(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return job, thread


async def settle(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, through any number of cancellations of ours.

    Its outcome is retrieved (never logged as unretrieved): the caller raises
    ``CancelledError`` instead.
    """
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            continue
    if not future.cancelled():
        future.exception()
