"""AsyncHub: the Hub for asyncio code, over the same actors and store, never blocking the loop.

Writes (``append``, ``post``, ``AsyncTurn.commit``) take the Hub's one write path: the
loop hands the checked write to the store's writer with a loop future as its completion,
which the writer finishes through one bridge per loop (:class:`_Bridge`: at most one
pending ``call_soon_threadsafe`` hop); at most :data:`CHUNK` writes are handed off, and
:data:`CHUNK` outcomes resolved, per iteration. Reads run on the reader threads
(``sharedesk-aio_N``), so a read never waits behind writes.

Cancellation (writes): cancelled before the write was handed off (waiting for its
chunk), nothing is written; cancelled after, the coroutine waits for the write's
outcome, ignoring further cancellation, then raises ``CancelledError``. Retrying with
the same event ids is idempotent either way.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Concatenate, Final, ParamSpec, TypeVar, Unpack

from sharedesk.actors._handles import AppendOptions, PostOptions, TurnFields, post_event
from sharedesk.actors._messages import Push
from sharedesk.actors.hub import Hub, Turn
from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.errors import HubClosed, ValidationError
from sharedesk.protocol.events import Event
from sharedesk.protocol.validation import check_session_id, check_write
from sharedesk.protocol.views import Conversation
from sharedesk.runs.aio import on_thread, settle

__all__ = ["AsyncHub", "AsyncTurn"]

T = TypeVar("T")
A = TypeVar("A")
P = ParamSpec("P")

#: Reader threads of one AsyncHub (reads, views, turn plans, transcripts).
WORKERS: Final = 8
#: Most completions resolved, and most writes handed off, per iteration of the loop.
CHUNK: Final = 64
#: Prefix of the worker threads' names (the Hub's ``sharedesk-`` prefix included).
WORKER_PREFIX: Final = "sharedesk-aio"


class _Bridge:
    """One event loop's side of the threads: hand-offs and completions, in chunks.

    A finished job or write queues its :class:`_Answer` (a listener's wake-up, its
    :class:`_Watch`); the first one queued hops in, and a drain resolves at most
    :data:`CHUNK`, rescheduling itself until a pass finds none. :meth:`admit` hands off
    at most :data:`CHUNK` writes per window (about one iteration); later ones wait, in
    order, for a later window.
    """

    __slots__ = ("_admitted", "_gated", "_loop", "_queue", "_scheduled", "_window")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: collections.deque[_Answer[Any] | _Watch] = collections.deque()
        self._scheduled = False
        self._admitted = 0
        self._window = False
        self._gated: collections.deque[asyncio.Future[None]] = collections.deque()

    def admit(self) -> asyncio.Future[None] | None:
        """Admit one write now (``None``), or return the future to await first (loop thread)."""
        if self._admitted < CHUNK and not self._gated:
            self._admitted += 1
            if not self._window:
                self._window = True
                self._loop.call_soon(self._next_window)
            return None
        waiting: asyncio.Future[None] = self._loop.create_future()
        self._gated.append(waiting)  # a window is open: its end admits the next ones
        return waiting

    def _next_window(self) -> None:
        gated = self._gated
        admitted = 0
        while gated and admitted < CHUNK:
            waiting = gated.popleft()
            if not waiting.done():  # else cancelled while waiting: nothing was written
                waiting.set_result(None)
                admitted += 1
        self._admitted = admitted
        if admitted or gated:
            self._loop.call_soon(self._next_window)
        else:
            self._window = False

    def watch(self, job: Future[T]) -> _Answer[T]:
        """Return a new answer, completed in the loop as ``job`` is."""
        done: _Answer[T] = _Answer(self)
        job.add_done_callback(done)  # done already: called at once, resolved by a drain
        return done

    def completed(self, done: _Answer[Any] | _Watch) -> None:
        """Queue ``done`` to be resolved; hop into the loop unless a drain is due (any thread)."""
        self._queue.append(done)
        if self._scheduled:  # the drain will see it (it re-checks after clearing this)
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody awaits these any more
            self._queue.clear()

    def _drain(self) -> None:
        queue = self._queue
        resolved = 0
        while queue and resolved < CHUNK:
            queue.popleft().resolve()
            resolved += 1
        if not resolved:  # one idle pass first: the rest of a group lands meanwhile
            self._scheduled = False
            if not queue:  # nothing was queued meanwhile: completed() schedules the next
                return
            self._scheduled = True
        self._loop.call_soon(self._drain)


class _Answer(asyncio.Future[T]):
    """The loop future of a thread's job; it is the job's done callback (no closure)."""

    __slots__ = ("_bridge", "_outcome")

    def __init__(self, bridge: _Bridge) -> None:
        super().__init__(loop=bridge._loop)
        self._bridge = bridge
        self._outcome: T | BaseException | None = None

    def __call__(self, job: Future[T]) -> None:
        """Take the finished ``job``'s outcome and queue this answer (any thread)."""
        try:
            outcome: T | BaseException = job.result(0)
        except BaseException as error:  # the job's error, or CancelledError
            outcome = error
        self.finish(outcome)

    def finish(self, outcome: T | BaseException) -> None:
        """Take ``outcome`` and queue this answer, to be resolved in the loop (any thread)."""
        self._outcome = outcome
        self._bridge.completed(self)

    def resolve(self) -> None:
        """Complete this future with the outcome taken (loop thread)."""
        if self.done():  # cancelled: its task no longer waits
            return
        outcome = self._outcome
        if isinstance(outcome, concurrent.futures.CancelledError):
            asyncio.Future.cancel(self)
        elif isinstance(outcome, BaseException):
            self.set_exception(outcome)
        else:
            self.set_result(outcome)  # type: ignore[arg-type]


