"""Compaction: one conversation's rows at or below ``through`` served as one summary row.

A ``Compaction(through, summary, covers, thread_root)`` event changes no stored row. The
folds read a compacted conversation through :class:`CompactedLog`, a ``SessionLog`` that
serves the rows above ``through`` as they are and then, in place of every row at or
below it, one summary row: sequence ``through``, authored by the compactor, content the
summary, ``covers`` its authors (a root in the channel; in thread ``R`` the root itself
when ``through == R``, else a reply to R). So ``project_session``, ``plan_turn`` and
``fold_views`` run unchanged over it, and everything after ``through`` is walked exactly
as before: compaction can neither drop nor repeat such a row.

A channel reply above ``through`` whose root lies below it has no root left to reach, so
views never show it; :meth:`CompactedLog.first_replies` keeps deltas in line by
answering no first reply for such a root. (A reply to the root at ``through`` itself answers the
summary row that stands in its place, and stays.) Stores keep each conversation's newest
compaction in ``SessionState.compactions`` (:func:`fold_compactions`, folded as events
are appended), so finding it is one lookup however long the desk.

Transcripts (the channel's compactions only) fold a ``Compaction`` in sequence order:
:func:`compacted_messages` puts one summary message, its role relative to the viewer,
in place of the messages of the events at or below ``through``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from sharedesk.projection.session import in_conversation, is_blank
from sharedesk.protocol.authors import SessionAuthor, same_participant
from sharedesk.protocol.constants import PAGE_SIZE
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Compaction, Event
from sharedesk.protocol.ports import ReplyIndex, SessionLog
from sharedesk.protocol.transcripts import TranscriptMessage
from sharedesk.protocol.views import Conversation, LogMessage, SessionPage


def compaction_of(compactions: Sequence[Event], conversation: Conversation) -> Event | None:
    """Return the newest compaction of ``conversation`` among ``compactions``, or ``None``.

    Cost: O(len(compactions)).
    """
    root = conversation.thread_root
    for event in compactions:
        if isinstance(event.body, Compaction) and event.body.thread_root == root:
            return event
    return None


def fold_compactions(compactions: tuple[Event, ...], event: Event) -> tuple[Event, ...]:
    """Return ``compactions`` with the stored ``event`` (a ``Compaction``) applied.

    It replaces its conversation's entry when its ``through`` is higher. A stale one, or
    one (appended by hand) whose ``through`` is not below its own sequence, changes
    nothing. Cost: O(len(compactions)).
    """
    body = event.body
    assert isinstance(body, Compaction) and event.sequence is not None
    old = compaction_of(compactions, Conversation("", body.thread_root))
    if compacted_through(old) >= body.through or body.through >= event.sequence:
        return compactions
    return (*(other for other in compactions if other is not old), event)


def summary_row(compaction: Event, desk: str) -> LogMessage:
    """Return the summary row that stands for the rows ``compaction`` replaces."""
    body = compaction.body
    assert isinstance(body, Compaction)
    root = body.thread_root
    parent = None if root is None or root == body.through else root
    return LogMessage(body.through, compaction.author, body.summary, desk, parent, body.covers)


class CompactedLog:
    """``log`` and ``replies`` as ``compaction`` serves them (see the module header).

    It never reads ``log`` below the compaction's ``through``.
    """

    __slots__ = ("_log", "_replies", "_summary", "_through")

    def __init__(
        self, log: SessionLog, compaction: Event, desk: str, replies: ReplyIndex | None = None
    ) -> None:
        self._log = log
        self._replies = replies
        self._summary = summary_row(compaction, desk)
        self._through = self._summary.sequence

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        """As :meth:`SessionLog.read_before`; the summary row is the last row of the log."""
        through = self._through
        if before is not None and before <= through + 1:
            rows = [self._summary] if before > through and limit > 0 else []
            return SessionPage(messages=rows, next_before=None)
        page = self._log.read_before(before, limit)
        above = [row for row in page.messages if row.sequence > through]
        cursor = page.next_before
        if len(above) == len(page.messages) and cursor is not None and cursor > through + 1:
            return page
        if len(above) < limit:
            return SessionPage(messages=[*above, self._summary], next_before=None)
        return SessionPage(messages=above, next_before=through + 1)

    def first_replies(self, roots: Collection[int]) -> Mapping[int, int]:
        """As :meth:`ReplyIndex.first_replies`, for the roots at or above ``through`` only."""
        live = [root for root in roots if root >= self._through]
        return self._replies.first_replies(live) if live and self._replies is not None else {}


def compacted_through(compaction: Event | None) -> int:
    """Return the ``through`` of ``compaction`` (0 for ``None``: nothing compacted)."""
    if compaction is None:
        return 0
    body = compaction.body
    assert isinstance(body, Compaction)
    return body.through


def channel_compacted(compactions: Sequence[Event], session_id: str) -> int:
    """Return the ``through`` of desk ``session_id``'s newest channel compaction (0: none)."""
    return compacted_through(compaction_of(compactions, Conversation(session_id)))


