"""The messages the Hub's actors exchange (frozen Structs, handled with ``match``).

A request is a :class:`Request` parametrized by the type of its answer, so
``ActorSupervisor.call(key, View(window=30))`` is typed ``Projection``; a told message
(``Push``, ``Committed``, ``CatchUp``) has no answer and is a plain Struct.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

from sharedesk.projection.messages import Budgets
from sharedesk.projection.turns import TurnPlan
from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.events import Event
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.views import Conversation, Projection

R = TypeVar("R")


class Request(msgspec.Struct, Generic[R], frozen=True):
    """Base of the messages asked of an actor; ``R`` is the type of the answer."""


class Push(msgspec.Struct, frozen=True):
    """Told to a sharing actor and listeners: committed events, in order, no gap, none twice.

    Attributes:
        events: Consecutive stored events, oldest first (empty: a wake-up, re-check).
    """

    events: tuple[Event, ...]


class Committed(msgspec.Struct, frozen=True):
    """Told to a session actor: the stored events of one commit of its session (any order)."""

    events: tuple[Event, ...]


class CatchUp(msgspec.Struct, frozen=True):
    """Told to a session actor: the store may hold events after ``last`` (``None``: unknown)."""

    last: int | None = None


class Prime(Request[int], frozen=True):
    """Ask a session actor to publish from after ``base`` on (answer: its last sequence)."""

    base: int


class View(Request[Projection], frozen=True):
    """Ask a projector for its view of at most ``window`` messages."""

    window: int


class GetTranscript(Request[Transcript], frozen=True):
    """Ask a projector for ``viewer``'s transcript, with ``TranscriptBuilder``'s budgets."""

    viewer: SessionAuthor
    limit: int | None = None
    budgets: Budgets = {}


class Plan(Request[TurnPlan], frozen=True):
    """Ask the sharing actor to plan a turn of ``viewer`` in ``conversation`` (see Hub.turn)."""

    viewer: SessionAuthor
    conversation: Conversation
    start_after: int | None = None
