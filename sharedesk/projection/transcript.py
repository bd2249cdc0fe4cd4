"""``TranscriptBuilder``: a session's transcript built from events or a store, and continued.

The fold's rules are in :mod:`sharedesk.projection.messages`; this module checks the
arguments, reads the store and keeps where the fold stopped.

**Reading from the tail.** With a budget, ``from_store`` reads newest first in pages
(``FIRST_PAGE`` events, doubling to ``MAX_PAGE``) until the events read decide the kept
suffix: the budgets cut at least one message of them and every tool result read found
its call. Only the oldest message read can differ from a fold of the whole session (its
stream may begin further back), and it is cut.

**Compaction.** Nothing at or below the ``through`` of the channel's newest compaction
is read: its summary stands for it (rule 6 of ``messages``). A tail walk that read a
compaction goes on down to its ``through`` and stops there.

**Continuing.** ``update_from_store`` resumes from the transcript's private
:class:`~sharedesk.protocol.transcripts.TranscriptFold`. With budgets it truncates the
kept messages plus the new ones: a fresh build differs only when an open stream that
alone exceeded the character budget (so was cut with everything before it) is closed by
a shorter ``Text``, and may then keep older messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Unpack

from sharedesk.projection.compaction import (
    channel_compacted,
    events_after_compaction,
)
from sharedesk.projection.messages import (
    Budget,
    Budgets,
    MessageFold,
    latest,
    message_chars,
    role_of,
    truncate,
)
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Compaction, Event
from sharedesk.protocol.ports import EventStore
from sharedesk.protocol.transcripts import Transcript, TranscriptFold
from sharedesk.protocol.validation import (
    check_optional_author,
    check_optional_int,
    check_optional_str,
    check_session_id,
)

if TYPE_CHECKING:
    from datetime import datetime

#: Events asked of the store by the first page of a walk from the tail.
FIRST_PAGE: Final = 256
#: Most events asked of the store by one page of a walk from the tail.
MAX_PAGE: Final = 4096


class TranscriptBuilder:
    """Builds a session's :class:`~sharedesk.Transcript` from its events (static methods).

    The rules are in :mod:`sharedesk.projection.messages`. Every method takes the budgets
    ``max_messages``, ``max_chars`` (:meth:`message_chars`) and ``max_tokens_approx`` (4
    characters a token), each unbounded when ``None`` or left out. A malformed argument
    raises ``ValidationError`` before anything is read.
    """

    role_of = staticmethod(role_of)
    message_chars = staticmethod(message_chars)

    @staticmethod
    def from_events(
        events: Iterable[Event],
        *,
        session_id: str | None = None,
        viewer: SessionAuthor | None = None,
        **budgets: Unpack[Budgets],
    ) -> Transcript:
        """Fold ``events`` (in any order; never changed) into a transcript for ``viewer``.

        ``session_id`` is required (events carry none). ``last_sequence`` and
        ``last_timestamp`` are the highest and latest among all ``events``, whatever the
        truncation cut. With a character budget, a tool input or output that cannot be
        encoded as JSON is ``ValidationError``. Cost: O(n log n) for n events; no I/O.
        """
        if session_id is None:
            raise ValidationError("session_id is required: events carry no session id")
        checked_id = check_session_id(session_id)
        checked_viewer = check_optional_author(viewer, "viewer")
        budget = Budget(**budgets)
        return _build(checked_id, _check_events(events), checked_viewer, budget)

    @staticmethod
    def from_store(
        store: EventStore,
        session_id: str,
        *,
        limit: int | None = None,
        viewer: SessionAuthor | None = None,
        exclude_run_id: str | None = None,
        **budgets: Unpack[Budgets],
    ) -> Transcript:
        """Read a session's newest events from ``store`` and fold them (as :meth:`from_events`).

        ``limit`` reads only the newest ``limit`` events; ``exclude_run_id`` leaves out that
        run's events (not counted toward ``limit``): a run's replay of its session. Raises
        as :meth:`from_events` and the store's ``read``. Cost: with a budget or ``limit``,
        reads newest first (pages of 256 events, doubling) until they are met, else one read
        of the whole session; no writes.
        """
        checked_id = check_session_id(session_id)
        checked_limit = check_optional_int("limit", limit)
        checked_viewer = check_optional_author(viewer, "viewer")
        budget = Budget(**budgets)
        check_optional_str("exclude_run_id", exclude_run_id)
        events = _read(store, checked_id, checked_limit, checked_viewer, budget, exclude_run_id)
        return _build(checked_id, events, checked_viewer, budget)

    @staticmethod
    def update_from_store(
        store: EventStore,
        transcript: Transcript,
        *,
        viewer: SessionAuthor | None = None,
        **budgets: Unpack[Budgets],
    ) -> Transcript:
        """Extend ``transcript`` (never changed) with the events after its ``last_sequence``.

        An open streamed message continues across the boundary, and the budgets apply to the
        kept messages plus the new ones. ``transcript`` must come from this builder for the
        same ``viewer`` (or be built by hand, without fold state), else it is
        ``ValidationError``; the store's ``read`` may raise too. Cost: one ``store.read`` of
        the events after ``last_sequence``; no writes.
        """
        if not isinstance(transcript, Transcript):
            raise ValidationError(
                f"transcript must be a Transcript, got {type(transcript).__name__}"
            )
        checked_id = check_session_id(transcript.session_id)
        checked_viewer = check_optional_author(viewer, "viewer")
        budget = Budget(**budgets)
        fold, cut_calls = _resume(transcript, checked_viewer)
        events = store.read(checked_id, after=transcript.last_sequence)
        fold.add_all(events)
        previous = (transcript.last_sequence, transcript.last_timestamp)
        return _finish(checked_id, fold, cut_calls, budget, events, *previous)


def _check_events(events: Any) -> list[Event]:
    if isinstance(events, Event | str | bytes) or not isinstance(events, Iterable):
        raise ValidationError(f"events must be an iterable of Event, got {type(events).__name__}")
    checked = list(events)
    for index, event in enumerate(checked):
        if not isinstance(event, Event):
            raise ValidationError(f"events[{index}] must be an Event, got {type(event).__name__}")
    return checked


def _build(
    session_id: str, events: Sequence[Event], viewer: SessionAuthor | None, budget: Budget
) -> Transcript:
    fold = MessageFold(viewer)
    fold.add_all(events_after_compaction(events))
    return _finish(session_id, fold, (), budget, events, None, None)


def _finish(
    session_id: str,
    fold: MessageFold,
    cut_calls: Sequence[str],
    budget: Budget,
    events: Sequence[Event],
    last_sequence: int | None,
    last_timestamp: datetime | None,
) -> Transcript:
    """Truncate the fold's messages and record where it stopped (after ``last_sequence``)."""
    messages, open_text, open_run = fold.finish()
    kept, still_cut = truncate(messages, cut_calls, budget)
    sequences = [event.sequence for event in events if event.sequence is not None]
    last = max(sequences, default=last_sequence)
    newest = latest([last_timestamp, *(event.timestamp for event in events)])
    viewer = None if fold.viewer is None else author_key(fold.viewer)
    stopped = TranscriptFold(viewer, open_text, open_run, tuple(still_cut))
    return Transcript(session_id, kept, last, newest, _fold=stopped)


