"""Turn planning and the projector's fold: what a turn offers, what a push changes.

Everything here is a pure function of values, a :class:`~sharedesk.SessionLog` and a
:class:`~sharedesk.protocol.ports.ReplyIndex`; the actors (``actors/sharing.py``,
``actors/projector.py``) only feed them and keep their results.

What a turn offers (``plan_turn``), for a viewer whose sharing state is ``state`` on a
desk whose last sequence is ``last``:

- no state, or a delta that cannot be computed (``GAP_TOO_LARGE``): the *full window*,
  exactly the viewer's view at ``last`` (``project_session`` with ``SESSION_WINDOW``),
  the viewer's own rows included (reason ``"initial"`` or the reinitialize reason);
- else a *delta*: every row above the watermark (up to ``last``) that qualifies for the
  viewer's view (in a thread, the root and its direct replies; in the channel, every
  root and every reply that is its root's first non-blank reply, wherever the root lies),
  minus the viewer's own rows (same participant, labels ignored) and its present set.
  Whether a reply is its root's first is asked of the ``ReplyIndex`` once per delta, for
  the parents of the replies walked, so the delta never walks down to a root: its cost
  is the rows above the watermark, flat in the desk's history.

The delta walk runs with ``log_ends_at_watermark=True``: the planner walks the desk's
whole log, so a log that ends above the watermark (a desk whose first turn came before
its first row, or whose rows up to the watermark are run or tool events) has had every
row above the watermark walked, and that is a delta, never ``WATERMARK_UNAVAILABLE``.

The state a commit stores has ``watermark = last`` (everything walked; a row appended
after planning lies above it and is offered by the next turn), the present entries above
``last`` carried over, and (noted by the store inside the commit's transaction) the
reply's own sequence.

So every row that ever shows in a viewer's view, other than its own, is offered by
exactly one turn until a reinitialize: a row at or below the watermark of a full window
that was not in it never enters a later view (a view's threshold only rises), and a row
above it qualifies for the view exactly when it qualifies for the delta of its interval.

The projector's fold (``fold_view``): a pushed row is folded into a cached view without
a walk when that is provably what a fresh walk would give; otherwise ``None`` (walk
again). With ``needed`` an upper bound on the rows a fresh walk must inspect (the rows
the last walk read, plus one per row folded since):

- a blank row qualifies nowhere: the view is unchanged;
- in a thread ``R``: row ``R`` itself (a root that arrives after the view was built) and
  every non-blank reply to ``R`` are appended, the oldest message dropped past the window
  (the root, when present, is the oldest: "the newest ``window`` replies without the
  root"); any other row is not part of the thread: unchanged;
- in the channel, a non-blank root is appended likewise (a new root changes no other
  row's standing, and a full, non-partial view is the newest ``window`` of everything
  that qualifies); a reply is left to a walk (whether it is its root's first non-blank
  reply needs the log).

The fold applies only while the view is not ``partial`` and ``needed + 1`` stays a page
below ``SCAN_LIMIT``, so the fresh walk could not have been cut by the scan limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from sharedesk.projection.session import as_messages, is_blank, project_session
from sharedesk.projection.sharing import delta_messages, rows_above_watermark
from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.constants import PAGE_SIZE, SCAN_LIMIT, SESSION_WINDOW
from sharedesk.protocol.errors import WatermarkRegression
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
        messages: What the viewer must read, oldest first (see the module header).
        reason: ``None`` for a delta, else ``"initial"`` or a ``ReinitializeReason`` value.
        expected_state: The stored state the turn was planned from (``None``: none).
        next_state: The state committing stores, before the reply is noted as present:
            the watermark is the last sequence when the turn was planned.
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
) -> TurnPlan:
    """Plan a turn of ``viewer`` in ``conversation`` on a session whose last sequence is ``last``.

    Args:
        log: The session's log (the whole history, newest first).
        state: The stored sharing state of (viewer, conversation), or ``None``.
        conversation: The channel or thread.
        viewer: Whose turn it is.
        last: The session's last sequence (read before ``log`` is walked).
        replies: The session's first-reply index (asked only for a channel delta).

    Returns:
        The plan: messages (see the module header), reason, the state it was planned
        from and the state committing will store.

    Raises:
        PageError: The log returned a malformed page.
        LogReadError: The log failed.
        WatermarkRegression: ``last`` lies below the stored watermark.

    Cost: one walk of the log from ``last`` down to the watermark (a delta; none when
    ``last`` is the watermark) or to a full window, at most ``SCAN_LIMIT`` rows each; one
    ``replies.first_replies`` call for a channel delta with replies in it; no writes.
    """
    messages: list[SessionMessage] | None = None
    reason: str | None = "initial"
    carried: frozenset[int] = frozenset()
    if state is not None:
        carried = frozenset(seq for seq in state.present_above_watermark if seq > last)
        if last < state.watermark:
            raise WatermarkRegression(last, state.watermark)
        walked = (
            []  # nothing was appended since: no read
            if last == state.watermark
            else rows_above_watermark(log, last + 1, state.watermark, log_ends_at_watermark=True)
        )
        if isinstance(walked, list):
            messages = delta_messages(walked, state, conversation, viewer, replies)
            reason = None
        else:
            reason = walked.reason.value
    if messages is None:
        window = SessionQuery(conversation=conversation, before=last + 1, window=SESSION_WINDOW)
        messages = project_session(log, window).messages
    return TurnPlan(
        conversation=conversation,
        messages=messages,
        reason=reason,
        expected_state=state,
        next_state=SharingState(
            conversation=conversation, watermark=last, present_above_watermark=carried
        ),
    )


class CachedView(msgspec.Struct, frozen=True):
    """A cached view and an upper bound on the rows a fresh walk for it must read.

    Attributes:
        projection: The view.
        needed: At most this many rows must be read to build it afresh.
    """

    projection: Projection
    needed: int


def fold_view(
    cached: CachedView, row: LogMessage, conversation: Conversation, window: int
) -> CachedView | None:
    """Fold one new row into a cached view; ``None`` when a fresh walk is needed.

    Args:
        cached: The view as of the row before ``row``.
        row: The next ``Text`` row of the session (the newest).
        conversation: The conversation the view shows.
        window: The view's window.

    Returns:
        The view a fresh walk would give with ``row`` appended (see the module header),
        or ``None`` when that is not provable without a walk.

    Cost: O(window); no reads.
    """
    needed = cached.needed + 1
    if cached.projection.partial or needed > FOLD_LIMIT:
        return None
    if window == 0 or is_blank(row.content):
        return CachedView(cached.projection, needed)
    root = conversation.thread_root
    if root is None:
        if row.parent is not None:
            return None
    elif row.parent != root and row.sequence != root:
        return CachedView(cached.projection, needed)
    messages = [*cached.projection.messages, *as_messages([row])][-window:]
    return CachedView(Projection(messages=messages, partial=False), needed)


def fold_views(
    cached: CachedView, rows: Sequence[LogMessage], conversation: Conversation, window: int
) -> CachedView | None:
    """Fold ``rows`` (oldest first) into ``cached`` one by one (``fold_view``).

    Returns:
        The folded view, or ``None`` as soon as one row needs a fresh walk.

    Cost: O(len(rows) * window); no reads.
    """
    folded: CachedView | None = cached
    for row in rows:
        if folded is None:
            return None
        folded = fold_view(folded, row, conversation, window)
    return folded


__all__ = [
    "FOLD_LIMIT",
    "CachedView",
    "TurnPlan",
    "fold_view",
    "fold_views",
    "plan_turn",
]
