"""``submit``/``on_commit`` over a store not built on :class:`~sharedesk.store.base.StoreBase`.

The Hub writes through one port, ``WritingStore`` (``submit(write) -> Future`` and
``on_commit(callback)``). :class:`LegacyWrites` gives that port to a store that only has
the older ``append``/``append_and_share`` (and, for LMDB, ``submit_append`` with
tickets): a ticketed write is completed by the store's writer thread, anything else runs
on one of a few threads of its own; either way the commit callbacks run before the
future completes, as ``StoreBase`` does. Once every backend subclasses ``StoreBase``
this module goes.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from sharedesk.protocol._log import logger
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import CommitCallback
from sharedesk.protocol.writes import Write

_log = logger()

#: Threads that wait on writes the store cannot take with a ticket.
_THREADS: Final = 8


class LegacyWrites:
    """The ``WritingStore`` port over an older store (see the module docstring)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._callbacks: tuple[CommitCallback, ...] = ()
        self._pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="sharedesk-writes")

    def on_commit(self, callback: CommitCallback) -> Callable[[], None]:
        """Call ``callback(session_id, stored)`` after each commit, before its future."""
        self._callbacks += (callback,)

        def remove() -> None:
            self._callbacks = tuple(c for c in self._callbacks if c is not callback)

        return remove

    def submit(self, write: Write) -> Future[list[Event]]:
        """Queue ``write``; return the future of its stored events. Never blocks."""
        future: Future[list[Event]] = Future()
        future.set_running_or_notify_cancel()
        share = write.share
        name = "submit_append" if share is None else "submit_append_and_share"
        submit = getattr(self._store, name, None)
        if submit is None or write.unless_stored is not None:
            self._pool.submit(self._run, write, future)
            return future
        ticket = _Ticket(self, write.session_id, future)
        if share is None:
            submit(
                write.session_id,
                write.events,
                expected_version=write.expected_version,
                ticket=ticket,
            )
        else:
            submit(
                write.session_id,
                write.events,
                viewer=share.viewer,
                state=share.state,
                expected_state=share.expected_state,
                reply_present=share.reply_present,
                ticket=ticket,
            )
        return future

    def close(self) -> None:
        """Wait for the writes on its threads, then stop them."""
        self._pool.shutdown(wait=True)

    def _run(self, write: Write, future: Future[list[Event]]) -> None:
        share = write.share
        try:
            if share is not None:
                stored: list[Event] = self._store.append_and_share(
                    write.session_id,
                    write.events,
                    viewer=share.viewer,
                    state=share.state,
                    expected_state=share.expected_state,
                    reply_present=share.reply_present,
                )
            elif write.unless_stored is not None:
                stored = self._store.append(
                    write.session_id,
                    write.events,
                    expected_version=write.expected_version,
                    unless_stored=write.unless_stored,
                )
            else:
                stored = self._store.append(
                    write.session_id, write.events, expected_version=write.expected_version
                )
        except BaseException as error:
            future.set_exception(error)
            return
        self.committed(write.session_id, stored)
        future.set_result(stored)

    def committed(self, session_id: str, stored: list[Event]) -> None:
        """Run the commit callbacks; one that raises is logged and dropped."""
        for callback in self._callbacks:
            try:
                callback(session_id, stored)
            except Exception:
                _log.exception("store.commit_callback_failed", session_id=session_id)


class _Ticket:
    """A ticket of the older submitted-write port, completing a future."""

    __slots__ = ("_future", "_session_id", "_writes")

    def __init__(self, writes: LegacyWrites, session_id: str, future: Future[list[Event]]) -> None:
        self._writes = writes
        self._session_id = session_id
        self._future = future

    @property
    def sink(self) -> _Ticket:
        """Itself: the future is completed on settling; nothing is left to deliver."""
        return self

    def deliver(self, tickets: object) -> None:
        """Nothing to do (see :attr:`sink`)."""

    def settle(self, result: list[Event] | None, error: BaseException | None) -> None:
        """Run the commit callbacks, then complete the future (writer thread)."""
        if error is not None:
            self._future.set_exception(error)
            return
        assert result is not None
        self._writes.committed(self._session_id, result)
        self._future.set_result(result)

    def resolve(self) -> None:
        """Nothing to do (see :attr:`sink`)."""
