"""Conversations, log rows, pages, projections and sharing states."""

from __future__ import annotations

import enum

import msgspec

from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.constants import PRESENT_SET_LIMIT, SESSION_WINDOW
from sharedesk.protocol.errors import PresentSetTooLarge
from sharedesk.protocol.events import Event, Text

__all__ = [
    "Conversation",
    "Delta",
    "LogMessage",
    "Projection",
    "Reinitialize",
    "ReinitializeReason",
    "SessionMessage",
    "SessionPage",
    "SessionQuery",
    "SharingQuery",
    "SharingState",
]


class Conversation(msgspec.Struct, frozen=True):
    """The channel of a desk, or one thread in it.

    Attributes:
        desk: The desk (session) id.
        thread_root: Sequence of the thread's root row, or ``None`` for the channel.
    """

    desk: str
    thread_root: int | None = None


class LogMessage(msgspec.Struct, frozen=True):
    """One raw row of a host log.

    Attributes:
        sequence: The row's position in its log.
        author: Who wrote it.
        content: The text as stored.
        desk: The desk the row belongs to (rows of other desks never qualify).
        parent: Sequence of the thread root this row replies to, or ``None``.
        covers: For a compaction's summary row, the authors it summarises; else ``()``.
    """

    sequence: int
    author: SessionAuthor
    content: str
    desk: str
    parent: int | None = None
    covers: tuple[SessionAuthor, ...] = ()


def to_log_message(session_id: str, event: Event) -> LogMessage:
    """Return a stored ``Text`` event as a log row of desk ``session_id``."""
    assert isinstance(event.body, Text) and event.sequence is not None
    return LogMessage(event.sequence, event.author, event.body.content, session_id, event.parent)


class SessionPage(msgspec.Struct, frozen=True):
    """One page of a host log, newest first.

    Attributes:
        messages: The rows, newest first.
        next_before: Exclusive cursor for the next read; ``None`` when the log has ended.
    """

    messages: list[LogMessage]
    next_before: int | None


class SessionQuery(msgspec.Struct, frozen=True):
    """What to project.

    Attributes:
        conversation: The channel or thread to project.
        before: Exclusive upper bound; ``None`` means from the newest row.
        window: How many qualifying messages to return at most.
    """

    conversation: Conversation
    before: int | None = None
    window: int = SESSION_WINDOW


class SessionMessage(msgspec.Struct, frozen=True):
    """One message of a participant's view, attributed.

    Attributes:
        sequence: The row's sequence.
        author: Who wrote it.
        content: The text, exactly as stored.
        parent: The thread root it replies to, or ``None`` for a root.
        covers: For a compaction's summary, the authors of the rows it replaces (its
            ``sequence`` is the compaction's ``through``); ``()`` for an ordinary row.
    """

    sequence: int
    author: SessionAuthor
    content: str
    parent: int | None = None
    covers: tuple[SessionAuthor, ...] = ()


class Projection(msgspec.Struct, frozen=True):
    """A participant's view of a conversation.

    Attributes:
        messages: The messages, oldest first.
        partial: Whether ``SCAN_LIMIT`` stopped the walk (a success, not an error).
    """

    messages: list[SessionMessage]
    partial: bool


class SharingState(msgspec.Struct, frozen=True):
    """What one participant has been shown of one conversation.

    Built or decoded with more than ``PRESENT_SET_LIMIT`` present sequences, it raises
    ``PresentSetTooLarge``.

    Attributes:
        conversation: The conversation the state tracks.
        watermark: Highest sequence up to which everything was shown.
        present_above_watermark: Later rows the participant already has (its own replies).
        paged: Whether its deltas come in pages of at most ``SESSION_WINDOW`` messages,
            oldest first: a late joiner (``Hub.turn(..., start_after=N)``) catching up.
            Cleared by the page that reaches the last sequence.
    """

    conversation: Conversation
    watermark: int
    present_above_watermark: frozenset[int] = frozenset()
    paged: bool = False

    def __post_init__(self) -> None:
        if len(self.present_above_watermark) > PRESENT_SET_LIMIT:
            raise PresentSetTooLarge(PRESENT_SET_LIMIT, len(self.present_above_watermark))


class SharingQuery(msgspec.Struct, frozen=True):
    """What delta to prepare.

    Attributes:
        requested: The conversation the participant asks about.
        bound: The conversation the participant is bound to.
        before: Exclusive upper bound of the delta (usually the log's last sequence + 1).
    """

    requested: Conversation
    bound: Conversation
    before: int


class Delta(msgspec.Struct, frozen=True):
    """The rows a participant has not seen, and the state to commit once they are shown.

    Attributes:
        messages: The unseen qualifying rows, oldest first.
        next_state: The state to store after the turn is durably appended.
    """

    messages: list[SessionMessage]
    next_state: SharingState


class ReinitializeReason(enum.StrEnum):
    """Why a delta could not be prepared and a full window is needed."""

    #: The requested, bound or stored conversation differs.
    CONVERSATION_CHANGED = "conversation_changed"
    #: The watermark was not crossed inside the bounded scan.
    GAP_TOO_LARGE = "gap_too_large"
    #: The log ended before reaching the watermark.
    WATERMARK_UNAVAILABLE = "watermark_unavailable"


class Reinitialize(msgspec.Struct, frozen=True):
    """A request to re-seed the participant with a full window, for a ``reason``."""

    reason: ReinitializeReason
