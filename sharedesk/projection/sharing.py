"""Continuous sharing: watermarked deltas of one conversation for one participant.

A :class:`~sharedesk.SharingState` says what a participant has been shown: everything at
or below its ``watermark``, plus the rows in ``present_above_watermark`` (its own rows the
host accepted after the watermark). ``prepare_delta`` returns the rows the participant has
not seen and the state to commit once the turn is durably appended; it never applies the
state itself, so a crash between the two leaves the watermark behind rather than ahead.

The delta walk reads the log through the same ``_LogWalk`` as ``project_session`` (same
growing reads, same page checks, same ``SCAN_LIMIT``) and stops at the first row at or
below the watermark. Which rows qualify:

* a thread (``thread_root = R``): row R and rows whose ``parent == R``;
* the channel: roots only (rows with no parent), as in the seed; replies reach a channel
  reader through its threads, or through a full projection after a reinitialize;
* never a blank row or a row of another desk, nor a row in the present set.
"""

from __future__ import annotations

from collections.abc import Sequence

from sharedesk.projection.session import _LogWalk, as_messages, check_log, is_blank
from sharedesk.protocol.authors import SessionAuthor, same_participant
from sharedesk.protocol.constants import PRESENT_SET_LIMIT
from sharedesk.protocol.errors import (
    PresentSetOverflow,
    PresentSetTooLarge,
    ValidationError,
    WatermarkRegression,
)
from sharedesk.protocol.ports import ReplyIndex, SessionLog
from sharedesk.protocol.validation import check_conversation, check_int
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
    """Return the state of a participant who has been shown everything up to ``watermark``.

    Args:
        conversation: The conversation the state tracks.
        watermark: Highest sequence up to which everything was shown (0: nothing).

    Returns:
        A state with that watermark and an empty present set.

    Raises:
        ValidationError: ``conversation`` is not a ``Conversation`` or ``watermark`` is
            not an int of at least 0.

    Cost: O(1); no reads, no writes.
    """
    check_conversation(conversation, "conversation")
    check_int("watermark", watermark, minimum=0)
    return SharingState(conversation, watermark, frozenset())


def note_present(state: SharingState, sequence: int) -> SharingState:
    """Return ``state`` with ``sequence`` recorded as already present for the participant.

    Use it for a row the participant wrote itself after its watermark (e.g. a message it
    posted outside a turn), so that the next delta does not offer the row back. The given
    state is never changed.

    Args:
        state: The current state.
        sequence: The row's sequence.

    Returns:
        A new state holding ``sequence`` in its present set; ``state`` itself when
        ``sequence`` is at or below the watermark or already present.

    Raises:
        ValidationError: ``state`` is not a ``SharingState`` or ``sequence`` not an int.
        PresentSetTooLarge: ``state`` already holds more than ``PRESENT_SET_LIMIT``
            sequences (only reachable by bypassing the struct's own check).
        PresentSetOverflow: ``state`` holds ``PRESENT_SET_LIMIT`` sequences and
            ``sequence`` would be one more.

    Cost: O(PRESENT_SET_LIMIT) to copy the set; no reads, no writes.
    """
    _check_state(state)
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
    """Return the rows the participant has not seen, or why a full window is needed.

    Checks, in order: ``query.requested``, ``query.bound`` and ``state.conversation``
    must all be the same conversation, else ``Reinitialize(CONVERSATION_CHANGED)``;
    ``query.before`` below the watermark raises ``WatermarkRegression``; ``before`` equal
    to the watermark returns an empty ``Delta`` with ``state`` itself. None of these
    reads the log. Otherwise :func:`rows_above_watermark` walks it, and the qualifying
    rows above the watermark that are not present (see the module header) come back
    oldest first.

    Note for callers (the Hub): ``before`` is exclusive and becomes the new watermark, so
    the row at ``before`` itself is claimed as shown without being delivered. A caller
    that passes ``last_sequence + 1`` therefore claims the row ``last_sequence + 1`` as
    shown: that is right only when that row will be the participant's own (the reply the
    turn appends); otherwise the next row anyone appends is never delivered.

    Args:
        log: The host log, read newest first through ``read_before``.
        state: The participant's current state; never changed.
        query: The requested and bound conversations and the exclusive bound ``before``.

    Returns:
        ``Delta(messages, next_state)`` with ``next_state.watermark == before`` and the
        present entries at or below ``before`` dropped; or ``Reinitialize``:
        ``CONVERSATION_CHANGED``, or the reason :func:`rows_above_watermark` gives.

    Raises:
        ValidationError: Malformed ``state`` or ``query`` (not the right type, a negative
            or non-int ``before``), ``log`` without ``read_before``, or as
            :func:`rows_above_watermark`.
        PresentSetTooLarge: ``state`` holds more than ``PRESENT_SET_LIMIT`` sequences.
        WatermarkRegression: ``query.before < state.watermark``.
        PageError: As :func:`rows_above_watermark`.
        LogReadError: As :func:`rows_above_watermark`.

    Cost: the walk of :func:`rows_above_watermark`, none when a check above answers; no
    writes.
    """
    _check_state(state)
    requested, bound, before = _check_sharing_query(query)
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
    return Delta(
        messages=delta_messages(walked, state, conversation),
        next_state=SharingState(
            conversation,
            before,
            frozenset(seq for seq in state.present_above_watermark if seq > before),
        ),
    )


