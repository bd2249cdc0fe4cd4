"""StoreBase: the one store base; backends supply only their own I/O.

The public methods of every store are written, validated and documented here, once;
``MemoryStore``, ``LmdbStore`` and ``PostgresStore`` implement the hooks at the end. The
one write path, ``submit``, is described in ``docs/architecture.md`` ("One write").

Hooks, called with checked arguments on an open store: ``_transact(work)`` runs
``work(txn)`` in one write transaction and commits (perhaps again, in a fresh one, after
a retryable failure), raising a ``SharedeskError``; ``_close()`` releases the resources
once the writer has stopped; each read hook returns what the public method of its name
does (``after`` an int, ``before`` ``None`` or above ``after + 1``, ``limit`` ``None`` or
positive, ``roots`` a non-empty list); ``_run_events`` may return other runs' events too.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Self, TypeVar

from sharedesk.projection.compaction import channel_compacted
from sharedesk.projection.runstate import opens_run
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import (
    RowsArchived,
    SharedeskError,
    StoreClosedError,
    StoreFullError,
    ValidationError,
)
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import CommitCallback, D, SessionInfo, WriteFuture
from sharedesk.protocol.records import LogRecord, private_copy
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.validation import (
    check_bool,
    check_conversation,
    check_int,
    check_optional_int,
    check_optional_str,
    check_roots,
    check_session_id,
    check_text,
    check_write,
)
from sharedesk.protocol.views import Conversation, LogMessage, SessionPage, SharingState
from sharedesk.protocol.writes import Write
from sharedesk.store._group_commit import GroupWriter, Outcome, WriteTxn, plan_group

__all__ = ["StoreBase", "WriteTxn"]

_log = logger()
T = TypeVar("T")
R = TypeVar("R")


class StoreBase(ABC):
    """The store port, written once: validation, the write path, the reads, the lifecycle.

    Thread-safe. A subclass implements the hooks and calls ``super().__init__`` last, once
    its resources are open.

    Every public method checks its arguments first: a malformed one raises
    ``ValidationError``, and nothing is read or written. Once the store is closed, reads
    and writes raise ``StoreClosedError`` (``submit``: through its completion; a write waiting
    as it closes too). Any method raises ``StoreIOError`` (the cause chained) when the
    backend fails; a read never writes, and raises ``CorruptRecordError`` for a damaged
    record.

    Args:
        path: Where the store lives, named in its errors (``None``: in memory).
        writer: The writer thread's name, or ``None``: writes run on the caller's
            thread, under the store's lock.
        group_wait: Most seconds the writer thread gathers a group (see
            :mod:`sharedesk.store._group_commit`).
    """

    #: Whether the backend keeps the very events its ``put`` is handed (``MemoryStore``):
    #: then a write returns copies of them; otherwise the stored events themselves.
    keeps_events: ClassVar[bool] = False

    def __init__(
        self, path: str | None = None, *, writer: str | None = None, group_wait: float = 0.0
    ) -> None:
        self._path = path
        # Serialises writes without a writer thread and guards such a backend's data
        # (reentrant: an ``on_commit`` callback may read).
        self._lock = threading.RLock()
        self._closed = False
        self._callbacks: tuple[CommitCallback, ...] = ()
        self._writer: GroupWriter | None = None
        if writer is not None:
            self._writer = GroupWriter(
                self._commit_group,
                group_wait=group_wait,
                name=writer,
                closed_error=self._closed_error,
            )

    def submit(self, write: Write, done: D) -> D:
        """Queue ``write`` (built by ``check_write``, not checked again); the one write path.

        Returns:
            ``done``, finished once, after the ``on_commit`` callbacks of its commit ran:
            with what ``append`` returns (for a commit, the stored reply as a list, empty
            without one), or with the error it would raise.

        Cost: without a writer thread (``MemoryStore``), the whole write, done on return;
        otherwise one queue append, never blocking on the writer.
        """
        if self._writer is not None:
            return self._writer.submit(write, done)
        if done.start():
            with self._lock:
                outcome = self._closed_error() if self._closed else self._commit_group([write])[0]
            done.finish(outcome)
        return done

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
            expected_version: Append only if the session's last sequence equals it.
            unless_stored: Append only if the session holds no event with this id.

        Returns:
            One stored event per input, in input order; an event whose ``id`` the
            session already holds (or that repeats an earlier id of the batch) is
            returned as stored, not stored again.

        Raises:
            ConcurrencyError: ``expected_version`` differs from the last sequence.
            AlreadyStored: The event ``unless_stored`` names is stored.
            StoreFullError: The store may not grow to hold the events.

        Cost: a msgpack round trip per event, then blocks until the writer commits the
        group this write joins: one write transaction (durable backends: one sync shared
        by the group), O(len(events)) reads and writes.
        """
        write = check_write(
            session_id, events, expected_version=expected_version, unless_stored=unless_stored
        )
        return self.submit(write, WriteFuture()).result()

    def on_commit(self, callback: CommitCallback) -> Callable[[], None]:
        """Call ``callback(session_id, new_events)`` after each commit that stored events.

        Called by the writer (its thread, or the caller's without one), once per write
        that stored events, in commit order, before that commit's futures complete.
        ``new_events`` are private copies, in sequence order. A raising callback is logged
        (``store.callback_failed``); the others still run. A callback may read the store
        and submit writes, but must not wait for one (the writer would wait for itself).
        Returns the function that removes the callback (idempotent). Cost: O(1); each
        commit then costs one call per callback.
        """
        with self._lock:
            self._callbacks = (*self._callbacks, callback)

        def remove() -> None:
            with self._lock:
                self._callbacks = tuple(c for c in self._callbacks if c is not callback)

        return remove

    def _closed_error(self) -> StoreClosedError:
        return StoreClosedError(self._path)

    def _commit_group(self, writes: list[Write]) -> list[Outcome]:
        """Plan and put ``writes`` in one transaction, run the callbacks; one outcome each."""
        now = datetime.now(UTC)
        try:
            planned = self._transact(lambda txn: plan_group(txn, writes, now))
        except StoreFullError as exc:
            if len(writes) == 1:
                return [exc]
            return [outcome for write in writes for outcome in self._commit_group([write])]
        except SharedeskError as exc:
            return [exc] * len(writes)
        except Exception as exc:  # a bug or a foreign error: every write of the group
            _log.exception("store.writer_failed", path=self._path)
            return [exc] * len(writes)
        callbacks = self._callbacks
        outcomes: list[Outcome] = []
        for members in planned:
            if isinstance(members, BaseException):
                outcomes.append(members)
                continue
            for plan in members:
                if plan.new and callbacks:
                    session_id = plan.write.session_id
                    told = [private_copy(e) for e in plan.new]
                    for callback in callbacks:
                        try:
                            callback(session_id, told)
                        except Exception:
                            _log.exception("store.callback_failed", session_id=session_id)
            result = members[0].result
            outcomes.append([private_copy(e) for e in result] if self.keeps_events else result)
        return outcomes

    def _live(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _open(self, session_id: str) -> str:
        check_session_id(session_id)
        self._live()
        return session_id

    def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Return stored events with ``after < sequence < before`` (bounds exclusive).

        With ``limit``, the first ``limit`` events in the chosen order (oldest first, or
        ``newest_first``). Raises ``RowsArchived`` when the answer would hold a row at or
        below the session's ``archived_through`` (a ``newest_first`` read without
        ``after`` ends above it instead). Cost: one read of the rows returned, walked from
        the requested end (plus a state read when the rows end before ``after + 1``).
        """
        check_session_id(session_id)
        check_bool("newest_first", newest_first)
        after = check_optional_int("after", after)
        before = check_optional_int("before", before)
        limit = check_optional_int("limit", limit)
        self._live()
        low = 0 if after is None else after
        if limit == 0 or (before is not None and before <= low + 1):
            return []
        rows = self._read(session_id, low, before, limit, newest_first)
        reached = not newest_first or (after is not None and (limit is None or len(rows) < limit))
        bottom = rows[-1 if newest_first else 0].sequence if rows else None
        if reached and (rows or before is not None) and bottom != low + 1:
            archived = self._session_state(session_id).archived_through
            if low < archived:
                raise RowsArchived(session_id, archived)
        return rows

    def last_sequence(self, session_id: str) -> int:
        """Return the session's last sequence (0: no events). Cost: one key read."""
        return self._last_sequence(self._open(session_id))

    def log(self, session_id: str) -> StoreLog:
        """Return the session's ``Text`` rows as a :class:`~sharedesk.SessionLog`.

        Rows carry ``desk == session_id``. Cost of a ``read_before(before, limit)``: one
        read of at most ``limit`` rows from the tail, whatever the history.
        """
        check_session_id(session_id)
        return StoreLog(self, session_id)

    def first_replies(self, session_id: str, roots: Collection[int]) -> dict[int, int]:
        """Return, for each root in ``roots`` that has one, its first non-blank reply.

        A sequence that is not a root ``Text`` row, or a root with no non-blank reply
        yet, is left out. Cost: one index read per root (the index is kept on append).
        """
        check_session_id(session_id)
        wanted = check_roots(roots)
        self._live()
        return self._first_replies(session_id, wanted) if wanted else {}

    def session_state(self, session_id: str) -> SessionState:
        """Return the session's state, folded as its events were appended. Cost: one read."""
        return self._session_state(self._open(session_id))

    def session_states(self, session_ids: Sequence[str]) -> list[SessionState]:
        """Return the states of ``session_ids``, in order, from one read (one snapshot).

        Cost: one read transaction of ``len(session_ids)`` key reads.
        """
        if isinstance(session_ids, str) or not isinstance(session_ids, Sequence):
            raise ValidationError(f"session_ids must be a sequence of str, got {session_ids!r}")
        return self._session_states([self._open(s) for s in session_ids])

    def run_events(self, session_id: str, run_id: str) -> list[Event]:
        """Return the events carrying ``run_id``, oldest first.

        Raises ``RowsArchived`` when they do not begin with the run's first input row and
        the session's ``archived_through`` is above 0: the run's oldest rows (perhaps all
        of them) may be among the rows retention removed. Cost: a run-index walk (plus a
        state read when they do not begin so).
        """
        check_session_id(session_id)
        check_optional_str("run_id", run_id)
        self._live()
        rows = [event for event in self._run_events(session_id, run_id) if event.run_id == run_id]
        if not rows or not opens_run(rows[0]):
            archived = self._session_state(session_id).archived_through
            if archived:
                raise RowsArchived(session_id, archived)
        return rows

    def get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        """Return the stored sharing state of (session, viewer, conversation), or ``None``.

        ``viewer`` is the participant's :func:`~sharedesk.protocol.author_key`. Cost: one
        key read.
        """
        check_session_id(session_id)
        check_text("viewer", viewer, empty=False)
        check_conversation(conversation)
        self._live()
        return self._get_sharing_state(session_id, viewer, conversation)

    def sessions(self) -> list[str]:
        """Return the ids of the sessions holding events, sorted. Cost: a walk of them."""
        self._live()
        return self._sessions()

    def session_info(self, session_id: str) -> SessionInfo | None:
        """Return what the store knows of ``session_id`` (``None``: no events). Cost: one read."""
        return self._session_info(self._open(session_id))

    def session_infos(self) -> list[SessionInfo]:
        """Return every session's :class:`SessionInfo`, sorted by id. Cost: a walk of them."""
        self._live()
        return self._session_infos()

    def close(self) -> None:
        """Close the store; later calls raise ``StoreClosedError``. Idempotent.

        Writes still queued get ``StoreClosedError``; the group being written completes.
        Cost: waits for that group and joins the writer thread.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._writer is not None:
            self._writer.close()
        with self._lock:
            self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- retention ----------------------------------------------------------------------

    def remove_archived(self, session_id: str, through: int) -> int:
        """Remove the session's rows at or below ``through``; return how many went.

        The port retention writes through (the caller archives the rows first). In one
        transaction the rows above ``archived_through`` up to ``through`` go, with their
        index entries, and ``archived_through`` becomes ``through``; a ``through`` at or
        below it removes nothing. ``ValidationError``, nothing removed: ``through`` is no
        int, or lies above the session's newest channel compaction. Cost: one write
        transaction, a decode and delete per row.
        """
        check_session_id(session_id)
        check_int("through", through)
        self._live()
        state = self._session_state(session_id)
        compacted = channel_compacted(state.compactions, session_id)
        if through > compacted:
            raise ValidationError(
                f"through={through} lies above the newest compaction's {compacted} of "
                f"session {session_id!r}"
            )
        if through <= state.archived_through:
            return 0
        with self._lock:
            return self._transact(lambda txn: txn.remove(session_id, through))

    @abstractmethod
    def _transact(self, work: Callable[[WriteTxn], T]) -> T: ...
    @abstractmethod
    def _read(
        self, session_id: str, after: int, before: int | None, limit: int | None, newest_first: bool
    ) -> list[Event]: ...
    def _last_sequence(self, session_id: str) -> int:
        info = self._session_info(session_id)
        return 0 if info is None else info.last_sequence

    @abstractmethod
    def _read_text_before(self, session_id: str, before: int | None, limit: int) -> SessionPage: ...
    @abstractmethod
    def _first_replies(self, session_id: str, roots: list[int]) -> dict[int, int]: ...
    def _session_state(self, session_id: str) -> SessionState:
        return self._session_states([session_id])[0]

    @abstractmethod
    def _session_states(self, session_ids: list[str]) -> list[SessionState]: ...
    @abstractmethod
    def _run_events(self, session_id: str, run_id: str) -> list[Event]: ...
    @abstractmethod
    def _get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None: ...
    def _sessions(self) -> list[str]:
        return [info.session_id for info in self._session_infos()]

    @abstractmethod
    def _session_info(self, session_id: str) -> SessionInfo | None: ...
    @abstractmethod
    def _session_infos(self) -> list[SessionInfo]: ...
    @abstractmethod
    def _close(self) -> None: ...


def text_page(
    session_id: str,
    rows: Iterable[tuple[int, R]],
    limit: int,
    record: Callable[[int, R], LogRecord],
) -> SessionPage:
    """Return the first ``limit`` ``rows`` (newest first) as a page; one more: the log goes on."""
    messages: list[LogMessage] = []
    for sequence, raw in rows:
        if len(messages) == limit:
            return SessionPage(messages=messages, next_before=messages[-1].sequence)
        row = record(sequence, raw)
        content, parent = row.body.content, row.parent
        messages.append(LogMessage(sequence, row.author, content, session_id, parent))
    return SessionPage(messages=messages, next_before=None)


@dataclass(frozen=True, slots=True)
class StoreLog:
    """A :class:`~sharedesk.SessionLog` over one session of a store (see ``StoreBase.log``)."""

    store: StoreBase
    session_id: str

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        """Return at most ``limit`` ``Text`` rows below ``before``, newest first.

        A log retention cut does not end above ``archived_through``: the page of the oldest
        rows kept gives the cursor ``archived_through + 1``, and a read that would need a
        row at or below it raises ``RowsArchived``. Errors as for a read of the store.
        Cost: one read of at most ``limit`` rows (plus a state read when the rows end).
        """
        before = check_optional_int("before", before)
        store, limit = self.store, check_int("limit", limit)
        store._live()
        if limit == 0:
            return SessionPage(messages=[], next_before=None)
        page = store._read_text_before(self.session_id, before, limit)
        if page.next_before is None and (before is None or before > 1):
            archived = store._session_state(self.session_id).archived_through
            if archived:
                if not page.messages:
                    raise RowsArchived(self.session_id, archived)
                page = SessionPage(messages=page.messages, next_before=archived + 1)
        return page
