"""AsyncHub: the Hub for asyncio code, over the same actors and store, never blocking the loop.

Contract: every coroutine of :class:`AsyncHub` leaves the event loop free while it
waits. Store I/O, fsyncs and actor waits happen on other threads; their outcomes come
back into the loop through ``loop.call_soon_threadsafe`` (the aiosqlite pattern).
Nothing here awaits a pykka future (its ``__await__`` blocks in ``get()``).

Two paths lead off the loop:

- **Submitted writes** (``append``, ``post``, ``AsyncTurn.commit``) to a session whose
  actor is running, idle and knows its last sequence, over a store that takes
  submitted writes (``LmdbStore``, ``MemoryStore``): the actor's lock is taken without
  blocking (:meth:`Hub.try_submit`, :meth:`Hub.try_submit_commit`), the write is
  queued on the store's writer with a ticket, and no thread waits for it. The writer
  commits it in the same group (one transaction, one fsync) as every other waiting
  write, sync or async; after the commit it pushes the events to the session's
  subscribers, releases the actor, and hands the group's tickets to the loop's queue
  (:class:`_LoopSink`), hopping into the loop with ``call_soon_threadsafe`` at most
  once per group. So a thousand coroutines appending at once cost one fsync and one
  wake-up of the loop per group, not one thread per caller. The loop hands off and
  resolves these writes in chunks (at most :data:`ADMIT_CHUNK` hand-offs and
  :data:`RESOLVE_CHUNK` resolutions per iteration), so a burst of them never holds one
  iteration of the loop for long: timers and other tasks run between chunks.
- **Worker threads** for everything else (reads, views, turn plans, transcripts, the
  first write to a session, a busy session, a store that takes no submitted writes):
  the sync :class:`~sharedesk.actors.hub.Hub` call runs on one of the AsyncHub's own
  threads (``sharedesk-aio_N``), and its concurrent future is wrapped into the loop. A
  write that the Hub would run "inline" on its caller's thread thus runs inline on a
  worker, never on the loop.

Cancellation rule (``append``, ``post``, ``AsyncTurn.commit``): a write is either not
started or wholly settled by the time its task sees ``CancelledError``. Cancelled
before the write was handed off (waiting for its chunk, or still queued for a worker),
nothing is written.
Cancelled after (queued on the store's writer, or running on a worker), the write
cannot be recalled: the coroutine waits for its outcome (at most one group commit for
an append; a commit's actor round trip at most ``ask_timeout``), ignoring further
cancellation, and then raises ``CancelledError``; the write is then durable or was
refused as a whole. Either way, retrying with the same event ids is idempotent: the
store keeps the first event of each id and returns it to every later writer.

``wait_turn`` sleeps on a listener of the session's committed events
(:meth:`Hub.listen`): every append through this Hub (from any task or thread) wakes
it, and it plans the turn again; it never polls. On a store several processes share
and follow (PostgreSQL: ``AsyncHub.open("postgresql://...")``), appends made by the
other processes wake it too: their commit notices (``LISTEN``/``NOTIFY``) are pushed to
the listener like this Hub's own appends. Appends made by other processes on one LMDB
path are not pushed (LMDB tells no one): they are seen by the next turn planned after
an append through this Hub, or after ``timeout``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Final, TypeVar

from sharedesk.actors._messages import Push
from sharedesk.actors.hub import Hub, Turn
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.constants import SESSION_WINDOW
from sharedesk.protocol.errors import HubClosed, ValidationError
from sharedesk.protocol.events import Event, Text, new_event_id
from sharedesk.protocol.ports import WriteTicket
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.validation import check_author, check_event_sequence, check_session_id
from sharedesk.protocol.views import Conversation, Projection, SessionMessage

__all__ = ["AsyncHub", "AsyncTurn"]

_log = logger()

T = TypeVar("T")

#: Worker threads of one AsyncHub (reads, actor waits, writes that cannot be submitted).
WORKERS: Final = 8
#: Most submitted writes resolved in one callback of the loop (see ``_LoopSink``).
RESOLVE_CHUNK: Final = 32
#: Most writes handed off per window of the loop, about one iteration (see ``_LoopSink``):
#: twice what one drain resumes, so that in the steady state writes seldom wait.
ADMIT_CHUNK: Final = 2 * RESOLVE_CHUNK
#: Prefix of the worker threads' names (the Hub's ``sharedesk-`` prefix included).
WORKER_PREFIX: Final = "sharedesk-aio"


class _LoopSink:
    """One event loop's side of submitted writes: admission in chunks, resolution in chunks.

    **Resolution** (a ``CompletionSink``): settled tickets join one queue per loop; a
    delivery hops into the loop (``call_soon_threadsafe``) only when no drain is
    scheduled already, so a group costs one hop, and groups settling while the loop is
    busy cost none. A drain resolves at most :data:`RESOLVE_CHUNK` tickets and schedules
    itself again (``call_soon``) while tickets remain: each resolved future resumes its
    task in the next iteration of the loop, so resolving a thousand at once would make
    one iteration run a thousand tasks while timers and every other task wait. In
    chunks, an iteration runs one chunk's tasks, however many groups are waiting.

    **Admission** (:meth:`admit`): the same bound on the way in. A thousand tasks started
    at once each make their first append in the same iteration; handing all of them off
    there would make that iteration do a thousand appends' checks and submissions. At
    most :data:`ADMIT_CHUNK` writes are handed off per window (about one iteration: a
    window ends with a callback scheduled when it opens); later ones wait, in arrival
    order, for a later window. In the steady state, the tasks a drain resumes fit in
    one window and seldom wait.
    """

    __slots__ = ("_admitted", "_gated", "_loop", "_queue", "_scheduled", "_window")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: collections.deque[WriteTicket] = collections.deque()
        self._scheduled = False
        # Admission: writes handed off in the current window, whether a callback ends
        # it (always, while any write waits), and the writes waiting for a window.
        self._admitted = 0
        self._window = False
        self._gated: collections.deque[asyncio.Future[None]] = collections.deque()

    def admit(self) -> asyncio.Future[None] | None:
        """Admit one write now (``None``), or return the future to await first (loop thread).

        Cost: O(1); a future only when this window is full.
        """
        if self._admitted < ADMIT_CHUNK and not self._gated:
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
        while gated and admitted < ADMIT_CHUNK:
            waiting = gated.popleft()
            if not waiting.done():  # else cancelled while waiting: nothing was written
                waiting.set_result(None)
                admitted += 1
        self._admitted = admitted
        if admitted or gated:
            self._loop.call_soon(self._next_window)
        else:
            self._window = False

    def deliver(self, tickets: Sequence[WriteTicket]) -> None:
        """Queue ``tickets`` for the loop; hop into it unless a drain is due (never blocks)."""
        self._queue.extend(tickets)
        if self._scheduled:  # the drain will see them (it re-checks after clearing this)
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody awaits these any more
            self._queue.clear()
            _log.debug("aio.loop_closed", tickets=len(tickets))

    def _drain(self) -> None:
        queue = self._queue
        for _ in range(RESOLVE_CHUNK):
            try:
                ticket = queue.popleft()
            except IndexError:
                break
            ticket.resolve()
        if not queue:
            self._scheduled = False
            if not queue:  # nothing was queued meanwhile: deliver schedules the next
                return
            self._scheduled = True
        self._loop.call_soon(self._drain)


class _Ticket(asyncio.Future[list[Event]]):
    """One submitted write, awaited in a loop: the future its task awaits is the ticket.

    Settled on the writer thread (:meth:`settle` records the outcome), resolved in the
    loop (:meth:`resolve` completes the future). It refuses cancellation: the write
    cannot be recalled once handed off, so a cancelled task keeps waiting here, and
    asyncio raises ``CancelledError`` in it once the outcome is in (the module's
    cancellation rule, with no second future and no wrapper coroutine per write).
    """

    __slots__ = ("_failure", "_stored", "sink")

    def __init__(self, loop: asyncio.AbstractEventLoop, sink: _LoopSink) -> None:
        super().__init__(loop=loop)
        self.sink = sink
        self._stored: list[Event] | None = None
        self._failure: BaseException | None = None

    def cancel(self, msg: Any | None = None) -> bool:
        """Refuse: the write is in flight (the awaiting task is cancelled once it settles)."""
        return False

    def settle(self, result: list[Event] | None, error: BaseException | None) -> None:
        """Record the outcome (writer thread)."""
        self._stored = result
        self._failure = error

    def resolve(self) -> None:
        """Complete the future with the outcome (loop thread; once)."""
        if self.done():  # only cancel() completes it otherwise, and that is refused
            return
        if self._failure is not None:
            self.set_exception(self._failure)
        else:
            assert self._stored is not None
            self.set_result(self._stored)


async def _settle(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, through any number of cancellations."""
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            continue
    if not future.cancelled():
        future.exception()  # retrieved: the caller raises CancelledError instead


