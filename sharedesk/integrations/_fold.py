"""The rows of one conversation that an agent's memory still holds, folded as they come.

``DeskSession`` (OpenAI Agents SDK) and ``DeskHistoryProvider`` (Agent Framework) read a
desk through a :class:`DeskFold`: each call reads only the rows appended since the last
one, and the fold applies them in sequence order:

* a ``Text`` or ``Item`` row of the conversation is kept;
* a ``Retracted`` row that is the agent's own (``is_own``) drops what it names: its
  ``target`` row, or with ``through`` every kept row at or below it (a ``through``
  retraction counts only in its own conversation);
* a ``Compaction`` of the conversation (one below its own sequence, above the last
  one folded) drops every kept row at or below its ``through`` and keeps in their place
  one summary row (:func:`summary_event`), as views and turns serve it.

The first refresh starts after the ``through`` of the conversation's newest compaction
(:func:`compaction_state`, one state read), as does a refresh that meets rows retention
archived (``RowsArchived``): the rows at or below it are replaced by the summary anyway,
and the compaction itself lies above it, so the fold holds what a fold from the first
row would, and a retained desk reads through its summary. Rows retention archived that no
compaction of the conversation replaces (a thread's, below the channel's compaction) are
no longer on the desk: the fold goes on after them (a view of such a thread raises
``RowsArchived``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Final

from sharedesk.actors.aio import AsyncHub
from sharedesk.projection.compaction import compacted_through, compaction_of, summary_row
from sharedesk.projection.session import in_conversation
from sharedesk.protocol import PAGE_SIZE, Compaction, Conversation, Event, Retracted, Text
from sharedesk.protocol.authors import author_label
from sharedesk.protocol.errors import RowsArchived
from sharedesk.protocol.events import Item

#: Metadata key of a summary row: the labels of the authors of the rows it stands for.
COVERS_KEY: Final = "sharedesk.covers"


def summary_event(compaction: Event, conversation: Conversation) -> Event:
    """Return the row standing for what ``compaction`` replaces: a ``Text`` by its author.

    Its sequence is the compaction's ``through``, its id the compaction's (a retraction
    of it names that id); ``metadata[COVERS_KEY]`` labels the authors it covers.
    """
    row = summary_row(compaction, conversation.desk)
    return Event(
        row.author,
        Text(row.content),
        id=compaction.id,
        parent=row.parent,
        run_id=compaction.run_id,
        sequence=row.sequence,
        timestamp=compaction.timestamp,
        metadata={COVERS_KEY: [author_label(a) for a in row.covers]},
    )


async def compaction_state(hub: AsyncHub, conversation: Conversation) -> tuple[Event | None, int]:
    """Return ``conversation``'s newest compaction (``None``: none), its archived_through.

    ``archived_through`` is that of the conversation's desk. Cost: one state read, on a
    worker thread.
    """
    state = await asyncio.to_thread(hub.hub.session_state, conversation.desk)
    return compaction_of(state.compactions, conversation), state.archived_through


class DeskFold:
    """One conversation's kept rows, relative to one agent (see the module docstring).

    Safe to share between tasks and threads: concurrent refreshes fold each row once.

    Attributes:
        conversation: The conversation folded (a desk's channel or one thread).
        seen: The last sequence folded.
    """

    def __init__(self, conversation: Conversation, is_own: Callable[[Event], bool]) -> None:
        self.conversation = conversation
        self.seen = 0
        self._is_own = is_own
        self._rows: dict[int, Event] = {}
        self._sequence_of: dict[str, int] = {}
        self._compacted = 0
        self._started = False
        self._lock = threading.Lock()

    async def refresh(self, hub: AsyncHub) -> list[Event]:
        """Fold the rows appended since the last refresh; return the kept rows, oldest first.

        Cost: reads of ``PAGE_SIZE`` rows of what was appended since (on the first
        refresh, since the newest compaction, after one state read); O(kept rows).
        """
        if not self._started:
            await self._skip_compacted(hub, 0)
            self._started = True
        while True:
            try:
                page = await hub.read(self.conversation.desk, after=self.seen, limit=PAGE_SIZE)
            except RowsArchived as gone:
                await self._skip_compacted(hub, gone.archived_through)
                continue
            with self._lock:
                for event in page:
                    self._fold(event)
            if len(page) < PAGE_SIZE:
                with self._lock:
                    return list(self._rows.values())

    async def _skip_compacted(self, hub: AsyncHub, archived: int) -> None:
        """Move ``seen`` past the rows the newest compaction replaces and those archived."""
        compaction, stored_from = await compaction_state(hub, self.conversation)
        archived = max(archived, stored_from)
        with self._lock:
            self.seen = max(self.seen, compacted_through(compaction))
            if self.seen < archived:
                if compaction is not None and (compaction.sequence or 0) <= archived:
                    self._fold(compaction)  # archived itself: folded before moving on
                self.seen = max(self.seen, archived)

    def _fold(self, event: Event) -> None:
        sequence = event.sequence
        assert sequence is not None
        if sequence <= self.seen:
            return  # a concurrent refresh folded it already
        self.seen = sequence
        body = event.body
        if isinstance(body, Retracted):
            if self._is_own(event):
                self._retract(event, body)
        elif isinstance(body, Compaction):
            if body.thread_root == self.conversation.thread_root:
                self._compact(event, body)
        elif isinstance(body, Text | Item) and in_conversation(
            self.conversation.thread_root, event.sequence, event.parent
        ):
            self._rows[sequence] = event
            self._sequence_of[event.id] = sequence

    def _drop_through(self, through: int) -> None:
        for sequence in [s for s in self._rows if s <= through]:
            self._sequence_of.pop(self._rows.pop(sequence).id, None)

    def _retract(self, event: Event, body: Retracted) -> None:
        if body.target is not None:
            sequence = self._sequence_of.pop(body.target, None)
            if sequence is not None:
                self._rows.pop(sequence, None)
        if body.through is not None and in_conversation(
            self.conversation.thread_root, event.sequence, event.parent
        ):
            self._drop_through(body.through)

    def _compact(self, event: Event, body: Compaction) -> None:
        assert event.sequence is not None
        if body.through <= self._compacted or body.through >= event.sequence:
            return  # stale, or not below its own sequence: no compaction (as the folds)
        self._compacted = body.through
        self._drop_through(body.through)
        summary = summary_event(event, self.conversation)
        self._rows = {body.through: summary, **self._rows}
        self._sequence_of[summary.id] = body.through