def delta_messages(
    rows: Sequence[LogMessage],
    state: SharingState,
    conversation: Conversation,
    viewer: SessionAuthor | None = None,
    replies: ReplyIndex | None = None,
) -> list[SessionMessage]:
    """Return what a delta over ``rows`` (every row above the watermark) offers.

    The rows that qualify are those of the module header. With ``replies`` (the turn
    planner), a channel delta also offers each reply that is its root's first non-blank
    reply, wherever the root lies, and with ``viewer`` the viewer's own rows (same
    participant, labels ignored) are left out.

    Args:
        rows: The rows above the watermark, oldest first (``rows_above_watermark``).
        state: The participant's state (its present set is left out).
        conversation: The channel or thread.
        viewer: Whose rows to leave out, or ``None``.
        replies: The first-reply index, asked once for the parents of the channel's
            candidate replies (never when there are none), or ``None``: roots only.

    Returns:
        The offered rows, oldest first.

    Cost: O(len(rows)); at most one ``replies.first_replies`` call; no reads of the log.
    """
    desk = conversation.desk
    root = conversation.thread_root
    present = state.present_above_watermark
    picked: list[LogMessage] = []
    candidates: set[int] = set()
    for row in rows:
        seq = row.sequence
        if (
            row.desk != desk
            or is_blank(row.content)
            or seq in present
            or (viewer is not None and same_participant(row.author, viewer))
        ):
            continue
        if root is not None:
            if seq == root or row.parent == root:
                picked.append(row)
        elif row.parent is None:
            picked.append(row)
        elif replies is not None:
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
    """Walk ``log`` newest first from ``before`` down to ``watermark``; return the rows above it.

    The walk every delta takes (``prepare_delta``, the turn planner): the log walk of
    :mod:`sharedesk.projection.session`, stopped at the first row at or below
    ``watermark``.

    Args:
        log: The host log, read newest first through ``read_before``.
        before: The exclusive upper bound (greater than ``watermark``).
        watermark: Everything at or below it has been shown.
        log_ends_at_watermark: What a log that ends above ``watermark`` means. ``False``
            (the seed's rule): the rows up to the watermark are unavailable, so
            ``Reinitialize(WATERMARK_UNAVAILABLE)``. ``True``: the log holds nothing at
            or below the watermark that a delta could need (a caller that knows the
            log is the whole history, e.g. a desk whose first turn came before its
            first row), so the walk has seen every row above it and returns them.

    Returns:
        Every row read above ``watermark``, oldest first; or ``Reinitialize`` with
        ``GAP_TOO_LARGE`` (``SCAN_LIMIT`` rows read first) or ``WATERMARK_UNAVAILABLE``
        (the log ended first, ``log_ends_at_watermark`` off; this wins when the page
        that reaches ``SCAN_LIMIT`` also ends the log, and is the answer for a watermark
        of 0 once the log has rows above it).

    Raises:
        ValidationError: A page that is not a ``SessionPage`` of well-typed rows.
        PageError: A page broke the page contract (as in ``project_session``).
        LogReadError: ``log.read_before`` raised; the original error is the ``__cause__``.

    Cost: the walk's reads (as in ``project_session``); CPU O(rows read); no writes.
    """
    walk = _LogWalk(log, before)
    rows: list[LogMessage] = []
    for row in walk:
        if row.sequence <= watermark:
            break
        rows.append(row)
    else:
        if walk.ended:
            if log_ends_at_watermark:
                rows.reverse()
                return rows
            return Reinitialize(reason=ReinitializeReason.WATERMARK_UNAVAILABLE)
        return Reinitialize(reason=ReinitializeReason.GAP_TOO_LARGE)
    rows.reverse()
    return rows


def _check_state(state: object) -> SharingState:
    """Return ``state`` if it is a well-formed ``SharingState``."""
    if not isinstance(state, SharingState):
        raise ValidationError(f"state must be a SharingState, got {type(state).__name__}")
    check_conversation(state.conversation, "state.conversation")
    check_int("state.watermark", state.watermark, minimum=0)
    present = state.present_above_watermark
    if not isinstance(present, frozenset):
        raise ValidationError(
            f"state.present_above_watermark must be a frozenset, got {type(present).__name__}"
        )
    if len(present) > PRESENT_SET_LIMIT:
        raise PresentSetTooLarge(PRESENT_SET_LIMIT, len(present))
    return state


def _check_sharing_query(query: object) -> tuple[Conversation, Conversation, int]:
    """Return the requested and bound conversations and the bound of a ``SharingQuery``."""
    if not isinstance(query, SharingQuery):
        raise ValidationError(f"query must be a SharingQuery, got {type(query).__name__}")
    requested = check_conversation(query.requested, "query.requested")
    bound = check_conversation(query.bound, "query.bound")
    before = check_int("query.before", query.before, minimum=0)
    return requested, bound, before
