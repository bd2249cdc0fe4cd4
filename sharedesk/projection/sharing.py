"""Continuous sharing: watermarked deltas of one conversation for one participant.

``prepare_delta`` returns the unseen rows and the state to commit once the turn is
durably appended; it never applies the state itself, so a crash between the two leaves
the watermark behind. Its walk is ``project_session``'s ``_LogWalk``, stopped at the
first row at or below the watermark. A delta offers, in a thread ``R``, row R and the
rows whose ``parent == R``; in the channel, roots only; never a blank row, a row of
another desk or one in the present set.
"""

from __future__ import annotations

from collections.abc import Sequence

from sharedesk.projection.session import (
    _LogWalk,
    as_messages,
    check_log,
    in_conversation,
    is_blank,
)
from sharedesk.protocol.authors import SessionAuthor, same_participant
from sharedesk.protocol.constants import PRESENT_SET_LIMIT
from sharedesk.protocol.errors import (
    PresentSetOverflow,
    RowsArchived,
    ValidationError,
    WatermarkRegression,
)
from sharedesk.protocol.ports import ReplyIndex, SessionLog
from sharedesk.protocol.validation import check_conversation, check_int, check_sharing_state
from sharedesk.protocol.views import (
    Conversation,
    Delta,
    LogMessage,
    Reinitialize,
    ReinitializeReason,
    SessionMessage,
    SharingQuery,
    SharingState,
)


def initialized_state(conversation: Conversation, watermark: int) -> SharingState:
    """Return the state of a participant shown everything up to ``watermark`` (0: nothing).

    Raises ``ValidationError`` for a malformed argument. Cost: O(1); no reads, no writes.
    """
    check_conversation(conversation, "conversation")
    check_int("watermark", watermark, minimum=0)
    return SharingState(conversation, watermark, frozenset())


def note_present(state: SharingState, sequence: int) -> SharingState:
    """Return ``state`` with ``sequence`` (a row the participant wrote) noted as present.

    The next delta does not offer that row back. ``state`` is never changed, and is
    returned itself when ``sequence`` is at or below the watermark or already present.
    Raises ``ValidationError`` for a malformed argument, ``PresentSetTooLarge`` when
    ``state`` holds more than ``PRESENT_SET_LIMIT``, ``PresentSetOverflow`` when
    ``sequence`` would be one more. Cost: O(PRESENT_SET_LIMIT) to copy the set; no reads, no writes.
    """
    check_sharing_state(state)
    check_int("sequence", sequence)
    present = state.present_above_watermark
    if sequence <= state.watermark or sequence in present:
        return state
    if len(present) >= PRESENT_SET_LIMIT:
        raise PresentSetOverflow(PRESENT_SET_LIMIT, sequence)
    return SharingState(state.conversation, state.watermark, present | {sequence})


def prepare_delta(
    log: SessionLog, state: SharingState, query: SharingQuery
) -> Delta | Reinitialize:
    """Return the rows the participant has not seen, oldest first, or a ``Reinitialize``.

    ``Reinitialize(CONVERSATION_CHANGED)`` unless ``query.requested``, ``query.bound``
    and ``state.conversation`` are one conversation; ``before == watermark`` gives an
    empty ``Delta`` with ``state`` itself (neither reads). Otherwise the walk of
    :func:`rows_above_watermark`, giving ``Delta(messages, next_state)`` with the present
    entries at or below ``before`` dropped. ``before`` is exclusive and becomes the new
    watermark: the row at ``before`` is claimed as shown without being delivered.

    Raises ``WatermarkRegression`` when ``query.before < state.watermark``,
    ``PresentSetTooLarge`` as :func:`note_present`, and as ``project_session``. Cost: the
    walk of :func:`rows_above_watermark` (none when a check above answers).
    """
    check_sharing_state(state)
    if not isinstance(query, SharingQuery):
        raise ValidationError(f"query must be a SharingQuery, got {type(query).__name__}")
    requested = check_conversation(query.requested, "query.requested")
    bound = check_conversation(query.bound, "query.bound")
    before = check_int("query.before", query.before, minimum=0)
    check_log(log)
    conversation = state.conversation
    if requested != conversation or bound != conversation:
        return Reinitialize(reason=ReinitializeReason.CONVERSATION_CHANGED)
    watermark = state.watermark
    if before < watermark:
        raise WatermarkRegression(before, watermark)
    if before == watermark:
        return Delta(messages=[], next_state=state)
    walked = rows_above_watermark(log, before, watermark)
    if isinstance(walked, Reinitialize):
        return walked
    carried = frozenset(seq for seq in state.present_above_watermark if seq > before)
    next_state = SharingState(conversation, before, carried)
    return Delta(messages=delta_messages(walked, state, conversation), next_state=next_state)


def delta_messages(
    rows: Sequence[LogMessage],
    state: SharingState,
    conversation: Conversation,
    viewer: SessionAuthor | None = None,
    replies: ReplyIndex | None = None,
) -> list[SessionMessage]:
    """Return what a delta over ``rows`` (oldest first, all above the watermark) offers.

    The rows of the module header, minus ``state``'s present set. With ``replies`` (the
    turn planner), a channel delta also offers each reply that is its root's first
    non-blank reply (one ``first_replies`` call, none without candidates); with
    ``viewer``, the viewer's own rows (labels ignored) are left out. Cost: O(len(rows)).
    """
    desk = conversation.desk
    root = conversation.thread_root
    present = state.present_above_watermark
    picked: list[LogMessage] = []
    candidates: set[int] = set()
    for row in rows:
        seq = row.sequence
        if row.desk != desk or is_blank(row.content) or seq in present:
            continue
        if viewer is not None and same_participant(row.author, viewer):
            continue  # the viewer's own row
        if in_conversation(root, seq, row.parent):
            picked.append(row)
        elif root is None and replies is not None and row.parent is not None:
            picked.append(row)
            candidates.add(row.parent)
    if candidates:
        assert replies is not None
        first = replies.first_replies(sorted(candidates))
        picked = [r for r in picked if r.parent is None or first.get(r.parent) == r.sequence]
    return as_messages(picked)


def rows_above_watermark(
    log: SessionLog, before: int, watermark: int, *, log_ends_at_watermark: bool = False
) -> list[LogMessage] | Reinitialize:
    """Walk ``log`` from ``before`` to ``watermark``; return the rows above it, oldest first.

    ``Reinitialize(GAP_TOO_LARGE)`` when ``SCAN_LIMIT`` rows come first. A log that ends
    first gives ``WATERMARK_UNAVAILABLE`` (even when that page reaches ``SCAN_LIMIT``),
    unless ``log_ends_at_watermark`` (the turn planner: the log is the whole history).
    A log raising ``RowsArchived`` at or below ``watermark`` has given every row above
    it. Raises as ``project_session``; costs its walk's reads.
    """
    walk = _LogWalk(log, before)
    rows: list[LogMessage] = []
    try:
        for row in walk:
            if row.sequence <= watermark:
                break
            rows.append(row)
        else:
            if not walk.ended:
                return Reinitialize(reason=ReinitializeReason.GAP_TOO_LARGE)
            if not log_ends_at_watermark:
                return Reinitialize(reason=ReinitializeReason.WATERMARK_UNAVAILABLE)
    except RowsArchived as gone:
        if gone.archived_through > watermark:
            raise
    rows.reverse()
    return rows
