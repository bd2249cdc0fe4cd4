"""MemoryStore: the in-process store backend (a real implementation, not a mock)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import msgspec

from sharedesk.projection.sharing import note_present
from sharedesk.protocol.errors import (
    AlreadyStored,
    ConcurrencyError,
    SharedeskError,
    SharingStateConflict,
    StoreClosedError,
)
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.ports import WriteTicket
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SessionState
from sharedesk.protocol.validation import (
    check_append_args,
    check_conversation,
    check_optional_str,
    check_session_id,
)
from sharedesk.protocol.views import Conversation, SessionPage, SharingState, to_log_message
from sharedesk.store._common import (
    Outcome,
    SessionInfo,
    StoredRow,
    check_log_args,
    check_read_args,
    check_roots,
    check_sharing_args,
    check_viewer,
    hand_over,
    plan_append,
    private_copy,
    watermark_of,
)


class _Submitted(msgspec.Struct, frozen=True):
    """One submitted write, checked, waiting for the writer thread."""

    session_id: str
    events: list[Event]
    expected_version: int | None
    sharing: tuple[str, SharingState, SharingState | None] | None
    ticket: Any
    reply_present: bool


class _Stream:
    """One session's events, its indexes (ids, Text rows, first replies, runs), its state."""

    __slots__ = ("by_id", "by_run", "events", "first_reply", "state", "text_sequences")

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.by_id: dict[str, Event] = {}
        self.text_sequences: list[int] = []
        #: Root sequence -> its first non-blank reply's sequence (set when appended).
        self.first_reply: dict[int, int] = {}
        #: The sequences of each run's events, oldest first.
        self.by_run: dict[str, list[int]] = {}
        self.state: SessionState = EMPTY_SESSION_STATE


def _info(session_id: str, stream: _Stream) -> SessionInfo:
    """Return what ``stream`` (holding at least one event) says about ``session_id``."""
    newest = stream.events[-1]
    assert newest.sequence is not None and newest.timestamp is not None
    return SessionInfo(
        session_id=session_id,
        last_sequence=newest.sequence,
        text_count=len(stream.text_sequences),
        last_activity=newest.timestamp,
    )


