"""Retention over a store: plan each desk's bound, archive its rows, then remove them.

The rule is :func:`~sharedesk.projection.retention.retention_through`'s; the removal
``StoreBase.remove_archived``'s. Rows go in chunks, each written to the archive and
fsync'd first, then removed in one transaction that records the new
``archived_through``: a kill at any point leaves every row in the store or in the
archive, and a run again after it is exact (the archive skips the sequences it holds).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Final

from sharedesk.projection.compaction import channel_compacted
from sharedesk.projection.retention import RetentionPolicy, RetentionReport, retention_through
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event
from sharedesk.protocol.validation import check_int, check_session_id
from sharedesk.store.archive import append_archive, archive_file
from sharedesk.store.base import StoreBase

__all__ = ["apply_retention"]

#: Rows archived and removed per transaction.
CHUNK: Final = 20_000
_PAGE: Final = 2048


def apply_retention(
    store: object,
    policy: RetentionPolicy,
    session_id: str | None = None,
    *,
    now: datetime | None = None,
    chunk: int = CHUNK,
) -> RetentionReport:
    """Apply ``policy`` to ``session_id`` (``None``: every desk of ``store``); report it.

    Raises ``ValidationError`` before anything is written or archived: ``policy`` is no
    ``RetentionPolicy``, the store cannot remove rows, ``session_id`` names no desk, or
    a policy that keeps nothing meets a desk with no compaction (every desk: such desks
    are left as they are). ``StoreIOError`` when the archive cannot be written.

    ``now`` (default: the clock) is what ``max_age`` counts from; ``chunk`` the most rows
    one transaction removes. Cost: per desk, the reads the bound needs, then per chunk one read,
    one archive append and fsync, and one removal transaction.
    """
    if not isinstance(policy, RetentionPolicy):
        raise ValidationError(f"policy must be a RetentionPolicy, got {type(policy).__name__}")
    if not isinstance(store, StoreBase):
        raise ValidationError(f"{type(store).__name__} cannot remove rows")
    check_int("chunk", chunk, minimum=1)
    if session_id is not None:
        check_session_id(session_id)
        if store.last_sequence(session_id) == 0:
            raise ValidationError(f"desk {session_id!r} is unknown: it has no rows")
        if (
            policy.keep_last is None
            and policy.max_age is None
            and not channel_compacted(store.session_state(session_id).compactions, session_id)
        ):
            raise ValidationError(
                f"desk {session_id!r} has no compaction, and the policy keeps nothing: "
                "compact it first, or give keep_last or max_age"
            )
    now = datetime.now(UTC) if now is None else now
    removed: dict[str, int] = {}
    archived: dict[str, int] = {}
    for desk in store.sessions() if session_id is None else [session_id]:
        state = store.session_state(desk)
        low = state.archived_through
        bound = retention_through(
            policy,
            compacted=channel_compacted(state.compactions, desk),
            archived=low,
            newest=_rows(store, desk, low, None, newest_first=True),
            oldest=_rows(store, desk, low, None, newest_first=False),
            now=now,
        )
        count = 0
        while low < bound:
            high = min(bound, low + chunk)
            if policy.archive is not None:
                rows = _rows(store, desk, low, high, newest_first=False)
                append_archive(archive_file(policy.archive, desk), rows)
            count += store.remove_archived(desk, high)
            low = high
        removed[desk], archived[desk] = count, low
    return RetentionReport(removed, archived)


def _rows(
    store: StoreBase, desk: str, low: int, high: int | None, *, newest_first: bool
) -> Iterator[Event]:
    """Yield ``desk``'s rows with ``low < sequence <= high`` in pages, in the order asked."""
    after, before = low, None if high is None else high + 1
    while True:
        page = store.read(desk, after=after, before=before, limit=_PAGE, newest_first=newest_first)
        yield from page
        if len(page) < _PAGE:
            return
        if newest_first:
            before = page[-1].sequence
        else:
            after = page[-1].sequence or after