def compaction_event(
    log: SessionLog,
    conversation: Conversation,
    summary: object,
    through: object,
    author: SessionAuthor,
    last: int,
    previous: Event | None,
) -> Event:
    """Return the ``Compaction`` event that compacts ``conversation`` through ``through``.

    ``last`` is the desk's last sequence and ``previous`` the conversation's newest
    compaction; ``covers`` comes from :func:`compaction_covers` over ``log``.

    Raises ``ValidationError`` (checked before anything is read): a desk with no rows
    (``last == 0``), a summary that is not a non-blank ``str``, a ``through`` that is
    not an int, lies beyond ``last``, at or below ``previous``'s, or below the thread's
    root. Cost: that of :func:`compaction_covers`.
    """
    if last == 0:
        raise ValidationError(f"desk {conversation.desk!r} is unknown: it has no rows to compact")
    if not isinstance(summary, str) or is_blank(summary):
        raise ValidationError(f"summary must be a non-blank str, got {summary!r}")
    if type(through) is not int or through < 1:
        raise ValidationError(f"through must be an int of at least 1, got {through!r}")
    if through > last:
        raise ValidationError(f"through={through} lies beyond the last sequence {last}")
    if through <= (floor := compacted_through(previous)):
        raise ValidationError(f"through={through} must lie above the previous compaction's {floor}")
    root = conversation.thread_root
    if root is not None and through < root:
        raise ValidationError(f"through={through} lies below the thread's root {root}")
    covers = compaction_covers(log, conversation, through, previous)
    return Event(author, Compaction(through, summary, covers, root))


def compaction_covers(
    log: SessionLog, conversation: Conversation, through: int, previous: Event | None
) -> tuple[SessionAuthor, ...]:
    """Return the authors of the rows a compaction through ``through`` replaces.

    Those of ``previous`` (the conversation's last compaction) first, then the authors
    of the non-blank rows of ``conversation`` (in a thread: its root and direct replies)
    above ``previous.through`` and at or below ``through``, oldest first, each
    participant once (labels ignored: the first seen is kept).

    Cost: reads of ``PAGE_SIZE`` rows from ``through`` down to the previous compaction
    (the whole desk when none); no writes.
    """
    floor = compacted_through(previous)
    authors: list[SessionAuthor] = []
    if previous is not None:
        assert isinstance(previous.body, Compaction)
        authors.extend(previous.body.covers)
    found: list[SessionAuthor] = []
    root = conversation.thread_root
    before: int | None = through + 1
    while before is not None and before > floor + 1:
        page = log.read_before(before, PAGE_SIZE)
        for row in page.messages:
            if row.sequence <= floor:
                break
            if row.desk != conversation.desk or is_blank(row.content):
                continue
            if root is None or in_conversation(root, row.sequence, row.parent):
                found.append(row.author)  # a channel compaction replaces replies too
        before = page.next_before
    for author in reversed(found):
        if not any(same_participant(author, known) for known in authors):
            authors.append(author)
    return tuple(authors)


def events_after_compaction(events: Sequence[Event]) -> Sequence[Event]:
    """Return ``events`` less those at or below the newest channel compaction among them.

    Only a compaction below its own sequence counts. A transcript folds what remains,
    so it is the same whether its events were read from after ``through`` or not.
    Cost: O(len(events)).
    """
    through = max(
        (
            e.body.through
            for e in events
            if isinstance(e.body, Compaction)
            and e.body.thread_root is None
            and e.body.through < (e.sequence or 0)
        ),
        default=0,
    )
    if not through:
        return events
    return [e for e in events if e.sequence is None or e.sequence > through]


def compacted_messages(
    messages: Sequence[TranscriptMessage], summary: TranscriptMessage, through: int
) -> list[TranscriptMessage]:
    """Return a transcript's ``messages`` with those at or below ``through`` replaced.

    ``summary`` (the compaction's message, ``through`` in its metadata) comes first,
    then the messages whose event lies above ``through`` (a message without a sequence
    stays), less an earlier summary and any tool result whose call was replaced. A
    summary already first that reaches as far leaves ``messages`` as they are.
    Cost: O(len(messages)).
    """
    first = messages[0].metadata if messages else {}
    earlier = first.get("through") if "covers" in first else None
    if isinstance(earlier, int):
        if earlier >= through:
            return list(messages)
        messages = messages[1:]
    kept: list[TranscriptMessage] = [summary]
    gone: set[str] = set()
    for message in messages:
        sequence = message.metadata.get("sequence")
        if isinstance(sequence, int) and sequence <= through:
            if message.tool_call_id is not None and message.role == "assistant":
                gone.add(message.tool_call_id)
        elif not (message.role == "tool" and message.tool_call_id in gone):
            kept.append(message)
    return kept
