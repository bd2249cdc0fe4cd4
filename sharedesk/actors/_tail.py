"""The tail of a session kept in memory: its newest ``Text`` rows, current from the store.

As a ``SessionLog`` it serves pages from memory and reads the store's log only below
them, so the folds run unchanged over it, with no store read on the common path.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Final

from sharedesk.projection.compaction import compaction_of
from sharedesk.protocol.constants import PAGE_SIZE, SCAN_LIMIT
from sharedesk.protocol.errors import RowsArchived
from sharedesk.protocol.events import Compaction, Event, Text
from sharedesk.protocol.ports import RunIndexStore, SessionLog
from sharedesk.protocol.views import Conversation, LogMessage, SessionPage, to_log_message

#: Most rows a tail keeps.
MIRROR_LIMIT: Final = SCAN_LIMIT + PAGE_SIZE


class Tail:
    """The newest ``Text`` rows of one session, kept by one actor (not thread-safe).

    Holds every ``Text`` row from ``covered_from`` up to ``through``, at most
    ``MIRROR_LIMIT``. A gap in the events applied drops it (rebuilt on the next request),
    and so does a ``Compaction``: a rebuilt tail reads the desk's compactions with its state.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._store_log: SessionLog | None = None
        self.rows: list[LogMessage] = []  # oldest first
        self.sequences: list[int] = []  # theirs, for bisection
        self.covered_from = 0  # complete from here up (1: the whole log)
        #: Last sequence applied (every event kind); ``None``: not built.
        self.through: int | None = None
        #: The desk's compactions up to ``through`` (``SessionState.compactions``).
        self.compactions: tuple[Event, ...] = ()

    def reset(self) -> None:
        """Drop everything; the next :meth:`catch_up_rows` rebuilds."""
        self.through = None
        self.rows, self.sequences = [], []

    def apply_rows(self, events: Sequence[Event]) -> list[LogMessage] | None:
        """Apply committed events; return the ``Text`` rows added (``None``: a gap reset it).

        A tail not built applies nothing (``[]``).
        """
        added: list[LogMessage] = []
        if self.through is None:
            return added
        for event in events:
            sequence = event.sequence
            assert sequence is not None
            if sequence <= self.through:
                continue
            if sequence != self.through + 1 or isinstance(event.body, Compaction):
                self.reset()
                return None
            self.through = sequence
            if isinstance(event.body, Text):
                row = to_log_message(self.session_id, event)
                self.rows.append(row)
                self.sequences.append(sequence)
                added.append(row)
        if len(self.rows) > MIRROR_LIMIT:
            drop = len(self.rows) - SCAN_LIMIT
            del self.rows[:drop]
            del self.sequences[:drop]
            self.covered_from = self.sequences[0]
        return added

    def catch_up_rows(self, store: RunIndexStore) -> tuple[int, list[LogMessage] | None]:
        """Bring the tail up to the store; return that last sequence and the rows gained.

        The rows are ``None`` when the tail was rebuilt (every row may have changed). Cost:
        one ``last_sequence``; when behind, one read of the missing events (at most
        ``SCAN_LIMIT``; further behind, the tail is rebuilt lazily by the walks).
        """
        last = store.last_sequence(self.session_id)
        through = self.through
        if through is not None and through <= last <= through + SCAN_LIMIT:
            if last == through:
                return last, []
            try:
                added = self.apply_rows(store.read(self.session_id, after=through, before=last + 1))
            except RowsArchived:  # retention removed rows the tail lacks: rebuild
                added = None
            if added is not None and self.through is not None:
                return last, added
            # a gap inside one read: the store moved on
        # Not built, too far behind, or the store holds less than the tail: rebuild.
        self.reset()
        self.through, self.covered_from = last, last + 1
        compactions = store.session_state(self.session_id).compactions
        self.compactions = tuple(c for c in compactions if (c.sequence or 0) <= last)
        return last, None

    def compaction(self, conversation: Conversation) -> Event | None:
        """Return the newest compaction of ``conversation`` the tail knows, or ``None``."""
        return compaction_of(self.compactions, conversation)

    def log(self, store: RunIndexStore) -> SessionLog:
        """Return the tail as a log, reading the store's below its rows (built first)."""
        assert self.through is not None
        if self._store_log is None:
            self._store_log = store.log(self.session_id)
        return self

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        """As :meth:`SessionLog.read_before`: from memory, else from the store's log."""
        assert self._store_log is not None
        end = len(self.rows) if before is None else bisect.bisect_left(self.sequences, before)
        if end > 0 and limit > 0:
            start = max(0, end - limit)
            rows = self.rows[start:end][::-1]
            ended = start == 0 and self.covered_from <= 1
            return SessionPage(messages=rows, next_before=None if ended else rows[-1].sequence)
        if self.covered_from <= 1 or limit <= 0:
            return SessionPage(messages=[], next_before=None)
        if before is not None and before < self.covered_from:
            return self._store_log.read_before(before, limit)  # not contiguous: do not keep
        page = self._store_log.read_before(self.covered_from, limit)
        older = page.messages[::-1]  # the newest rows below covered_from
        self.rows[:0] = older
        self.sequences[:0] = [row.sequence for row in older]
        self.covered_from = 1 if page.next_before is None or not older else older[0].sequence
        return page
