"""The handles a Hub gives out: ``SessionHandle`` (one session) and ``Turn`` (one turn)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final, TypeVar

from sharedesk.projection.turns import TurnPlan
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, Text, new_event_id
from sharedesk.protocol.ports import SessionLog
from sharedesk.protocol.validation import check_author, check_events
from sharedesk.protocol.views import Conversation, SessionMessage

if TYPE_CHECKING:
    from sharedesk.actors.hub import Hub


def post_event(author: SessionAuthor, content: str, parent: int | None, id: str | None) -> Event:
    """Return the ``Text`` event a post stores (``ValidationError``: not a ``str``)."""
    if not isinstance(content, str):
        raise ValidationError(f"content must be a str, got {type(content).__name__}")
    return Event(
        check_author(author), Text(content), id=new_event_id() if id is None else id, parent=parent
    )


def reply_event(turn: Turn, reply: str | Event | None) -> Event | None:
    """Return a turn's reply as the event to store (``None``: no reply).

    Raises:
        ValidationError: A malformed reply, or an ``Event`` by someone else.
    """
    event: Event | None
    if reply is None:
        event = None
    elif isinstance(reply, str):
        event = Event(
            turn.viewer, Text(reply), id=new_event_id(), parent=turn.conversation.thread_root
        )
    elif isinstance(reply, Event):
        if author_key(reply.author) != author_key(turn.viewer):
            raise ValidationError(
                f"a turn's reply must be written by its viewer {author_key(turn.viewer)}, "
                f"not {author_key(reply.author)}"
            )
        event = reply
    else:
        raise ValidationError(f"reply must be a str, an Event or None, got {type(reply)}")
    if event is not None:  # checked here, before the store
        (event,) = check_events([event])
    return event


class SessionHandle:
    """A handle to one session of a Hub (its methods are the Hub's, for one session).

    Handles are cheap and hold no state of their own; take as many as you like.
    """

    __slots__ = ("_hub", "session_id")

    def __init__(self, hub: Hub, session_id: str) -> None:
        self._hub = hub
        #: The session's id.
        self.session_id = session_id

    def append(
        self, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        """Append events to the session (as :meth:`Hub.append`)."""
        return self._hub.append(self.session_id, events, expected_version=expected_version)

    def post(
        self,
        author: SessionAuthor,
        content: str,
        *,
        parent: int | None = None,
        id: str | None = None,
    ) -> Event:
        """Post a ``Text`` message and return it as stored.

        Args:
            author: Who writes it.
            content: The text, stored exactly as given.
            parent: The thread root it replies to, or ``None`` for a new root.
            id: Idempotency key (default: a fresh uuid4 hex); posting the same id twice
                stores it once.

        Raises:
            ValidationError: Malformed input.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.

        Cost: as :meth:`Hub.append` of one event.
        """
        return self._hub.append(self.session_id, [post_event(author, content, parent, id)])[0]

    def last_sequence(self) -> int:
        """Return the session's last sequence. Cost: O(1)."""
        return self._hub.last_sequence(self.session_id)

    def log(self) -> SessionLog:
        """Return the session's ``Text`` rows as a ``SessionLog`` (read from the tail)."""
        return self._hub.log(self.session_id)

    def read(self, **bounds: Any) -> list[Event]:
        """Read the session's events (keywords as :meth:`Hub.read`)."""
        return self._hub.read(self.session_id, **bounds)


class TurnFields:
    """What a planned turn offers (shared by :class:`Turn` and ``AsyncTurn``).

    Attributes:
        session_id: The session (desk).
        viewer: Whose turn it is.
        plan: The plan: messages, reason, and the states the commit swaps.
    """

    __slots__ = ("plan", "session_id", "viewer")

    def __init__(self, session_id: str, viewer: SessionAuthor, plan: TurnPlan) -> None:
        self.session_id = session_id
        self.viewer = viewer
        self.plan = plan

    @property
    def conversation(self) -> Conversation:
        """The channel or thread of the turn."""
        return self.plan.conversation

    @property
    def messages(self) -> list[SessionMessage]:
        """What to read, oldest first.

        A full window (``reason`` not ``None``) is exactly the viewer's view, its own
        rows included; a delta holds the rows of the view above the watermark, except
        the viewer's own and its present set.
        """
        return self.plan.messages

    @property
    def reason(self) -> str | None:
        """``None`` for a delta, else ``"initial"`` or the ``ReinitializeReason`` value."""
        return self.plan.reason


class Turn(TurnFields):
    """What a viewer must read before its next turn, and the way to commit that turn.

    Nothing moves until :meth:`commit` returns: a turn abandoned (or a process killed
    before committing) is offered again in full by the next ``hub.turn``.
    """

    __slots__ = ("_hub", "committed")

    def __init__(self, hub: Hub, session_id: str, viewer: SessionAuthor, plan: TurnPlan) -> None:
        super().__init__(session_id, viewer, plan)
        self._hub = hub
        #: Whether :meth:`commit` succeeded (a second one raises ``TurnAlreadyCommitted``).
        self.committed = False

    def commit(self, reply: str | Event | None = None) -> Event | None:
        """Append the reply and advance the viewer's sharing state in one durable step.

        The new watermark is the session's last sequence when the turn was planned, and
        the reply's sequence is noted as present, so the reply is never offered back to
        the viewer while rows others appended meanwhile still are.

        Args:
            reply: ``None`` (just advance), a ``str`` posted by the viewer in the turn's
                conversation (in a thread: a reply to its root), or an ``Event`` written
                by the viewer.

        Returns:
            The stored reply, or ``None``.

        Raises:
            SharingStateConflict: Another turn of the same viewer and conversation
                moved the stored state since this one was planned (or this turn was
                committed already); nothing was written. This is the only way a commit
                fails for what others did: rows appended meanwhile (in this process or
                another) never make it fail, and are offered by the next turn. Take a
                new turn: it shows what that other turn did not. The compare-and-swap
                is on the state's value, so a turn whose rival left the state as it was
                (no reply, nothing new) commits; its messages are then empty, so
                nothing is delivered twice.
            TurnAlreadyCommitted: This turn was committed already (a
                ``SharingStateConflict``); nothing was written.
            ValidationError: A malformed reply, or an ``Event`` by someone else.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.

        Cost: one store transaction holding reply and state (LMDB: one fsync), on the
        caller's thread.
        """
        return self._hub.committed(self, interruptible(self._hub.submit_commit(self, reply)))


T = TypeVar("T")
#: Most seconds a caller waiting on a write sleeps before it looks for a pending signal.
_WAKE: Final = 0.25


def interruptible(future: Future[T]) -> T:
    """Return ``future.result()``, waking every ``_WAKE`` s so that Ctrl-C is never missed.

    A signal that reaches the process just before a thread blocks in an untimed wait
    (or while another thread takes it) leaves that wait asleep; a timed wait returns to
    Python, which raises the pending ``KeyboardInterrupt``.
    """
    while True:
        try:
            return future.result(timeout=_WAKE)
        except TimeoutError:
            if future.done():
                raise  # the write itself timed out
            continue
