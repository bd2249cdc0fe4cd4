"""Helpers shared by the store backends (not public)."""

from __future__ import annotations

from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.validation import check_optional_int
from sharedesk.protocol.views import LogMessage


def check_read_args(
    after: int | None, before: int | None, limit: int | None
) -> tuple[int | None, int | None, int | None]:
    """Validate ``read``'s bounds.

    Raises:
        ValidationError: A bound that is not a non-negative int, or ``limit`` < 0.
    """
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


def to_log_message(session_id: str, event: Event) -> LogMessage:
    """Turn a stored ``Text`` event into a log row of desk ``session_id``."""
    assert isinstance(event.body, Text) and event.sequence is not None
    return LogMessage(
        sequence=event.sequence,
        author=event.author,
        content=event.body.content,
        desk=session_id,
        parent=event.parent,
    )
