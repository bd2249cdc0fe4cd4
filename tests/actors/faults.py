"""A store wrapper that injects faults into chosen calls (fault-injection tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from types import TracebackType
from typing import Any, Self

from sharedesk.protocol import Conversation, Event, SessionLog, SharingState
from sharedesk.protocol.ports import CommitCallback, D
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.writes import Write
from sharedesk.store import MemoryStore


class InjectedFault(RuntimeError):
    """The unexpected error a faulty store raises (not a SharedeskError)."""


class FaultyStore:
    """A MemoryStore whose ``append``/``last_sequence``/``read`` can fail or block on demand.

    ``fail[method] = n`` makes the next ``n`` calls of ``method`` raise ``InjectedFault``
    (before touching the store). ``gate[method]`` is an Event the call waits on first.
    """

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.fail: dict[str, int] = {}
        self.gate: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def _enter(self, method: str) -> None:
        entered = self.entered.get(method)
        if entered is not None:
            entered.set()
        gate = self.gate.get(method)
        if gate is not None:
            gate.wait()
        with self._lock:
            left = self.fail.get(method, 0)
            if left > 0:
                self.fail[method] = left - 1
                raise InjectedFault(f"injected fault in {method}")

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        unless_stored: str | None = None,
    ) -> list[Event]:
        self._enter("append")
        return self.inner.append(
            session_id, events, expected_version=expected_version, unless_stored=unless_stored
        )

    def submit(self, write: Write, done: D) -> D:
        self._enter("append" if write.share is None else "shared_write")
        return self.inner.submit(write, done)

    def on_commit(self, callback: CommitCallback) -> Callable[[], None]:
        return self.inner.on_commit(callback)

    def run_events(self, session_id: str, run_id: str) -> list[Event]:
        self._enter("read")
        return self.inner.run_events(session_id, run_id)

    def session_state(self, session_id: str) -> SessionState:
        self._enter("session_state")
        return self.inner.session_state(session_id)

    def session_states(self, session_ids: Sequence[str]) -> list[SessionState]:
        self._enter("session_state")
        return self.inner.session_states(session_ids)

    def read(self, session_id: str, **bounds: Any) -> list[Event]:
        self._enter("read")
        return self.inner.read(session_id, **bounds)

    def last_sequence(self, session_id: str) -> int:
        self._enter("last_sequence")
        return self.inner.last_sequence(session_id)

    def log(self, session_id: str) -> SessionLog:
        return self.inner.log(session_id)

    def get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        self._enter("get_sharing_state")
        return self.inner.get_sharing_state(session_id, viewer, conversation)

    def first_replies(self, session_id: str, roots: Collection[int]) -> dict[int, int]:
        self._enter("first_replies")
        return self.inner.first_replies(session_id, roots)

    def close(self) -> None:
        for gate in self.gate.values():
            gate.set()
        self.inner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
