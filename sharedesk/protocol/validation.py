"""The one vocabulary of input checks, run before any actor or writer sees the input.

Stores, the Hub and the folds check their input with these functions, so bad input fails
the same way everywhere: as ``ValidationError`` naming the value (``name``) and where it
is, with nothing written and no actor involved (bad input never marks a desk failed).
Every ``check_*`` returns what it checked and raises for the first problem it finds; it
does no I/O and costs O(1) unless its docstring says otherwise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final, NoReturn, TypeGuard, cast

import msgspec

from sharedesk.protocol.authors import Agent, Operator, Person, SessionAuthor, System
from sharedesk.protocol.constants import PRESENT_SET_LIMIT
from sharedesk.protocol.errors import PresentSetTooLarge, ValidationError
from sharedesk.protocol.events import RUN_STATUSES, Event, RunFinished
from sharedesk.protocol.records import ENCODER, EVENT_DECODER
from sharedesk.protocol.views import Conversation, SharingState
from sharedesk.protocol.writes import Share, Write

#: Longest session id accepted, in UTF-8 bytes (keeps store keys bounded).
MAX_SESSION_ID_BYTES: Final = 256
#: Every int checked here is below this (what a signed 64-bit store field holds).
MAX_INT: Final = 2**63
#: Deepest nesting of containers accepted inside an event field.
MAX_DEPTH: Final = 64
#: A lone surrogate: the one code point a Python ``str`` holds that UTF-8 cannot encode.
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")


def check_int(name: str, value: Any, *, minimum: int = 0) -> int:
    """Return ``value`` if it is an ``int``, not a ``bool``, with ``minimum <= value < 2**63``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an int, got {type(value).__name__}")
    if not minimum <= value < MAX_INT:
        raise ValidationError(f"{name} must be in [{minimum}, 2**63), got {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a ``bool`` (a truthy string such as ``"no"`` is not a flag)."""
    if not isinstance(value, bool):
        raise ValidationError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_seconds(name: str, value: Any, low: float, high: float) -> float:
    """Return ``value`` as a float if it is a number of seconds in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValidationError(f"{name} must be seconds in [{low}, {high}], got {value!r}")
    return float(value)


def check_text(name: str, value: Any, *, empty: bool = True) -> str:
    """Return ``value`` if it is a ``str`` that encodes to UTF-8, and empty only if ``empty``."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a str, got {type(value).__name__}")
    if not value and not empty:
        raise ValidationError(f"{name} must not be empty")
    if not value.isascii() and (lone := _SURROGATE.search(value)):
        raise ValidationError(f"{name} holds a lone surrogate {lone[0]!r} at index {lone.start()}")
    return value


