"""ProjectorActor: one viewer's view of one conversation, kept current from the tail.

The projector keeps the session's :class:`~sharedesk.actors._tail.Tail` (its newest
``Text`` rows) and builds a view by running the very fold the contract defines,
:func:`project_session`, over the tail's log, so the rules (first non-blank reply, roots
the walk reached, the exact window, the scan limit and ``partial``) hold by
construction. Views are cached per window.

Nothing is pushed to a projector: a post must not cost one thread wake-up per viewer.
When asked for a view, the projector catches up from the session's tail (one O(1)
``last_sequence`` and one read of the events appended since it last looked, see
:meth:`~sharedesk.actors._tail.Tail.catch_up_rows`), so a post costs the same with one
warm viewer or a thousand, and a viewer that never asks again costs nothing.

A row it catches up on is then folded into each cached view by the pure
:func:`~sharedesk.projection.turns.fold_view` (its rules are stated there) when that is
provably what a fresh walk would give; otherwise the view is dropped and walked again
(in memory). Each view it serves is published in the Hub's slot with the sequence it
reflects, so a ``hub.view`` with nothing appended since needs no thread switch.

Transcripts (``hub.transcript``) are cached per budget the same way: the unbudgeted one
is extended with the events appended since (``update_from_store``); one with a ``limit``
or a budget is read again from the tail (``from_store``, which reads only the newest
events the answer needs) whenever the session moved.
"""

from __future__ import annotations

from typing import Any, Final

from sharedesk.actors._base import HubActor, ViewSnapshot
from sharedesk.actors._messages import GetTranscript, View
from sharedesk.actors._tail import Tail
from sharedesk.projection import TranscriptBuilder, project_session
from sharedesk.projection.turns import CachedView, fold_views
from sharedesk.protocol._log import logger
from sharedesk.protocol.ports import SessionLog
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.views import (
    Conversation,
    Projection,
    SessionPage,
    SessionQuery,
)

_log = logger()

#: Most distinct windows whose views a projector caches at once.
_CACHED_WINDOWS: Final = 4
#: Most distinct budgets whose transcripts a projector caches at once.
_CACHED_TRANSCRIPTS: Final = 4


class _CountingLog:
    """A :class:`SessionLog` that counts the rows read through it."""

    __slots__ = ("_inner", "rows_read")

    def __init__(self, inner: SessionLog) -> None:
        self._inner = inner
        self.rows_read = 0

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        page = self._inner.read_before(before, limit)
        self.rows_read += len(page.messages)
        return page


class ProjectorActor(HubActor):
    """Keeps one viewer's view of one conversation (and the viewer's transcript) current.

    Hooks: ``on_start``/``on_stop`` only log. The view is built lazily, on the first
    request; each request first catches up from the session's tail (nothing is pushed
    to a projector). A store error reaches the caller and leaves the actor as it was. A
    failure other than a ``SharedeskError`` while answering restarts the actor (see
    :mod:`sharedesk.actors._base`); the fresh one rebuilds from the log.
    """

    kind = "projector"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.key.conversation is not None
        self.conversation: Conversation = self.key.conversation
        self.tail = Tail(self.key.session_id)
        self.views: dict[int, CachedView] = {}
        self.transcripts: dict[tuple[int | None, ...], Transcript] = {}

    def context(self, message: Any) -> dict[str, Any]:
        """Bind ``viewer``."""
        return {"viewer": self.key.viewer}

    def handle(self, message: Any) -> Any:
        """Serve :class:`View` and :class:`GetTranscript`."""
        match message:
            case View(window=window):
                return self._view(window)
            case GetTranscript():
                return self._transcript(message)
        raise TypeError(f"unexpected message {type(message).__name__}")

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
            counting = _CountingLog(self.tail.log(store))
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
        key = (ask.limit, ask.max_messages, ask.max_chars, ask.max_tokens_approx)
        cached = self.transcripts.get(key)
        last = store.last_sequence(session_id)
        if cached is not None and (cached.last_sequence or 0) == last:
            return cached
        if cached is not None and all(value is None for value in key):
            transcript = TranscriptBuilder.update_from_store(store, cached, viewer=ask.viewer)
        else:
            transcript = TranscriptBuilder.from_store(
                store,
                session_id,
                limit=ask.limit,
                viewer=ask.viewer,
                max_messages=ask.max_messages,
                max_chars=ask.max_chars,
                max_tokens_approx=ask.max_tokens_approx,
            )
        if key not in self.transcripts and len(self.transcripts) >= _CACHED_TRANSCRIPTS:
            self.transcripts = {}
        self.transcripts[key] = transcript
        return transcript


__all__ = ["ProjectorActor"]
