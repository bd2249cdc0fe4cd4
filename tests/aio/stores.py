"""Store wrappers for the async tests: a store whose calls take as long as a test says.

:class:`Slow` delays every store call (reads, writes, sharing states) by ``delay``
seconds on whichever thread makes it, while ``delay`` is set; :class:`SlowSubmitting`
also takes submitted writes (the LMDB fast path) and delays their settling on the
writer's thread. :class:`Gated` holds every write until ``gate`` is set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from sharedesk import AsyncHub, Event, Hub, HubOptions, LmdbStore, MemoryStore, SharingState
from sharedesk.protocol.ports import CompletionSink, SessionLog, WriteTicket


class Slow:
    """A store whose calls sleep ``delay`` seconds first (0: none)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.delay = 0.0
        self.calls = 0

    def _wait(self) -> None:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)

    def append(
        self, session_id: str, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        self._wait()
        stored: list[Event] = self.inner.append(
            session_id, events, expected_version=expected_version
        )
        return stored

    def append_and_share(self, session_id: str, events: Sequence[Event], **kw: Any) -> list[Event]:
        self._wait()
        stored: list[Event] = self.inner.append_and_share(session_id, events, **kw)
        return stored

    def read(self, session_id: str, **bounds: Any) -> list[Event]:
        self._wait()
        events: list[Event] = self.inner.read(session_id, **bounds)
        return events

    def last_sequence(self, session_id: str) -> int:
        self._wait()
        last: int = self.inner.last_sequence(session_id)
        return last

    def log(self, session_id: str) -> SessionLog:
        log: SessionLog = self.inner.log(session_id)
        return log

    def get_sharing_state(self, session_id: str, viewer: str, conversation: Any) -> Any:
        self._wait()
        return self.inner.get_sharing_state(session_id, viewer, conversation)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> Slow:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _SlowTicket:
    """Delays the settling of a submitted write on the writer's thread."""

    def __init__(self, inner: WriteTicket, delay: float) -> None:
        self._inner = inner
        self._delay = delay

    @property
    def sink(self) -> CompletionSink:
        return self._inner.sink

    def settle(self, result: list[Event] | None, error: BaseException | None) -> None:
        time.sleep(self._delay)
        self._inner.settle(result, error)

    def resolve(self) -> None:
        self._inner.resolve()


class SlowSubmitting(Slow):
    """A slow LMDB store that also takes submitted writes (settled ``delay`` late)."""

    def submit_append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        ticket: WriteTicket,
    ) -> None:
        self.calls += 1
        self.inner.submit_append(
            session_id,
            events,
            expected_version=expected_version,
            ticket=self._wrap(ticket),
        )

    def submit_append_and_share(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        viewer: str,
        state: SharingState,
        expected_state: SharingState | None,
        expected_version: int | None = None,
        reply_present: bool = False,
        ticket: WriteTicket,
    ) -> None:
        self.calls += 1
        self.inner.submit_append_and_share(
            session_id,
            events,
            viewer=viewer,
            state=state,
            expected_state=expected_state,
            expected_version=expected_version,
            reply_present=reply_present,
            ticket=self._wrap(ticket),
        )

    def _wrap(self, ticket: WriteTicket) -> WriteTicket:
        return _SlowTicket(ticket, self.delay)


class _GatedTicket(_SlowTicket):
    def __init__(self, inner: WriteTicket, gate: threading.Event) -> None:
        super().__init__(inner, 0.0)
        self._gate = gate

    def settle(self, result: list[Event] | None, error: BaseException | None) -> None:
        self._gate.wait(10)
        super().settle(result, error)


class Gated(Slow):
    """A store whose writes wait for ``gate``; ``entered`` counts the writes that began."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Semaphore(0)

    def append(
        self, session_id: str, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        self.entered.release()
        self.gate.wait(10)
        return super().append(session_id, events, expected_version=expected_version)

    def append_and_share(self, session_id: str, events: Sequence[Event], **kw: Any) -> list[Event]:
        self.entered.release()
        self.gate.wait(10)
        return super().append_and_share(session_id, events, **kw)


class GatedSubmitting(Gated, SlowSubmitting):
    """A gated LMDB store that also takes submitted writes (settled once ``gate`` is set)."""

    def _wrap(self, ticket: WriteTicket) -> WriteTicket:
        self.entered.release()
        return _GatedTicket(ticket, self.gate)


def wrapped_hub(slow: bool, store_path: Path | None, **options: Any) -> tuple[AsyncHub, Any]:
    """Open an AsyncHub over a slow (or else gated) wrapper of the backend's store.

    Over LMDB the wrapper also takes submitted writes, so the fast path is used.
    """
    store: Any
    if store_path is None:
        store = Slow(MemoryStore()) if slow else Gated(MemoryStore())
    else:
        inner = LmdbStore(store_path)
        store = SlowSubmitting(inner) if slow else GatedSubmitting(inner)
    return AsyncHub(Hub(store, HubOptions(**options))), store