def check_path(value: Any, name: str = "path") -> str:
    """Return ``value`` as a ``str`` path if it names a directory one can open.

    Refused: not a ``str``/``os.PathLike`` of ``str``, empty (the current directory,
    silently), a NUL or a lone surrogate, a URL (``scheme://...``). Cost: O(len(path)).
    """
    if not isinstance(value, str | os.PathLike):
        raise ValidationError(f"{name} must be a str or os.PathLike, got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise ValidationError(f"{name} must be a text path, got {type(text).__name__}")
    if not text:
        raise ValidationError(f"{name} must not be empty (use '.' for the current directory)")
    if "\0" in text:
        raise ValidationError(f"{name} holds a NUL character at index {text.index(chr(0))}")
    scheme = _URL.match(text)
    if scheme is not None:  # never turn a database URL into nested directories
        raise ValidationError(
            f"{name} must be a directory, got a URL with scheme {scheme.group(1)!r} "
            f"(the only URLs a store opens are PostgreSQL DSNs: "
            f"{', '.join(s + '://...' for s in POSTGRES_SCHEMES)}, with Hub.open or "
            "PostgresStore)"
        )
    return check_text(name, text)


#: A URL's scheme and ``://`` at the start of a path (``postgresql://...``).
_URL: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")

#: The URL schemes of PostgreSQL connection strings (libpq's), which ``Hub.open`` takes.
POSTGRES_SCHEMES: Final = ("postgresql", "postgres")


def is_postgres_dsn(value: Any) -> TypeGuard[str]:
    """Whether ``value`` is a ``str`` URL with a PostgreSQL scheme (any case), ``postgresql://``."""
    if not isinstance(value, str):
        return False
    scheme = _URL.match(value)
    return scheme is not None and scheme.group(1).lower() in POSTGRES_SCHEMES


#: The containers whose nesting counts toward ``MAX_DEPTH`` (a struct inside a value too).
_CONTAINERS: Final = (dict, list, tuple, set, frozenset, msgspec.Struct)


def _check_nesting(where: str, event: Event) -> None:
    # ``metadata`` and each container field of the body count from their own first level.
    if event.metadata and _too_deep(event.metadata):
        _refuse_depth(event.metadata, f"{where}.metadata")
    body = event.body
    for name in body.__struct_fields__ if isinstance(body, msgspec.Struct) else ():
        value = getattr(body, name)
        if value and isinstance(value, _CONTAINERS) and _too_deep(value):
            _refuse_depth(value, f"{where}.body.{name}")


def _refuse_depth(value: Any, where: str) -> NoReturn:
    path = _path_of(value, where, _too_deep_at)
    raise ValidationError(f"{path} nests deeper than {MAX_DEPTH} levels")


def _too_deep(value: Any) -> bool:
    # Iterative, so any depth is refused cleanly. Cost: O(containers and items).
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= MAX_DEPTH:
            return True
        if isinstance(item, msgspec.Struct):
            item = [getattr(item, field) for field in item.__struct_fields__]
        inner = item.values() if isinstance(item, dict) else item
        stack.extend((each, depth + 1) for each in inner if isinstance(each, _CONTAINERS))
    return False


def _too_deep_at(item: Any, depth: int) -> bool:
    return depth >= MAX_DEPTH and isinstance(item, _CONTAINERS)


def _lone_surrogate(item: Any, depth: int) -> bool:
    return isinstance(item, str) and _SURROGATE.search(item) is not None


def _path_of(value: Any, where: str, bad: Callable[[Any, int], bool], depth: int = 0) -> str | None:
    # The path of the first str or container in ``value``, depth first, that is ``bad``.
    if bad(value, depth):
        return where
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, msgspec.Struct):
        children = [(getattr(value, name), f"{where}.{name}") for name in value.__struct_fields__]
    elif isinstance(value, dict):
        children = [
            child
            for key, item in value.items()
            for child in ((key, f"{where} key {key!r}"), (item, f"{where}[{key!r}]"))
        ]
    elif isinstance(value, list | tuple | set | frozenset):
        children = [(item, f"{where}[{index}]") for index, item in enumerate(value)]
    else:
        return None
    for child, path in children:
        found = _path_of(child, path, bad, depth + 1)
        if found is not None:
            return found
    return None


def check_session_id(session_id: Any) -> str:
    """Return ``session_id`` if it is non-empty text of at most ``MAX_SESSION_ID_BYTES``."""
    check_text("session_id", session_id, empty=False)
    size = len(session_id) if session_id.isascii() else len(session_id.encode("utf-8"))
    if size > MAX_SESSION_ID_BYTES:
        raise ValidationError(
            f"session_id is {size} UTF-8 bytes; at most {MAX_SESSION_ID_BYTES} are allowed"
        )
    return cast(str, session_id)


def check_author(value: Any, name: str = "author") -> SessionAuthor:
    """Return ``value`` if it is an author with a non-empty id (or kind) and text fields."""
    if isinstance(value, Person | Agent):
        check_text(f"{name}.id", value.id, empty=False)
        check_text(f"{name}.label", value.label)
    elif isinstance(value, System):
        check_text(f"{name}.kind", value.kind, empty=False)
        check_text(f"{name}.label", value.label)
    elif not isinstance(value, Operator):
        raise ValidationError(
            f"{name} must be an Operator, Person, Agent or System, got {type(value).__name__}"
        )
    return cast(SessionAuthor, value)


