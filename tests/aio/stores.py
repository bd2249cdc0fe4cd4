"""A store for the async tests whose writer a test holds: :class:`Held`.

``Held`` is a :class:`~sharedesk.MemoryStore` with a writer thread of its own: ``submit``
queues the write and returns a pending future at once, as ``LmdbStore``'s and
``PostgresStore``'s writers do; the writer commits each write once ``gate`` is set. So a
test holds writes "stuck in the store" (as another process holding the LMDB write lock,
or a stopped PostgreSQL server, would) for as long as it likes, through the store port
the Hub uses and nothing else. ``entered`` counts the writes handed to the store.

:meth:`Held.hold` also holds the reads the Hub's actors and reader threads make
(``read``, ``last_sequence``, ``get_sharing_state``), each for at most ``patience``
seconds, and counts them in ``entered`` too: a call that blocked the event loop would
hold the loop there, which is what the stall tests look for.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from sharedesk import AsyncHub, Event, Hub, HubOptions, MemoryStore
from sharedesk.protocol.ports import Completion, D
from sharedesk.protocol.writes import Write


class Held(MemoryStore):
    """A MemoryStore whose writer commits only while ``gate`` is set (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        #: Writes are committed while set.
        self.gate = threading.Event()
        self.gate.set()
        #: Reads go on while set.
        self.reads = threading.Event()
        self.reads.set()
        #: Longest a held read or write waits, in seconds.
        self.patience = 10.0
        self.entered = threading.Semaphore(0)
        #: Released by every turn plan (each reads a sharing state once).
        self.plans = threading.Semaphore(0)
        self._held_writes: queue.SimpleQueue[tuple[Write, Completion] | None] = queue.SimpleQueue()
        self._held_writer = threading.Thread(
            target=self._write_loop, name="held-writer", daemon=True
        )
        self._held_writer.start()

    def hold(self) -> None:
        """Hold writes and reads from now on, counting them afresh in ``entered``."""
        self.entered = threading.Semaphore(0)
        self.gate.clear()
        self.reads.clear()

    def release(self) -> None:
        """Let held writes and reads go on."""
        self.reads.set()
        self.gate.set()

    def _held_read(self) -> None:
        if not self.reads.is_set():
            self.entered.release()
            self.reads.wait(self.patience)

    def read(self, session_id: str, **bounds: Any) -> list[Event]:
        self._held_read()
        return super().read(session_id, **bounds)

    def last_sequence(self, session_id: str) -> int:
        self._held_read()
        return super().last_sequence(session_id)

    def get_sharing_state(self, session_id: str, viewer: str, conversation: Any) -> Any:
        self.plans.release()
        self._held_read()
        return super().get_sharing_state(session_id, viewer, conversation)

    def submit(self, write: Write, done: D) -> D:
        self.entered.release()
        self._held_writes.put((write, done))
        return done

    def _write_loop(self) -> None:
        while (item := self._held_writes.get()) is not None:
            write, done = item
            self.gate.wait(self.patience)
            MemoryStore.submit(self, write, done)  # commits, runs the callbacks

    def close(self) -> None:
        self.release()
        self._held_writes.put(None)
        self._held_writer.join()
        super().close()


def held_hub(**options: Any) -> tuple[AsyncHub, Held]:
    """Open an AsyncHub over a :class:`Held` store; return both."""
    store = Held()
    return AsyncHub(Hub(store, HubOptions(**options))), store
