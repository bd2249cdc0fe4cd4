"""``project_session``: one participant's view of a channel or a thread, from a bounded walk.

How the walk works (read this before changing this file or ``sharing.py``):

* ``_LogWalk`` is the ONE place that reads a host log; both folds iterate it. Each page
  is validated whole, in the contract's order, before any of its rows is handed out,
  and the next page is read only when a row beyond the current one is asked for.
* Row order costs one comparison per row: every earlier row of the walk lies at or above
  the cursor or above the previous row, so a row strictly below both cannot repeat one.
  Only a row that fails it is searched for among the rows seen, to name the broken rule.

Channel walk. It keeps a min-heap of the newest ``window`` qualifying sequences and a
map ``parent -> lowest non-blank reply seen`` of replies whose root is not reached yet.
Once the heap is full, only a pending reply above its smallest sequence (the threshold)
can still enter the window, so the walk goes on only while one is pending, and drops it
when its parent is reached or passed, when a lower non-blank reply to the same parent
turns up, or when the threshold rises above it. Two lists sorted once (by parent, by
reply) drive the drops: O(rows log rows), and no row is read that could not change the
answer.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence

from sharedesk.protocol.constants import MIN_PAGE, PAGE_SIZE, SCAN_LIMIT
from sharedesk.protocol.errors import (
    CursorAfterOldest,
    CursorDidNotAdvance,
    DuplicateSequence,
    EmptyPageCursor,
    LogReadError,
    PageNotDescending,
    PageOutOfRange,
    PageTooLarge,
    RowsArchived,
    ValidationError,
)
from sharedesk.protocol.ports import SessionLog
from sharedesk.protocol.validation import check_conversation, check_int, check_optional_int
from sharedesk.protocol.views import (
    LogMessage,
    Projection,
    SessionMessage,
    SessionPage,
    SessionQuery,
)


def project_session(log: SessionLog, query: SessionQuery) -> Projection:
    """Return the participant's view of ``query.conversation``, oldest first.

    A row qualifies only when ``row.desk == conversation.desk`` and its content is not
    blank; its content is returned exactly as stored. A thread query (``thread_root =
    R``) returns R and its direct replies, stopping on reaching R (a blank R is not
    returned) or the first row below it; when the window fills first, the newest
    ``window`` replies come back without R. A channel query returns roots and each root's
    first non-blank reply, and fills the window exactly: fewer than ``window`` messages
    only when the log ended or ``SCAN_LIMIT`` stopped the walk (then ``partial=True``).
    ``query.before`` is exclusive (``None``: from the newest row); a ``window`` of 0
    reads nothing.

    Raises:
        ValidationError: A malformed ``query``, a ``log`` without ``read_before``, or a
            page that is not a ``SessionPage`` of well-typed ``LogMessage`` rows.
        PageError: The first broken page rule, in the contract's order.
        LogReadError: ``log.read_before`` raised (the ``__cause__``), other than
            ``RowsArchived`` (rows retention removed), which passes as it is.

    Cost: reads of 64, 128, 256, then ``PAGE_SIZE`` rows, at most ``SCAN_LIMIT`` in all,
    stopping once no further row can change the answer; CPU O(n log n) in the n rows
    read; no writes, never blocks except inside ``log.read_before``.
    """
    if not isinstance(query, SessionQuery):
        raise ValidationError(f"query must be a SessionQuery, got {type(query).__name__}")
    conversation = check_conversation(query.conversation, "query.conversation")
    before = check_optional_int("query.before", query.before)
    window = check_int("query.window", query.window, minimum=0)
    check_log(log)
    if window == 0:
        return Projection(messages=[], partial=False)
    root = conversation.thread_root
    if root is None:
        rows, partial = _channel(_LogWalk(log, before), conversation.desk, window)
    elif before is not None and before <= root:
        rows, partial = [], False
    else:
        rows, partial = _thread(_LogWalk(log, before), conversation.desk, root, window)
    return Projection(messages=as_messages(rows), partial=partial)


def _thread(walk: _LogWalk, desk: str, root: int, window: int) -> tuple[list[LogMessage], bool]:
    """Collect R and its direct replies, newest first, then return them oldest first."""
    found: list[LogMessage] = []
    limited = False
    for row in walk:
        seq = row.sequence
        if seq <= root:
            if seq == root and row.desk == desk and not is_blank(row.content):
                found.append(row)
            break
        if row.parent == root and row.desk == desk and not is_blank(row.content):
            found.append(row)
            if len(found) == window:
                break
    else:
        limited = walk.limited
    found.reverse()
    return found, limited


def _channel(walk: _LogWalk, desk: str, window: int) -> tuple[list[LogMessage], bool]:
    """Collect the newest ``window`` roots and first replies (see the module header)."""
    kept: list[int] = []  # min-heap: sequences of the newest `window` qualifying rows
    found: dict[int, LogMessage] = {}  # every qualifying row added to `kept`, by sequence
    pending: dict[int, LogMessage] = {}  # parent -> lowest non-blank reply seen so far
    rows = iter(walk)
    floor = 0
    # Phase 1: until the window is full, every qualifying row may belong to it.
    for row in rows:
        floor = seq = row.sequence
        parent = row.parent
        if pending:
            reply = pending.pop(seq, None)
            if reply is not None and parent is None and row.desk == desk:
                _keep(kept, found, reply, window)
        if row.desk == desk and not is_blank(row.content):
            if parent is None:
                _keep(kept, found, row, window)
            else:  # a reply lying below its parent stays pending forever: never kept
                pending[parent] = row
        if len(kept) == window:
            break
    else:
        return _oldest_first(kept, found), walk.limited
    # Phase 2: the window is full; only a pending reply above the threshold can enter it.
    threshold = kept[0]
    live = {p: r for p, r in pending.items() if p < floor and r.sequence > threshold}
    if not live:
        return _oldest_first(kept, found), False
    by_parent = sorted(live, reverse=True)
    by_reply = sorted((r.sequence, p) for p, r in live.items())
    next_parent = next_reply = 0
    for row in rows:
        seq = row.sequence
        while next_parent < len(by_parent) and by_parent[next_parent] >= seq:
            parent = by_parent[next_parent]
            next_parent += 1
            reply = live.pop(parent, None)
            if reply is None or parent != seq or row.parent is not None or row.desk != desk:
                continue
            _keep(kept, found, reply, window)
            threshold = kept[0]
            while next_reply < len(by_reply) and by_reply[next_reply][0] < threshold:
                live.pop(by_reply[next_reply][1], None)
                next_reply += 1
        parent = row.parent
        if parent in live and row.desk == desk and not is_blank(row.content):
            del live[parent]  # this lower reply comes first, and it is below the window
        if not live:
            return _oldest_first(kept, found), False
    return _oldest_first(kept, found), walk.limited


def _keep(kept: list[int], found: dict[int, LogMessage], row: LogMessage, window: int) -> None:
    """Offer ``row`` to the heap of the newest ``window`` qualifying sequences."""
    found[row.sequence] = row
    if len(kept) < window:
        heapq.heappush(kept, row.sequence)
    else:
        heapq.heappushpop(kept, row.sequence)


def _oldest_first(kept: list[int], found: dict[int, LogMessage]) -> list[LogMessage]:
    """Return the kept rows in ascending sequence order."""
    return [found[seq] for seq in sorted(kept)]


class _LogWalk:
    """A validated walk over a host log, newest first, bounded by ``SCAN_LIMIT`` rows."""

    __slots__ = ("_before", "_log", "ended", "scanned")

    def __init__(self, log: SessionLog, before: int | None) -> None:
        self._log = log
        self._before = before
        #: Rows read so far (every row counts, qualifying or not).
        self.scanned = 0
        #: Whether the log returned its last page (``next_before is None``).
        self.ended = False

    @property
    def limited(self) -> bool:
        """Whether ``SCAN_LIMIT`` rows were read while the log still had more."""
        return not self.ended and self.scanned >= SCAN_LIMIT

    def __iter__(self) -> Iterator[LogMessage]:
        before = self._before
        ask = MIN_PAGE
        seen: list[Sequence[LogMessage]] = []
        while self.scanned < SCAN_LIMIT:
            limit = min(ask, SCAN_LIMIT - self.scanned)
            try:
                page = self._log.read_before(before, limit)
            except RowsArchived:  # the store's answer, not a log that misbehaved
                raise
            except Exception as exc:
                raise LogReadError(before, limit) from exc
            rows, next_before = _checked_page(page, before, limit, seen)
            seen.append(rows)
            self.scanned += len(rows)
            yield from rows
            if next_before is None:
                self.ended = True
                return
            before = next_before
            ask = min(2 * ask, PAGE_SIZE)


def _checked_page(
    page: object, before: int | None, limit: int, seen: list[Sequence[LogMessage]]
) -> tuple[Sequence[LogMessage], int | None]:
    """Validate what ``read_before(before, limit)`` returned; return its rows and cursor."""
    if not isinstance(page, SessionPage):
        raise ValidationError(f"session log returned {type(page).__name__}; expected a SessionPage")
    rows, next_before = page.messages, page.next_before
    if not isinstance(rows, list | tuple):
        raise ValidationError(
            f"SessionPage.messages is a {type(rows).__name__}; expected a list of LogMessage"
        )
    if next_before is not None and type(next_before) is not int:
        raise ValidationError(
            f"SessionPage.next_before is a {type(next_before).__name__}; expected int or None"
        )
    if len(rows) > limit:
        raise PageTooLarge(limit, len(rows))
    if not rows:
        if next_before is not None:
            raise EmptyPageCursor(next_before)
        return rows, None
    bound = before
    for index, row in enumerate(rows):
        # Exact types first (the common case); anything else, a subclass of LogMessage
        # or str included, is looked at again, and accepted or refused, by _check_row.
        if (
            type(row) is not LogMessage
            or type(row.sequence) is not int
            or type(row.content) is not str
            or type(row.desk) is not str
            or (row.parent is not None and type(row.parent) is not int)
        ):
            _check_row(row, index)
        seq = row.sequence
        if bound is not None and seq >= bound:
            _raise_order_error(rows, index, before, seen)
        bound = seq
    if next_before is not None:
        if before is not None and next_before >= before:
            raise CursorDidNotAdvance(before, next_before)
        oldest = rows[-1].sequence
        if next_before > oldest:
            raise CursorAfterOldest(next_before, oldest)
    return rows, next_before


def _raise_order_error(
    rows: Sequence[LogMessage], index: int, before: int | None, seen: list[Sequence[LogMessage]]
) -> None:
    """Raise the first order rule that ``rows[index]`` breaks (it breaks at least one)."""
    seq = rows[index].sequence
    earlier = (row.sequence for page in [*seen, rows[:index]] for row in page)
    if any(other == seq for other in earlier):
        raise DuplicateSequence(seq)
    if before is not None and seq >= before:
        raise PageOutOfRange(seq, before)
    raise PageNotDescending(rows[index - 1].sequence, seq)


def _check_row(row: object, index: int) -> None:
    """Accept a well-typed ``LogMessage`` (subclasses allowed), else ``ValidationError``."""
    where = f"SessionPage.messages[{index}]"
    if not isinstance(row, LogMessage):
        raise ValidationError(f"{where} is a {type(row).__name__}; expected a LogMessage")
    for name, ok, expected in (
        ("sequence", type(row.sequence) is int, "int"),
        ("content", isinstance(row.content, str), "str"),
        ("desk", isinstance(row.desk, str), "str"),
        ("parent", row.parent is None or type(row.parent) is int, "int or None"),
    ):
        if not ok:
            kind = type(getattr(row, name)).__name__
            raise ValidationError(f"{where}.{name} is a {kind}; expected {expected}")


def as_messages(rows: Iterable[LogMessage]) -> list[SessionMessage]:
    """Return ``rows`` as the messages of a view (content exactly as stored)."""
    return [SessionMessage(r.sequence, r.author, r.content, r.parent, r.covers) for r in rows]


def is_blank(content: str) -> bool:
    """Return whether ``content`` is blank (``content.strip() == ""``): every fold's rule."""
    return not content or content.isspace()


def in_conversation(thread_root: int | None, sequence: int | None, parent: int | None) -> bool:
    """Return whether the row ``sequence`` (replying to ``parent``) is in a conversation.

    The conversation is a ``Conversation``'s ``thread_root``: in the channel (``None``),
    the roots; in thread ``R``, R and its direct replies. Cost: O(1).
    """
    if thread_root is None:
        return parent is None
    return sequence == thread_root or parent == thread_root


def check_log(log: object) -> None:
    """Raise ``ValidationError`` unless ``log`` has a callable ``read_before``."""
    if not callable(getattr(log, "read_before", None)):
        raise ValidationError(
            f"log must be a SessionLog with a read_before method, got {type(log).__name__}"
        )