class MemoryStore:
    """An in-memory event store; thread-safe, with the full store interface.

    Everything is lost when the process ends. Appends are serialised by one lock; reads
    take the same lock briefly. No object is shared with callers: what is stored is a
    private copy of each event (its encoding decoded, see
    :mod:`sharedesk.protocol.validation`), and ``append`` and ``read`` hand out copies
    of that (:func:`~sharedesk.store._common.private_copy`), so changing an event's
    ``metadata`` or ``tool_input`` afterwards never changes history. It also keeps
    sharing states (the :class:`~sharedesk.protocol.ports.SharingStateStore` port).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._states: dict[tuple[str, str, Conversation], SharingState] = {}
        self._closed = False
        # Submitted writes (SubmittingStore) and the thread that applies them, started
        # with the first one.
        self._cond = threading.Condition(threading.Lock())
        self._submitted: list[_Submitted] = []
        self._writer: threading.Thread | None = None
        self._stopping = False

    def _live(self) -> None:
        if self._closed:
            raise StoreClosedError(None)

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        unless_stored: str | None = None,
    ) -> list[Event]:
        """Append ``events`` to ``session_id`` and return them as stored.

        Args:
            session_id: The session.
            events: Events with ``sequence`` and ``timestamp`` left ``None``.
            expected_version: When set, append only if the session's last sequence
                equals it.
            unless_stored: When set, append only if the session holds no event with
                this id (checked under the lock, like ``expected_version``).

        Returns:
            One stored event per input, in input order; an event whose ``id`` the
            session already holds (or that repeats an earlier id of the same batch) is
            returned as stored, not stored again.

        Raises:
            ValidationError: Malformed input; nothing was written.
            ConcurrencyError: ``expected_version`` differs from the last sequence.
            AlreadyStored: The event ``unless_stored`` names is stored; nothing written.
            StoreClosedError: The store is closed.

        Cost: O(len(events)) under the store lock; no I/O.
        """
        batch = check_append_args(session_id, events, expected_version)
        guard = check_optional_str("unless_stored", unless_stored)
        with self._lock:
            self._live()
            if guard is not None:
                stream = self._streams.get(session_id)
                if stream is not None and guard in stream.by_id:
                    raise AlreadyStored(session_id, guard)
            result = self._append_locked(session_id, batch, expected_version)
        return [private_copy(event) for event in result]

    def _append_locked(
        self, session_id: str, batch: list[Event], expected_version: int | None
    ) -> list[Event]:
        """Check and apply one checked batch; the caller holds the lock. Writes all or nothing."""
        stream = self._streams.get(session_id)
        last = len(stream.events) if stream is not None else 0
        if expected_version is not None and expected_version != last:
            raise ConcurrencyError(expected_version, last)
        earlier = stream.events if stream is not None else []
        plan = plan_append(
            batch,
            last,
            stream.by_id if stream is not None else {},
            datetime.now(UTC),
            stored_row=lambda sequence: StoredRow(
                type(earlier[sequence - 1].body).__name__, earlier[sequence - 1].parent
            ),
            answered=stream.first_reply if stream is not None else {},
            state=lambda: stream.state if stream is not None else EMPTY_SESSION_STATE,
        )
        if plan.new:
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
        return plan.result

    def get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        """Return the stored sharing state of (session, viewer, conversation), or ``None``.

        Args:
            session_id: The session.
            viewer: The participant's :func:`~sharedesk.protocol.author_key`.
            conversation: The conversation the state tracks.

        Raises:
            ValidationError: A malformed argument.
            StoreClosedError: The store is closed.

        Cost: O(1) under the store lock; no I/O.
        """
        check_session_id(session_id)
        check_viewer(viewer)
        check_conversation(conversation)
        with self._lock:
            self._live()
            return self._states.get((session_id, viewer, conversation))

    def append_and_share(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        viewer: str,
        state: SharingState,
        expected_state: SharingState | None,
        expected_version: int | None = None,
        reply_present: bool = False,
    ) -> list[Event]:
        """Append ``events`` and store ``state`` in one atomic step.

        The state is keyed by (session, viewer, ``state.conversation``). ``events`` may be
        empty (a turn committed without a reply). Checks run in this order: input,
        ``expected_version``, the stored state, parents, the present set.

        Args:
            session_id: The session.
            events: Events to append, as for :meth:`append`.
            viewer: The participant's :func:`~sharedesk.protocol.author_key`.
            state: The state to store.
            expected_state: The state the caller read (``None``: no state stored).
            expected_version: When set, write only if the session's last sequence
                equals it.
            reply_present: Note the first event's stored sequence (its old one when its
                id was stored before) as present in ``state`` before storing it.

        Returns:
            The events as stored, as :meth:`append` returns them.

        Raises:
            ValidationError: Malformed input; nothing was written.
            ConcurrencyError: ``expected_version`` differs from the last sequence.
            SharingStateConflict: The stored state is not ``expected_state``; nothing
                was written.
            PresentSetOverflow: Noting the reply overflows the present set; nothing
                was written.
            StoreClosedError: The store is closed.

        Cost: O(len(events)) under the store lock; no I/O.
        """
        batch = check_append_args(session_id, events, expected_version)
        sharing = check_sharing_args(viewer, state, expected_state)
        with self._lock:
            self._live()
            result = self._share_locked(session_id, batch, expected_version, sharing, reply_present)
        return [private_copy(event) for event in result]

    def _share_locked(
        self,
        session_id: str,
        batch: list[Event],
        expected_version: int | None,
        sharing: tuple[str, SharingState, SharingState | None],
        reply_present: bool,
    ) -> list[Event]:
        """Check and apply one checked ``append_and_share``; the caller holds the lock."""
        viewer, state, expected_state = sharing
        key = (session_id, viewer, state.conversation)
        if expected_version is not None:
            last = self._last_locked(session_id)
            if expected_version != last:
                raise ConcurrencyError(expected_version, last)
        stored_state = self._states.get(key)
        if stored_state != expected_state:
            raise SharingStateConflict(watermark_of(expected_state), watermark_of(stored_state))
        if reply_present and batch:
            # The first event's sequence, known under the lock: its old one when
            # its id is stored, else the next one.
            stream = self._streams.get(session_id)
            known = stream.by_id.get(batch[0].id) if stream is not None else None
            reply = known.sequence if known is not None else self._last_locked(session_id) + 1
            assert reply is not None
            state = note_present(state, reply)
        result = self._append_locked(session_id, batch, None)
        self._states[key] = state
        return result

    # -- submitted writes (the SubmittingStore port) -----------------------------------

    def submit_append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        ticket: WriteTicket,
    ) -> None:
        """Queue an append that no thread waits for; ``ticket`` gets its outcome.

        The store's writer thread (started with the first submitted write) takes every
        write queued meanwhile, applies each as :meth:`append` would, settles their
        tickets and delivers them, one ``deliver`` per sink.

        Raises:
            ValidationError: Malformed input; nothing was queued.
            StoreClosedError: The store is closed; nothing was queued.

        Cost: O(len(events)) validation and one queue append; never blocks on the writer.
        """
        batch = check_append_args(session_id, events, expected_version)
        self._enqueue(_Submitted(session_id, batch, expected_version, None, ticket, False))

    def submit_append_and_share(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        viewer: str,
        state: SharingState,
        expected_state: SharingState | None,
        expected_version: int | None = None,
        reply_present: bool = False,
        ticket: WriteTicket,
    ) -> None:
        """Queue an :meth:`append_and_share` that no thread waits for (as :meth:`submit_append`).

        Raises:
            ValidationError: Malformed input; nothing was queued.
            StoreClosedError: The store is closed; nothing was queued.

        Cost: as :meth:`submit_append`.
        """
        batch = check_append_args(session_id, events, expected_version)
        sharing = check_sharing_args(viewer, state, expected_state)
        self._enqueue(
            _Submitted(session_id, batch, expected_version, sharing, ticket, reply_present)
        )

    def _enqueue(self, item: _Submitted) -> None:
        with self._cond:
            if self._closed or self._stopping:
                raise StoreClosedError(None)
            self._submitted.append(item)
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._run_writer, name="sharedesk-memory-writer", daemon=True
                )
                self._writer.start()
            elif len(self._submitted) == 1:
                self._cond.notify()

    def _run_writer(self) -> None:
        """Body of the writer thread: apply every queued write, then hand their tickets over."""
        while True:
            with self._cond:
                while not self._submitted and not self._stopping:
                    self._cond.wait()
                group, self._submitted = self._submitted, []
                if not group:
                    return
            outcomes: list[Outcome] = []
            for item in group:
                try:
                    with self._lock:
                        self._live()
                        if item.sharing is None:
                            stored = self._append_locked(
                                item.session_id, item.events, item.expected_version
                            )
                        else:
                            stored = self._share_locked(
                                item.session_id,
                                item.events,
                                item.expected_version,
                                item.sharing,
                                item.reply_present,
                            )
                    outcomes.append((item.ticket, [private_copy(e) for e in stored], None))
                except SharedeskError as exc:
                    outcomes.append((item.ticket, None, exc))
            hand_over(outcomes)

    def first_replies(self, session_id: str, roots: Collection[int]) -> dict[int, int]:
        """Return, for each root in ``roots`` that has one, its first non-blank reply.

        Args:
            session_id: The session.
            roots: Sequences of root rows (others are left out of the answer).

        Raises:
            ValidationError: A malformed session id or root.
            StoreClosedError: The store is closed.

        Cost: O(len(roots)) under the store lock (the index is kept on append); no I/O.
        """
        check_session_id(session_id)
        wanted = check_roots(roots)
        with self._lock:
            self._live()
            stream = self._streams.get(session_id)
            if stream is None:
                return {}
            index = stream.first_reply
            return {root: index[root] for root in wanted if root in index}

    def _last_locked(self, session_id: str) -> int:
        stream = self._streams.get(session_id)
        return 0 if stream is None else len(stream.events)

    def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Return stored events with ``after < sequence < before``.

        Args:
            session_id: The session.
            after: Exclusive lower bound, or ``None``.
            before: Exclusive upper bound, or ``None``.
            limit: The first ``limit`` events in the chosen order, or all.
            newest_first: Order newest first instead of oldest first.

        Raises:
            ValidationError: A bound that is not a non-negative int.
            StoreClosedError: The store is closed.

        Cost: O(result) under the store lock, then one copy per event outside it (O(1)
        for a plain message, else one msgpack round trip).
        """
        check_session_id(session_id)
        after, before, limit = check_read_args(after, before, limit, newest_first)
        with self._lock:
            self._live()
            stream = self._streams.get(session_id)
            if stream is None:
                return []
            events = stream.events
            low = 0 if after is None else min(after, len(events))
            high = len(events) if before is None else max(min(before - 1, len(events)), 0)
            if high <= low or limit == 0:
                return []
            if newest_first:
                start = low if limit is None else max(low, high - limit)
                rows = events[start:high][::-1]
            else:
                stop = high if limit is None else min(high, low + limit)
                rows = events[low:stop]
        return [private_copy(event) for event in rows]

    def last_sequence(self, session_id: str) -> int:
        """Return the session's last sequence (0 for a session with no events).

        Cost: O(1).
        """
        check_session_id(session_id)
        with self._lock:
            self._live()
            return self._last_locked(session_id)

    def run_events(self, session_id: str, run_id: str) -> list[Event]:
        """Return the events carrying ``run_id``, oldest first (the run index).

        Raises:
            ValidationError: A malformed argument.
            StoreClosedError: The store is closed.

        Cost: O(the run's events) under the store lock.
        """
        check_session_id(session_id)
        check_optional_str("run_id", run_id)
        with self._lock:
            self._live()
            stream = self._streams.get(session_id)
            if stream is None:
                return []
            return [stream.events[seq - 1] for seq in stream.by_run.get(run_id, ())]

    def session_state(self, session_id: str) -> SessionState:
        """Return the session's state, folded as its events were appended.

        Raises:
            ValidationError: A malformed session id.
            StoreClosedError: The store is closed.

        Cost: O(1).
        """
        check_session_id(session_id)
        with self._lock:
            self._live()
            stream = self._streams.get(session_id)
            return EMPTY_SESSION_STATE if stream is None else stream.state

    def sessions(self) -> list[str]:
        """Return the ids of the sessions holding at least one event, sorted.

        Cost: O(sessions).
        """
        with self._lock:
            self._live()
            return sorted(self._streams)

    def session_info(self, session_id: str) -> SessionInfo | None:
        """Return what the store knows about ``session_id``, or ``None`` if it has no events.

        Raises:
            ValidationError: A malformed session id.
            StoreClosedError: The store is closed.

        Cost: O(1).
        """
        check_session_id(session_id)
        with self._lock:
            self._live()
            stream = self._streams.get(session_id)
            return None if stream is None else _info(session_id, stream)

    def session_infos(self) -> list[SessionInfo]:
        """Return :class:`SessionInfo` for every session holding events, sorted by id.

        Raises:
            StoreClosedError: The store is closed.

        Cost: O(sessions log sessions).
        """
        with self._lock:
            self._live()
            return [
                _info(session_id, self._streams[session_id]) for session_id in sorted(self._streams)
            ]

    def log(self, session_id: str) -> _MemoryLog:
        """Return the session's ``Text`` rows as a :class:`~sharedesk.SessionLog`.

        Rows carry ``desk == session_id``. Cost per ``read_before``: O(log n + page).
        """
        check_session_id(session_id)
        return _MemoryLog(self, session_id)

    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage:
        before, limit = check_log_args(before, limit)
        with self._lock:
            self._live()
            stream = self._streams.get(session_id)
            if stream is None or limit == 0:
                return SessionPage(messages=[], next_before=None)
            seqs = stream.text_sequences
            end = len(seqs) if before is None else bisect.bisect_left(seqs, before)
            start = max(0, end - limit)
            rows = [
                to_log_message(session_id, stream.events[seq - 1])
                for seq in reversed(seqs[start:end])
            ]
        next_before = rows[-1].sequence if rows and start > 0 else None
        return SessionPage(messages=rows, next_before=next_before)

    def close(self) -> None:
        """Close the store; later calls raise ``StoreClosedError``. Idempotent.

        Writes submitted before are applied first (the writer thread is stopped and
        joined once it has handed them over).
        """
        with self._cond:
            self._stopping = True
            writer = self._writer
            self._cond.notify()
        if writer is not None and writer is not threading.current_thread():
            writer.join()
        with self._lock:
            self._closed = True
            self._streams = {}
            self._states = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _MemoryLog:
    """A :class:`~sharedesk.SessionLog` over one session of a :class:`MemoryStore`."""

    __slots__ = ("_session_id", "_store")

    def __init__(self, store: MemoryStore, session_id: str) -> None:
        self._store = store
        self._session_id = session_id

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        """Return at most ``limit`` ``Text`` rows below ``before``, newest first.

        Raises:
            ValidationError: Bad arguments.
            StoreClosedError: The store is closed.
        """
        return self._store._read_text_before(self._session_id, before, limit)
