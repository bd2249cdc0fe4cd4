"""SessionActor: the only writer of one session's stream.

The actor knows its session's last sequence (read once, O(1), on first use), appends
through the store, answers once the store says the events are durable, and then hands
every subscribed actor (projectors, the sharing actor) the newly committed events, in
sequence order, with no gap and no duplicate (events the store returned for known ids
are not pushed again). Pushes are queued while the write still holds the actor's
``turn_lock``, so they leave in commit order.

Writes to different sessions never wait on one another: a write to an idle session runs
on its caller's thread (see :mod:`sharedesk.actors._base`), so the store's group commit
sees as many concurrent appends as there are writers and batches them into one fsync;
a write to a busy session queues behind the one in progress, on the actor's thread.

A turn's commit also comes here (:class:`~sharedesk.actors._messages.AppendAndShare`):
being the writer, the actor knows the sequence the reply will get, notes it as present in
the viewer's next sharing state, and stores reply and state in one ``append_and_share``
(one transaction), guarded by ``expected_version`` so that a writer outside the Hub
cannot make that guess wrong (it retries with the new last sequence).
"""

from __future__ import annotations

from typing import Any

from sharedesk.actors._base import HubActor
from sharedesk.actors._messages import Append, AppendAndShare, Push
from sharedesk.projection import note_present
from sharedesk.protocol.errors import ConcurrencyError, SharedeskError, SharingStateConflict
from sharedesk.protocol.events import Event
from sharedesk.protocol.views import SharingState

#: Attempts of a commit when a writer outside the Hub moved the session meanwhile.
_COMMIT_ATTEMPTS = 3


class SessionActor(HubActor):
    """The writer of one session: appends, commits turns, pushes committed events.

    Hooks: ``on_start``/``on_stop`` only log (actor thread). The last sequence is read
    from the store on the first message, so a failing store fails that request, not the
    start. A failure other than a ``SharedeskError`` restarts the actor (see
    :mod:`sharedesk.actors._base`).
    """

    kind = "session"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: The session's last sequence as this actor knows it; ``None``: read it again.
        self.last: int | None = None

    def context(self, message: Any) -> dict[str, Any]:
        """Bind ``run_id`` (first event carrying one) and ``viewer`` (commits)."""
        extra: dict[str, Any] = {}
        if isinstance(message, Append | AppendAndShare):
            for event in message.events:
                if event.run_id is not None:
                    extra["run_id"] = event.run_id
                    break
        if isinstance(message, AppendAndShare):
            extra["viewer"] = message.viewer
        return extra

    def handle(self, message: Any) -> Any:
        """Serve :class:`Append` and :class:`AppendAndShare`."""
        match message:
            case Append(events=events, expected_version=expected_version):
                return self._append(events, expected_version)
            case AppendAndShare():
                return self._append_and_share(message)
        raise TypeError(f"unexpected message {type(message).__name__}")

    def _known_last(self) -> int:
        if self.last is None:
            self.last = self.hub.store.last_sequence(self.key.session_id)
        return self.last

    def _append(self, events: list[Event], expected_version: int | None) -> list[Event]:
        self._known_last()
        try:
            stored = self.hub.store.append(
                self.key.session_id, events, expected_version=expected_version
            )
        except SharedeskError:
            self.last = None
            raise
        self._publish(stored)
        return stored

    def _append_and_share(self, message: AppendAndShare) -> list[Event]:
        store = self.hub.store
        session_id = self.key.session_id
        for attempt in range(_COMMIT_ATTEMPTS):
            last = self._known_last()
            state = message.state
            if message.events:
                state = note_present(state, last + 1)
            try:
                stored = store.append_and_share(
                    session_id,
                    message.events,
                    viewer=message.viewer,
                    state=state,
                    expected_state=message.expected_state,
                    expected_version=last if message.events else None,
                )
            except SharingStateConflict:
                raise
            except ConcurrencyError:
                # Someone outside the Hub appended: learn the new last sequence, retry.
                self.last = None
                if attempt + 1 == _COMMIT_ATTEMPTS:
                    raise
                continue
            except SharedeskError:
                self.last = None
                raise
            if stored and stored[0].sequence != last + 1:
                self._correct_present(message, state, stored[0])
            self._publish(stored)
            return stored
        raise AssertionError("unreachable")  # pragma: no cover

    def _correct_present(
        self, message: AppendAndShare, written: SharingState, reply: Event
    ) -> None:
        # The reply's id was already stored, so it kept its old sequence and nothing was
        # appended: replace the guessed present entry by the reply's real sequence.
        assert reply.sequence is not None
        state = message.state
        if reply.sequence > state.watermark:
            state = note_present(state, reply.sequence)
        self.hub.store.append_and_share(
            self.key.session_id,
            [],
            viewer=message.viewer,
            state=state,
            expected_state=written,
        )

    def _publish(self, stored: list[Event]) -> None:
        last = self._known_last()
        ordered = stored if len(stored) == 1 else sorted(stored, key=_sequence_of)
        fresh: list[Event] = []
        for event in ordered:
            if _sequence_of(event) > last:
                fresh.append(event)
                last = _sequence_of(event)
        self.last = last
        projectors = self.hub._subscribers_of(self.key.session_id)
        if not fresh or not projectors:
            return
        push = Push(events=tuple(fresh))
        for projector in projectors:
            projector.deliver(push)  # one that stopped rebuilds when it is next started


def _sequence_of(event: Event) -> int:
    assert event.sequence is not None
    return event.sequence
