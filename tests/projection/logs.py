"""Test doubles for the folds: recording logs and naive reference implementations.

* ``RecordingLog`` serves a list of rows as a well-behaved ``SessionLog`` (newest first,
  ``before`` exclusive, ``next_before`` the oldest row of the page or ``None`` when the
  page reaches the log's start, like ``MemoryStore.log``) and records every
  ``read_before(before, limit)`` so a test can assert the cost.
* ``ScriptedLog`` returns scripted pages (or raises scripted errors) in order, whatever it
  is asked, and records the calls too: it plays a misbehaving host.
* ``reference_*`` are the naive, obviously-correct versions of the folds the property
  tests compare against (quadratic, no paging, no early stop).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from hypothesis import strategies as st

from sharedesk.protocol import (
    SCAN_LIMIT,
    Agent,
    Conversation,
    LogMessage,
    Operator,
    Person,
    SessionAuthor,
    SessionMessage,
    SessionPage,
    SharingState,
)

ALICE = Person(id="alice", label="Alice")
BOT = Agent(id="bot", label="Bot")
OPERATOR = Operator()


class Read:
    """One recorded ``read_before`` call."""

    __slots__ = ("before", "limit")

    def __init__(self, before: int | None, limit: int) -> None:
        self.before = before
        self.limit = limit

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Read) and (self.before, self.limit) == (other.before, other.limit)

    def __hash__(self) -> int:
        return hash((self.before, self.limit))

    def __repr__(self) -> str:
        return f"Read(before={self.before}, limit={self.limit})"


class RecordingLog:
    """A correct ``SessionLog`` over fixed rows that records every read."""

    def __init__(self, rows: Iterable[LogMessage]) -> None:
        self.rows: list[LogMessage] = sorted(rows, key=lambda row: row.sequence)
        self._sequences = [row.sequence for row in self.rows]
        self.reads: list[Read] = []
        #: How many rows each read returned, in read order.
        self.returned: list[int] = []

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        self.reads.append(Read(before, limit))
        end = len(self.rows) if before is None else bisect.bisect_left(self._sequences, before)
        start = max(0, end - limit)
        page = self.rows[start:end][::-1]
        self.returned.append(len(page))
        next_before = page[-1].sequence if page and start > 0 else None
        return SessionPage(messages=page, next_before=next_before)

    @property
    def rows_read(self) -> int:
        """How many rows the reads returned in all."""
        return sum(self.returned)


class ScriptedLog:
    """A host log that returns ``script`` items in order; an exception item is raised."""

    def __init__(self, script: Sequence[object]) -> None:
        self.script = list(script)
        self.reads: list[Read] = []

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        self.reads.append(Read(before, limit))
        item = self.script[len(self.reads) - 1]
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[return-value]  # deliberately anything


def row(
    sequence: int,
    content: str = "",
    *,
    desk: str = "d",
    parent: int | None = None,
    author: SessionAuthor = ALICE,
) -> LogMessage:
    """Build a row; the default content is ``"m<sequence>"`` (never blank)."""
    return LogMessage(
        sequence=sequence,
        author=author,
        content=content or f"m{sequence}",
        desk=desk,
        parent=parent,
    )


def blank(sequence: int, *, desk: str = "d", parent: int | None = None) -> LogMessage:
    """Build a blank row (whitespace only)."""
    return LogMessage(sequence=sequence, author=ALICE, content=" \n\t", desk=desk, parent=parent)


def page(*rows: LogMessage, next_before: int | None = None) -> SessionPage:
    """Build a page from rows given newest first."""
    return SessionPage(messages=list(rows), next_before=next_before)


def sequences(messages: Iterable[SessionMessage | LogMessage]) -> list[int]:
    """Return the sequences of ``messages`` in order."""
    return [message.sequence for message in messages]


def as_messages(rows: Iterable[LogMessage]) -> list[SessionMessage]:
    """Convert rows to the messages a fold returns for them."""
    return [SessionMessage(r.sequence, r.author, r.content, r.parent) for r in rows]


def is_blank(content: str) -> bool:
    """The contract's definition of blank."""
    return content.strip() == ""


# --- naive references ----------------------------------------------------------------


def reference_thread(rows: Sequence[LogMessage], desk: str, root: int) -> list[LogMessage]:
    """Every row of thread ``root`` (R and its direct replies above R), oldest first."""
    return sorted(
        (
            r
            for r in rows
            if r.desk == desk
            and not is_blank(r.content)
            and (r.sequence == root or (r.parent == root and r.sequence > root))
        ),
        key=lambda r: r.sequence,
    )


def reference_channel(rows: Sequence[LogMessage], desk: str) -> list[LogMessage]:
    """Every qualifying channel row of ``rows`` (roots and first replies), oldest first.

    A reply qualifies when its root is a row of ``rows`` of the same desk with no parent
    (blank or not), it lies above that root, and it is the lowest-sequence non-blank reply
    of the desk to it.
    """
    by_sequence = {r.sequence: r for r in rows}
    first_reply: dict[int, int] = {}
    for r in rows:
        if (
            r.parent is not None
            and r.desk == desk
            and not is_blank(r.content)
            and r.sequence > r.parent
        ):
            first_reply[r.parent] = min(first_reply.get(r.parent, r.sequence), r.sequence)
    out: list[LogMessage] = []
    for r in rows:
        if r.desk != desk or is_blank(r.content):
            continue
        if r.parent is None:
            out.append(r)
            continue
        root = by_sequence.get(r.parent)
        if root is None or root.parent is not None or root.desk != desk:
            continue
        if first_reply.get(root.sequence) == r.sequence:
            out.append(r)
    return sorted(out, key=lambda r: r.sequence)