def check_optional_author(value: Any, name: str) -> SessionAuthor | None:
    """Return ``value`` if it is an author (as :func:`check_author`) or ``None``."""
    if value is not None and not isinstance(value, Operator | Person | Agent | System):
        raise ValidationError(
            f"{name} must be an Operator, Person, Agent, System or None, got {type(value).__name__}"
        )
    return None if value is None else check_author(value, name)


def check_conversation(conversation: object, name: str = "conversation") -> Conversation:
    """Return ``conversation`` if it is a :class:`Conversation` (text desk, root None or >= 1)."""
    if not isinstance(conversation, Conversation):
        raise ValidationError(f"{name} must be a Conversation, got {type(conversation).__name__}")
    check_text(f"{name}.desk", conversation.desk)
    if conversation.thread_root is not None:
        check_int(f"{name}.thread_root", conversation.thread_root, minimum=1)
    return conversation


def check_sharing_state(state: Any, name: str = "state") -> SharingState:
    """Return ``state`` if it is a :class:`SharingState` with valid fields. Cost: O(present set).

    A present set of more than ``PRESENT_SET_LIMIT`` sequences raises ``PresentSetTooLarge``.
    """
    if not isinstance(state, SharingState):
        raise ValidationError(f"{name} must be a SharingState, got {type(state).__name__}")
    check_conversation(state.conversation, f"{name}.conversation")
    check_int(f"{name}.watermark", state.watermark)
    present = state.present_above_watermark
    if not isinstance(present, frozenset):
        raise ValidationError(
            f"{name}.present_above_watermark must be a frozenset, got {type(present).__name__}"
        )
    if len(present) > PRESENT_SET_LIMIT:
        raise PresentSetTooLarge(PRESENT_SET_LIMIT, len(present))
    for sequence in present:
        check_int(f"{name}.present_above_watermark item", sequence)
    return state


def check_optional_int(name: str, value: Any, *, minimum: int = 0) -> int | None:
    """Return ``value`` if it is ``None`` or passes :func:`check_int`."""
    return None if value is None else check_int(name, value, minimum=minimum)