class _Watch:
    """A listener of one session's committed events that wakes one waiting task."""

    __slots__ = ("_event", "_loop", "_pending")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()
        self._pending = False

    def deliver(self, message: Push) -> None:
        """Wake the waiting task (any thread; one hop per wake-up, never blocks)."""
        if self._pending:
            return
        self._pending = True
        try:
            self._loop.call_soon_threadsafe(self._fire)
        except RuntimeError:  # the loop is closed
            self._pending = False

    def _fire(self) -> None:
        self._pending = False
        self._event.set()

    def wake(self) -> None:
        """Wake the waiting task (loop thread)."""
        self._event.set()

    def clear(self) -> None:
        """Forget earlier wake-ups (loop thread)."""
        self._event.clear()

    async def wait(self) -> None:
        """Wait for the next wake-up."""
        await self._event.wait()


class AsyncTurn:
    """An asyncio view of a :class:`~sharedesk.actors.hub.Turn`: commit it with ``await``.

    Nothing moves until :meth:`commit` returns (as for ``Turn``).
    """

    __slots__ = ("_hub", "turn")

    def __init__(self, hub: AsyncHub, turn: Turn) -> None:
        self._hub = hub
        #: The sync turn underneath (for code that mixes both).
        self.turn = turn

    @property
    def session_id(self) -> str:
        """The session (desk)."""
        return self.turn.session_id

    @property
    def viewer(self) -> SessionAuthor:
        """Whose turn it is."""
        return self.turn.viewer

    @property
    def conversation(self) -> Conversation:
        """The channel or thread of the turn."""
        return self.turn.conversation

    @property
    def messages(self) -> list[SessionMessage]:
        """What to read, oldest first (never rows written by the viewer)."""
        return self.turn.messages

    @property
    def reason(self) -> str | None:
        """``None`` for a delta, else ``"initial"`` or the ``ReinitializeReason`` value."""
        return self.turn.reason

    async def commit(self, reply: str | Event | None = None) -> Event | None:
        """Append the reply and advance the viewer's sharing state in one durable step.

        As :meth:`Turn.commit`, run on a worker thread.

        Args:
            reply: ``None``, a ``str`` posted by the viewer, or an ``Event`` by the viewer.

        Returns:
            The stored reply, or ``None``.

        Raises:
            SharingStateConflict: Another turn of the same viewer and conversation
                committed first; nothing was written.
            ValidationError: A malformed reply.
            CancelledError: The task was cancelled; the commit is wholly done or not at
                all (see the module's cancellation rule).
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: As for the Hub.

        Cost: as :meth:`Turn.commit` (one transaction, one fsync on LMDB, group-committed
        with every other waiting write); submitted without a thread when the session's
        actor is running and idle, else on a worker thread.
        """
        return await self._hub._commit(self.turn, reply)

    def __repr__(self) -> str:
        return (
            f"AsyncTurn(session_id={self.session_id!r}, reason={self.reason!r}, "
            f"messages={len(self.messages)})"
        )


