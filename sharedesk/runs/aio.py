"""The async executor behind ``SessionManager.aexecute_run`` and ``arun_once`` (their contract).

The bookkeeping is the sync executor's (:meth:`~sharedesk.runs.execute.Execution.drive`,
on a thread of its own, over the sync store). A coroutine adapter runs as a task on the
caller's loop, a sync one on the worker thread; a run ended by its time-out or
``cancel_run`` cancels a coroutine adapter.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Final

from sharedesk.protocol.errors import RunStateError, ValidationError
from sharedesk.protocol.events import Event
from sharedesk.runs import execute
from sharedesk.runs.execute import on_thread as on_thread  # the async front ends use it too
from sharedesk.runs.rules import RunOptions
from sharedesk.runs.types import RunResult

#: Prefix of the threads that run an async run's bookkeeping.
THREAD_PREFIX: Final = "sharedesk-arun"


def sync_store(store: Any) -> Any:
    """Return ``store`` itself, or an ``AsyncHub``'s ``.hub`` (else ``ValidationError``)."""
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
    """Execute a pending run with checked ``options`` (see the module docstring)."""
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


async def settle(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, through any cancellations; retrieve its outcome."""
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            continue
    if not future.cancelled():
        future.exception()
