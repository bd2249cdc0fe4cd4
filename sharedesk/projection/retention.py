"""Retention: which rows of a compacted desk may leave the store.

Only rows at or below the ``through`` of the desk's newest channel compaction may go, and
they go as a prefix: retention removes every row from ``archived_through + 1`` up to the
bound :func:`retention_through` returns, so every row above ``archived_through`` stays and
sequences keep their numbers. ``keep_last`` holds back the desk's newest rows, ``max_age``
the rows younger than that; rows of the ``prune_first`` types go first: they neither
count toward ``keep_last`` nor hold a row back by their age.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import PurePath
from typing import get_args

import msgspec

from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, EventBody
from sharedesk.protocol.validation import check_optional_int, check_path

#: The names of the event body kinds (``type(event.body).__name__``).
BODY_KINDS = frozenset(kind.__name__ for kind in get_args(EventBody))


class RetentionPolicy(msgspec.Struct, frozen=True):
    """What ``Hub.apply_retention`` lets go of a compacted desk (see the module header).

    Attributes:
        keep_last: The desk's newest rows that always stay (``None``: no such floor).
        max_age: Only rows older than this go (``None``: any age).
        prune_first: Body kinds (class names) that go first.
        archive: A directory: each row is written to ``<archive>/<desk>.jsonl`` before it
            goes (``None``: rows go unarchived).
    """

    keep_last: int | None = None
    max_age: timedelta | None = None
    prune_first: tuple[str, ...] = ("TextDelta",)
    archive: str | PurePath | None = None

    def __post_init__(self) -> None:
        check_optional_int("keep_last", self.keep_last)
        age = self.max_age
        if age is not None and (not isinstance(age, timedelta) or age <= timedelta(0)):
            raise ValidationError(f"max_age must be None or a positive timedelta, got {age!r}")
        kinds = self.prune_first
        if not isinstance(kinds, tuple) or not set(kinds) <= BODY_KINDS:
            raise ValidationError(f"prune_first must be a tuple of {sorted(BODY_KINDS)}")
        if self.archive is not None:
            check_path(self.archive, "archive")


class RetentionReport(msgspec.Struct, frozen=True):
    """What one ``apply_retention`` did.

    Attributes:
        removed: Desk -> the rows this call archived (when the policy names an archive)
            and removed; every desk looked at is named.
        archived_through: Desk -> its ``archived_through`` after the call.
    """

    removed: dict[str, int]
    archived_through: dict[str, int]

    @property
    def total(self) -> int:
        """The rows removed from every desk."""
        return sum(self.removed.values())


def retention_through(
    policy: RetentionPolicy,
    *,
    compacted: int,
    archived: int,
    newest: Iterable[Event],
    oldest: Iterable[Event],
    now: datetime,
) -> int:
    """Return the highest sequence retention removes (``archived``: none).

    ``compacted`` is the ``through`` of the desk's newest channel compaction (0: none),
    ``archived`` its ``archived_through``; ``newest`` yields its rows above ``archived``
    newest first, ``oldest`` the same rows oldest first. Each is read only as far as the
    bound needs. Cost: O(``keep_last`` + the ``prune_first`` rows among the newest) of
    ``newest``, O(rows below the bound) of ``oldest`` (with ``max_age`` only).
    """
    bound = compacted
    skip = set(policy.prune_first)
    if policy.keep_last is not None and bound > archived:
        bound = min(bound, _below_newest(policy.keep_last, skip, newest))
    if policy.max_age is not None and bound > archived:
        bound = min(bound, _below_young(now - policy.max_age, skip, oldest, bound))
    return max(bound, archived)


def _below_newest(keep_last: int, skip: set[str], newest: Iterable[Event]) -> int:
    """Return the sequence below the ``keep_last``-th newest row not of the ``skip`` kinds."""
    if keep_last == 0:
        return 2**63
    kept = 0
    for event in newest:
        if type(event.body).__name__ not in skip:
            kept += 1
            if kept == keep_last:
                assert event.sequence is not None
                return event.sequence - 1
    return 0


def _below_young(cutoff: datetime, skip: set[str], oldest: Iterable[Event], bound: int) -> int:
    """Return the sequence below the oldest row not of the ``skip`` kinds from ``cutoff`` on."""
    last = 0
    for event in oldest:
        assert event.sequence is not None and event.timestamp is not None
        if event.sequence > bound:
            break
        if type(event.body).__name__ not in skip and event.timestamp >= cutoff:
            return event.sequence - 1
        last = event.sequence
    return last
