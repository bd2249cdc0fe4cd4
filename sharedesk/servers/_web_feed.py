"""The live feed of one desk for the web server: stored rows after a sequence, then new ones.

Exactly once, in order: the feed keeps ``sent``, the sequence of the last row it yielded,
and yields only the row ``sent + 1`` next. Pushes from :meth:`Hub.listen` that continue
``sent`` are yielded from memory; anything else (a gap, an empty push from a following
store, an inbox that overflowed, the start) is read from the store after ``sent``, a page
at a time. The listener is added before the first read, so a row committed while the feed
starts is either read or pushed, and never lost; one both read and pushed is skipped the
second time because its sequence is at or below ``sent``.

Other processes: a following Hub (PostgreSQL; LMDB once its store follows) pushes their
commits too. On a Hub that does not follow, the feed also compares the store's last
sequence with ``sent`` every ``recheck`` seconds (one O(1) read), so a row another
process wrote still arrives, a little later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Final

from starlette.concurrency import run_in_threadpool

from sharedesk.actors import Hub
from sharedesk.actors._messages import Push
from sharedesk.protocol.constants import PAGE_SIZE
from sharedesk.protocol.events import Event

__all__ = ["INBOX_LIMIT", "desk_feed"]

#: Most pushed rows a feed holds for a slow client before it drops them and re-reads.
INBOX_LIMIT: Final = 4096


class _Inbox:
    """Pushes from the session actor's thread, handed to one feed's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.rows: deque[Event] = deque()
        self.reread = False
        self.ready = asyncio.Event()

    def deliver(self, message: Push) -> None:
        """Take one push (on the session actor's thread); never blocks."""
        with contextlib.suppress(RuntimeError):  # the loop closed: the feed is gone
            self._loop.call_soon_threadsafe(self._take, message.events)

    def _take(self, events: tuple[Event, ...]) -> None:
        if not events or len(self.rows) + len(events) > INBOX_LIMIT:
            self.rows.clear()
            self.reread = True
        else:
            self.rows.extend(events)
        self.ready.set()


async def desk_feed(
    hub: Hub, desk: str, after: int, *, recheck: float, keepalive: float
) -> AsyncIterator[Event | None]:
    """Yield the rows of ``desk`` above ``after`` in sequence order, then each new one.

    ``None`` is yielded after ``keepalive`` seconds without a row (for the client to
    hear the stream is alive). Runs until the consumer stops iterating.

    Cost: one store read per page of backlog; then nothing per pushed row beyond the
    push, plus, on a Hub that does not follow, one ``last_sequence`` read per
    ``recheck`` seconds.
    """
    inbox = _Inbox(asyncio.get_running_loop())
    remove = await run_in_threadpool(hub.listen, desk, inbox)
    try:
        sent, reread, idle = after, True, 0.0
        while True:
            while reread:
                page = await run_in_threadpool(hub.read, desk, after=sent, limit=PAGE_SIZE)
                for event in page:
                    assert event.sequence is not None
                    sent = event.sequence
                    yield event
                reread = len(page) == PAGE_SIZE
            while inbox.rows:
                event = inbox.rows.popleft()
                assert event.sequence is not None
                if event.sequence == sent + 1:
                    sent = event.sequence
                    yield event
                elif event.sequence > sent + 1:  # a gap: the store has what came between
                    inbox.rows.clear()
                    reread = True
            if reread or inbox.reread:
                inbox.reread, reread = False, True
                continue
            inbox.ready.clear()
            wait = recheck if not hub.following else keepalive
            try:
                await asyncio.wait_for(inbox.ready.wait(), timeout=min(wait, keepalive))
                idle = 0.0
            except TimeoutError:
                idle += min(wait, keepalive)
                if not hub.following:
                    last = await run_in_threadpool(hub.last_sequence, desk)
                    reread = last > sent
                if not reread and idle >= keepalive:
                    idle = 0.0
                    yield None
    finally:
        remove()
