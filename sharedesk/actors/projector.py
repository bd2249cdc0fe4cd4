"""ProjectorActor: one viewer's view of one conversation, kept current from pushed rows.

The projector keeps the session's :class:`~sharedesk.actors._tail.Tail` (its newest
``Text`` rows, fed by the events the session actor pushes) and builds a view by running
the very fold the contract defines, :func:`project_session`, over the tail's log, so
the rules (first non-blank reply, roots the walk reached, the exact window, the scan
limit and ``partial``) hold by construction. Views are cached per window.

A pushed row is then folded into each cached view by the pure
:func:`~sharedesk.projection.turns.fold_view` (its rules are stated there) when that is
provably what a fresh walk would give; otherwise the view is dropped and walked again
(in memory) on the next request.
After each push the newest view is published in the Hub's slot with the sequence it
reflects, so ``hub.view`` after an append usually needs no thread switch either.
"""

from __future__ import annotations

from typing import Any, Final

from sharedesk.actors._base import HubActor, ViewSnapshot
from sharedesk.actors._messages import GetTranscript, Push, View
from sharedesk.actors._tail import Tail
from sharedesk.projection import TranscriptBuilder, project_session
from sharedesk.projection.turns import CachedView, fold_views
from sharedesk.protocol._log import logger
from sharedesk.protocol.events import Event
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
    request. Pushed events never fail the actor: any error while applying them drops
    the tail and the views, rebuilt on the next request. A failure other than a
    ``SharedeskError`` while answering restarts the actor (see
    :mod:`sharedesk.actors._base`); the fresh one rebuilds from the log.
    """

    kind = "projector"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.key.conversation is not None
        self.conversation: Conversation = self.key.conversation
        self.tail = Tail(self.key.session_id)
        self.views: dict[int, CachedView] = {}
        self.transcript: Transcript | None = None

    def context(self, message: Any) -> dict[str, Any]:
        """Bind ``viewer``."""
        return {"viewer": self.key.viewer}

    def handle(self, message: Any) -> Any:
        """Serve :class:`Push` (told), :class:`View` and :class:`GetTranscript`."""
        match message:
            case Push(events=events):
                self._on_push(events)
                return None
            case View(window=window):
                return self._view(window)
            case GetTranscript(viewer=viewer):
                return self._transcript(viewer)
        raise TypeError(f"unexpected message {type(message).__name__}")

    def _on_push(self, events: tuple[Event, ...]) -> None:
        try:
            rows = self.tail.apply_rows(events)
            if rows is None:
                self.views = {}
                return
            if rows:
                self.views = {
                    window: folded
                    for window, cached in self.views.items()
                    if (folded := fold_views(cached, rows, self.conversation, window)) is not None
                }
            self._publish()
        except Exception:
            _log.debug("projector.dropped", exc_info=True)
            self.tail.reset()
            self.views = {}

    def _publish(self) -> None:
        # Republish the newest view with the sequence it now reflects, when still cached.
        snapshot = self.slot.snapshot
        through = self.tail.through
        if snapshot is None or through is None:
            return
        cached = self.views.get(snapshot.window)
        if cached is not None:
            self.slot.snapshot = ViewSnapshot(
                window=snapshot.window, through=through, projection=cached.projection
            )

    def _view(self, window: int) -> Projection:
        store = self.hub.store
        through, changed = self.tail.catch_up(store)
        if changed:
            self.views = {}
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

    def _transcript(self, viewer: Any) -> Transcript:
        store = self.hub.store
        if self.transcript is None:
            self.transcript = TranscriptBuilder.from_store(
                store, self.key.session_id, viewer=viewer
            )
        else:
            self.transcript = TranscriptBuilder.update_from_store(
                store, self.transcript, viewer=viewer
            )
        return self.transcript


__all__ = ["ProjectorActor"]
