"""The ticket interface (``SubmittingStore``) over ``StoreBase.submit``, for old callers.

``actors/aio.py`` submits writes with tickets until it completes them from the futures
of ``submit`` directly; each ticket is settled and delivered to its sink, alone, once
its future is done.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future

from sharedesk.protocol.errors import StoreClosedError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import WriteTicket
from sharedesk.protocol.validation import check_write
from sharedesk.protocol.views import SharingState
from sharedesk.protocol.writes import Share, Write

__all__ = ["TicketShims"]


class TicketShims(ABC):
    """``submit_append`` and ``submit_append_and_share``, as a ``StoreBase`` mixin."""

    _closed: bool

    @abstractmethod
    def submit(self, write: Write) -> Future[list[Event]]: ...

    @abstractmethod
    def _closed_error(self) -> StoreClosedError: ...

    def submit_append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        ticket: WriteTicket,
    ) -> None:
        """Queue an append over :meth:`submit`; ``ticket`` gets its outcome (``SubmittingStore``).

        Raises:
            ValidationError: Malformed input; nothing was queued.
            StoreClosedError: The store is closed; nothing was queued.

        Cost: as :meth:`submit`.
        """
        write = check_write(session_id, events, expected_version=expected_version)
        self._submit_ticket(write, ticket)

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
        """:meth:`append_and_share` as :meth:`submit_append` takes an append.

        Raises:
            ValidationError: Malformed input; nothing was queued.
            StoreClosedError: The store is closed; nothing was queued.

        Cost: as :meth:`submit`.
        """
        share = Share(viewer, state, expected_state, reply_present)
        write = check_write(session_id, events, expected_version=expected_version, share=share)
        self._submit_ticket(write, ticket)

    def _submit_ticket(self, write: Write, ticket: WriteTicket) -> None:
        if self._closed:
            raise self._closed_error()

        def settle(future: Future[list[Event]]) -> None:
            error = future.exception()
            ticket.settle(None if error is not None else future.result(), error)
            ticket.sink.deliver([ticket])

        self.submit(write).add_done_callback(settle)
