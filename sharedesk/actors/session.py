"""SessionActor: the only writer of one session's stream.

The actor knows its session's last sequence (read once, O(1), on first use), appends
through the store, answers once the store says the events are durable, and then hands
every subscribed actor (the sharing actor; projectors catch up by themselves) the newly
committed events, in sequence order, with no gap and no duplicate (events the store
returned for known ids are not pushed again). Pushes are queued while the write still
holds the actor's ``turn_lock``, so they leave in commit order.

Writes to different sessions never wait on one another: a write to an idle session runs
on its caller's thread (see :mod:`sharedesk.actors._base`), so the store's group commit
sees as many concurrent appends as there are writers and batches them into one fsync;
a write to a busy session queues behind the one in progress, on the actor's thread.

A write may also be *submitted* (:meth:`SessionActor.try_submit`, for ``AsyncHub``):
the actor's ``turn_lock`` is taken without blocking, the append is queued on the
store's writer (the ``SubmittingStore`` port) and no thread waits for it; when the
writer has settled it, on its own thread, the events are pushed exactly as after an
append run here, and the lock is released. The store's error, if any, goes to the
submitter and the actor forgets its last sequence (read again by the next write), as
after a failed append run here.

A turn's commit comes straight here (:class:`~sharedesk.actors._messages.Commit`, no
other actor on the way): the actor stores reply and state in one ``append_and_share``
with ``reply_present=True``, so the store notes the reply's real sequence as present
inside the same write transaction (one transaction, no guess, no repair). The only check
is the compare-and-swap on the viewer's own sharing state: rows others appended
meanwhile (through the Hub or straight to the store, in this process or another) never
make a commit fail; the next turn offers them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sharedesk.actors._base import HubActor
from sharedesk.actors._messages import Append, Commit, Push
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import SharedeskError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import CompletionSink, WriteTicket

_log = logger()


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
        if isinstance(message, Append):
            for event in message.events:
                if event.run_id is not None:
                    extra["run_id"] = event.run_id
                    break
        if isinstance(message, Commit):
            extra["viewer"] = message.viewer
            if message.reply is not None and message.reply.run_id is not None:
                extra["run_id"] = message.reply.run_id
        return extra

    def handle(self, message: Any) -> Any:
        """Serve :class:`Append` and :class:`Commit`."""
        match message:
            case Append(events=events, expected_version=expected_version, unless_stored=guard):
                return self._append(events, expected_version, guard)
            case Commit():
                return self._commit(message)
        raise TypeError(f"unexpected message {type(message).__name__}")

    def _known_last(self) -> int:
        if self.last is None:
            self.last = self.hub.store.last_sequence(self.key.session_id)
        return self.last

    def _append(
        self, events: list[Event], expected_version: int | None, unless_stored: str | None = None
    ) -> list[Event]:
        self._known_last()
        try:
            if unless_stored is None:
                stored = self.hub.store.append(
                    self.key.session_id, events, expected_version=expected_version
                )
            else:
                stored = self.hub.store.append(
                    self.key.session_id,
                    events,
                    expected_version=expected_version,
                    unless_stored=unless_stored,
                )
        except SharedeskError:
            self.last = None
            raise
        self._publish(stored)
        return stored

    def try_submit(
        self, message: Append | Commit, ticket: WriteTicket, release: Callable[[], None]
    ) -> bool:
        """Hand an append or a commit to the store's writer without waiting, if idle.

        Takes :attr:`turn_lock` (see :meth:`HubActor.hold`) and submits the write to a
        :class:`~sharedesk.protocol.ports.SubmittingStore` (an ``Append`` as
        ``submit_append``, a ``Commit`` as ``submit_append_and_share`` with
        ``reply_present``, as :meth:`handle` would write them); once the write is
        settled, on the writer's thread, the committed events are pushed as after any
        write, the lock is released, ``release`` is called, and only then is ``ticket``
        settled (with the stored events: a commit's reply, or none). The actor must know
        its last sequence already (it does after its first write), so nothing is read.

        Returns:
            ``True`` when submitted (``release`` will be called), ``False`` when the
            actor is busy, does not know its last sequence, or its store cannot take
            submitted writes (nothing was done; write the usual way).

        Raises:
            ValidationError: Malformed input; nothing was queued.
            StoreClosedError: The store is closed.

        Cost: O(len(events)) validation and one queue append; never blocks.
        """
        # The SubmittingStore port, found by its methods: an isinstance() check against
        # the runtime-checkable Protocol costs ~40 us, more than the rest of this call.
        store = self.hub.store
        name = "submit_append" if isinstance(message, Append) else "submit_append_and_share"
        submit = getattr(store, name, None)
        if (
            self.last is None
            or submit is None
            # the guard is checked by a plain append
            or (isinstance(message, Append) and message.unless_stored is not None)
            or not self.hold()
        ):
            return False
        if self.last is None:
            self.turn_lock.release()
            return False
        held = _Held(self, ticket, release, message if isinstance(message, Commit) else None)
        try:
            if isinstance(message, Append):
                submit(
                    self.key.session_id,
                    message.events,
                    expected_version=message.expected_version,
                    ticket=held,
                )
            else:
                events = [] if message.reply is None else [message.reply]
                submit(
                    self.key.session_id,
                    events,
                    viewer=message.viewer,
                    state=message.plan.next_state,
                    expected_state=message.plan.expected_state,
                    reply_present=bool(events),
                    ticket=held,
                )
        except BaseException:
            self.turn_lock.release()
            raise
        return True

    def _settled(
        self, result: list[Event] | None, error: BaseException | None, commit: Commit | None
    ) -> None:
        # The end of a submitted write, on the store's writer thread (turn_lock held).
        try:
            if error is None and result is not None:
                self._publish(result)
                if commit is not None:
                    plan = commit.plan
                    _log.info(
                        "turn.committed",
                        session_id=self.key.session_id,
                        viewer=commit.viewer,
                        watermark=plan.next_state.watermark,
                        reply_sequence=result[0].sequence if result else None,
                        delivered=len(plan.messages),
                    )
            else:
                self.last = None
        finally:
            self.turn_lock.release()

    def _commit(self, message: Commit) -> Event | None:
        plan = message.plan
        self._known_last()
        events = [] if message.reply is None else [message.reply]
        try:
            stored = self.hub.store.append_and_share(
                self.key.session_id,
                events,
                viewer=message.viewer,
                state=plan.next_state,
                expected_state=plan.expected_state,
                reply_present=bool(events),
            )
        except SharedeskError:
            self.last = None
            raise
        self._publish(stored)
        _log.info(
            "turn.committed",
            watermark=plan.next_state.watermark,
            reply_sequence=stored[0].sequence if stored else None,
            delivered=len(plan.messages),
        )
        return stored[0] if stored else None

    def _publish(self, stored: list[Event]) -> None:
        last = self._known_last()
        ordered = stored if _ascending(stored) else sorted(stored, key=_sequence_of)
        fresh: list[Event] = []
        for event in ordered:
            if _sequence_of(event) > last:
                fresh.append(event)
                last = _sequence_of(event)
        self.last = last
        subscribers = self.hub.subscribers_of(self.key.session_id)
        if not fresh or not subscribers:
            return
        push = Push(events=tuple(fresh))
        for subscriber in subscribers:
            subscriber.deliver(push)  # one that stopped rebuilds when it is next started


def _ascending(events: list[Event]) -> bool:
    """Whether ``events`` are in strictly ascending sequence order (the usual case)."""
    previous = 0
    for event in events:
        sequence = _sequence_of(event)
        if sequence <= previous:
            return False
        previous = sequence
    return True


class _Held:
    """A ticket submitted by the session actor: settling it ends the actor's write first."""

    __slots__ = ("_actor", "_commit", "_inner", "_release")

    def __init__(
        self,
        actor: SessionActor,
        inner: WriteTicket,
        release: Callable[[], None],
        commit: Commit | None,
    ) -> None:
        self._actor = actor
        self._inner = inner
        self._release = release
        self._commit = commit

    @property
    def sink(self) -> CompletionSink:
        """The sink of the caller's ticket."""
        return self._inner.sink

    def settle(self, result: list[Event] | None, error: BaseException | None) -> None:
        """Push the committed events, release the actor and its pin, then settle the caller's."""
        try:
            self._actor._settled(result, error, self._commit)
        except Exception:  # never lose the caller's outcome
            _log.exception("session.push_failed", session_id=self._actor.key.session_id)
        finally:
            self._release()
            self._inner.settle(result, error)

    def resolve(self) -> None:
        """Resolve the caller's ticket."""
        self._inner.resolve()


def _sequence_of(event: Event) -> int:
    assert event.sequence is not None
    return event.sequence
