"""The followers of a store's commits, and the one thread that tells them (LMDB, PostgreSQL).

A backend that follows other processes (:class:`~sharedesk.protocol.ports.FollowingStore`)
keeps one :class:`Followers`: it starts the backend's watcher thread with the first
follower, stops it with the last, and calls every follower for each notice the watcher
hands to :meth:`Followers.tell`. The backends differ only in what their watcher watches
(LMDB's last transaction id, PostgreSQL's ``LISTEN`` channel).
"""

from __future__ import annotations

import abc
import signal
import threading
from collections.abc import Callable

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import StoreClosedError, ValidationError
from sharedesk.protocol.ports import AppendCallback

__all__ = ["Followers", "Watcher"]

_log = logger()


class Watcher(abc.ABC):
    """A backend's watcher thread: ``start`` takes its first reading, then runs ``_run``.

    ``_run`` loops until ``_stopping`` is set, handing each notice to ``_tell`` (the
    :meth:`Followers.tell` of ``followers``); a backend whose thread blocks elsewhere than
    on ``_stopping`` wakes it in ``_wake``.
    """

    def __init__(self, kind: str, followers: Followers) -> None:
        self._tell = followers.tell
        self._path = followers._path  # the store it names in errors and the thread name
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"sharedesk-{kind}:{self._path}", daemon=True
        )

    def start(self) -> None:
        """Start watching (a backend raises its error first when the first reading fails)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and join it (unless called from it)."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._wake()
            self._thread.join()

    def _wake(self) -> None:  # noqa: B027 (a hook: only a watcher blocked elsewhere needs one)
        """Wake the stopping thread where it waits on something else (nothing here)."""

    def _main(self) -> None:
        _keep_signals_for_the_main_thread()
        self._run()

    @abc.abstractmethod
    def _run(self) -> None:
        """Watch until ``_stopping`` is set (each backend's own loop)."""


class Followers:
    """The followers of one store and its watcher, which runs while any is registered.

    ``watcher`` makes the watcher of this registry (it calls :meth:`tell`); ``path`` names
    the store in errors.
    """

    def __init__(self, watcher: Callable[[Followers], Watcher], path: str) -> None:
        self._make = watcher
        self._path = path
        self._lock = threading.Lock()
        self._followers: dict[object, AppendCallback] = {}
        self._closed = False
        self._watcher: Watcher | None = None

    def add(self, on_append: AppendCallback) -> Callable[[], None]:
        """Register ``on_append`` (the first starts the watcher); return its remover.

        The remover is idempotent; the last one stops the watcher. Raises
        ``ValidationError`` (not callable), ``StoreClosedError``, or what the watcher's
        first reading raises (then nothing is registered).
        """
        if not callable(on_append):
            raise ValidationError(f"on_append must be callable, got {type(on_append).__name__}")
        with self._lock:
            if self._closed:
                raise StoreClosedError(self._path)
            token = object()
            self._followers[token] = on_append
            if self._watcher is None:
                watcher = self._make(self)
                try:
                    watcher.start()
                except BaseException:
                    del self._followers[token]
                    raise
                self._watcher = watcher

        def remove() -> None:
            with self._lock:
                if self._followers.pop(token, None) is None or self._followers:
                    return
                watcher, self._watcher = self._watcher, None
            if watcher is not None:
                watcher.stop()

        return remove

    def tell(self, session_id: str | None, last: int) -> None:
        """Call every follower with a notice (watcher thread); what one raises is logged."""
        with self._lock:
            followers = list(self._followers.values())
        for follower in followers:
            try:
                follower(session_id, last)
            except Exception:
                _log.exception("store.follower_failed", path=self._path)

    def close(self) -> None:
        """Drop every follower and stop the watcher for good (idempotent; joins it)."""
        with self._lock:
            self._closed = True
            self._followers.clear()
            watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()


def _keep_signals_for_the_main_thread() -> None:
    """Block Ctrl-C and SIGTERM in the calling (watcher) thread, so the kernel hands them on.

    A signal delivered to a thread that wakes often would leave the main thread asleep in
    a blocking wait, never interrupted; blocked here, it goes to a thread that lets
    Python raise ``KeyboardInterrupt`` where the caller waits.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
