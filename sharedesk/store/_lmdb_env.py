"""One LMDB environment per path per process, shared by every LmdbStore on that path.

py-lmdb refuses to open one environment twice in a process, so stores on the same
(real) path share one :class:`SharedEnvironment`, reference-counted and closed when the
last store releases it. This registry is the one piece of process-wide mutable state in
sharedesk: it exists because the environment itself is process-wide.

Resizing the map (``set_mapsize``) is only safe while no transaction of this process is
open, because LMDB remaps the file. Every transaction, read or write, therefore holds
the environment's :class:`ResizeLock` in shared mode, and a resize (or adopting a map
grown by another process) holds it exclusively.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Final

import lmdb
import structlog

from sharedesk.protocol.errors import StoreIOError, ValidationError

_log = structlog.get_logger()

#: The sub-databases of a store, by purpose.
DATABASES: Final = (b"events", b"ids", b"meta", b"texts", b"sharing", b"runs")


class ResizeLock:
    """Many transactions at once, or one resize alone (a writer-preferring RW lock)."""

    __slots__ = ("_active", "_cond", "_resizing")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._resizing = False

    def acquire_shared(self) -> None:
        """Enter a transaction; waits while a resize runs. Cost: one lock round trip."""
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._active += 1

    def release_shared(self) -> None:
        """Leave a transaction. Cost: one lock round trip."""
        with self._cond:
            self._active -= 1
            if self._resizing and self._active == 0:
                self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        """Wait until no transaction is open and block new ones (the caller holds none)."""
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            while self._active:
                self._cond.wait()

    def pause(self) -> bool:
        """Stop new transactions from starting; the caller may still hold one.

        Aborting a write transaction while other threads keep starting read transactions
        can stall inside py-lmdb indefinitely (observed with py-lmdb 3.0 after
        ``MapFullError``), so the writer pauses readers before it aborts.

        Returns:
            Whether this call paused; if so the caller must end with
            :meth:`complete_exclusive` then :meth:`release_exclusive`, or with
            :meth:`release_exclusive` alone. ``False``: someone else already paused.
        """
        with self._cond:
            if self._resizing:
                return False
            self._resizing = True
            return True

    def complete_exclusive(self) -> None:
        """After :meth:`pause` returned ``True``, wait until no transaction is open."""
        with self._cond:
            while self._active:
                self._cond.wait()

    def release_exclusive(self) -> None:
        """Let transactions start again."""
        with self._cond:
            self._resizing = False
            self._cond.notify_all()


class SharedEnvironment:
    """One open LMDB environment, its sub-databases, and who uses it.

    Attributes:
        path: The environment's real path.
        env: The py-lmdb environment.
        dbs: The sub-databases, keyed by name (see ``DATABASES``).
        durability: ``"durable"`` or ``"relaxed"``, as opened.
        lock: Held shared by every transaction, exclusively by a resize.
        closed: Set once the environment is closed (under the exclusive lock).
    """

    def __init__(self, path: str, env: Any, dbs: dict[bytes, Any], durability: str) -> None:
        self.path = path
        self.env = env
        self.dbs = dbs
        self.durability = durability
        self.lock = ResizeLock()
        self.closed = False
        self.refs = 0

    def map_size(self) -> int:
        """Return the current map size in bytes. Cost: O(1)."""
        size: int = self.env.info()["map_size"]
        return size

    def resize(self, new_size: int, *, paused: bool = False) -> None:
        """Set the map size to ``new_size`` (0: adopt the size another process set).

        Waits until no transaction of this process is open; the caller must hold none.

        Args:
            new_size: The new map size in bytes, or 0.
            paused: The caller already paused transactions (:meth:`ResizeLock.pause`).

        Raises:
            StoreIOError: LMDB refused.

        Cost: blocks transactions for one remap.
        """
        if paused:
            self.lock.complete_exclusive()
        else:
            self.lock.acquire_exclusive()
        try:
            old = self.map_size()
            self.env.set_mapsize(new_size)
            _log.info("store.map_resized", path=self.path, old=old, new=self.map_size())
        except lmdb.Error as exc:
            raise StoreIOError(self.path, "resize") from exc
        finally:
            self.lock.release_exclusive()


class _Registry:
    """The environments open in this process, by real path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, SharedEnvironment] = {}

    def acquire(self, path: str, *, durability: str, map_size: int) -> SharedEnvironment:
        """Return the shared environment at ``path``, opening it on first use.

        Raises:
            ValidationError: The path is already open here with another durability.
            StoreIOError: LMDB could not open it.
        """
        real = os.path.realpath(path)
        with self._lock:
            shared = self._open.get(real)
            if shared is None:
                shared = self._open_env(real, durability, map_size)
                self._open[real] = shared
            elif shared.durability != durability:
                raise ValidationError(
                    f"store at {real} is already open in this process with "
                    f"durability={shared.durability!r}, not {durability!r}"
                )
            shared.refs += 1
            return shared

    def release(self, shared: SharedEnvironment) -> None:
        """Drop one reference; close the environment when it was the last."""
        with self._lock:
            shared.refs -= 1
            if shared.refs > 0:
                return
            del self._open[shared.path]
        shared.lock.acquire_exclusive()
        try:
            shared.closed = True
            shared.env.close()
        finally:
            shared.lock.release_exclusive()
        _log.debug("store.env_closed", path=shared.path)

    @staticmethod
    def _open_env(real: str, durability: str, map_size: int) -> SharedEnvironment:
        durable = durability == "durable"
        try:
            os.makedirs(real, exist_ok=True)
            env = lmdb.open(
                real,
                map_size=map_size,
                max_dbs=len(DATABASES),
                max_readers=1024,
                sync=durable,
                metasync=durable,
                readahead=False,
                lock=True,
            )
        except (lmdb.Error, OSError) as exc:
            raise StoreIOError(real, "open") from exc
        try:
            dbs = {name: env.open_db(name) for name in DATABASES}
        except lmdb.Error as exc:
            env.close()
            raise StoreIOError(real, "open") from exc
        _log.debug("store.env_opened", path=real, durability=durability, map_size=map_size)
        return SharedEnvironment(real, env, dbs, durability)


#: The process-wide registry (see the module comment for why it exists).
REGISTRY: Final = _Registry()
