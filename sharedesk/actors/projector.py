"""ProjectorActor: one viewer's view of one conversation, kept current from pushed rows.

The projector keeps the session's :class:`~sharedesk.actors._tail.Tail` (its newest
``Text`` rows, fed by the events the session actor pushes) and answers ``hub.view`` by
running the very fold the contract defines, :func:`project_session`, over the tail's log.
So the channel rules (first non-blank reply, roots the walk reached, the exact window,
the scan limit and ``partial``) are never re-implemented here: they hold by
construction, and a pushed row just lands at the top of the tail. The result is cached
per window until the next ``Text`` row arrives, and published in the Hub's slot, so a
warm view costs no read, no walk and no thread switch.
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from sharedesk.actors._base import HubActor, ViewSnapshot
from sharedesk.actors._messages import GetTranscript, Push, View
from sharedesk.actors._tail import MIRROR_LIMIT, Tail
from sharedesk.projection import project_session
from sharedesk.protocol.events import Event
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.views import Conversation, Projection, SessionQuery

_log = structlog.get_logger()

#: Most distinct windows whose views a projector caches at once.
_CACHED_WINDOWS: Final = 4


class ProjectorActor(HubActor):
    """Keeps one viewer's view of one conversation (and the viewer's transcript) current.

    Hooks: ``on_start``/``on_stop`` only log (actor thread). The view is built lazily, on
    the first request. Pushed events (``tell``) never fail the actor: any error while
    applying them drops the mirror, which is rebuilt on the next request. A failure
    other than a ``SharedeskError`` while answering restarts the actor (see
    :mod:`sharedesk.actors._base`); the fresh one rebuilds from the log.
    """

    kind = "projector"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.key.conversation is not None
        self.conversation: Conversation = self.key.conversation
        self.tail = Tail(self.key.session_id)
        self.views: dict[int, Projection] = {}
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
            if self.tail.apply(events):
                self.views = {}
        except Exception:
            _log.debug("projector.dropped", exc_info=True)
            self.tail.reset()
            self.views = {}

    def _view(self, window: int) -> Projection:
        store = self.hub.store
        through, changed = self.tail.catch_up(store)
        if changed:
            self.views = {}
        view = self.views.get(window)
        if view is None:
            query = SessionQuery(conversation=self.conversation, window=window)
            view = project_session(self.tail.log(store), query)
            if len(self.views) >= _CACHED_WINDOWS:
                self.views = {}
            self.views[window] = view
        self.slot.snapshot = ViewSnapshot(window=window, through=through, projection=view)
        return view

    def _transcript(self, viewer: Any) -> Transcript:
        from sharedesk.projection import TranscriptBuilder  # lands with the runs work

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


__all__ = ["MIRROR_LIMIT", "ProjectorActor"]
