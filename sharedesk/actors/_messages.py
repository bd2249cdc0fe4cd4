"""The messages the Hub's actors exchange (frozen Structs, handled with ``match``).

A request is a :class:`Request` parametrized by the type of its answer, so
``Hub._call(key, View(window=30))`` is typed ``Projection``; a told message (``Push``)
has no answer and is a plain Struct.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.events import Event
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.views import Conversation, Projection, SessionMessage, SharingState

#: The type of a request's answer.
R = TypeVar("R")


class Request(msgspec.Struct, Generic[R], frozen=True):
    """Base of the messages asked of an actor; ``R`` is the type of the answer."""


class Append(Request[list[Event]], frozen=True):
    """Ask a session actor to append events (answer: the stored events).

    Attributes:
        events: The events to append.
        expected_version: As ``EventStore.append``.
    """

    events: list[Event]
    expected_version: int | None = None


class AppendAndShare(Request[list[Event]], frozen=True):
    """Ask a session actor to commit a turn: append its reply and store the next state.

    Attributes:
        events: The reply (zero or one event).
        viewer: The viewer's author key.
        state: The state to store, before the reply is noted as present.
        expected_state: The stored state the turn was planned from (compare-and-swap).
    """

    events: list[Event]
    viewer: str
    state: SharingState
    expected_state: SharingState | None


class Push(msgspec.Struct, frozen=True):
    """Told to projectors: committed events, in order, without gap or duplicate.

    Attributes:
        events: Consecutive stored events, oldest first.
    """

    events: tuple[Event, ...]


class View(Request[Projection], frozen=True):
    """Ask a projector for its view (answer: a ``Projection``).

    Attributes:
        window: How many qualifying messages at most.
    """

    window: int


class GetTranscript(Request[Transcript], frozen=True):
    """Ask a projector for its viewer's transcript, brought up to date (answer: ``Transcript``).

    Attributes:
        viewer: The participant whose roles the transcript takes.
    """

    viewer: SessionAuthor


class TurnPlan(msgspec.Struct, frozen=True):
    """What a turn shows and what committing it will store.

    Attributes:
        conversation: The conversation of the turn.
        messages: What the viewer must read (never rows the viewer wrote).
        reason: ``None`` for a delta, else ``"initial"`` or a ``ReinitializeReason`` value.
        expected_state: The stored state the turn was planned from (``None``: none).
        next_state: The state committing stores, before the reply is noted as present:
            the watermark is the last sequence when the turn was planned.
    """

    conversation: Conversation
    messages: list[SessionMessage]
    reason: str | None
    expected_state: SharingState | None
    next_state: SharingState


class Plan(Request[TurnPlan], frozen=True):
    """Ask the sharing actor to plan a turn (answer: a ``TurnPlan``).

    Attributes:
        viewer: Whose turn it is.
        conversation: The channel or thread.
    """

    viewer: SessionAuthor
    conversation: Conversation


class Commit(Request[Event | None], frozen=True):
    """Ask the sharing actor to commit a planned turn (answer: the stored reply or ``None``).

    Attributes:
        viewer: Whose turn it is.
        plan: The plan being committed.
        reply: The reply event, if any.
    """

    viewer: SessionAuthor
    plan: TurnPlan
    reply: Event | None
