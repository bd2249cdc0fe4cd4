"""Ports: the interfaces the folds, runs and actors reach the outside world through."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

import msgspec

from sharedesk.protocol.events import Event
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.views import Conversation, SessionPage, SharingState
from sharedesk.protocol.writes import Write


class SessionInfo(msgspec.Struct, frozen=True):
    """What a store knows about one session without reading its events (``session_info``).

    Attributes:
        session_id: The session.
        last_sequence: The session's last sequence; sequences have no gaps, so this is
            also the number of events it holds.
        text_count: How many of those events are ``Text`` rows (the rows its log serves).
        last_activity: The timestamp stamped on the session's newest event (UTC).
    """

    session_id: str
    last_sequence: int
    text_count: int
    last_activity: datetime


#: ``callback(session_id, new_events)``, run by a store's writer (see ``StoreBase.on_commit``).
CommitCallback = Callable[[str, list[Event]], None]


@runtime_checkable
class SessionLog(Protocol):
    """A host log lent to the folds: rows newest first, ``before`` exclusive."""

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        """Return at most ``limit`` rows below ``before`` (``None``: from the newest row)."""


@runtime_checkable
class ReplyIndex(Protocol):
    """A session's first-reply index, lent to the turn planner: root -> first reply."""

    def first_replies(self, roots: Collection[int]) -> Mapping[int, int]:
        """Return each asked root's first non-blank reply, as ``StoreBase.first_replies``."""


@runtime_checkable
class EventStore(Protocol):
    """The store interface shared by every backend and the Hub.

    The store ports state signatures; each method's contract is documented once, on
    ``sharedesk.store.base.StoreBase``.
    """

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        unless_stored: str | None = None,
    ) -> list[Event]:
        """Append ``events``; return them as stored."""

    def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Return stored events with ``after < sequence < before``."""

    def last_sequence(self, session_id: str) -> int:
        """Return the session's last sequence."""

    def log(self, session_id: str) -> SessionLog:
        """Return the session's ``Text`` rows as a :class:`SessionLog`."""

    def close(self) -> None:
        """Close the store."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class SharingStateStore(Protocol):
    """A store that also keeps sharing states, each written with a turn's reply (``Share``)."""

    def get_sharing_state(
        self, session_id: str, viewer: str, conversation: Conversation
    ) -> SharingState | None:
        """Return the stored sharing state, or ``None``."""

    def first_replies(self, session_id: str, roots: Collection[int]) -> dict[int, int]:
        """Return each root's first reply."""


class Completion(Protocol):
    """How a write's writer completes it: ``start``, then (if started) ``finish``, once."""

    def start(self) -> bool:
        """Return whether the write still runs (``False``: cancelled while queued)."""

    def finish(self, outcome: list[Event] | BaseException) -> None:
        """Take the write's stored events, or its error (on the writer's thread)."""

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None:
        """Call ``fn(self)`` once finished (a future's callback, on its own terms)."""


D = TypeVar("D", bound=Completion)


class WriteFuture(Future[list[Event]]):
    """The :class:`Completion` of a caller that waits on a ``concurrent.futures.Future``."""

    start = Future.set_running_or_notify_cancel

    def finish(self, outcome: list[Event] | BaseException) -> None:
        """Complete this future with ``outcome``."""
        if isinstance(outcome, BaseException):
            self.set_exception(outcome)
        else:
            self.set_result(outcome)


@runtime_checkable
class WritingStore(Protocol):
    """A store's one write path: checked writes in, completions completed."""

    def submit(self, write: Write, done: D) -> D:
        """Queue a checked write; return ``done``, which its writer finishes (never raises)."""

    def on_commit(self, callback: CommitCallback) -> Callable[[], None]:
        """Call ``callback`` after each commit; return the remover."""


@runtime_checkable
class RunIndexStore(EventStore, Protocol):
    """A store that keeps each session's state and run index as events are appended.

    Every store and the ``Hub`` implement it, so ``SessionManager`` never reads a history.
    """

    def run_events(self, session_id: str, run_id: str) -> list[Event]:
        """Return the events carrying ``run_id``."""

    def session_state(self, session_id: str) -> SessionState:
        """Return the session's folded state."""

    def session_states(self, session_ids: Sequence[str]) -> list[SessionState]:
        """Return the folded states of ``session_ids``, in order, in one read."""


#: ``on_append(session_id, last_sequence)``, called by a store (see ``FollowingStore.follow``).
AppendCallback = Callable[[str | None, int], None]


@runtime_checkable
class FollowingStore(Protocol):
    """A store several processes share that tells each of them what the others commit.

    ``PostgresStore`` (``LISTEN``/``NOTIFY``) and ``LmdbStore`` (its last transaction id)
    implement it: a Hub over one pushes what other processes append to its own
    subscribers, so nothing polls the rows.
    """

    def follow(self, on_append: AppendCallback) -> Callable[[], None]:
        """Call ``on_append(session_id, last_sequence)`` after each commit to a session.

        Commits of every process count, this one's included; several may be told as one
        call with the newest ``last_sequence``, in commit order per session.
        ``on_append(None, 0)``: notices may have been missed (the store reconnected), so
        re-read whatever is followed. Calls come from a thread of the store's; they must
        be quick and must not raise.

        Returns:
            The function that stops following (idempotent); ``close()`` stops it too.

        Raises:
            StoreClosedError: The store is closed.

        Cost: one connection (or equivalent) per store, shared by followers.
        """
