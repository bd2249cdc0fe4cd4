"""MemoryStore: the in-process store backend (a real implementation, not a mock)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec

from sharedesk.projection.append import Facts, StoredRow, Wants, WritePlan
from sharedesk.protocol.authors import Operator
from sharedesk.protocol.events import Event, Text, TextDelta
from sharedesk.protocol.ports import SessionInfo
from sharedesk.protocol.records import private_copy
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SessionState
from sharedesk.protocol.views import Conversation, SessionPage, SharingState, to_log_message
from sharedesk.store.base import StoreBase, WriteTxn

__all__ = ["MemoryStore"]

T = TypeVar("T")


@dataclass(slots=True)
class _Stream:
    """One session's events, its indexes (ids, Text rows, first replies, runs), its state."""

    events: list[Event] = field(default_factory=list)
    by_id: dict[str, Event] = field(default_factory=dict)
    text_sequences: list[int] = field(default_factory=list)
    first_reply: dict[int, int] = field(default_factory=dict)  # root -> its first reply
    by_run: dict[str, list[int]] = field(default_factory=dict)  # run -> its sequences
    state: SessionState = EMPTY_SESSION_STATE


#: What a slot of a row retention removed holds (never read: not a ``Text`` root either).
_ARCHIVED: Final = Event(Operator(), TextDelta(""), id="sharedesk.archived")


def _info(session_id: str, stream: _Stream) -> SessionInfo:
    """Return what ``stream`` (holding at least one event) says about ``session_id``."""
    newest = stream.events[-1]
    assert newest.sequence is not None and newest.timestamp is not None
    return SessionInfo(session_id, newest.sequence, len(stream.text_sequences), newest.timestamp)