def _resume(transcript: Transcript, viewer: SessionAuthor | None) -> tuple[MessageFold, list[str]]:
    """Return the fold ``transcript`` stopped at and the calls it cut, checked."""
    state = transcript._fold
    if state is None:
        return MessageFold(viewer, transcript.messages), []
    viewer_key = None if viewer is None else author_key(viewer)
    if state.viewer != viewer_key:
        raise ValidationError(
            f"transcript was built for viewer {state.viewer!r}, not {viewer_key!r}"
        )
    open_text, run, cut_calls = state.open_text, state.open_run_id, state.cut_pending_calls
    if open_text is not None and open_text.author is None:
        raise ValidationError("the transcript's open_text has no author")
    messages = list(transcript.messages)
    if open_text is not None and messages:
        # Truncation keeps a suffix, so the open message, being the newest, is either
        # the last kept message or was cut with everything else.
        if messages[-1] != open_text:
            raise ValidationError("the transcript's open_text is not its last message")
        messages.pop()
    return MessageFold(viewer, messages, open_text, run, cut_calls), list(cut_calls)


def _read(
    store: EventStore,
    session_id: str,
    limit: int | None,
    viewer: SessionAuthor | None,
    budget: Budget,
    exclude_run_id: str | None,
) -> list[Event]:
    """Read the newest events (at most ``limit``; fewer once the budget is met), oldest first."""
    if limit is None and not budget.bounded:  # the whole session (after a compaction): one read
        events = store.read(session_id, after=_compacted_through(store, session_id) or None)
        if exclude_run_id is None:
            return events
        return [e for e in events if e.run_id != exclude_run_id]
    kept: list[Event] = []  # newest first
    before: int | None = None
    page = FIRST_PAGE
    floor = 0  # the through of a channel compaction read: nothing below it is needed
    while (limit is None or len(kept) < limit) and (before is None or before > floor + 1):
        want = page if limit is None else min(page, limit - len(kept))
        if limit is not None and not budget.bounded and exclude_run_id is None:
            want = limit - len(kept)  # the newest ``limit`` events: one read
        rows = store.read(session_id, before=before, limit=want, newest_first=True)
        if not rows:
            break
        for event in rows:
            if exclude_run_id is None or event.run_id != exclude_run_id:
                kept.append(event)
            body = event.body
            if isinstance(body, Compaction) and body.thread_root is None:
                floor = max(floor, body.through)
        if limit is not None and len(kept) >= limit:
            del kept[limit:]
            break
        if len(rows) < want:
            break
        before = rows[-1].sequence
        if before is None or before <= 1:
            break
        if budget.bounded and not floor:
            fold = MessageFold(viewer)
            fold.add_all(kept[::-1])
            if not fold.orphans and budget.oldest_kept(fold.finish()[0]) > 0:
                break  # the events read decide the kept suffix (see the module header)
        page = min(page * 2, MAX_PAGE)
    kept.reverse()
    return kept


def _compacted_through(store: EventStore, session_id: str) -> int:
    """Return the ``through`` of the channel's newest compaction, when the store keeps state."""
    session_state = getattr(store, "session_state", None)
    if session_state is None:
        return 0
    return channel_compacted(session_state(session_id).compactions, session_id)
