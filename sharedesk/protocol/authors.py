"""Authors: who wrote a row. Attribution is kept; roles are derived per viewer at the edge."""

from __future__ import annotations

import msgspec

__all__ = [
    "Agent",
    "Operator",
    "Person",
    "SessionAuthor",
    "System",
    "author_key",
    "author_label",
    "same_participant",
]


class _Author(msgspec.Struct, frozen=True, tag_field="type"):
    """Tagged base of the author kinds (tag field ``"type"``)."""


class Operator(_Author, frozen=True, tag="operator"):
    """The desk's operator: the host program or the person who runs it."""


class _Participant(_Author, frozen=True):
    """Base of the participants a stable id names (``Person``, ``Agent``).

    Attributes:
        id: Stable identifier of the participant.
        label: Display name captured with the row (never looked up later).
    """

    id: str
    label: str


class Person(_Participant, frozen=True, tag="person"):
    """A human participant, named by its ``id`` and shown by its ``label``."""


class Agent(_Participant, frozen=True, tag="agent"):
    """An AI agent participant, named by its ``id`` and shown by its ``label``."""


class System(_Author, frozen=True, tag="system"):
    """A system source: a notice, a workflow report, a system prompt.

    Attributes:
        kind: What kind of system source (e.g. ``"prompt"``, ``"workflow"``).
        label: Display name captured with the row.
    """

    kind: str
    label: str


#: Any author of a row, tagged on ``"type"``.
SessionAuthor = Operator | Person | Agent | System


def author_key(author: SessionAuthor) -> str:
    """Return a stable string naming ``author``: ``"operator"``, ``"person:ID"``, ...

    The key identifies a participant regardless of its label. Cost: O(1).
    """
    match author:
        case Operator():
            return "operator"
        case Person(id=ident):
            return f"person:{ident}"
        case Agent(id=ident):
            return f"agent:{ident}"
        case System(kind=kind):
            return f"system:{kind}"
    raise AssertionError(author)  # pragma: no cover - exhaustive


def same_participant(a: SessionAuthor, b: SessionAuthor) -> bool:
    """Return whether ``a`` and ``b`` name the same participant (labels are ignored)."""
    return author_key(a) == author_key(b)


def author_label(author: SessionAuthor) -> str:
    """Return the name readers are shown for ``author``.

    Its label, else its id (a ``System``: its kind); ``"operator"`` for the operator.
    Cost: O(1).
    """
    if isinstance(author, Person | Agent):
        return author.label or author.id
    if isinstance(author, System):
        return author.label or author.kind
    return "operator"
