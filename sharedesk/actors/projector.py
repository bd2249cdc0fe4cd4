"""ProjectorActor: one viewer's view of one conversation, kept current from the tail.

Asked for a view, it catches its :class:`~sharedesk.actors._tail.Tail` up from the store
and folds the rows gained into each cached view, else walks again; each view is
published in the slot for the Hub's fast path. Transcripts are cached per budget.
"""

from __future__ import annotations

from typing import Any, Final

from sharedesk.actors._base import HubActor, ViewSnapshot
from sharedesk.actors._messages import GetTranscript, View
from sharedesk.actors._tail import Tail
from sharedesk.projection import TranscriptBuilder, project_session
from sharedesk.projection.compaction import CompactedLog
from sharedesk.projection.turns import CachedView, fold_views
from sharedesk.protocol.ports import SessionLog
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.views import Conversation, Projection, SessionPage, SessionQuery

#: Most distinct windows whose views a projector caches at once.
_CACHED_WINDOWS: Final = 4
#: Most distinct budgets whose transcripts a projector caches at once.
_CACHED_TRANSCRIPTS: Final = 4


class _CountingLog:
    """A ``SessionLog`` that counts the rows read through it."""

    __slots__ = ("_inner", "rows_read")

    def __init__(self, inner: SessionLog) -> None:
        self._inner = inner
        self.rows_read = 0

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        page = self._inner.read_before(before, limit)
        self.rows_read += len(page.messages)
        return page


class ProjectorActor(HubActor):
    """Keeps one viewer's view of one conversation (and its transcript) current.

    Built lazily, on the first request; a restarted one rebuilds from the log.
    """

    kind = "projector"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.key.conversation is not None
        self.conversation: Conversation = self.key.conversation
        self.tail = Tail(self.key.session_id)
        self.views: dict[int, CachedView] = {}
        self.transcripts: dict[tuple[Any, ...], Transcript] = {}

    def handle(self, message: Any) -> Any:
        """Serve :class:`View` and :class:`GetTranscript`."""
        match message:
            case View(window=window):
                return self._view(window)
            case GetTranscript():
                return self._transcript(message)
        return super().handle(message)

    def _view(self, window: int) -> Projection:
        store = self.hub.store
        through, rows = self.tail.catch_up_rows(store)
        if rows is None:
            self.views = {}
        elif rows:
            self.views = {
                w: folded
                for w, cached in self.views.items()
                if (folded := fold_views(cached, rows, self.conversation, w)) is not None
            }
        cached = self.views.get(window)
        if cached is None:
            query = SessionQuery(conversation=self.conversation, window=window)
            log = self.tail.log(store)
            compaction = self.tail.compaction(self.conversation)
            if compaction is not None:
                log = CompactedLog(log, compaction, self.conversation.desk)
            counting = _CountingLog(log)
            cached = CachedView(project_session(counting, query), counting.rows_read)
            if len(self.views) >= _CACHED_WINDOWS:
                self.views = {}
            self.views[window] = cached
        view = cached.projection
        self.slot.snapshot = ViewSnapshot(window=window, through=through, projection=view)
        return view

    def _transcript(self, ask: GetTranscript) -> Transcript:
        store = self.hub.store
        session_id = self.key.session_id
        key = (ask.limit, *sorted((k, v) for k, v in ask.budgets.items() if v is not None))
        cached = self.transcripts.get(key)
        if cached is not None and (cached.last_sequence or 0) == store.last_sequence(session_id):
            return cached
        if cached is not None and key == (None,):
            transcript = TranscriptBuilder.update_from_store(store, cached, viewer=ask.viewer)
        else:
            transcript = TranscriptBuilder.from_store(
                store, session_id, limit=ask.limit, viewer=ask.viewer, **ask.budgets
            )
        if key not in self.transcripts and len(self.transcripts) >= _CACHED_TRANSCRIPTS:
            self.transcripts = {}
        self.transcripts[key] = transcript
        return transcript


__all__ = ["ProjectorActor"]
