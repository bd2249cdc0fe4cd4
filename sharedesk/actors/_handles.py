"""The handles a Hub gives out: ``SessionHandle`` (one session) and ``Turn`` (one turn)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final, TypedDict, TypeVar, Unpack

from sharedesk.projection.turns import TurnPlan
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, Text, new_event_id
from sharedesk.protocol.ports import SessionLog, WriteFuture
from sharedesk.protocol.validation import check_author
from sharedesk.protocol.views import Conversation, SessionMessage

if TYPE_CHECKING:
    from sharedesk.actors.hub import Hub


class AppendOptions(TypedDict, total=False):
    """The keywords of an append (``Hub.append``, ``SessionHandle.append``), as the store's."""

    expected_version: int | None  #: Append only if the session's last sequence equals it.
    unless_stored: str | None  #: Append only if the session holds no event with this id.


class PostOptions(TypedDict, total=False):
    """The keywords of a post (``SessionHandle.post``, ``AsyncHub.post``)."""

    parent: int | None  #: The thread root it replies to (default ``None``: a new root).
    id: str | None  #: Idempotency key (default: a fresh uuid4 hex); stored once.


def post_event(
    author: SessionAuthor, content: str, parent: int | None = None, id: str | None = None
) -> Event:
    """Return the ``Text`` event a post stores (``ValidationError``: not a ``str``).

    Its author is checked here, so that the error names the post's argument; the rest is
    checked with its write (``check_write``).
    """
    if not isinstance(content, str):
        raise ValidationError(f"content must be a str, got {type(content).__name__}")
    return Event(
        check_author(author), Text(content), id=new_event_id() if id is None else id, parent=parent
    )


def reply_event(turn: Turn, reply: str | Event | None) -> Event | None:
    """Return a turn's reply as the event to store (``None``: no reply); see :func:`post_event`."""
    if reply is None:
        return None
    if isinstance(reply, str):
        reply = Event(turn.viewer, Text(reply), parent=turn.conversation.thread_root)
    elif not isinstance(reply, Event):
        raise ValidationError(f"reply must be a str, an Event or None, got {type(reply)}")
    elif author_key(reply.author) != author_key(turn.viewer):
        raise ValidationError(
            f"a turn's reply must be written by its viewer {author_key(turn.viewer)}, "
            f"not {author_key(reply.author)}"
        )
    return reply


class SessionHandle:
    """A handle to one session of a Hub (its methods are the Hub's, for one session).

    Handles are cheap and hold no state of their own; take as many as you like.
    """

    __slots__ = ("_hub", "session_id")

    def __init__(self, hub: Hub, session_id: str) -> None:
        self._hub = hub
        #: The session's id.
        self.session_id = session_id

    def append(self, events: Sequence[Event], **options: Unpack[AppendOptions]) -> list[Event]:
        """Append events to the session (as :meth:`Hub.append`)."""
        return self._hub.append(self.session_id, events, **options)

    def post(self, author: SessionAuthor, content: str, **options: Unpack[PostOptions]) -> Event:
        """Post ``content`` (stored exactly as given) by ``author``; return it as stored.

        The keywords are :class:`PostOptions` (``parent``, ``id``). Raises
        ``ValidationError`` (malformed input) or as :meth:`Hub.append`, whose cost it has.
        """
        return self._hub.append(self.session_id, [post_event(author, content, **options)])[0]

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

    __slots__ = ("_hub", "committed", "span")

    def __init__(self, hub: Hub, session_id: str, viewer: SessionAuthor, plan: TurnPlan) -> None:
        super().__init__(session_id, viewer, plan)
        self._hub = hub
        #: Whether :meth:`commit` succeeded (a second one raises ``TurnAlreadyCommitted``).
        self.committed = False
        #: The turn's ``invoke_agent`` span (``sharedesk.telemetry``), or ``None``.
        self.span: Any = None

    def commit(self, reply: str | Event | None = None) -> Event | None:
        """Append the reply and advance the viewer's sharing state in one durable step.

        The watermark moves to the session's last sequence when the turn was planned;
        the reply is noted as present, so it is never offered back to the viewer. Returns
        the stored reply, or ``None``.

        Args:
            reply: ``None`` (just advance), a ``str`` posted by the viewer in the turn's
                conversation (in a thread: a reply to its root), or an ``Event`` written
                by the viewer.

        Raises:
            SharingStateConflict: Another turn of the same viewer and conversation changed
                the stored state's value since this one was planned; nothing was written:
                take a new turn. Rows appended meanwhile never make a commit fail.
            TurnAlreadyCommitted: This turn was committed already; nothing was written.
            ValidationError: A malformed reply, or an ``Event`` by someone else.

        Cost: one store transaction holding reply and state (LMDB: one fsync), on the
        caller's thread.
        """
        stored = interruptible(self._hub.submit_commit(self, reply, WriteFuture()))
        return self._hub.committed(self, stored)


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
