"""ProjectorActor: one viewer's view of one conversation, kept current from pushed rows.

How the view stays exact without re-reading the log on every call:

The projector keeps a *mirror*: every ``Text`` row of the session from ``covered_from``
up to ``through`` (the last sequence applied, counting every event kind), newest last.
``hub.view`` runs the very fold the contract defines, :func:`project_session`, over a
:class:`SessionLog` that serves pages from the mirror and falls through to the store's
log only for rows older than the mirror (which it then adds to the mirror). So the
channel rules (first non-blank reply, roots the walk reached, the exact window, the scan
limit and ``partial``) are never re-implemented here: they hold by construction, and a
pushed row just lands at the top of the mirror. The result is cached per window until
the next ``Text`` row arrives, so a warm view costs no read and no walk.

Pushed events are applied only in sequence order: an event at or below ``through`` is a
duplicate and is skipped; one beyond ``through + 1`` reveals a gap (rows appended while
this projector was away, or by another process), and the mirror is dropped and rebuilt
from the log on the next request. Before answering, the projector also compares
``through`` with the store's last sequence (O(1)) and reads any missing events, so a view
is current even when another process writes to the same store.

The mirror holds at most ``MIRROR_LIMIT`` rows (enough for any walk, which inspects at
most ``SCAN_LIMIT`` rows); older rows are dropped and read again from the store if a walk
ever needs them.
"""

from __future__ import annotations

import bisect
from typing import Any, Final

import structlog

from sharedesk.actors._base import HubActor, ViewSnapshot
from sharedesk.actors._messages import GetTranscript, Push, View
from sharedesk.projection import project_session
from sharedesk.protocol.constants import PAGE_SIZE, SCAN_LIMIT
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.ports import SessionLog
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.views import Conversation, LogMessage, Projection, SessionPage, SessionQuery

_log = structlog.get_logger()

#: Most rows a projector's mirror keeps.
MIRROR_LIMIT: Final = SCAN_LIMIT + PAGE_SIZE
#: Most distinct windows whose views a projector caches at once.
_CACHED_WINDOWS: Final = 4


class _Mirror:
    """The newest ``Text`` rows of a session, and how far down they are complete."""

    __slots__ = ("covered_from", "rows", "sequences")

    def __init__(self, through: int) -> None:
        #: Rows oldest first; every Text row with ``covered_from <= sequence`` is here.
        self.rows: list[LogMessage] = []
        #: Their sequences (for bisection).
        self.sequences: list[int] = []
        #: Lowest sequence from which the mirror is complete (1: the whole log).
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


class _MirrorLog:
    """A :class:`SessionLog` over a mirror, reading the store's log below it."""

    __slots__ = ("_mirror", "_store_log")

    def __init__(self, mirror: _Mirror, store_log: SessionLog) -> None:
        self._mirror = mirror
        self._store_log = store_log

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        mirror = self._mirror
        end = len(mirror.rows) if before is None else bisect.bisect_left(mirror.sequences, before)
        if end > 0 and limit > 0:
            start = max(0, end - limit)
            rows = mirror.rows[start:end][::-1]
            ended = start == 0 and mirror.covered_from <= 1
            return SessionPage(messages=rows, next_before=None if ended else rows[-1].sequence)
        if mirror.covered_from <= 1 or limit <= 0:
            return SessionPage(messages=[], next_before=None)
        if before is not None and before < mirror.covered_from:
            return self._store_log.read_before(before, limit)  # not contiguous: do not keep
        page = self._store_log.read_before(mirror.covered_from, limit)
        if page.messages:
            mirror.add_oldest(page)
        else:
            mirror.covered_from = 1
        return page


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
        #: Last sequence applied (every event kind); ``None``: not built.
        self.through: int | None = None
        self.mirror: _Mirror | None = None
        self.views: dict[int, Projection] = {}
        self.transcript: Transcript | None = None
        self._store_log: SessionLog | None = None

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

    # -- keeping current -------------------------------------------------------------

    def _reset(self) -> None:
        self.through = None
        self.mirror = None
        self.views = {}

    def _build(self, last: int) -> None:
        self.through = last
        self.mirror = _Mirror(last)
        self.views = {}
        _log.debug("projector.built", through=last)

    def _on_push(self, events: tuple[Event, ...]) -> None:
        if self.through is None:
            return  # not built yet: the first request builds from the log
        try:
            self._apply(events)
        except Exception:
            _log.debug("projector.dropped", exc_info=True)
            self._reset()

    def _apply(self, events: tuple[Event, ...] | list[Event]) -> None:
        for event in events:
            sequence = event.sequence
            assert sequence is not None and self.through is not None and self.mirror is not None
            if sequence <= self.through:
                continue
            if sequence != self.through + 1:
                _log.debug("projector.gap", through=self.through, next=sequence)
                self._reset()
                return
            self.through = sequence
            if isinstance(event.body, Text):
                self.mirror.add_newest(
                    LogMessage(
                        sequence=sequence,
                        author=event.author,
                        content=event.body.content,
                        desk=self.key.session_id,
                        parent=event.parent,
                    )
                )
                self.views = {}

    def _catch_up(self) -> int:
        store = self.hub.store
        session_id = self.key.session_id
        last = store.last_sequence(session_id)
        if self.through is None or last < self.through or last - self.through > SCAN_LIMIT:
            self._build(last)
        elif last > self.through:
            self._apply(store.read(session_id, after=self.through, before=last + 1))
            if self.through is None:  # a gap inside one read: the store moved on; rebuild
                self._build(last)
        assert self.through is not None
        return self.through

    # -- answering -------------------------------------------------------------------

    def _view(self, window: int) -> Projection:
        through = self._catch_up()
        view = self.views.get(window)
        if view is None:
            assert self.mirror is not None
            if self._store_log is None:
                self._store_log = self.hub.store.log(self.key.session_id)
            log = _MirrorLog(self.mirror, self._store_log)
            view = project_session(log, SessionQuery(conversation=self.conversation, window=window))
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