class AsyncHub:
    """The Hub for asyncio: coroutines over the same actors and store as :attr:`hub`.

    Open it with ``hub = await AsyncHub.open(path)`` or ``async with AsyncHub.open(path)
    as hub:``. Every method is a coroutine that never blocks the event loop (see the
    module docstring). Safe to use from several event loops and alongside the sync
    :attr:`hub` from any thread.
    """

    def __init__(self, hub: Hub) -> None:
        """Serve ``hub`` to asyncio code; the AsyncHub now owns it (``close()`` closes it).

        Cost: creates the worker pool (threads start on first use); no I/O.
        """
        self._hub = hub
        self._path: str | None = getattr(hub.store, "path", None)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=WORKER_PREFIX)
        self._sinks: dict[asyncio.AbstractEventLoop, _LoopSink] = {}
        self._watches: set[_Watch] = set()
        self._closed = False

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, **options: Any) -> _Opening:
        """Open an AsyncHub over a new store: ``await`` it, or use it in ``async with``.

        Args:
            path: Where the LMDB store lives; a PostgreSQL DSN (``postgresql://...``,
                ``postgres://...``) for a store several processes share; ``None`` keeps
                everything in memory (as for :meth:`Hub.open`).
            **options: As for :meth:`Hub.open`.

        Returns:
            An awaitable that is also an async context manager (closing the hub on exit).

        Raises:
            ValidationError: A bad option (when awaited).
            StoreError: The store could not be opened (when awaited).

        Cost: none until awaited; then ``Hub.open`` on a thread of its own.
        """
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
        self, session_id: str, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        """Append ``events`` through the session's actor and return them as stored.

        Args:
            session_id: The session.
            events: Events with ``sequence`` and ``timestamp`` left ``None``.
            expected_version: Append only if the session's last sequence equals it.

        Returns:
            The events as stored, once durable.

        Raises:
            ValidationError: Malformed input; nothing was written.
            ConcurrencyError: ``expected_version`` differs from the last sequence.
            CancelledError: The task was cancelled; the write is wholly done or not
                at all (see the module's cancellation rule).
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: As for the Hub.

        Cost: one store append, group-committed with every other waiting write (LMDB:
        one shared fsync); submitted without a thread when the session's actor is
        running and idle (one loop wake-up per group), else on a worker thread. At
        most :data:`ADMIT_CHUNK` writes are handed off per iteration of the loop; a
        burst waits for its chunk.
        """
        check_session_id(session_id)
        batch = check_event_sequence(events)  # the store copies it before queueing
        self._live()
        loop = asyncio.get_running_loop()
        sink = self._sink(loop)
        waiting = sink.admit()
        if waiting is not None:
            await waiting  # cancelled here: nothing was handed off
            self._live()
        ticket = _Ticket(loop, sink)
        if self._hub.try_submit(session_id, batch, expected_version, ticket):
            # The store holds its own copies: drop the caller's while waiting, and await
            # here rather than in a helper coroutine, so that fewer objects per append
            # stay alive for the collector, with a thousand appends in flight.
            del events, batch
            return await ticket
        stored: list[Event] = await self._write(
            self._hub.append, session_id, batch, expected_version=expected_version
        )
        return stored

    async def post(
        self,
        session_id: str,
        author: SessionAuthor,
        content: str,
        *,
        parent: int | None = None,
        id: str | None = None,
    ) -> Event:
        """Post a ``Text`` message and return it as stored.

        Args:
            session_id: The session.
            author: Who writes it.
            content: The text, stored exactly as given.
            parent: The thread root it replies to, or ``None`` for a new root.
            id: Idempotency key (default: a fresh uuid4 hex).

        Raises:
            ValidationError: Malformed input; nothing was written.
            CancelledError: As for :meth:`append`.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: As for the Hub.

        Cost: as :meth:`append` of one event.
        """
        if not isinstance(content, str):
            raise ValidationError(f"content must be a str, got {type(content).__name__}")
        event = Event(
            check_author(author),
            Text(content),
            id=new_event_id() if id is None else id,
            parent=parent,
        )
        return (await self.append(session_id, [event]))[0]

    # -- reads -------------------------------------------------------------------------

    async def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Read stored events (as :meth:`Hub.read`), on a worker thread.

        Raises:
            ValidationError: A bad bound.
            HubClosed: The hub is closed.

        Cost: the store's read (O(result)) on a worker; one hop back into the loop.
        """
        events: list[Event] = await self._call(
            self._hub.read,
            session_id,
            after=after,
            before=before,
            limit=limit,
            newest_first=newest_first,
        )
        return events

    async def last_sequence(self, session_id: str) -> int:
        """Return the session's last sequence (0 for none), read on a worker thread.

        Raises:
            ValidationError: A malformed session id.
            HubClosed: The hub is closed.

        Cost: one key read on a worker; one hop back into the loop.
        """
        last: int = await self._call(self._hub.last_sequence, session_id)
        return last

    async def view(
        self,
        session_id: str,
        viewer: SessionAuthor,
        conversation: Conversation | None = None,
        *,
        window: int = SESSION_WINDOW,
    ) -> Projection:
        """Return ``viewer``'s view of a conversation (as :meth:`Hub.view`).

        Raises:
            ValidationError: A malformed argument.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: As for the Hub.

        Cost: as :meth:`Hub.view`, on a worker thread; one hop back into the loop.
        """
        view: Projection = await self._call(
            self._hub.view, session_id, viewer, conversation, window=window
        )
        return view

    async def turn(
        self, session_id: str, viewer: SessionAuthor, conversation: Conversation | None = None
    ) -> AsyncTurn:
        """Plan ``viewer``'s next turn (as :meth:`Hub.turn`): what it must read first.

        Returns:
            The :class:`AsyncTurn`; nothing moves until ``await turn.commit(...)``.

        Raises:
            ValidationError: A malformed argument.
            PageError, LogReadError: The store's log misbehaved.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: As for the Hub.

        Cost: as :meth:`Hub.turn` (one round trip to the sharing actor), on a worker
        thread; one hop back into the loop.
        """
        turn: Turn = await self._call(self._hub.turn, session_id, viewer, conversation)
        return AsyncTurn(self, turn)

    async def wait_turn(
        self,
        session_id: str,
        viewer: SessionAuthor,
        conversation: Conversation | None = None,
        *,
        timeout: float | None = None,
    ) -> AsyncTurn:
        """Return ``viewer``'s next turn as soon as it has at least one message.

        Plans the turn; while it is empty, sleeps until the next append to the session
        through this Hub (any task or thread), or, on a following store (PostgreSQL),
        by any process sharing the store, and plans again. Never polls.

        Args:
            session_id: The session (desk).
            viewer: Whose turn.
            conversation: A thread or the channel (``None``: the channel).
            timeout: Most seconds to wait (``None``: no limit).

        Returns:
            A turn with at least one message; commit it to move on.

        Raises:
            TimeoutError: No message for the viewer within ``timeout`` seconds.
            ValidationError: A malformed argument.
            HubClosed: The hub closed while waiting.
            SessionFailed, ActorTimeout, ActorCrashed: As for the Hub.

        Cost: one turn plan, plus one per append to the session while it waits.
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
        watch = _Watch(loop)
        remove = await self._listen(session_id, watch)
        self._watches.add(watch)
        try:
            while True:
                watch.clear()
                turn = await self.turn(session_id, viewer, conversation)
                if turn.messages:
                    return turn
                self._live()
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no turn for the viewer within {timeout} s")
                try:
                    async with asyncio.timeout(remaining):
                        await watch.wait()
                except TimeoutError:
                    raise TimeoutError(f"no turn for the viewer within {timeout} s") from None
        finally:
            self._watches.discard(watch)
            remove()

    async def turns(
        self, session_id: str, viewer: SessionAuthor, conversation: Conversation | None = None
    ) -> AsyncIterator[AsyncTurn]:
        """Yield ``viewer``'s turns, each as soon as it has a message (:meth:`wait_turn`).

        Commit each turn before asking for the next one (an uncommitted turn is
        offered again at once). The iteration ends when the hub closes.

        Raises:
            ValidationError: A malformed argument.
            SessionFailed, ActorTimeout, ActorCrashed: As for the Hub.

        Cost: as :meth:`wait_turn`, per turn.
        """
        while not self._closed:
            try:
                turn = await self.wait_turn(session_id, viewer, conversation)
            except HubClosed:
                return
            yield turn

    async def transcript(
        self,
        session_id: str,
        viewer: SessionAuthor,
        *,
        limit: int | None = None,
        max_messages: int | None = None,
        max_chars: int | None = None,
        max_tokens_approx: int | None = None,
    ) -> Transcript:
        """Return ``viewer``'s transcript of the session (as :meth:`Hub.transcript`).

        Raises:
            ValidationError: A malformed argument.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: As for the Hub.

        Cost: as :meth:`Hub.transcript`, on a worker thread; one hop back into the loop.
        """
        budget = {
            key: value
            for key, value in (
                ("limit", limit),
                ("max_messages", max_messages),
                ("max_chars", max_chars),
                ("max_tokens_approx", max_tokens_approx),
            )
            if value is not None
        }
        transcript: Transcript = await self._call(
            self._hub.transcript, session_id, viewer, **budget
        )
        return transcript

    # -- lifecycle ---------------------------------------------------------------------

    async def close(self) -> None:
        """Close the Hub underneath and stop the worker threads. Idempotent.

        Tasks waiting in :meth:`wait_turn` get ``HubClosed``; :meth:`turns` ends.

        Cost: ``Hub.close()`` (stops every actor and the store) on a thread of its own;
        the loop is free meanwhile.
        """
        if self._closed:
            return
        self._closed = True
        for watch in list(self._watches):
            watch.wake()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        failure: list[BaseException] = []

        def finish() -> None:
            if not done.done():
                done.set_result(None)

        def run() -> None:
            try:
                self._hub.close()
            except BaseException as exc:
                failure.append(exc)
            finally:
                self._pool.shutdown(wait=True)
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(finish)

        closer = threading.Thread(target=run, name=f"{WORKER_PREFIX}-close", daemon=True)
        closer.start()
        await _settle(done)
        closer.join()
        if failure:
            raise failure[0]

    async def __aenter__(self) -> AsyncHub:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- internals ---------------------------------------------------------------------

    async def _commit(self, turn: Turn, reply: str | Event | None) -> Event | None:
        self._live()
        loop = asyncio.get_running_loop()
        sink = self._sink(loop)
        waiting = sink.admit()
        if waiting is not None:
            await waiting  # cancelled here: nothing was handed off
            self._live()
        ticket = _Ticket(loop, sink)
        if self._hub.try_submit_commit(turn, reply, ticket):
            stored = await ticket
            return stored[0] if stored else None
        event: Event | None = await self._write(turn.commit, reply)
        return event

    def _live(self) -> None:
        if self._closed:
            raise HubClosed(self._path)

    async def _listen(self, session_id: str, watch: _Watch) -> Callable[[], None]:
        """Add ``watch`` as a listener; on a following Hub on a worker (it reads the store)."""
        if not self._hub.following:
            return self._hub.listen(session_id, watch)
        job = self._offload(self._hub.listen, session_id, watch)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            # Added or not, it must not outlive the task: remove it once it is added.
            def drop(done: Future[Callable[[], None]]) -> None:
                if not done.cancelled() and done.exception() is None:
                    done.result()()

            job.add_done_callback(drop)
            raise

    def _sink(self, loop: asyncio.AbstractEventLoop) -> _LoopSink:
        sink = self._sinks.get(loop)
        if sink is None:
            sink = self._sinks[loop] = _LoopSink(loop)
        return sink

    def _offload(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        self._live()
        try:
            return self._pool.submit(fn, *args, **kwargs)
        except RuntimeError:  # the pool shut down: the hub closed meanwhile
            raise HubClosed(self._path) from None

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a read (or an actor wait) on a worker; a cancelled one's answer is dropped."""
        return await asyncio.wrap_future(self._offload(fn, *args, **kwargs))

    async def _write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a write on a worker; cancelled once started, wait for it to settle first."""
        job = self._offload(fn, *args, **kwargs)
        future = asyncio.wrap_future(job)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not job.cancel():  # it runs already (or ran): it cannot be recalled
                await _settle(future)
            raise


class _Opening:
    """What :meth:`AsyncHub.open` returns: awaitable, and an async context manager."""

    __slots__ = ("_hub", "_options", "_path")

    def __init__(self, path: str | os.PathLike[str] | None, options: dict[str, Any]) -> None:
        self._path = path
        self._options = options
        self._hub: AsyncHub | None = None

    async def _open(self) -> AsyncHub:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[Hub] = loop.create_future()

        def deliver(hub: Hub | None, error: BaseException | None) -> None:
            if opened.done():  # cancelled meanwhile: close what was opened
                if hub is not None:
                    threading.Thread(
                        target=hub.close, name=f"{WORKER_PREFIX}-close", daemon=True
                    ).start()
                return
            if error is not None:
                opened.set_exception(error)
            else:
                assert hub is not None
                opened.set_result(hub)

        def run() -> None:
            try:
                hub = Hub.open(self._path, **self._options)
            except BaseException as exc:
                outcome: tuple[Hub | None, BaseException | None] = (None, exc)
            else:
                outcome = (hub, None)
            try:
                loop.call_soon_threadsafe(deliver, *outcome)
            except RuntimeError:  # the loop closed meanwhile
                if outcome[0] is not None:
                    outcome[0].close()

        opener = threading.Thread(target=run, name=f"{WORKER_PREFIX}-open", daemon=True)
        opener.start()
        hub = await opened  # cancelled: the opener closes what it opens
        opener.join()  # it has delivered: only its return is left
        return AsyncHub(hub)

    def __await__(self) -> Generator[Any, None, AsyncHub]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncHub:
        self._hub = await self._open()
        return self._hub

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._hub is not None:
            await self._hub.close()
