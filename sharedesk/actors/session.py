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
append run here (if others appended in between, a catch-up pushes the run instead:
nothing is read on the writer's thread), and the lock is released. The store's error, if
any, goes to the submitter; the actor keeps the last sequence it pushed (a write whose
outcome was unknown but which committed is pushed by the next write or catch-up).

A turn's commit comes straight here (:class:`~sharedesk.actors._messages.Commit`, no
other actor on the way): the actor stores reply and state in one ``append_and_share``
with ``reply_present=True``, so the store notes the reply's real sequence as present
inside the same write transaction (one transaction, no guess, no repair). The only check
is the compare-and-swap on the viewer's own sharing state: rows others appended
meanwhile (through the Hub or straight to the store, in this process or another) never
make a commit fail; the next turn offers them.

What the actor pushes is always the run of stored events right after the last sequence it
pushed (:attr:`SessionActor.last`), whoever appended them: when a write's stored events
do not follow on from it (another process, or a caller of the store itself, appended in
between), the actor reads the events in between from the store and pushes them first
(at most ``SCAN_LIMIT`` events: further behind, the push follows a gap and subscribers
rebuild from the store, as a :class:`~sharedesk.actors._tail.Tail` does on any gap).
On a store several processes share (a ``FollowingStore``), the Hub hands each commit
notice to :meth:`SessionActor.notice`, on the store's listener thread: a notice for
events the actor has pushed already (its own commits) costs one comparison; any other
is a told :class:`~sharedesk.actors._messages.CatchUp`, on which the actor reads what it
lacks and pushes it, in order with its own writes (one message at a time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sharedesk.actors._base import HubActor
from sharedesk.actors._messages import Append, CatchUp, Commit, Prime, Push
from sharedesk.protocol._log import logger
from sharedesk.protocol.constants import SCAN_LIMIT
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

    The flags below are shared with the store's listener thread (:meth:`notice`)
    without a lock: each is a single assignment, and the order of the writes on each
    side (see :meth:`notice` and :meth:`_wrote`) makes sure a notice is either seen
    by the write in progress or told as a :class:`CatchUp`.
    """

    kind = "session"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: The last sequence pushed to subscribers (every event up to it was pushed, or
        #: nobody subscribed); ``None``: not known yet (read on the first write).
        self.last: int | None = None
        #: The newest sequence a notice told of (written by the listener thread only).
        self.noticed = 0
        #: A notice said any session may have changed (a reconnection of the store).
        self.recheck = False
        #: A write is in progress (it checks the notices when it ends).
        self.writing = False
        #: A :class:`CatchUp` is queued and not yet started.
        self.catching = False

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
        """Serve :class:`Append`, :class:`Commit`, :class:`CatchUp` (told) and :class:`Prime`."""
        match message:
            case Append(events=events, expected_version=expected_version, unless_stored=guard):
                return self._append(events, expected_version, guard)
            case Commit():
                return self._commit(message)
            case CatchUp():
                self._catch_up_told()
                return None
            case Prime(base=base):
                if self.last is None:
                    self.last = base
                return self.last
        raise TypeError(f"unexpected message {type(message).__name__}")

    # -- notices from a store several processes share ----------------------------------

    def notice(self, last: int | None) -> None:
        """Take a commit notice: the session's last sequence is ``last`` (``None``: unknown).

        Called on the store's listener thread. A notice for what the actor pushed
        already (its own commits) costs one comparison; one that arrives while a write
        is in progress is left to that write, which checks :attr:`noticed` when it ends
        (:meth:`_wrote`); any other tells the actor one :class:`CatchUp` (at most one is
        queued at a time).

        Cost: O(1); never blocks (a told message may start the actor's thread).
        """
        if last is None:
            self.recheck = True
        else:
            known = self.last
            if known is not None and last <= known:
                return  # pushed already: this Hub's own commit, or caught up
            if last > self.noticed:
                self.noticed = last
        if self.writing:
            return  # the write in progress sees the notice when it ends
        if last is not None:
            known = self.last  # a write that ended meanwhile set it before clearing writing
            if known is not None and last <= known:
                return
        self._want_catch_up()

    def _want_catch_up(self) -> None:
        if self.catching:
            return  # the queued one reads the store after this notice
        self.catching = True
        self.deliver(CatchUp())

    def _writes(self) -> None:
        # Marks a write in progress (under turn_lock): notices meanwhile wait for it.
        self.writing = True

    def _wrote(self) -> None:
        # Ends a write (still under turn_lock; last is set by now): a notice of events
        # it did not push, told while it ran, becomes a catch-up.
        self.writing = False
        last = self.last
        if self.recheck or (last is not None and self.noticed > last):
            self._want_catch_up()

    def _catch_up(self) -> None:
        # CatchUp, on the actor's thread: push what the store holds after self.last.
        self.catching = False
        self.recheck = False
        session_id = self.key.session_id
        newest = self.hub.store.last_sequence(session_id)
        last = self.last
        if last is None or newest <= last:
            if last is None:
                self.last = newest  # nothing was pushed yet: nothing to push from
            return
        if not self.hub.subscribers_of(session_id):
            self.last = newest
            return
        pushed = self._push_from_store(last, newest)
        _log.debug("session.caught_up", session_id=session_id, events=pushed, last=self.last)

    def _catch_up_told(self) -> None:
        # A told message has nobody to hand a store error to, and must not stop the
        # actor: log it; the next notice or write of this session tries again.
        try:
            self._catch_up()
        except SharedeskError as error:
            self.recheck = True
            _log.warning(
                "session.catch_up_failed", session_id=self.key.session_id, error=repr(error)
            )

    def _known_last(self) -> int:
        if self.last is None:
            self.last = self.hub.store.last_sequence(self.key.session_id)
        return self.last

    def _append(
        self, events: list[Event], expected_version: int | None, unless_stored: str | None = None
    ) -> list[Event]:
        self._known_last()
        self._writes()
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
            self._publish(stored)
        finally:
            self._wrote()
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
        self._writes()
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
            self._wrote()
            self.turn_lock.release()
            raise
        return True

    def _settled(
        self, result: list[Event] | None, error: BaseException | None, commit: Commit | None
    ) -> None:
        # The end of a submitted write, on the store's writer thread (turn_lock held):
        # nothing is read here (a gap becomes a catch-up on the actor's thread).
        try:
            if error is None and result is not None:
                self._publish(result, may_read=False)
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
        finally:
            self._wrote()
            self.turn_lock.release()

    def _commit(self, message: Commit) -> Event | None:
        plan = message.plan
        self._known_last()
        events = [] if message.reply is None else [message.reply]
        self._writes()
        try:
            stored = self.hub.store.append_and_share(
                self.key.session_id,
                events,
                viewer=message.viewer,
                state=plan.next_state,
                expected_state=plan.expected_state,
                reply_present=bool(events),
            )
            self._publish(stored)
        finally:
            self._wrote()
        _log.info(
            "turn.committed",
            watermark=plan.next_state.watermark,
            reply_sequence=stored[0].sequence if stored else None,
            delivered=len(plan.messages),
        )
        return stored[0] if stored else None

    def _publish(self, stored: list[Event], *, may_read: bool = True) -> None:
        # Push the stored events the subscribers lack, as one consecutive run after
        # self.last: events others appended in between are read from the store first
        # (on the writer's thread, ``may_read=False``, a catch-up does that instead).
        last = self._known_last()
        ordered = stored if _ascending(stored) else sorted(stored, key=_sequence_of)
        fresh = [event for event in ordered if _sequence_of(event) > last]
        if not fresh:
            return
        top = _sequence_of(fresh[-1])
        subscribers = self.hub.subscribers_of(self.key.session_id)
        if not subscribers:
            self.last = top
            return
        if top - last != len(fresh):  # not the run right after last: others appended
            if may_read:
                try:
                    self._push_from_store(last, top)
                    return
                except SharedeskError as error:  # the write stands: push it later
                    _log.warning(
                        "session.push_read_failed",
                        session_id=self.key.session_id,
                        error=repr(error),
                    )
            self._want_catch_up()  # reads (last, newest] and pushes it, ours included
            return
        self.last = top
        _push(subscribers, fresh)

    def _push_from_store(self, last: int, newest: int) -> int:
        # Read (last, newest] from the store and push it; return how many events were
        # pushed. Sets self.last as it goes. More than SCAN_LIMIT behind, only the
        # newest SCAN_LIMIT are read and pushed: the push then follows a gap, and a
        # subscriber that sees one rebuilds from the store (as a Tail does), so a
        # session far behind costs one bounded read, not its whole history.
        store = self.hub.store
        session_id = self.key.session_id
        last = max(last, newest - SCAN_LIMIT)
        pushed = 0
        while last < newest:
            page = store.read(session_id, after=last, before=newest + 1, limit=SCAN_LIMIT)
            if not page:
                break
            subscribers = self.hub.subscribers_of(session_id)
            if subscribers:
                _push(subscribers, page)
            last = self.last = _sequence_of(page[-1])
            pushed += len(page)
        return pushed


def _push(subscribers: tuple[HubActor, ...], events: list[Event]) -> None:
    push = Push(events=tuple(events))
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
