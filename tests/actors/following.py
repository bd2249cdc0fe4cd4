"""A following store for the Hub's tests: a MemoryStore that tells followers when told to.

:class:`FollowingMemoryStore` implements the ``FollowingStore`` port the way
``PostgresStore`` does, except that a test decides when a notice goes out
(:meth:`FollowingMemoryStore.fire`, on the test's thread, standing in for the store's
listener thread). :meth:`FollowingMemoryStore.append_elsewhere` appends as another
process sharing the store would: straight to the store, no Hub of this process involved.
:class:`Recorder` is a Hub listener that records every push it is told.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from sharedesk.actors import Push
from sharedesk.protocol import Conversation, Event, Person, SharingState, Text
from sharedesk.protocol.errors import StoreClosedError, StoreIOError
from sharedesk.protocol.ports import AppendCallback, CommitCallback, D, WriteFuture
from sharedesk.protocol.writes import Write
from sharedesk.store import MemoryStore

BOB = Person(id="bob", label="Bob")

#: Longest wait for a push a test expects, in seconds (a bound on a wait, not a timing).
WAIT: float = 10.0


def said(content: str, author: Person = BOB) -> Event:
    """An unstamped Text event by ``author`` (Bob: the other process's participant)."""
    return Event(author, Text(content))


class FollowingMemoryStore(MemoryStore):
    """A MemoryStore with ``follow``: notices go out when the test fires them."""

    def __init__(self) -> None:
        super().__init__()
        self.followers: list[AppendCallback] = []
        self.stops = 0
        #: Called inside ``submit`` (after the commit), to play a notice mid-write.
        self.during_append: Callable[[], None] | None = None
        #: This process's commit callbacks (``on_commit``).
        self.commit_callbacks: list[CommitCallback] = []
        self._here = threading.local()
        #: Released by every turn plan (each reads a sharing state once).
        self.plans = threading.Semaphore(0)
        #: How many of the next ``read`` calls fail with ``StoreIOError``.
        self.failing_reads = 0

    def follow(self, on_append: AppendCallback) -> Callable[[], None]:
        """Register ``on_append`` until the returned function (or ``close``) is called."""
        if self._closed:
            raise StoreClosedError(None)
        self.followers.append(on_append)

        def stop() -> None:
            if on_append in self.followers:
                self.followers.remove(on_append)
                self.stops += 1

        return stop

    def fire(self, session_id: str | None, last: int = 0) -> None:
        """Tell every follower ``(session_id, last)``, as the listener thread would."""
        for on_append in list(self.followers):
            on_append(session_id, last)

    def append_elsewhere(self, session_id: str, events: Sequence[Event]) -> list[Event]:
        """Append as another process would (no Hub here sees it) and return the stored events."""
        self._here.elsewhere = True
        try:
            return MemoryStore.append(self, session_id, events)
        finally:
            self._here.elsewhere = False

    def on_commit(self, callback: CommitCallback) -> Callable[[], None]:
        """Tell ``callback`` this process's commits (not those made ``append_elsewhere``)."""
        self.commit_callbacks.append(callback)
        return lambda: self.commit_callbacks.remove(callback)

    def submit(self, write: Write, done: D) -> D:
        future = super().submit(write, WriteFuture())  # in memory: done by now
        hook, self.during_append = self.during_append, None
        if hook is not None:
            hook()
        error = future.exception()
        if not getattr(self._here, "elsewhere", False) and error is None:
            for callback in list(self.commit_callbacks):
                callback(write.session_id, future.result())
        if done.start():
            done.finish(future.result() if error is None else error)
        return done

    def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        if self.failing_reads > 0:
            self.failing_reads -= 1
            raise StoreIOError("memory", "read")
        return super().read(
            session_id, after=after, before=before, limit=limit, newest_first=newest_first
        )

    def get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        self.plans.release()
        return super().get_sharing_state(session_id, viewer, conversation)

    def close(self) -> None:
        self.followers.clear()
        super().close()


class Recorder:
    """A Hub listener that records the sequences of every push it is told."""

    def __init__(self) -> None:
        self.pushes: list[list[int]] = []
        self._changed = threading.Condition()

    def deliver(self, message: Push) -> None:
        with self._changed:
            self.pushes.append([event.sequence or 0 for event in message.events])
            self._changed.notify_all()

    def wait_through(self, sequence: int) -> list[list[int]]:
        """Wait until a push reaches ``sequence`` (at most :data:`WAIT`); return the pushes."""
        with self._changed:
            self._changed.wait_for(
                lambda: any(sequence in push for push in self.pushes), timeout=WAIT
            )
            return [list(push) for push in self.pushes]

    def wait_pushes(self, count: int) -> list[list[int]]:
        """Wait until ``count`` pushes came (at most :data:`WAIT`); return the pushes."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.pushes) >= count, timeout=WAIT)
            return [list(push) for push in self.pushes]
