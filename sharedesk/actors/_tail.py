"""The tail of a session kept in memory: its newest ``Text`` rows, current from pushes.

A :class:`Tail` holds every ``Text`` row of one session from ``covered_from`` up to
``through`` (the last sequence applied, counting every event kind), oldest first. Its
:meth:`Tail.log` is a :class:`~sharedesk.SessionLog` that serves pages from memory and
falls through to the store's log only for rows older than it holds (which it then keeps).
So the folds (:func:`project_session`, :func:`prepare_delta`) run unchanged over it, with
all their rules and budgets, and cost no store read on the common path: their walks
start at the newest row, and the tail holds the newest rows.

Projectors are not pushed to: they call :meth:`Tail.catch_up_rows` when asked for a
view, so a post costs the same however many viewers hold warm views (the sharing actor,
one per session, is still pushed each commit).

Events are applied only in sequence order: one at or below ``through`` is a duplicate and
is skipped; one beyond ``through + 1`` reveals a gap (rows appended while the owner was
away, or by another process) and drops the tail, rebuilt on the next request.
:meth:`Tail.catch_up_rows` also compares ``through`` with the store's last sequence (O(1)) and
reads the events it lacks, so the tail is current even when another process writes.

The tail keeps at most ``MIRROR_LIMIT`` rows (any walk inspects at most ``SCAN_LIMIT``);
older rows are dropped and read again from the store if a walk ever needs them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Final

from sharedesk.protocol.constants import PAGE_SIZE, SCAN_LIMIT
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.ports import EventStore, SessionLog
from sharedesk.protocol.views import LogMessage, SessionPage, to_log_message

#: Most rows a tail keeps.
MIRROR_LIMIT: Final = SCAN_LIMIT + PAGE_SIZE


class _Rows:
    """The newest ``Text`` rows of a session, and how far down they are complete."""

    __slots__ = ("covered_from", "rows", "sequences")

    def __init__(self, through: int) -> None:
        #: Rows oldest first; every Text row with ``covered_from <= sequence`` is here.
        self.rows: list[LogMessage] = []
        #: Their sequences (for bisection).
        self.sequences: list[int] = []
        #: Lowest sequence from which the rows are complete (1: the whole log).
        self.covered_from = through + 1

    def add_newest(self, row: LogMessage) -> None:
        self.rows.append(row)
        self.sequences.append(row.sequence)
        if len(self.rows) > MIRROR_LIMIT:
            drop = len(self.rows) - SCAN_LIMIT
            del self.rows[:drop]
            del self.sequences[:drop]
            self.covered_from = self.sequences[0]

    def add_oldest(self, page: SessionPage) -> None:
        # page: the newest rows below covered_from, newest first.
        older = page.messages[::-1]
        self.rows[:0] = older
        self.sequences[:0] = [row.sequence for row in older]
        self.covered_from = 1 if page.next_before is None else older[0].sequence


class _TailLog:
    """A :class:`SessionLog` over a tail's rows, reading the store's log below them."""

    __slots__ = ("_rows", "_store_log")

    def __init__(self, rows: _Rows, store_log: SessionLog) -> None:
        self._rows = rows
        self._store_log = store_log

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        held = self._rows
        end = len(held.rows) if before is None else bisect.bisect_left(held.sequences, before)
        if end > 0 and limit > 0:
            start = max(0, end - limit)
            rows = held.rows[start:end][::-1]
            ended = start == 0 and held.covered_from <= 1
            return SessionPage(messages=rows, next_before=None if ended else rows[-1].sequence)
        if held.covered_from <= 1 or limit <= 0:
            return SessionPage(messages=[], next_before=None)
        if before is not None and before < held.covered_from:
            return self._store_log.read_before(before, limit)  # not contiguous: do not keep
        page = self._store_log.read_before(held.covered_from, limit)
        if page.messages:
            held.add_oldest(page)
        else:
            held.covered_from = 1
        return page


class Tail:
    """The newest ``Text`` rows of one session, kept by one actor (not thread-safe)."""

    __slots__ = ("_rows", "_store_log", "session_id", "through")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        #: Last sequence applied (every event kind); ``None``: not built.
        self.through: int | None = None
        self._rows: _Rows | None = None
        self._store_log: SessionLog | None = None

    def reset(self) -> None:
        """Drop everything; the next :meth:`catch_up_rows` rebuilds. Cost: O(1)."""
        self.through = None
        self._rows = None

    def apply_rows(self, events: Sequence[Event]) -> list[LogMessage] | None:
        """Apply committed events in order; return the ``Text`` rows added, oldest first.

        Returns ``None`` when a gap reset the tail (and ``[]`` when it is not built:
        nothing is applied then). Cost: O(len(events)).
        """
        added: list[LogMessage] = []
        if self.through is None or self._rows is None:
            return added
        for event in events:
            sequence = event.sequence
            assert sequence is not None
            if sequence <= self.through:
                continue
            if sequence != self.through + 1:
                self.reset()
                return None
            self.through = sequence
            if isinstance(event.body, Text):
                row = to_log_message(self.session_id, event)
                self._rows.add_newest(row)
                added.append(row)
        return added

    def catch_up_rows(self, store: EventStore) -> tuple[int, list[LogMessage] | None]:
        """Bring the tail up to the store's last sequence; return the rows it gained.

        Returns:
            The last sequence the tail now reflects, and the ``Text`` rows added, oldest
            first (``None`` when the tail was rebuilt: every row may have changed).

        Raises:
            StoreError: The store failed.

        Cost: one O(1) ``last_sequence``; when behind, one read of the missing events
        (at most ``SCAN_LIMIT``; more resets the tail, rebuilt lazily by the walks).
        """
        last = store.last_sequence(self.session_id)
        through = self.through
        if through is not None and through <= last <= through + SCAN_LIMIT:
            if last == through:
                return last, []
            added = self.apply_rows(store.read(self.session_id, after=through, before=last + 1))
            if added is not None and self.through is not None:
                return last, added
            # a gap inside one read: the store moved on
        # Not built, too far behind, or the store holds less than the tail: rebuild.
        self.through = last
        self._rows = _Rows(last)
        return last, None

    def log(self, store: EventStore) -> SessionLog:
        """Return a log over the tail (built by :meth:`catch_up_rows` first). Cost: O(1)."""
        assert self._rows is not None
        if self._store_log is None:
            self._store_log = store.log(self.session_id)
        return _TailLog(self._rows, self._store_log)