class MemoryStore(StoreBase):
    """An in-memory event store; thread-safe, with the full store interface.

    Everything is lost when the process ends. Writes run on the caller's thread under the
    store's one lock, which reads take briefly too. No object is shared with callers:
    each event is stored as ``check_write``'s private copy and handed out as a copy.
    """

    keeps_events = True

    def __init__(self) -> None:
        super().__init__()
        self._streams: dict[str, _Stream] = {}
        self._states: dict[tuple[str, str, Conversation], SharingState] = {}

    def _stream(self, session_id: str) -> _Stream:
        stream = self._streams.get(session_id)
        return _Stream() if stream is None else stream  # an unknown session: empty, unshared

    # -- writes: the caller holds the lock (StoreBase.submit) ---------------------------

    def _transact(self, work: Callable[[WriteTxn], T]) -> T:
        return work(self)

    def facts(self, wants: Mapping[str, Wants]) -> dict[str, Facts]:
        """Return the facts of each wanted session (the ``WriteTxn`` of ``_transact``)."""
        found: dict[str, Facts] = {}
        for session_id, want in wants.items():
            stream = self._stream(session_id)
            events, by_id, parents = stream.events, stream.by_id, want.parents
            rows = {
                parent: StoredRow(type(events[parent - 1].body).__name__, events[parent - 1].parent)
                for parent in parents
                if parent <= len(events)
            }
            found[session_id] = Facts(
                len(events),
                {i: by_id[i] for i in want.ids if i in by_id} if by_id else {},
                rows,
                {parent for parent in parents if parent in stream.first_reply},
                stream.state,
                {key: self._states.get((session_id, *key)) for key in want.sharing},
            )
        return found

    def put(self, plans: Sequence[WritePlan]) -> None:
        """Store ``plans``, in order (the ``WriteTxn`` of ``_transact``)."""
        for plan in plans:
            write = plan.write
            session_id = write.session_id
            if plan.new:
                stream = self._streams.get(session_id)
                if stream is None:
                    stream = self._streams[session_id] = _Stream()
                for stored in plan.new:
                    assert stored.sequence is not None
                    stream.events.append(stored)
                    stream.by_id[stored.id] = stored
                    if isinstance(stored.body, Text):
                        stream.text_sequences.append(stored.sequence)
                    if stored.run_id is not None:
                        stream.by_run.setdefault(stored.run_id, []).append(stored.sequence)
                stream.first_reply.update(plan.first_replies)
                if plan.state is not None:
                    stream.state = plan.state
            if write.share is not None and plan.sharing is not None:
                self._states[(session_id, write.share.viewer, plan.sharing.conversation)] = (
                    plan.sharing
                )

    def _read(
        self, session_id: str, after: int, before: int | None, limit: int | None, newest_first: bool
    ) -> list[Event]:
        with self._lock:
            stream = self._stream(session_id)
            events = stream.events
            low = min(max(after, stream.state.archived_through), len(events))
            high = len(events) if before is None else max(min(before - 1, len(events)), 0)
            if high <= low:
                return []
            if newest_first:
                start = low if limit is None else max(low, high - limit)
                rows = events[start:high][::-1]
            else:
                stop = high if limit is None else min(high, low + limit)
                rows = events[low:stop]
        return [private_copy(event) for event in rows]

    def _last_sequence(self, session_id: str) -> int:
        with self._lock:
            return len(self._stream(session_id).events)

    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage:
        with self._lock:
            stream = self._stream(session_id)
            seqs = stream.text_sequences
            end = len(seqs) if before is None else bisect.bisect_left(seqs, before)
            start = max(0, end - limit)
            rows = [
                to_log_message(session_id, stream.events[seq - 1])
                for seq in reversed(seqs[start:end])
            ]
        next_before = rows[-1].sequence if rows and start > 0 else None
        return SessionPage(messages=rows, next_before=next_before)

    def _first_replies(self, session_id: str, roots: list[int]) -> dict[int, int]:
        with self._lock:
            index = self._stream(session_id).first_reply
            return {root: index[root] for root in roots if root in index}

    def _session_states(self, session_ids: list[str]) -> list[SessionState]:
        with self._lock:
            return [self._stream(session_id).state for session_id in session_ids]

    def _run_events(self, session_id: str, run_id: str) -> list[Event]:
        with self._lock:
            stream = self._stream(session_id)
            rows = [stream.events[seq - 1] for seq in stream.by_run.get(run_id, ())]
        return [private_copy(event) for event in rows]

    def _get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        with self._lock:
            return self._states.get((session_id, viewer, conversation))

    def _session_info(self, session_id: str) -> SessionInfo | None:
        with self._lock:
            stream = self._streams.get(session_id)
            return None if stream is None else _info(session_id, stream)

    def _session_infos(self) -> list[SessionInfo]:
        with self._lock:
            return [
                _info(session_id, stream) for session_id, stream in sorted(self._streams.items())
            ]

    def _close(self) -> None:
        self._streams = {}
        self._states = {}

    # -- retention: the caller holds the lock (StoreBase.remove_archived) ---------------

    def remove(self, session_id: str, through: int) -> int:
        """Drop the session's rows up to ``through`` (the ``WriteTxn`` of ``_transact``).

        Sequences index the events list, so each slot dropped holds one shared stand-in,
        which no read returns (``_read`` starts above ``archived_through``).
        """
        stream = self._streams.get(session_id)
        if stream is None or through <= stream.state.archived_through:
            return 0
        low = stream.state.archived_through
        gone = stream.events[low:through]
        stream.events[low:through] = [_ARCHIVED] * len(gone)
        runs: set[str] = set()
        for event in gone:
            stream.by_id.pop(event.id, None)
            stream.first_reply.pop(event.sequence or 0, None)
            if event.run_id is not None:
                runs.add(event.run_id)
        del stream.text_sequences[: bisect.bisect_right(stream.text_sequences, through)]
        for run_id in runs:
            kept = stream.by_run[run_id]
            del kept[: bisect.bisect_right(kept, through)]
            if not kept:
                del stream.by_run[run_id]
        stream.state = msgspec.structs.replace(stream.state, archived_through=through)
        return len(gone)
