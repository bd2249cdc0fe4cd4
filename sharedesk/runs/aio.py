"""Async runs: ``SessionManager.aexecute_run`` and ``arun_once``, never blocking the loop.

Contract: the arguments, events written, results and errors are those of
:meth:`SessionManager.execute_run` and :meth:`SessionManager.run_once` (time-outs,
``cancel_run``, continuation, validation); only the waiting differs.

How. The sync manager does the run's bookkeeping (fold, checks, ``RunStarted``, the
time-out and cancel watch, ``RunFinished``) on a worker thread of its own, exactly as a
sync run does, so there is one implementation of a run's rules. Its store is the given
store when that is a sync :class:`~sharedesk.EventStore`; when it is an
:class:`~sharedesk.protocol.ports.AsyncEventStore` (an ``AsyncHub``), a bridge turns
each store call of that thread into a coroutine run on the caller's loop
(``asyncio.run_coroutine_threadsafe``) and waits for it there, off the loop. The
adapter:

- whose ``execute`` (or ``aexecute``, preferred when present) is a coroutine function
  runs as a task on the caller's loop, with an ``emit`` that is a coroutine function
  too (``await emit(event)``: the sync emit, on a worker thread);
- whose ``execute`` is synchronous runs on the manager's worker thread, as in a sync run.

When the run ends first by its time-out or by ``cancel_run``, a coroutine adapter is
cancelled (a sync one is abandoned, as in a sync run). When the task awaiting
``aexecute_run`` is cancelled, the run is cancelled as by ``cancel_run`` (its
``RunFinished(status="cancelled")`` is written, unless the run finished first), the
adapter is stopped, and ``CancelledError`` is raised once the run's bookkeeping is done.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Final, Self, TypeVar, cast

from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import Operator, SessionAuthor
from sharedesk.protocol.constants import PAGE_SIZE
from sharedesk.protocol.errors import RunStateError, SharedeskError
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.ports import EventStore, SessionLog
from sharedesk.protocol.views import LogMessage, SessionPage, to_log_message
from sharedesk.runs.types import AdapterResult, Emit, Run, RunResult, Session

T = TypeVar("T")

_log = logger()

#: Prefix of the threads that run an async run's bookkeeping.
THREAD_PREFIX: Final = "sharedesk-arun"


def is_async_store(store: Any) -> bool:
    """Return whether ``store``'s ``append`` is a coroutine function (an ``AsyncEventStore``).

    Cost: O(1).
    """
    return inspect.iscoroutinefunction(getattr(store, "append", None))


def _sync_store(store: Any, loop: asyncio.AbstractEventLoop) -> EventStore:
    """Return the synchronous store a run's worker thread uses for ``store``.

    An async store that carries its synchronous self as ``.hub`` (an ``AsyncHub``) is
    used through it, so the run gets everything the sync path has (its own events from
    the run index, the folded session state, the ``unless_stored`` guard that keeps a
    busy desk from failing it); any other async store is bridged onto ``loop``.

    Cost: O(1).
    """
    if not is_async_store(store):
        return cast(EventStore, store)
    underneath = getattr(store, "hub", None)
    if callable(getattr(underneath, "append", None)) and not is_async_store(underneath):
        return cast(EventStore, underneath)
    return _Bridge(store, loop)


def _coroutine_execute(adapter: Any) -> Callable[..., Coroutine[Any, Any, Any]] | None:
    for name in ("aexecute", "execute"):
        method = getattr(adapter, name, None)
        if inspect.iscoroutinefunction(method):
            return method
    return None


class _Bridge:
    """A sync ``EventStore`` over an async one, for threads other than the loop's own.

    Each call runs the coroutine on ``loop`` and waits for its result on the calling
    thread. Never call it on the loop's thread (it would wait for itself).
    """

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def append(
        self, session_id: str, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        """Append through the async store (see ``EventStore.append``)."""
        stored: list[Event] = self._run(
            self._store.append(session_id, events, expected_version=expected_version)
        )
        return stored

    def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Read through the async store (see ``EventStore.read``)."""
        events: list[Event] = self._run(
            self._store.read(
                session_id, after=after, before=before, limit=limit, newest_first=newest_first
            )
        )
        return events

    def last_sequence(self, session_id: str) -> int:
        """Return the last sequence through the async store."""
        last: int = self._run(self._store.last_sequence(session_id))
        return last

    def log(self, session_id: str) -> SessionLog:
        """Return the session's ``Text`` rows, read through the async store's ``read``."""
        return _BridgedLog(self, session_id)

    def close(self) -> None:
        """Do nothing: the caller owns the async store."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class _BridgedLog:
    """A ``SessionLog`` over a bridged store: ``Text`` rows, newest first, from ``read``."""

    def __init__(self, store: _Bridge, session_id: str) -> None:
        self._store = store
        self._session_id = session_id

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        """Return at most ``limit`` ``Text`` rows below ``before``, newest first."""
        rows: list[LogMessage] = []
        cursor = before
        while len(rows) <= limit:
            page = self._store.read(
                self._session_id, before=cursor, limit=PAGE_SIZE, newest_first=True
            )
            for event in page:
                if isinstance(event.body, Text):
                    rows.append(to_log_message(self._session_id, event))
            if len(page) < PAGE_SIZE:
                break
            cursor = page[-1].sequence
        more = len(rows) > limit
        rows = rows[:limit]
        return SessionPage(messages=rows, next_before=rows[-1].sequence if more and rows else None)


#: The default author of a run's input rows (as in ``SessionManager.run_once``).
_OPERATOR: Final = Operator()


class _Driven:
    """A sync adapter that runs a coroutine adapter's ``execute`` on the caller's loop."""

    #: Copied from the adapter when it has them (annotations only: no class default).
    name: str
    native_continuation: bool

    def __init__(
        self,
        adapter: Any,
        execute: Callable[..., Coroutine[Any, Any, Any]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._adapter = adapter
        self._execute = execute
        self._loop = loop
        self._lock = threading.Lock()
        self._future: Future[Any] | None = None
        self._stopped = False
        # Only what the adapter has: the manager's adapter check then refuses one that
        # lacks a required attribute the same way for sync and coroutine adapters.
        for attribute in ("name", "native_continuation", "model", "author"):
            if hasattr(adapter, attribute):
                setattr(self, attribute, getattr(adapter, attribute))

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult | None:
        """Run the coroutine adapter on the loop and wait for it (manager's worker thread)."""
        loop = self._loop

        async def aemit(event: Event) -> Event:
            return await asyncio.to_thread(emit, event)

        with self._lock:
            if self._stopped:
                raise RunStateError(run.id, "cancelled", "execute")
            future = asyncio.run_coroutine_threadsafe(
                self._execute(run, session, aemit, opts), loop
            )
            self._future = future
        result: AdapterResult | None = future.result()
        return result

    def stop(self) -> None:
        """Cancel the adapter's coroutine if it still runs (any thread)."""
        with self._lock:
            self._stopped = True
            future = self._future
        if future is not None and not future.done():
            future.cancel()


async def aexecute_run(
    store: Any,
    adapter: Any,
    run_id: str,
    *,
    continuation: str | bool = False,
    continuation_opts: Mapping[str, Any] | None = None,
    adapter_opts: Mapping[str, Any] | None = None,
) -> RunResult:
    """Execute a pending run without blocking the loop (see the module docstring).

    Args and errors: as :meth:`SessionManager.execute_run`; ``store`` may be an
    ``AsyncEventStore`` (an ``AsyncHub``) or a sync ``EventStore``.

    Raises:
        CancelledError: The awaiting task was cancelled; the run was cancelled (or had
            finished) and its bookkeeping is done.

    Cost: as :meth:`SessionManager.execute_run`, on a thread of its own; each store call
    of that thread is one coroutine on the loop when ``store`` is async.
    """
    from sharedesk.runs.manager import SessionManager

    loop = asyncio.get_running_loop()
    sync_store = _sync_store(store, loop)
    coroutine = _coroutine_execute(adapter)
    driven = _Driven(adapter, coroutine, loop) if coroutine is not None else None

    def work() -> RunResult:
        try:
            return SessionManager.execute_run(
                sync_store,
                driven if driven is not None else adapter,
                run_id,
                continuation=continuation,
                continuation_opts=continuation_opts,
                adapter_opts=adapter_opts,
            )
        finally:
            if driven is not None:
                driven.stop()

    job: Future[RunResult] = Future()

    def thread_body() -> None:
        if not job.set_running_or_notify_cancel():
            return  # pragma: no cover - nobody cancels it before it starts
        try:
            job.set_result(work())
        except BaseException as exc:
            job.set_exception(exc)

    thread = threading.Thread(target=thread_body, name=f"{THREAD_PREFIX}-{run_id[:8]}", daemon=True)
    thread.start()
    waiting = asyncio.wrap_future(job)
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        await _cancel_run(sync_store, run_id, driven)
        while not waiting.done():
            try:
                await asyncio.wait((waiting,))
            except asyncio.CancelledError:
                continue
        if not waiting.cancelled():
            waiting.exception()  # retrieved: CancelledError wins
        raise
    finally:
        if job.done():
            await asyncio.to_thread(thread.join)


async def _cancel_run(store: EventStore, run_id: str, driven: _Driven | None) -> None:
    from sharedesk.runs.manager import SessionManager

    def cancel() -> None:
        try:
            SessionManager.cancel_run(store, run_id)
        except SharedeskError as exc:  # finished first, or never started
            _log.debug("run.cancel_refused", run_id=run_id, error=str(exc))

    task = asyncio.ensure_future(asyncio.to_thread(cancel))
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            continue
    if driven is not None:  # after the cancel is recorded: the adapter's end is not a failure
        driven.stop()
    task.result()


async def arun_once(
    store: Any,
    adapter: Any,
    input: Any,
    *,
    session_id: str | None = None,
    continuation: str | bool = False,
    continuation_opts: Mapping[str, Any] | None = None,
    adapter_opts: Mapping[str, Any] | None = None,
    author: SessionAuthor = _OPERATOR,
) -> RunResult:
    """Start a session (or continue ``session_id``), start a run, execute it; never blocks.

    Args and errors: as :meth:`SessionManager.run_once` and :func:`aexecute_run`; an
    adapter that is not one is refused before anything is written.

    Cost: as :meth:`SessionManager.run_once`; the start steps run on a worker thread.
    """
    from sharedesk.runs.manager import check_adapter, start_once

    check_adapter(adapter)  # on the loop's thread: refused before any thread starts
    loop = asyncio.get_running_loop()
    sync_store = _sync_store(store, loop)
    run_id = await asyncio.to_thread(start_once, sync_store, adapter, session_id, input, author)
    return await aexecute_run(
        store,
        adapter,
        run_id,
        continuation=continuation,
        continuation_opts=continuation_opts,
        adapter_opts=adapter_opts,
    )