def check_optional_str(name: str, value: Any) -> str | None:
    """Return ``value`` if it is ``None`` or a non-empty ``str``."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{name} must be a non-empty str or None, got {value!r}")
    return value


def check_roots(roots: Any) -> list[int]:
    """Return ``roots`` (``first_replies``'s collection of sequences) as a list. Cost: O(len)."""
    if not isinstance(roots, Collection) or isinstance(roots, str | bytes):
        raise ValidationError(f"roots must be a collection of ints, got {type(roots).__name__}")
    checked: list[int] = []
    for root in roots:
        if type(root) is not int or not 1 <= root < MAX_INT:
            raise ValidationError(f"roots must hold sequences (ints >= 1), got {root!r}")
        checked.append(root)
    return checked


def check_event_sequence(events: Any) -> Sequence[Event]:
    """Return ``events`` if it is a batch: a sequence, not a lone event or text (not its items)."""
    if type(events) is list:
        return events
    if isinstance(events, Event | str | bytes) or not isinstance(events, Sequence):
        raise ValidationError(f"events must be a sequence of Event, got {type(events).__name__}")
    return cast(Sequence[Event], events)


def check_write(
    session_id: Any,
    events: Any,
    *,
    expected_version: Any = None,
    unless_stored: Any = None,
    share: Any = None,
    linked: Any = (),
) -> Write:
    """Check a write and return it as a :class:`~sharedesk.protocol.writes.Write`.

    The one validation of a write, called once by the boundary that first receives it.
    Checks run in argument order (``linked``: checked writes, each of another session, no
    two of one, none with a share or links of its own); the write holds private copies of
    the events. Cost: as :func:`check_events`, plus O(len(present set)) for a share.
    """
    check_session_id(session_id)
    batch = check_events(events)
    check_optional_int("expected_version", expected_version)
    guard = check_optional_str("unless_stored", unless_stored)
    if share is not None:
        check_share(share)
    return Write(
        session_id, batch, expected_version, guard, share, check_linked(session_id, linked)
    )


def check_linked(session_id: str, linked: Any) -> tuple[Write, ...]:
    """Return ``linked`` as a tuple of writes that may join a write to ``session_id``.

    Cost: O(len(linked)).
    """
    if not isinstance(linked, tuple | list):
        raise ValidationError(f"linked must be a tuple of Writes, got {type(linked).__name__}")
    seen = {session_id}
    for index, write in enumerate(linked):
        if not isinstance(write, Write):
            raise ValidationError(f"linked[{index}] must be a Write, got {type(write).__name__}")
        if write.share is not None or write.linked:
            raise ValidationError(f"linked[{index}] must have no share and no linked writes")
        if write.session_id in seen:
            raise ValidationError(
                f"linked[{index}] writes to session {write.session_id!r} twice in one write"
            )
        seen.add(write.session_id)
    return tuple(linked)


def check_share(share: Any) -> Share:
    """Return ``share`` if it is a valid :class:`~sharedesk.protocol.writes.Share`.

    ``expected_state`` is ``None`` or a state of the same conversation. Cost: O(present set).
    """
    if not isinstance(share, Share):
        raise ValidationError(f"share must be a Share or None, got {type(share).__name__}")
    check_text("viewer", share.viewer, empty=False)
    state = check_sharing_state(share.state)
    expected = share.expected_state
    if expected is not None:
        check_sharing_state(expected, "expected_state")
        if expected.conversation != state.conversation:
            raise ValidationError(
                f"expected_state tracks {expected.conversation}, "
                f"but state tracks {state.conversation}"
            )
    check_bool("reply_present", share.reply_present)
    return share


def check_events(events: Any) -> list[Event]:
    """Check a batch given to ``append`` and return private copies of its events, as a list.

    Each is an :class:`Event` with its declared types, ``sequence`` and ``timestamp``
    unset, a non-empty ``id``, a valid author, a ``parent`` >= 1 when set, text without
    lone surrogates, containers nested at most ``MAX_DEPTH`` deep, and a known
    ``RunFinished.status``. Each copy is decoded from the event's own encoding (a ``set``
    or ``tuple`` becomes a ``list``), so a store keeps no object of the caller's. Cost:
    one msgpack round trip per event, plus a walk over its ``metadata`` and body.
    """
    checked: list[Event] = []
    for index, event in enumerate(check_event_sequence(events)):
        where = f"events[{index}]"
        if not isinstance(event, Event):
            raise ValidationError(f"{where} must be an Event, got {type(event).__name__}")
        if event.sequence is not None or event.timestamp is not None:
            raise ValidationError(
                f"{where} has sequence/timestamp set; the store stamps them on append"
            )
        check_author(event.author, f"{where}.author")
        check_text(f"{where}.id", event.id, empty=False)
        if event.parent is not None:
            check_int(f"{where}.parent", event.parent, minimum=1)
        _check_nesting(where, event)
        try:
            copy = EVENT_DECODER.decode(ENCODER.encode(event))
        except UnicodeEncodeError as exc:
            field = _path_of(event, where, _lone_surrogate) or where
            raise ValidationError(
                f"{field} holds a lone surrogate {exc.object[exc.start : exc.end]!r}"
            ) from exc
        except (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise ValidationError(f"{where} is malformed: {exc}") from exc
        if isinstance(event.body, RunFinished) and event.body.status not in RUN_STATUSES:
            raise ValidationError(
                f"{where}.body.status must be one of {sorted(RUN_STATUSES)}, "
                f"got {event.body.status!r}"
            )
        checked.append(copy)
    return checked


def check_parents(events: Sequence[Event], first_sequence: int) -> None:
    """Check that each ``parent`` names an earlier row (the first event gets ``first_sequence``)."""
    for index, event in enumerate(events):
        own = first_sequence + index
        if event.parent is not None and event.parent >= own:
            raise ValidationError(
                f"events[{index}].parent={event.parent} must name an earlier row "
                f"(this event gets sequence {own})"
            )
