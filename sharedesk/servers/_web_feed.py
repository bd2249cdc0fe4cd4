"""The live feeds of the web server: a desk's stored rows after a sequence, then new ones.

Exactly once, in order: a feed keeps ``sent``, the sequence of the last row it sent, and
sends only the row ``sent + 1`` next. Rows pushed by the Hub that continue ``sent`` are
sent from memory; anything else (a gap, an empty push from a following store, an inbox
that overflowed, the start) is read from the store after ``sent``, a page at a time.
A feed joins its desk's broadcast, which listens, before its first read, so a row
committed while the feed starts is either read or pushed, and never lost; one both read
and pushed is skipped the second time because its sequence is at or below ``sent``.

One broadcast per desk with open feeds (:class:`Feeds`): one :meth:`Hub.listen`, at
most one hand-over to the event loop per ``FLUSH_INTERVAL``, and each hand-over's rows
encoded and joined once, into batches every page sends whole (or from the row it needs
on): a page costs O(1) per hand-over, not a step per row. A page that opens at or above
what the broadcast pushes already reads nothing from the store.
Everything here but :meth:`_Broadcast.deliver` runs on the event loop's thread.

Other processes: a following Hub (LMDB, PostgreSQL) pushes their commits as its own, so
nothing here polls the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Final

from starlette.concurrency import run_in_threadpool

from sharedesk.actors import Hub
from sharedesk.actors._messages import Push
from sharedesk.protocol.constants import PAGE_SIZE
from sharedesk.protocol.events import Event

__all__ = ["FLUSH_INTERVAL", "INBOX_LIMIT", "KEEPALIVE", "PAGE_WAKEUPS", "Feeds"]


#: Most pushed rows a feed holds for a slow client before it drops them and re-reads.
INBOX_LIMIT: Final = 4096
#: What a feed sends after ``keepalive`` seconds without a row (an SSE comment).
KEEPALIVE: Final = b": alive\n\n"

#: Shortest time between two hand-overs of one desk's pushes to its feeds (seconds).
FLUSH_INTERVAL: Final = 0.02
#: Most page wake-ups a second one desk's hand-overs cost the loop: with more pages
#: than ``FLUSH_INTERVAL`` allows for, hand-overs come less often (and carry more rows).
PAGE_WAKEUPS: Final = 4000

#: Turns a stored event into its bytes on the stream (one SSE event).
Encode = Callable[[Event], bytes]


class _Batch:
    """Consecutive rows ``first`` to ``last``, encoded once and joined for every feed."""

    __slots__ = ("data", "first", "last", "starts")

    def __init__(self, rows: list[tuple[int, bytes]]) -> None:
        self.first, self.last = rows[0][0], rows[-1][0]
        self.data = b"".join(data for _, data in rows)
        self.starts = list(itertools.accumulate((len(data) for _, data in rows[:-1]), initial=0))

    def after(self, sent: int) -> bytes:
        """Return the bytes of the rows above ``sent`` (``first - 1 <= sent < last``)."""
        return self.data if sent < self.first else self.data[self.starts[sent + 1 - self.first] :]


def _batches(rows: list[tuple[int, bytes]]) -> list[_Batch]:
    """Split ``rows`` (in sequence order) into batches of consecutive sequences."""
    cuts = [i for i in range(1, len(rows)) if rows[i][0] != rows[i - 1][0] + 1]
    return [_Batch(rows[a:b]) for a, b in itertools.pairwise([0, *cuts, len(rows)]) if a < b]


class _Inbox:
    """The batches pushed to one feed, waiting for it."""

    def __init__(self) -> None:
        self.batches: deque[_Batch] = deque()
        self.rows = 0  # how many the batches hold
        self.reread = False
        self.ready = asyncio.Event()

    def take(self, batches: list[_Batch], rows: int) -> None:
        if not batches or self.rows + rows > INBOX_LIMIT:
            self.batches.clear()
            self.rows, self.reread = 0, True
        else:
            self.batches.extend(batches)
            self.rows += rows
        self.ready.set()


class _Broadcast:
    """One desk's listener, fanning pushed rows out to the inboxes of its feeds.

    Pushes are handed to the loop at most once per :data:`FLUSH_INTERVAL`, or per
    ``pages / PAGE_WAKEUPS`` seconds when that is longer: the first push after a quiet
    spell goes out at once, and those that follow within the interval go out together
    at its end. Under a stream of commits, every open page then costs the loop one
    wake-up per interval instead of one per commit.
    """

    listening: asyncio.Future[Callable[[], None]]
    """The ``Hub.listen`` call under way or done; its result removes the listener."""

    def __init__(self, encode: Encode) -> None:
        self._loop = asyncio.get_running_loop()
        self._encode = encode
        self._lock = threading.Lock()  # guards the two fields below (actor vs loop)
        self._pending: list[Event | None] = []  # None: an empty push (re-read)
        self._scheduled = False
        self._last_flush = 0.0
        self.inboxes: set[_Inbox] = set()
        #: Every row above it is handed to the inboxes from now on (``None``: unknown).
        self.through: int | None = None
        #: How many empty pushes came: a read that began before one proves nothing.
        self.resets = 0

    def deliver(self, message: Push) -> None:
        """Take one push (on the session actor's thread); never blocks."""
        with self._lock:
            if message.events:
                self._pending.extend(message.events)
            else:
                self._pending.append(None)
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop closed: the server is gone
            self._loop.call_soon_threadsafe(self._schedule)

    def _schedule(self) -> None:
        interval = max(FLUSH_INTERVAL, len(self.inboxes) / PAGE_WAKEUPS)
        wait = self._last_flush + interval - self._loop.time()
        if wait <= 0:
            self._flush()
        else:
            self._loop.call_later(wait, self._flush)

    def _flush(self) -> None:
        with self._lock:
            events, self._pending, self._scheduled = self._pending, [], False
        self._last_flush = self._loop.time()
        self.fan(events)

    def read_through(self, sequence: int, resets: int) -> None:
        """Note a feed's read that found nothing above ``sequence`` (begun at ``resets``).

        The read began after the broadcast listened, so each row above ``sequence``
        was committed since and is pushed: a feed starting at or above it needs no read.
        """
        if resets == self.resets:
            self.through = max(sequence, self.through or 0)

    def fan(self, events: list[Event | None]) -> None:
        """Hand ``events`` to every feed (on the loop); ``None`` among them: re-read."""
        rows = [(event.sequence or 0, self._encode(event)) for event in events if event]
        if len(rows) < len(events):
            rows = []  # an empty push among them: every feed re-reads
            self.through, self.resets = None, self.resets + 1
        elif rows and self.through is not None:
            self.through = max(self.through, rows[-1][0])
        batches = _batches(rows)
        for inbox in self.inboxes:
            inbox.take(batches, len(rows))


class Feeds:
    """The live feeds of one web app, a broadcast per desk (use on the event loop only)."""

    def __init__(self, hub: Hub, encode: Encode, *, keepalive: float) -> None:
        self._hub, self._encode = hub, encode
        self._keepalive = keepalive
        self._desks: dict[str, _Broadcast] = {}

    async def _join(self, desk: str, inbox: _Inbox) -> _Broadcast:
        broadcast = self._desks.get(desk)
        if broadcast is None:
            broadcast = _Broadcast(self._encode)
            broadcast.listening = asyncio.ensure_future(
                run_in_threadpool(self._hub.listen, desk, broadcast)
            )
            self._desks[desk] = broadcast
        broadcast.inboxes.add(inbox)
        try:
            await asyncio.shield(broadcast.listening)
        except BaseException:
            self._leave(desk, broadcast, inbox)
            raise
        return broadcast

    def _leave(self, desk: str, broadcast: _Broadcast, inbox: _Inbox) -> None:
        broadcast.inboxes.discard(inbox)
        if broadcast.inboxes or self._desks.get(desk) is not broadcast:
            return
        del self._desks[desk]

        def stop(listening: asyncio.Future[Callable[[], None]]) -> None:
            if not listening.cancelled() and listening.exception() is None:
                listening.result()()  # the listener's remover: quick, under a lock

        broadcast.listening.add_done_callback(stop)  # called at once when done already

    async def follow(self, desk: str, after: int) -> AsyncIterator[bytes]:
        """Yield the rows of ``desk`` above ``after`` in sequence order, then each new one.

        Each chunk holds one or more encoded rows; :data:`KEEPALIVE` comes after
        ``keepalive`` seconds without a row. Runs until the consumer stops iterating.

        Cost: one store read per page of backlog, none when ``after`` is at or above
        what the desk's broadcast pushes already; then nothing per pushed row beyond the
        push (a re-read after a gap).
        """
        hub, inbox = self._hub, _Inbox()
        broadcast = await self._join(desk, inbox)
        try:
            sent = after
            reread = broadcast.through is None or after < broadcast.through
            while True:
                while reread:
                    resets = broadcast.resets
                    page = await run_in_threadpool(hub.read, desk, after=sent, limit=PAGE_SIZE)
                    if page:
                        sent = page[-1].sequence or sent
                        yield b"".join(self._encode(event) for event in page)
                    reread = len(page) == PAGE_SIZE
                    if not reread:
                        broadcast.read_through(sent, resets)
                chunk: list[bytes] = []
                while inbox.batches:
                    batch = inbox.batches.popleft()
                    if batch.first > sent + 1:  # a gap: the store has what came between
                        inbox.batches.clear()
                        reread = True
                    elif batch.last > sent:
                        chunk.append(batch.after(sent))
                        sent = batch.last
                inbox.rows = 0
                if chunk:
                    yield b"".join(chunk)
                if reread or inbox.reread:
                    inbox.reread, reread = False, True
                    continue
                inbox.ready.clear()
                try:
                    async with asyncio.timeout(self._keepalive):
                        await inbox.ready.wait()
                except TimeoutError:
                    yield KEEPALIVE
        finally:
            self._leave(desk, broadcast, inbox)