class _Settling(_Answer[list[Event]]):
    """The answer of a write handed off, its ``Completion``: it refuses ``cancel()``."""

    __slots__ = ()

    def cancel(self, msg: Any | None = None) -> bool:
        return False

    def start(self) -> bool:
        return True  # handed off: it runs (see the module)


class _Watch:
    """A listener of one session's committed events that wakes one waiting task."""

    __slots__ = ("_bridge", "_pending", "event")

    def __init__(self, bridge: _Bridge) -> None:
        self._bridge = bridge
        self.event = asyncio.Event()  #: set on a wake-up (loop thread)
        self._pending = False

    def deliver(self, message: Push) -> None:
        """Wake the waiting task through the bridge (any thread; never blocks)."""
        if not self._pending:
            self._pending = True
            self._bridge.completed(self)

    def resolve(self) -> None:
        """Set :attr:`event` (loop thread)."""
        self._pending = False
        self.event.set()


def _on_reader(
    method: Callable[Concatenate[Hub, P], T],
) -> Callable[Concatenate[AsyncHub, P], Coroutine[Any, Any, T]]:
    """Return ``method`` of the Hub as a coroutine of the AsyncHub, run on a reader thread."""
    name = method.__name__

    @functools.wraps(method)  # the signature shown is the Hub's
    async def read(self: AsyncHub, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._call(getattr(self._hub, name), *args, **kwargs)

    read.__qualname__ = f"AsyncHub.{name}"
    read.__doc__ = f"As :meth:`Hub.{name}`, on a reader thread."
    return read


class AsyncTurn(TurnFields):
    """An asyncio view of a :class:`~sharedesk.actors.hub.Turn`: ``await`` its commit."""

    __slots__ = ("_hub", "turn")

    def __init__(self, hub: AsyncHub, turn: Turn) -> None:
        super().__init__(turn.session_id, turn.viewer, turn.plan)
        self._hub = hub
        #: The sync turn underneath (for code that mixes both).
        self.turn = turn

    async def commit(self, reply: str | Event | None = None) -> Event | None:
        """As :meth:`Turn.commit`, through the store's writer; cancelled: see the module."""
        hub = self._hub
        turn = self.turn
        stored = await hub._write(functools.partial(hub.hub.submit_commit, turn), reply)
        return hub.hub.committed(turn, stored)


class AsyncHub:
    """The Hub for asyncio: coroutines over the same actors and store as :attr:`hub`.

    Open it with ``hub = await AsyncHub.open(path)`` or ``async with AsyncHub.open(path)
    as hub:``. Each coroutine means what the :class:`Hub` method of its name means. Safe
    to use from several event loops and alongside the sync :attr:`hub` from any thread.
    """

    def __init__(self, hub: Hub) -> None:
        """Serve ``hub`` to asyncio code; the AsyncHub now owns it (``close()`` closes it)."""
        self._hub = hub
        self._path: str | None = getattr(hub.store, "path", None)
        self._readers = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=WORKER_PREFIX)
        self._bridges: dict[asyncio.AbstractEventLoop, _Bridge] = {}
        self._watches: set[_Watch] = set()
        self._closed = False

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, **options: Any) -> _Opening:
        """Open an AsyncHub (as :meth:`Hub.open`); ``await`` it, or use ``async with``."""
        return _Opening(path, options)

    @property
    def hub(self) -> Hub:
        """The sync Hub underneath: the same actors and store."""
        return self._hub

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    # -- writes ------------------------------------------------------------------------

    async def append(
        self, session_id: str, events: Sequence[Event], **options: Unpack[AppendOptions]
    ) -> list[Event]:
        """As :meth:`Hub.append`, through the store's writer; cancelled: see the module."""
        write = check_write(session_id, events, **options)
        return await self._write(self._hub.submit, write)

    async def post(
        self, session_id: str, author: SessionAuthor, content: str, **options: Unpack[PostOptions]
    ) -> Event:
        """As :meth:`SessionHandle.post` of ``session_id``; cancelled, as :meth:`append`."""
        return (await self.append(session_id, [post_event(author, content, **options)]))[0]

    # -- reads -------------------------------------------------------------------------

    compact = _on_reader(Hub.compact)
    read = _on_reader(Hub.read)
    last_sequence = _on_reader(Hub.last_sequence)
    view = _on_reader(Hub.view)
    transcript = _on_reader(Hub.transcript)

    async def turn(
        self,
        session_id: str,
        viewer: SessionAuthor,
        conversation: Conversation | None = None,
        *,
        start_after: int | None = None,
    ) -> AsyncTurn:
        """As :meth:`Hub.turn`, on a reader thread; commit with ``await turn.commit(...)``."""
        turn: Turn = await self._call(
            self._hub.turn, session_id, viewer, conversation, start_after=start_after
        )
        return AsyncTurn(self, turn)

    async def wait_turn(
        self,
        session_id: str,
        viewer: SessionAuthor,
        conversation: Conversation | None = None,
        *,
        timeout: float | None = None,
        start_after: int | None = None,
    ) -> AsyncTurn:
        """Return ``viewer``'s next turn as soon as it has at least one message.

        Plans the turn (``start_after`` as for :meth:`Hub.turn`); while it is empty,
        sleeps until the next commit to the session (this Hub's, or on a following store
        any process's) and plans again. Raises
        ``TimeoutError`` (no message within ``timeout`` seconds), ``ValidationError``,
        ``HubClosed`` (closed while waiting).
        """
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not timeout >= 0  # NaN too
        ):
            raise ValidationError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        check_session_id(session_id)
        self._live()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        watch = _Watch(self._bridge())
        remove = await self._listen(session_id, watch)
        self._watches.add(watch)
        try:
            while True:
                watch.event.clear()
                turn = await self.turn(session_id, viewer, conversation, start_after=start_after)
                if turn.messages:
                    return turn
                self._live()
                try:
                    async with asyncio.timeout_at(deadline):
                        await watch.event.wait()
                except TimeoutError:
                    raise TimeoutError(f"no turn for the viewer within {timeout} s") from None
        finally:
            self._watches.discard(watch)
            remove()

    async def turns(
        self, session_id: str, viewer: SessionAuthor, conversation: Conversation | None = None
    ) -> AsyncIterator[AsyncTurn]:
        """Yield ``viewer``'s turns as :meth:`wait_turn` returns them, until the hub closes.

        Commit each before asking for the next (an uncommitted one is offered again).
        """
        while not self._closed:
            try:
                turn = await self.wait_turn(session_id, viewer, conversation)
            except HubClosed:
                return
            yield turn

    # -- lifecycle ---------------------------------------------------------------------

    async def close(self) -> None:
        """Close the Hub (on a thread of its own), then the readers. Idempotent.

        Waiters in :meth:`wait_turn` get ``HubClosed``; :meth:`turns` ends.
        """
        if self._closed:
            return
        self._closed = True
        for watch in list(self._watches):
            watch.event.set()

        def shut() -> None:
            try:
                self._hub.close()
            finally:
                self._readers.shutdown(wait=True)

        job, closer = on_thread(shut, f"{WORKER_PREFIX}-close")
        done = self._bridge().watch(job)
        await settle(done)
        closer.join()
        job.result()

    async def __aenter__(self) -> AsyncHub:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- internals ---------------------------------------------------------------------

    def _live(self) -> None:
        if self._closed:
            raise HubClosed(self._path)

    async def _listen(self, session_id: str, watch: _Watch) -> Callable[[], None]:
        """Add ``watch`` as a listener (on a following Hub on a reader: it reads the store)."""
        if not self._hub.following:
            return self._hub.listen(session_id, watch)
        job = self._offload(self._hub.listen, session_id, watch)
        try:
            return await self._bridge().watch(job)
        except asyncio.CancelledError:
            # Added or not, it must not outlive the task: remove it once it is added.
            def drop(done: Future[Callable[[], None]]) -> None:
                if not done.cancelled() and done.exception() is None:
                    done.result()()

            job.add_done_callback(drop)
            raise

    def _bridge(self) -> _Bridge:
        loop = asyncio.get_running_loop()
        bridge = self._bridges.get(loop)
        if bridge is None:
            bridge = self._bridges[loop] = _Bridge(loop)
        return bridge

    def _offload(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        self._live()
        try:
            return self._readers.submit(fn, *args, **kwargs)
        except RuntimeError:  # the pool shut down: the hub closed meanwhile
            raise HubClosed(self._path) from None

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a read on a reader thread; a cancelled one's answer is dropped."""
        return await self._bridge().watch(self._offload(fn, *args, **kwargs))

    def _write(self, submit: Callable[[A, _Settling], _Settling], arg: A) -> Awaitable[list[Event]]:
        """Hand ``submit(arg, done)`` off in its chunk; return ``done``, its outcome's awaitable."""
        self._live()
        bridge = self._bridge()
        done, waiting = _Settling(bridge), bridge.admit()
        if waiting is None:
            return submit(arg, done)
        return self._write_later(waiting, functools.partial(submit, arg, done))

    async def _write_later(
        self, waiting: asyncio.Future[None], submit: Callable[[], _Settling]
    ) -> list[Event]:
        await waiting  # cancelled here: nothing was handed off
        self._live()
        return await submit()

    # -- retention ---------------------------------------------------------------------

    apply_retention = _on_reader(Hub.apply_retention)
    archived_through = _on_reader(Hub.archived_through)


class _Opening:
    """What :meth:`AsyncHub.open` returns: awaitable, and an async context manager."""

    __slots__ = ("_hub", "_options", "_path")

    def __init__(self, path: str | os.PathLike[str] | None, options: dict[str, Any]) -> None:
        self._path = path
        self._options = options
        self._hub: AsyncHub | None = None

    async def _open(self) -> AsyncHub:
        job, opener = on_thread(
            lambda: Hub.open(self._path, **self._options), f"{WORKER_PREFIX}-open"
        )

        def close_unwanted(opened: Future[Hub]) -> None:
            if opened.exception() is None:
                on_thread(opened.result().close, f"{WORKER_PREFIX}-close")

        try:
            hub = await asyncio.wrap_future(job)
        except asyncio.CancelledError:  # the opener closes what it opens
            job.add_done_callback(close_unwanted)
            raise
        opener.join()  # it has delivered: only its return is left
        return AsyncHub(hub)

    def __await__(self) -> Generator[Any, None, AsyncHub]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncHub:
        self._hub = await self._open()
        return self._hub

    async def __aexit__(self, *exc_info: object) -> None:
        if self._hub is not None:
            await self._hub.close()
