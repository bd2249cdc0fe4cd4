"""Input checks shared by every store backend, so bad input fails the same way everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, cast

import msgspec

from sharedesk.protocol.authors import Agent, Operator, Person, SessionAuthor, System
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import RUN_STATUSES, Event, RunFinished
from sharedesk.protocol.views import Conversation

_EVENT_DECODER: Final = msgspec.msgpack.Decoder(Event)
_ENCODER: Final = msgspec.msgpack.Encoder()

#: Longest session id accepted, in UTF-8 bytes (keeps store keys bounded).
MAX_SESSION_ID_BYTES: Final = 400


def check_session_id(session_id: Any) -> str:
    """Return ``session_id`` if it is a usable session id.

    Raises:
        ValidationError: Not a non-empty ``str`` of at most ``MAX_SESSION_ID_BYTES``
            UTF-8 bytes (lone surrogates are refused).
    """
    if not isinstance(session_id, str):
        raise ValidationError(f"session_id must be a str, got {type(session_id).__name__}")
    if not session_id:
        raise ValidationError("session_id must not be empty")
    try:
        size = len(session_id.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValidationError(f"session_id is not valid Unicode text: {exc}") from exc
    if size > MAX_SESSION_ID_BYTES:
        raise ValidationError(
            f"session_id is {size} UTF-8 bytes; at most {MAX_SESSION_ID_BYTES} are allowed"
        )
    return session_id


def check_author(value: Any, name: str = "author") -> SessionAuthor:
    """Return ``value`` if it is an author (``Operator``, ``Person``, ``Agent``, ``System``).

    Args:
        value: The value to check.
        name: What to call it in the error message (``"viewer"``, ``"author"``).

    Raises:
        ValidationError: Not an author.

    Cost: O(1).
    """
    if not isinstance(value, Operator | Person | Agent | System):
        raise ValidationError(
            f"{name} must be an Operator, Person, Agent or System, got {type(value).__name__}"
        )
    return value


def check_optional_author(value: Any, name: str) -> SessionAuthor | None:
    """Return ``value`` if it is an author or ``None`` (as :func:`check_author`).

    Raises:
        ValidationError: Neither an author nor ``None``.

    Cost: O(1).
    """
    if value is not None and not isinstance(value, Operator | Person | Agent | System):
        raise ValidationError(
            f"{name} must be an Operator, Person, Agent, System or None, got {type(value).__name__}"
        )
    return value


def check_conversation(conversation: object, name: str = "conversation") -> Conversation:
    """Return ``conversation`` if it is a well-typed :class:`Conversation`.

    Args:
        conversation: The value to check.
        name: How to call it in the error message.

    Raises:
        ValidationError: Not a ``Conversation``, a non-``str`` desk, or a ``thread_root``
            that is neither ``None`` nor an ``int``.

    Cost: O(1).
    """
    if not isinstance(conversation, Conversation):
        raise ValidationError(f"{name} must be a Conversation, got {type(conversation).__name__}")
    if not isinstance(conversation.desk, str):
        raise ValidationError(f"{name}.desk must be a str, got {type(conversation.desk).__name__}")
    root = conversation.thread_root
    if root is not None and type(root) is not int:
        raise ValidationError(
            f"{name}.thread_root must be an int or None, got {type(root).__name__}"
        )
    return conversation


def check_optional_int(name: str, value: Any, *, minimum: int = 0) -> int | None:
    """Return ``value`` if it is ``None`` or an ``int`` (not a bool) of at least ``minimum``.

    Raises:
        ValidationError: Otherwise.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an int or None, got {type(value).__name__}")
    if value < minimum:
        raise ValidationError(f"{name} must be at least {minimum}, got {value}")
    return value


def check_optional_str(name: str, value: Any) -> str | None:
    """Return ``value`` if it is ``None`` or a non-empty ``str``.

    Raises:
        ValidationError: Otherwise.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{name} must be a non-empty str or None, got {value!r}")
    return value


def check_event_sequence(events: Any) -> Sequence[Event]:
    """Return ``events`` if it has the shape of a batch: a sequence, not a lone event or text.

    Only the container is checked; :func:`check_events` checks the elements.

    Raises:
        ValidationError: ``events`` is a single ``Event``, a ``str``/``bytes``, or not a
            sequence.

    Cost: O(1).
    """
    if type(events) is list:
        return events
    if (
        isinstance(events, Event)
        or not isinstance(events, Sequence)
        or isinstance(events, str | bytes)
    ):
        raise ValidationError(f"events must be a sequence of Event, got {type(events).__name__}")
    return cast(Sequence[Event], events)


def check_append_args(session_id: Any, events: Any, expected_version: Any) -> list[Event]:
    """Check the arguments of a store's ``append`` and return the checked batch.

    The one order every backend checks in: session id, events, ``expected_version``.

    Raises:
        ValidationError: The first problem found; nothing was written.

    Cost: as :func:`check_events`.
    """
    check_session_id(session_id)
    batch = check_events(events)
    check_optional_int("expected_version", expected_version)
    return batch


def check_events(events: Any) -> list[Event]:
    """Check a batch given to ``append`` and return it as a list.

    Every element must be an :class:`Event` whose fields have their declared types, with
    ``sequence`` and ``timestamp`` left ``None``, a non-empty ``id``, a positive
    ``parent`` when set, and a known ``RunFinished.status``.

    Raises:
        ValidationError: The first problem found, naming the event's index.

    Cost: one msgpack round trip per event; no I/O.
    """
    checked: list[Event] = []
    for index, event in enumerate(check_event_sequence(events)):
        where = f"events[{index}]"
        if not isinstance(event, Event):
            raise ValidationError(f"{where} must be an Event, got {type(event).__name__}")
        try:
            _EVENT_DECODER.decode(_ENCODER.encode(event))
        except (msgspec.EncodeError, TypeError, ValueError, OverflowError) as exc:
            raise ValidationError(f"{where} is malformed: {exc}") from exc
        if event.sequence is not None or event.timestamp is not None:
            raise ValidationError(
                f"{where} has sequence/timestamp set; the store stamps them on append"
            )
        if not event.id:
            raise ValidationError(f"{where}.id must not be empty")
        if event.parent is not None and event.parent < 1:
            raise ValidationError(f"{where}.parent must be a sequence >= 1, got {event.parent}")
        if isinstance(event.body, RunFinished) and event.body.status not in RUN_STATUSES:
            raise ValidationError(
                f"{where}.body.status must be one of {sorted(RUN_STATUSES)}, "
                f"got {event.body.status!r}"
            )
        checked.append(event)
    return checked


def check_parents(events: Sequence[Event], first_sequence: int, where: str = "events") -> None:
    """Check that each event's ``parent`` names an earlier row of the session.

    ``first_sequence`` is the sequence the first new event will get.

    Raises:
        ValidationError: A parent at or above the event's own sequence.
    """
    for index, event in enumerate(events):
        own = first_sequence + index
        if event.parent is not None and event.parent >= own:
            raise parent_error(index, event.parent, own, where)


def parent_error(index: int, parent: int, own: int, where: str = "events") -> ValidationError:
    """Return the error for ``where[index]``, whose ``parent`` is not below its sequence ``own``."""
    return ValidationError(
        f"{where}[{index}].parent={parent} must name an earlier row "
        f"(this event gets sequence {own})"
    )