def below(rows: Sequence[LogMessage], before: int | None) -> list[LogMessage]:
    """The rows below the exclusive ``before``, newest first."""
    kept = [r for r in rows if before is None or r.sequence < before]
    return sorted(kept, key=lambda r: r.sequence, reverse=True)


def reference_channel_pending(
    rows_newest_first: Sequence[LogMessage], desk: str, window: int
) -> bool:
    """Whether a channel walk that has read exactly these rows must read on.

    True when the window is not full yet, or a non-blank reply of the desk whose parent
    lies below the rows read (so it may still be reached) is the lowest such reply to that
    parent and newer than the oldest of the newest ``window`` qualifying rows found.
    """
    found = reference_channel(rows_newest_first, desk)
    if len(found) < window:
        return True
    threshold = found[-window].sequence
    floor = rows_newest_first[-1].sequence
    lowest: dict[int, int] = {}
    for r in rows_newest_first:
        if (
            r.parent is not None
            and r.desk == desk
            and not is_blank(r.content)
            and r.parent < r.sequence
            and r.parent < floor
        ):
            lowest[r.parent] = min(lowest.get(r.parent, r.sequence), r.sequence)
    return any(reply > threshold for reply in lowest.values())


def delta_qualifies(r: LogMessage, conversation: Conversation) -> bool:
    """Whether a row belongs in a delta of ``conversation`` (presence aside)."""
    if r.desk != conversation.desk or is_blank(r.content):
        return False
    root = conversation.thread_root
    if root is None:
        return r.parent is None
    return r.sequence == root or r.parent == root


def reference_delta(
    rows: Sequence[LogMessage], state: SharingState, before: int
) -> list[LogMessage] | str:
    """The delta ``prepare_delta`` must deliver, or the reinitialize reason's value."""
    above = [r for r in rows if state.watermark < r.sequence < before]
    reached = any(r.sequence <= state.watermark for r in rows)
    if len(above) > SCAN_LIMIT or (len(above) == SCAN_LIMIT and reached):
        return "gap_too_large"
    if not reached:
        return "watermark_unavailable"
    return sorted(
        (
            r
            for r in above
            if delta_qualifies(r, state.conversation)
            and r.sequence not in state.present_above_watermark
        ),
        key=lambda r: r.sequence,
    )


# --- hypothesis strategies -----------------------------------------------------------

#: Contents a random row may hold: blank ones (empty, spaces, a tab, a newline) included.
CONTENTS = ("hi", "  padded  ", "", " ", "\t", "\n ", "ok")
DESKS = ("d", "e")
AUTHORS: tuple[SessionAuthor, ...] = (ALICE, BOT, OPERATOR)


@st.composite
def row_lists(
    draw: st.DrawFn, *, max_rows: int = 40, gaps: bool = True, first: int = 1
) -> list[LogMessage]:
    """Random rows, oldest first: several desks, threads, blank rows, replies to replies.

    Sequences start at ``first`` and rise by 1 (or, with ``gaps``, by 1 to 3, like a
    store log that serves only ``Text`` rows); a row's parent, when set, is an earlier
    row of any desk (so some replies answer replies, or rows of another desk).
    """
    count = draw(st.integers(0, max_rows))
    rows: list[LogMessage] = []
    sequence = first - 1
    for _ in range(count):
        sequence += draw(st.integers(1, 3)) if gaps else 1
        parent = None
        if draw(st.booleans()) and rows:
            parent = draw(st.sampled_from(rows)).sequence
        rows.append(
            LogMessage(
                sequence=sequence,
                author=draw(st.sampled_from(AUTHORS)),
                content=draw(st.sampled_from(CONTENTS)),
                desk=draw(st.sampled_from(DESKS)),
                parent=parent,
            )
        )
    return rows


@st.composite
def long_row_lists(draw: st.DrawFn) -> list[LogMessage]:
    """Random rows around ``SCAN_LIMIT`` long: random bottom, filler, random top.

    The filler (roots of desk ``"x"``) puts the bottom near or beyond the scan limit, and
    top rows may reply to bottom roots, so a walk can be cut off with replies pending.
    """
    bottom = draw(row_lists(max_rows=25, gaps=False))
    filler_count = draw(st.integers(SCAN_LIMIT - 60, SCAN_LIMIT + 10))
    start = len(bottom) + 1
    filler = [
        LogMessage(sequence=start + i, author=OPERATOR, content="noise", desk="x")
        for i in range(filler_count)
    ]
    top: list[LogMessage] = []
    sequence = start + filler_count - 1
    for _ in range(draw(st.integers(0, 25))):
        sequence += 1
        candidates = bottom + top
        parent = None
        if draw(st.booleans()) and candidates:
            parent = draw(st.sampled_from(candidates)).sequence
        top.append(
            LogMessage(
                sequence=sequence,
                author=draw(st.sampled_from(AUTHORS[:2])),
                content=draw(st.sampled_from(CONTENTS)),
                desk=draw(st.sampled_from(DESKS)),
                parent=parent,
            )
        )
    return bottom + filler + top


__all__ = [
    "AUTHORS",
    "CONTENTS",
    "DESKS",
    "ALICE",
    "BOT",
    "OPERATOR",
    "Read",
    "RecordingLog",
    "ScriptedLog",
    "as_messages",
    "below",
    "blank",
    "delta_qualifies",
    "is_blank",
    "long_row_lists",
    "page",
    "reference_channel",
    "reference_channel_pending",
    "reference_delta",
    "reference_thread",
    "row",
    "row_lists",
    "sequences",
]
