"""Turn planning and the projector's fold: what a turn offers, what a push changes.

``plan_turn`` (the rules: ``docs/hub-and-turns.md``, "What a turn offers"): with no
state, or when a delta cannot be computed, the *full window* (the viewer's view at the
desk's last sequence ``last``); else a *delta* over the rows above the watermark.
Whether a channel reply is its root's first is asked of the ``ReplyIndex`` once per
delta, so a delta costs the rows above the watermark, never a walk down to a root. A
commit stores ``watermark = last``, so every row of a viewer's view other than its own
is offered by exactly one turn until a reinitialize: a view's threshold only rises, and
a row above the watermark qualifies for the view exactly when it qualifies for the delta
of its interval.

``fold_views`` folds a pushed row into a cached view only when that is provably what a
fresh walk would give: the view is not ``partial`` and the rows a fresh walk needs stay
a page below ``SCAN_LIMIT``, so the scan limit could not have cut that walk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from sharedesk.projection.compaction import CompactedLog, compacted_through
from sharedesk.projection.session import as_messages, in_conversation, is_blank, project_session
from sharedesk.projection.sharing import delta_messages, rows_above_watermark
from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.constants import PAGE_SIZE, SCAN_LIMIT, SESSION_WINDOW
from sharedesk.protocol.errors import ValidationError, WatermarkRegression
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import ReplyIndex, SessionLog
from sharedesk.protocol.views import (
    Conversation,
    LogMessage,
    Projection,
    SessionMessage,
    SessionQuery,
    SharingState,
)

#: Most rows a fresh walk may need for a pushed row to be folded in without one.
FOLD_LIMIT: Final = SCAN_LIMIT - PAGE_SIZE


class TurnPlan(msgspec.Struct, frozen=True):
    """What a turn shows and what committing it will store.

    Attributes:
        conversation: The conversation of the turn.
        messages: What the viewer must read, oldest first.
        reason: ``None`` for a delta, else ``"initial"`` or a ``ReinitializeReason`` value.
        expected_state: The stored state the turn was planned from (``None``: none).
        next_state: The state committing stores, before the reply is noted as present.
    """

    conversation: Conversation
    messages: list[SessionMessage]
    reason: str | None
    expected_state: SharingState | None
    next_state: SharingState


def plan_turn(
    log: SessionLog,
    state: SharingState | None,
    conversation: Conversation,
    viewer: SessionAuthor,
    last: int,
    replies: ReplyIndex,
    *,
    compaction: Event | None = None,
    start_after: int | None = None,
) -> TurnPlan:
    """Plan a turn of ``viewer`` from its stored ``state`` (or ``None``); see the module header.

    ``log`` is the session's whole history and ``last`` its last sequence, read before
    the walk; ``compaction`` the conversation's newest (the folds read through it, and a
    state whose watermark lies below its ``through`` gets a full window, reason
    ``"compacted"``). ``start_after`` (only without a state) starts a late joiner: a
    paged state, whose delta covers at most ``SCAN_LIMIT - 1`` rows above the watermark
    and is cut to its oldest ``SESSION_WINDOW`` messages, the watermark moving to the
    last one kept (spans that offer nothing are walked past in the same turn); the page
    that reaches ``last`` ends the paging.

    Raises:
        ValidationError: ``start_after`` given with a state, or above ``last``.
        WatermarkRegression: ``last`` lies below the stored watermark.
        PageError: As ``project_session`` (and ``LogReadError`` when the log raised).

    Cost: one walk from ``last`` down to the watermark (none when ``last`` is the
    watermark) or to a full window, at most ``SCAN_LIMIT`` rows each (a paged state:
    one such walk per span until one offers a message); one
    ``replies.first_replies`` call for a channel delta with replies in it; no writes.
    """
    if compaction is not None:
        log = replies = CompactedLog(log, compaction, conversation.desk, replies)
    basis = state
    if start_after is not None:
        if state is not None:
            raise ValidationError(
                f"start_after={start_after} given, but the viewer's turns already stand at "
                f"watermark {state.watermark}"
            )
        if start_after > last:
            raise ValidationError(f"start_after={start_after} lies beyond the last sequence {last}")
        basis = SharingState(conversation, start_after, paged=True)
    messages: list[SessionMessage] | None = None
    reason: str | None = "initial"
    watermark, paged = last, False
    carried: frozenset[int] = frozenset()
    if basis is not None:
        if last < basis.watermark:
            raise WatermarkRegression(last, basis.watermark)
        if basis.watermark < compacted_through(compaction):
            reason = "compacted"
        else:
            # A paged state walks at most SCAN_LIMIT - 1 rows up at a time, so each walk
            # reaches its bottom; it walks on past spans that offer nothing.
            top = low = basis.watermark
            while messages is None or (not messages and top < last):
                low, top = top, min(last, top + SCAN_LIMIT - 1) if basis.paged else last
                walked = (
                    []  # nothing was appended since: no read
                    if top == low
                    else rows_above_watermark(log, top + 1, low, log_ends_at_watermark=True)
                )
                if not isinstance(walked, list):
                    reason = walked.reason.value
                    break
                messages = delta_messages(walked, basis, conversation, viewer, replies)
            if messages is not None:
                watermark = top
                if basis.paged and len(messages) > SESSION_WINDOW:
                    messages = messages[:SESSION_WINDOW]
                    watermark = messages[-1].sequence
                reason, paged = None, basis.paged and watermark < last
        carried = frozenset(s for s in basis.present_above_watermark if s > watermark)
    if messages is None:
        window = SessionQuery(conversation=conversation, before=last + 1, window=SESSION_WINDOW)
        messages = project_session(log, window).messages
    next_state = SharingState(conversation, watermark, carried, paged)
    return TurnPlan(conversation, messages, reason, expected_state=state, next_state=next_state)


class CachedView(msgspec.Struct, frozen=True):
    """A cached view (``projection``) and the most rows a fresh walk for it must read."""

    projection: Projection
    needed: int


def fold_views(
    cached: CachedView, rows: Sequence[LogMessage], conversation: Conversation, window: int
) -> CachedView | None:
    """Fold the session's next ``Text`` rows (oldest first) into ``cached`` (``None``: walk).

    Cost: O(window) a row.
    """
    projection, needed = cached.projection, cached.needed
    messages, root = projection.messages, conversation.thread_root
    for row in rows:
        needed += 1
        if projection.partial or needed > FOLD_LIMIT:
            return None
        if window == 0 or is_blank(row.content):
            continue
        if not in_conversation(root, row.sequence, row.parent):
            if root is None:
                return None  # a channel reply may be its root's first: walk
            continue
        messages = [*messages, *as_messages([row])][-window:]
    if messages is not projection.messages:
        projection = Projection(messages=messages, partial=False)
    return CachedView(projection, needed)
