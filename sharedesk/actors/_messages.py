"""The messages the Hub's actors exchange (frozen Structs, handled with ``match``).

A request is a :class:`Request` parametrized by the type of its answer, so
``ActorSupervisor.call(key, View(window=30))`` is typed ``Projection``; a told message
(``Push``, ``Committed``, ``CatchUp``) has no answer and is a plain Struct.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

from sharedesk.projection.turns import TurnPlan
from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.events import Event
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.views import Conversation, Projection

#: The type of a request's answer.
R = TypeVar("R")


class Request(msgspec.Struct, Generic[R], frozen=True):
    """Base of the messages asked of an actor; ``R`` is the type of the answer."""


class Push(msgspec.Struct, frozen=True):
    """Told to the sharing actor: committed events, in order, without gap or duplicate.

    Attributes:
        events: Consecutive stored events, oldest first (empty only in a wake-up sent to
            listeners of a session whose actor is not running: "re-check the store").
    """

    events: tuple[Event, ...]


class Committed(msgspec.Struct, frozen=True):
    """Told to a session actor: events the store committed for its session.

    Attributes:
        events: The stored events of one commit (any order; the actor sorts them).
    """

    events: tuple[Event, ...]


class CatchUp(msgspec.Struct, frozen=True):
    """Told to a session actor: the store says the session may hold events it has not published.

    Attributes:
        last: The session's last sequence the notice told of (``None``: unknown, re-check).
    """

    last: int | None = None


class Prime(Request[int], frozen=True):
    """Ask a session actor to push everything committed after ``base`` from now on.

    Sent when a listener is added on a following Hub, so that events other processes
    commit after the listener was added reach it (answer: the actor's last sequence).

    Attributes:
        base: The session's last sequence read before the listener was added.
    """

    base: int


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
        limit: Fold only the newest ``limit`` events (``None``: all).
        max_messages: As ``TranscriptBuilder.from_store``.
        max_chars: As ``TranscriptBuilder.from_store``.
        max_tokens_approx: As ``TranscriptBuilder.from_store``.
    """

    viewer: SessionAuthor
    limit: int | None = None
    max_messages: int | None = None
    max_chars: int | None = None
    max_tokens_approx: int | None = None


class Plan(Request[TurnPlan], frozen=True):
    """Ask the sharing actor to plan a turn (answer: a ``TurnPlan``).

    Attributes:
        viewer: Whose turn it is.
        conversation: The channel or thread.
    """

    viewer: SessionAuthor
    conversation: Conversation


__all__ = [
    "CatchUp",
    "Committed",
    "GetTranscript",
    "Plan",
    "Prime",
    "Push",
    "Request",
    "TurnPlan",
    "View",
]
