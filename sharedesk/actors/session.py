"""SessionActor: the one publisher of a session's committed events.

The store's ``on_commit`` tells it each commit (``Committed``), a following store's
notices a ``CatchUp``. It publishes the consecutive events after the last it published
(:attr:`SessionActor.last`), so subscribers get every stored event once, in order, with
no gap; what another writer appended in between it reads from the store first (at most
``SCAN_LIMIT`` events: further behind, subscribers see a gap and rebuild).
"""

from __future__ import annotations

from typing import Any

from sharedesk.actors._base import HubActor
from sharedesk.actors._messages import CatchUp, Committed, Prime
from sharedesk.protocol._log import logger
from sharedesk.protocol.constants import SCAN_LIMIT
from sharedesk.protocol.errors import RowsArchived, SharedeskError
from sharedesk.protocol.events import Event

_log = logger()


class SessionActor(HubActor):
    """Publishes one session's committed events, consecutively, once, in order.

    A store error while reading a gap is logged (a told message has nobody to hand it
    to) and retried: by the next message, or by a ``CatchUp`` the actor tells itself.
    """

    kind = "session"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: The last sequence published (and every one before it); ``None``: not yet known.
        self.last: int | None = None

    def handle(self, message: Any) -> Any:
        """Serve :class:`Committed`, :class:`CatchUp` (told) and :class:`Prime`."""
        match message:
            case Committed(events=events):
                self._committed(list(events))
                return None
            case CatchUp(last=last):
                if last is None or self.last is None or last > self.last:
                    self._catch_up()
                return None
            case Prime(base=base):
                if self.last is None:
                    self.last = base
                return self.last
        return super().handle(message)

    def _committed(self, stored: list[Event]) -> None:
        ordered = sorted(stored, key=_sequence_of)
        if self.last is None:  # the first commit told: publish from it on
            self.last = _sequence_of(ordered[0]) - 1 if ordered else 0
        fresh = [event for event in ordered if _sequence_of(event) > self.last]
        if not fresh:
            return
        top = _sequence_of(fresh[-1])
        if top - self.last == len(fresh):
            self.last = top
            self.hub.publish(self.key.session_id, tuple(fresh))
            return
        if not self._read_and_publish(top):  # others appended in between: read ours too
            self.actor_ref.tell(CatchUp())  # the writes stand: try once more

    def _catch_up(self) -> None:
        newest = self.hub.store.last_sequence(self.key.session_id)
        if self.last is None:
            self.last = newest  # nothing was published yet: nothing to publish from
            return
        if newest > self.last:
            self._read_and_publish(newest)
            _log.debug("session.caught_up", last=self.last)

    def _read_and_publish(self, newest: int) -> bool:
        # Read (last, newest] (at most its newest SCAN_LIMIT) and publish it, page by page.
        assert self.last is not None
        session_id = self.key.session_id
        last = max(self.last, newest - SCAN_LIMIT)
        try:
            while last < newest:
                try:
                    page = self.hub.store.read(
                        session_id, after=last, before=newest + 1, limit=SCAN_LIMIT
                    )
                except RowsArchived as gone:  # retention removed them: publish what is left
                    last = self.last = gone.archived_through
                    continue
                if not page:
                    break
                self.hub.publish(session_id, tuple(page))
                last = self.last = _sequence_of(page[-1])
        except SharedeskError as error:  # the writes stand: the next message retries
            _log.warning("session.catch_up_failed", error=repr(error))
            return False
        return True


def _sequence_of(event: Event) -> int:
    assert event.sequence is not None
    return event.sequence
