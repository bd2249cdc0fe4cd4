"""What the backends not yet on :class:`~sharedesk.store.base.StoreBase` still import.

Everything here lives elsewhere now (``projection/append``, ``protocol/``, the base).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from sharedesk.projection.append import (
    AppendPlan,
    StoredRow,
    not_a_root_error,
    plan_append,
)
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import CompletionSink, SessionInfo, WriteTicket
from sharedesk.protocol.records import private_copy
from sharedesk.protocol.validation import (
    check_bool,
    check_optional_int,
    check_sharing_state,
    check_text,
)
from sharedesk.protocol.views import SharingState

__all__ = [
    "AppendPlan",
    "SessionInfo",
    "StoredRow",
    "check_log_args",
    "check_read_args",
    "check_roots",
    "check_sharing_args",
    "check_viewer",
    "hand_over",
    "not_a_root_error",
    "plan_append",
    "private_copy",
    "watermark_of",
]

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
