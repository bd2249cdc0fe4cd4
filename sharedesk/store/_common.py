"""Helpers shared by the store backends (not public)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping
from datetime import datetime
from typing import Any, Final, NamedTuple

import msgspec

from sharedesk.logconfig import logger
from sharedesk.projection.runstate import fold_session_state, moves_session_state
from sharedesk.projection.session import is_blank
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, RunStarted, Text, TextDelta
from sharedesk.protocol.ports import CompletionSink, WriteTicket
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.validation import (
    check_bool,
    check_optional_int,
    check_parents,
    check_sharing_state,
    check_text,
)
from sharedesk.protocol.views import SharingState

_log = logger()

#: One settled submitted write: its ticket, the stored events or ``None``, the error.
Outcome = tuple[WriteTicket, "list[Event] | None", "BaseException | None"]


def hand_over(outcomes: Iterable[Outcome]) -> None:
    """Settle each ticket with its outcome, in order, then deliver them: one call per sink.

    The tail of every store's submitted writes (``SubmittingStore``), on its writer
    thread. Never raises: a failing ticket or sink is logged (its awaiting side is lost,
    the writer goes on).

    Cost: O(len(outcomes)); one ``deliver`` per distinct sink.
    """
    by_sink: dict[int, tuple[CompletionSink, list[WriteTicket]]] = {}
    for ticket, result, error in outcomes:
        try:
            ticket.settle(result, error)
            sink = ticket.sink
        except Exception:
            _log.exception("store.ticket_failed")
            continue
        entry = by_sink.get(id(sink))
        if entry is None:
            by_sink[id(sink)] = (sink, [ticket])
        else:
            entry[1].append(ticket)
    for sink, tickets in by_sink.values():
        try:
            sink.deliver(tickets)
        except Exception:
            _log.exception("store.sink_failed")


class SessionInfo(msgspec.Struct, frozen=True):
    """What a store knows about one session without reading its events.

    Returned by ``session_info`` of both backends (used by inspection commands).

    Attributes:
        session_id: The session.
        last_sequence: The session's last sequence; sequences have no gaps, so this is
            also the number of events it holds.
        text_count: How many of those events are ``Text`` rows (the rows its log serves).
        last_activity: The timestamp stamped on the session's newest event (UTC).
    """

    session_id: str
    last_sequence: int
    text_count: int
    last_activity: datetime


_EVENT_DECODER: Final = msgspec.msgpack.Decoder(Event)
_ENCODER: Final = msgspec.msgpack.Encoder()
#: Bodies whose fields are all immutable (str, bool, None): shared safely.
_IMMUTABLE_BODIES: Final = (Text, TextDelta, RunStarted)


def private_copy(event: Event) -> Event:
    """Return a copy of a stored event that shares no mutable object with it.

    Authors and the bodies in ``_IMMUTABLE_BODIES`` hold only immutable values, so an
    event with such a body and empty ``metadata`` only needs a fresh ``metadata``;
    anything else is copied whole by an encoding round trip (what the store keeps is
    that encoding's result already, so the copy compares equal).

    Cost: O(1) for a plain message; otherwise one msgpack round trip.
    """
    if not event.metadata and isinstance(event.body, _IMMUTABLE_BODIES):
        return msgspec.structs.replace(event, metadata={})
    return _EVENT_DECODER.decode(_ENCODER.encode(event))


def check_sharing_args(
    viewer: Any, state: Any, expected_state: Any
) -> tuple[str, SharingState, SharingState | None]:
    """Validate ``append_and_share``'s sharing arguments.

    Raises:
        ValidationError: ``viewer`` not a non-empty ``str``; ``state`` not a valid
            :class:`SharingState` (see ``check_sharing_state``); ``expected_state``
            neither ``None`` nor a valid ``SharingState`` of the same conversation.

    Cost: O(1).
    """
    check_viewer(viewer)
    check_sharing_state(state)
    if expected_state is not None:
        if not isinstance(expected_state, SharingState):
            raise ValidationError(
                f"expected_state must be a SharingState or None, "
                f"got {type(expected_state).__name__}"
            )
        check_sharing_state(expected_state, "expected_state")
        if expected_state.conversation != state.conversation:
            raise ValidationError(
                f"expected_state tracks {expected_state.conversation}, "
                f"but state tracks {state.conversation}"
            )
    return viewer, state, expected_state


def check_viewer(viewer: Any) -> str:
    """Return ``viewer`` if it is a non-empty ``str``.

    Raises:
        ValidationError: Not a ``str``, empty, or holding a lone surrogate.

    Cost: O(len(viewer)).
    """
    return check_text("viewer", viewer, empty=False)


def watermark_of(state: SharingState | None) -> int:
    """Return the watermark of ``state``, or -1 for no state (as ``SharingStateConflict``)."""
    return -1 if state is None else state.watermark


def check_read_args(
    after: int | None, before: int | None, limit: int | None, newest_first: bool = False
) -> tuple[int | None, int | None, int | None]:
    """Validate ``read``'s bounds and order.

    Raises:
        ValidationError: A bound that is not a non-negative int, ``limit`` < 0, or a
            ``newest_first`` that is not a bool.
    """
    check_bool("newest_first", newest_first)
    return (
        check_optional_int("after", after),
        check_optional_int("before", before),
        check_optional_int("limit", limit),
    )


def check_log_args(before: int | None, limit: int) -> tuple[int | None, int]:
    """Validate ``read_before``'s arguments.

    Raises:
        ValidationError: ``before`` not ``None`` or a non-negative int; ``limit`` not a
            non-negative int.
    """
    checked_before = check_optional_int("before", before)
    checked_limit = check_optional_int("limit", limit)
    if checked_limit is None:
        raise ValidationError("limit must be an int, got None")
    return checked_before, checked_limit


def not_a_root_error(index: int, parent: int, why: str) -> ValidationError:
    """Return the error for ``events[index]``, whose ``parent`` row is not a root ``Text``."""
    return ValidationError(
        f"events[{index}].parent={parent} must name a root Text row (a thread is one "
        f"level deep), but row {parent} is {why}"
    )


def check_root(index: int, row: Event) -> None:
    """Check that ``row``, named as ``events[index].parent``, is a root ``Text`` row.

    Raises:
        ValidationError: It is a reply, or not a ``Text`` row.

    Cost: O(1).
    """
    assert row.sequence is not None
    if not isinstance(row.body, Text):
        raise not_a_root_error(index, row.sequence, f"a {type(row.body).__name__} event")
    if row.parent is not None:
        raise not_a_root_error(index, row.sequence, f"a reply to row {row.parent}")


def check_roots(roots: Any) -> list[int]:
    """Return ``roots`` (``first_replies``'s argument) as a list of sequences.

    Raises:
        ValidationError: Not a collection of ints of at least 1.

    Cost: O(len(roots)).
    """
    if not isinstance(roots, Collection) or isinstance(roots, str | bytes):
        raise ValidationError(f"roots must be a collection of ints, got {type(roots).__name__}")
    checked: list[int] = []
    for root in roots:
        if type(root) is not int or not 1 <= root < 2**63:
            raise ValidationError(f"roots must hold sequences (ints >= 1), got {root!r}")
        checked.append(root)
    return checked


class StoredRow(NamedTuple):
    """What the append rules need of a stored row named as a ``parent``.

    Attributes:
        kind: The body's class name (``"Text"``, ``"TextDelta"``, ...).
        parent: The row's own ``parent``.
    """

    kind: str
    parent: int | None


class AppendPlan(NamedTuple):
    """What one checked batch writes, decided by :func:`plan_append`.

    Attributes:
        result: One stored event per input, in input order (a known id's stored event).
        new: The events to store, in sequence order (sequence and timestamp set).
        first_replies: Root sequence -> its first non-blank reply, for the roots this
            batch answers first (roots already answered are left out).
        texts: How many of ``new`` are ``Text`` rows.
        state: The session state with ``new`` folded in, or ``None`` when none moved it.
    """

    result: list[Event]
    new: list[Event]
    first_replies: dict[int, int]
    texts: int
    state: SessionState | None


def plan_append(
    batch: list[Event],
    last: int,
    known: Mapping[str, Event],
    now: datetime,
    *,
    stored_row: Callable[[int], StoredRow | None],
    answered: Container[int],
    state: Callable[[], SessionState],
) -> AppendPlan:
    """Decide what appending a checked ``batch`` after sequence ``last`` writes.

    The append rules every store shares: an event whose id is in ``known`` (or repeats
    an earlier id of the batch) is answered with the stored event and takes no
    sequence; new events get ``last + 1, ...`` and ``now``; each new event's ``parent``
    must name an earlier root ``Text`` row (stored, looked up with ``stored_row``, or new
    in this batch); a root's first non-blank reply is recorded unless ``answered``
    holds the root; the session state (``state()``, read only when an event moves it)
    is folded with the new events.

    Raises:
        ValidationError: A parent at or above its event's sequence, or one that is not
            a root ``Text`` row; nothing may be written.

    Cost: O(len(batch)), one ``stored_row`` call per parent below ``last + 1``.
    """
    fresh: dict[str, Event] = {}
    result: list[Event] = []
    next_sequence = last + 1
    for event in batch:
        stored = known.get(event.id) or fresh.get(event.id)
        if stored is None:
            stored = msgspec.structs.replace(event, sequence=next_sequence, timestamp=now)
            fresh[event.id] = stored
            next_sequence += 1
        result.append(stored)
    new = list(fresh.values())
    check_parents(new, last + 1)
    first_replies: dict[int, int] = {}
    texts = 0
    folded: SessionState | None = None
    for index, stored in enumerate(new):
        assert stored.sequence is not None
        parent = stored.parent
        if parent is not None:
            if parent > last:
                check_root(index, new[parent - last - 1])
            else:
                row = stored_row(parent)
                if row is None:
                    raise not_a_root_error(index, parent, "missing")
                if row.kind != "Text":
                    raise not_a_root_error(index, parent, f"a {row.kind} event")
                if row.parent is not None:
                    raise not_a_root_error(index, parent, f"a reply to row {row.parent}")
        body = stored.body
        if isinstance(body, Text):
            texts += 1
            if (
                parent is not None
                and parent not in first_replies
                and parent not in answered
                and not is_blank(body.content)
            ):
                first_replies[parent] = stored.sequence
        if moves_session_state(stored):
            folded = fold_session_state(state() if folded is None else folded, stored)
    return AppendPlan(result, new, first_replies, texts, folded)
