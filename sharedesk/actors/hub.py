"""The Hub: the public face of a desk's actors (see ``docs/architecture.md``, "The actors").

Inputs are checked on the caller's thread, writes go to the store's writer (``submit``),
reads straight to the store. A ``FollowingStore`` (LMDB, PostgreSQL) is followed from
``__init__`` to ``close()``, so other processes' commits are published as this Hub's own.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Concatenate, Final, ParamSpec, Self, TypeVar, Unpack

import msgspec

from sharedesk.actors._base import ActorKey, HubStore, Slot
from sharedesk.actors._handles import AppendOptions, SessionHandle, Turn, interruptible, reply_event
from sharedesk.actors._messages import GetTranscript, Plan, Prime, View
from sharedesk.actors._options import HubOptions, HubStats
from sharedesk.actors.supervisor import ActorSupervisor, Listener
from sharedesk.projection.compaction import compaction_event, compaction_of
from sharedesk.projection.messages import Budget, Budgets
from sharedesk.projection.retention import RetentionPolicy, RetentionReport
from sharedesk.projection.turns import TurnPlan
from sharedesk.protocol._lazy import load_lazy
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.constants import SESSION_WINDOW
from sharedesk.protocol.errors import HubClosed, TurnAlreadyCommitted, ValidationError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import D, EventStore, FollowingStore, RunIndexStore, WriteFuture
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.validation import (
    check_author,
    check_conversation,
    check_int,
    check_optional_int,
    check_path,
    check_session_id,
    check_write,
    is_postgres_dsn,
)
from sharedesk.protocol.views import Conversation, Projection
from sharedesk.protocol.writes import Share, Write
from sharedesk.store.memory import MemoryStore
from sharedesk.store.retention import apply_retention
from sharedesk.telemetry import hub_telemetry

__all__ = ["Hub", "SessionHandle", "Turn"]

if TYPE_CHECKING:
    from sharedesk.runs.queue import RunQueue
    from sharedesk.runs.types import RunQueueStatus

_log = logger()

T = TypeVar("T")
P = ParamSpec("P")

#: Longest wait when the exit hook closes a Hub left open, in seconds.
_EXIT_GRACE: Final = 1.0

#: The option names ``Hub.open`` keeps for the Hub; the others go to the store.
_OPTION_NAMES: Final = frozenset(HubOptions.__struct_fields__)


def _from_store(method: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[Hub, P], T]:
    """Return the store port's read ``method`` as the Hub's: straight to the store, no actor."""
    name = method.__name__

    @functools.wraps(method)  # the signature shown is the port's
    def read(self: Hub, /, *args: P.args, **kwargs: P.kwargs) -> T:
        self._live()
        result: T = getattr(self._store, name)(*args, **kwargs)
        return result

    read.__qualname__ = f"Hub.{name}"
    read.__doc__ = f"As :meth:`{method.__qualname__}`, straight from the store; no actor."
    return read


class Hub:
    """The in-process supervisor of a desk's actors; also an ``EventStore`` itself.

    Thread-safe: call it from any number of threads. A context manager: leaving the
    block closes it. This is where the desk API is documented once; ``AsyncHub``'s
    coroutines take the same arguments and mean the same.

    Every method checks its arguments on the caller's thread (``ValidationError``, nothing
    sent); one that reaches an actor may also raise:

    - ``HubClosed``: the Hub is closed (or closed while the caller waited);
    - ``SessionFailed``: the session exceeded its restart intensity;
    - ``ActorTimeout``: no answer within ``ask_timeout``;
    - ``ActorCrashed``: the handler failed; the actor was restarted.
    """

    def __init__(
        self, store: HubStore, options: HubOptions | None = None, *, path: str | None = None
    ) -> None:
        """Run actors over ``store``, which the Hub now owns; ``path`` names it in errors."""
        self._store = store
        self._options = options if options is not None else HubOptions()
        self._path = path
        self._lock = threading.Lock()  # guards the run queue and the closing flag
        self._closing = False
        self._runs: RunQueue | None = None
        self._telemetry = hub_telemetry()  # None without opentelemetry-api
        self._supervisor = ActorSupervisor(store, self._options, path)
        self._stop_commits = store.on_commit(self._supervisor.committed)
        self._unfollow: Callable[[], None] | None = None
        if isinstance(store, FollowingStore):
            try:
                self._unfollow = store.follow(self._supervisor.notice)
            except BaseException:
                self._stop_commits()
                self._supervisor.close(self._options.ask_timeout)
                raise
        self._exit_hook = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._exit_hook)
        _log.info("hub.opened", path=path, max_active=self._options.max_active)

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, **options: Any) -> Hub:
        """Open a Hub over a new store, which it owns.

        Args:
            path: An LMDB path; a PostgreSQL DSN (``postgresql://...``, ``postgres://...``)
                for a store several Hub processes share; ``None`` keeps everything in memory.
            **options: :class:`HubOptions` fields for the Hub; the others go to
                ``LmdbStore(path, ...)`` or ``PostgresStore(dsn, ...)``.

        Raises:
            ValidationError: An unknown option (the message names the valid ones), store
                options without a path, or a URL that is not a PostgreSQL DSN.
            StoreError: The store could not be opened.
            ImportError: A DSN, and psycopg (the ``postgres`` extra) is not installed.
        """
        hub_options = {k: options.pop(k) for k in list(options) if k in _OPTION_NAMES}
        settings = HubOptions(**hub_options)
        store, where = _open_store(path, options)
        try:
            return cls(store, settings, path=where)
        except BaseException:
            store.close()
            raise

    @property
    def store(self) -> HubStore:
        """The store the Hub owns (read it freely; write through the Hub)."""
        return self._store

    @property
    def options(self) -> HubOptions:
        """The options the Hub runs with."""
        return self._options

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closing

    @property
    def following(self) -> bool:
        """Whether the Hub follows its store's commit notices (a ``FollowingStore``)."""
        return self._unfollow is not None

    def listen(self, session_id: str, listener: Listener) -> Callable[[], None]:
        """Push the events committed to ``session_id`` to ``listener`` (see :class:`Listener`).

        Until the returned (idempotent) remover is called, it is told what the sharing
        actor is told, on the session actor's thread; on a following Hub, other processes'
        commits too. Cost: O(listeners) under a lock; on a following Hub also one store
        read and one round trip to the session actor.
        """
        check_session_id(session_id)
        if not self.following:
            return self._supervisor.add_listener(session_id, listener)
        self._live()
        # The base is read before the listener is added: whatever is committed later
        # lies above it, and the session actor publishes everything above it.
        base = self._store.last_sequence(session_id)
        remove = self._supervisor.add_listener(session_id, listener)
        try:
            self._supervisor.call(ActorKey(kind="session", session_id=session_id), Prime(base))
        except BaseException:
            remove()
            raise
        return remove

    def append(
        self, session_id: str, events: Sequence[Event], **options: Unpack[AppendOptions]
    ) -> list[Event]:
        """As ``StoreBase.append`` (keywords: :class:`AppendOptions`), through :meth:`submit`."""
        return interruptible(self.submit(check_write(session_id, events, **options), WriteFuture()))

    def submit(self, write: Write, done: D) -> D:
        """Hand a checked write to the store's writer, which finishes ``done``: the one path.

        Raises ``HubClosed`` or ``SessionFailed`` before anything is queued.
        """
        self._supervisor.check(write.session_id)
        if self._telemetry is not None:  # its rows stamped, its span ended with done
            write = self._telemetry.append(write, done)
        return self._store.submit(write, done)

    read = _from_store(EventStore.read)
    last_sequence = _from_store(EventStore.last_sequence)
    log = _from_store(EventStore.log)
    run_events = _from_store(RunIndexStore.run_events)
    session_state = _from_store(RunIndexStore.session_state)
    session_states = _from_store(RunIndexStore.session_states)

    def session(self, session_id: str) -> SessionHandle:
        """Return a handle to ``session_id``; starts nothing (``ValidationError``)."""
        check_session_id(session_id)
        self._live()
        return SessionHandle(self, session_id)

    def view(
        self,
        session_id: str,
        viewer: SessionAuthor,
        conversation: Conversation | None = None,
        *,
        window: int = SESSION_WINDOW,
    ) -> Projection:
        """Return ``viewer``'s view, as :func:`project_session` gives it, from its projector.

        ``conversation=None`` is the channel (as for every method taking one). Cost: O(1)
        when nothing was appended since the last view of this window; else one round trip
        and a walk of the projector's in-memory rows (at most ``SCAN_LIMIT``).
        """
        conversation = self._conversation(session_id, conversation)
        check_int("window", window)
        key = _projector(session_id, check_author(viewer, "viewer"), conversation)
        last_sequence = self._store.last_sequence

        def published(slot: Slot) -> Projection | None:
            snap = slot.snapshot
            if snap is None or (snap.window, snap.through) != (window, last_sequence(session_id)):
                return None
            return snap.projection

        view: Projection = self._supervisor.call(key, View(window=window), fast=published)
        # The projector keeps serving this view: hand out a list of one's own.
        return Projection(messages=list(view.messages), partial=view.partial)

    def turn(
        self,
        session_id: str,
        viewer: SessionAuthor,
        conversation: Conversation | None = None,
        *,
        start_after: int | None = None,
    ) -> Turn:
        """Plan ``viewer``'s next :class:`Turn` in a conversation (see :attr:`Turn.messages`).

        ``start_after=N`` starts a viewer without sharing state after sequence ``N``: its
        turns then bring the rows above ``N`` in pages of at most ``SESSION_WINDOW``
        messages, oldest first, each once (``SharingState.paged``). Nothing moves until
        ``Turn.commit``. Raises ``ValidationError`` (``start_after`` negative, beyond the
        last sequence, or given to a viewer with sharing state), ``PageError`` or
        ``LogReadError`` (the store's log misbehaved).

        Cost: one round trip to the sharing actor, one state read and a walk of its
        in-memory tail down to the watermark (at most ``SCAN_LIMIT`` rows); no writes.
        """
        conversation = self._conversation(session_id, conversation)
        viewer = check_author(viewer, "viewer")
        check_optional_int("start_after", start_after)
        plan: TurnPlan = self._supervisor.call(
            ActorKey(kind="sharing", session_id=session_id),
            Plan(viewer=viewer, conversation=conversation, start_after=start_after),
        )
        turn = Turn(self, session_id, viewer, plan)
        if self._telemetry is not None:
            turn.span = self._telemetry.turn(session_id, viewer, plan)
        return turn

    def compact(
        self,
        session_id: str,
        summary: str,
        *,
        through: int,
        author: SessionAuthor,
        conversation: Conversation | None = None,
    ) -> Event:
        """Append a ``Compaction``: ``summary`` by ``author`` stands for the rows up to ``through``.

        From then on every view, turn and transcript of ``conversation`` (``None``: the
        channel) serves one summary row in their place (``projection/compaction.py``);
        ``read`` still returns them. Returns the stored event.

        Raises ``ValidationError``, nothing written: a malformed argument, an unknown
        desk, a blank summary, ``through`` beyond the last sequence or at or below the
        conversation's previous compaction.

        Cost: a read of the rows from ``through`` down to the previous compaction (to name
        ``covers``) and one append.
        """
        conversation = self._conversation(session_id, conversation)
        author = check_author(author, "author")
        store = self._store
        previous = compaction_of(store.session_state(session_id).compactions, conversation)
        last = store.last_sequence(session_id)
        event = compaction_event(
            store.log(session_id), conversation, summary, through, author, last, previous
        )
        return self.append(session_id, [event])[0]

    def transcript(
        self,
        session_id: str,
        viewer: SessionAuthor,
        *,
        limit: int | None = None,
        **budgets: Unpack[Budgets],
    ) -> Transcript:
        """Return ``viewer``'s transcript, as ``TranscriptBuilder.from_store``, from its projector.

        Cost: O(1) store work when nothing was appended since the same call; else a read of
        what was appended since (with a budget: of the newest events the answer needs).
        """
        conversation = self._conversation(session_id, None)
        viewer = check_author(viewer, "viewer")
        Budget(**budgets)  # checked here, on the caller's thread
        ask = GetTranscript(viewer, check_optional_int("limit", limit), budgets)
        transcript: Transcript = self._supervisor.call(
            _projector(session_id, viewer, conversation), ask
        )
        # The projector keeps serving this transcript: hand out a list of one's own.
        return msgspec.structs.replace(transcript, messages=list(transcript.messages))

    def submit_commit(self, turn: Turn, reply: str | Event | None, done: D) -> D:
        """Check ``turn``'s commit and submit it into ``done`` (the reply: a list of 0 or 1).

        Finish with :meth:`committed`. Raises as :meth:`Turn.commit`, before anything is queued.
        """
        plan = turn.plan
        if turn.committed:
            expected = plan.expected_state
            raise TurnAlreadyCommitted(
                -1 if expected is None else expected.watermark, plan.next_state.watermark
            )
        event = reply_event(turn, reply)
        share = Share(
            viewer=author_key(turn.viewer),
            state=plan.next_state,
            expected_state=plan.expected_state,
            reply_present=event is not None,
        )
        write = check_write(turn.session_id, [] if event is None else [event], share=share)
        tel, span = self._telemetry, turn.span
        if tel is not None and span is not None and event is not None:
            write = tel.stamp(write, span)  # readers' turns link to this one
        self.submit(write, done)
        if tel is not None and span is not None:  # a turn never committed costs nothing
            tel.offered(span, turn.session_id, plan, self._store.read)

        def mark(done: Any) -> None:
            if not done.cancelled() and done.exception() is None:
                turn.committed = True  # a cancelled caller's turn too
            elif tel is not None and span is not None and not done.cancelled():
                tel.failed(span, done.exception() or HubClosed(self._path))

        done.add_done_callback(mark)
        return done

    def committed(self, turn: Turn, stored: list[Event]) -> Event | None:
        """Record that ``turn`` committed (``stored``: its future's result); return the reply."""
        turn.committed = True
        plan = turn.plan
        _log.info(
            "turn.committed",
            session_id=turn.session_id,
            viewer=author_key(turn.viewer),
            watermark=plan.next_state.watermark,
            reply_sequence=stored[0].sequence if stored else None,
            delivered=len(plan.messages),
        )
        if self._telemetry is not None and turn.span is not None:
            self._telemetry.committed(turn.span, stored[0] if stored else None)
        return stored[0] if stored else None

    def _run_queue(self) -> RunQueue:
        with self._lock:
            if self._closing:
                raise HubClosed(self._path)
            if self._runs is None:
                from sharedesk.runs.queue import RunQueue  # the runs API loads on first use

                self._runs = RunQueue(
                    self,
                    max_concurrent_runs=self._options.max_concurrent_runs,
                    max_queued_runs=self._options.max_queued_runs,
                )
            return self._runs

    def submit_run(self, session_id: str, adapter: Any, input: Any, **options: Any) -> Future[Any]:
        """Queue a run on the Hub's ``RunQueue`` (created on first use), as ``RunQueue.submit``.

        ``options``: ``continuation``, ``continuation_opts``, ``adapter_opts``. Returns the
        future of its ``RunResult``. Raises ``HubClosed``, ``QueueFull``.
        """
        return self._run_queue().submit(session_id, adapter, input, **options)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no run is queued or running; return whether that happened in time."""
        runs = self._runs
        return runs is None or bool(runs.drain(timeout))

    def status(self, session_id: str) -> RunQueueStatus:
        """Return the run queue's status of ``session_id`` (``ValidationError``)."""
        return self._run_queue().status(check_session_id(session_id))

    def stats(self) -> HubStats:
        """Return how many actors run, by kind, and which sessions failed. Cost: O(actors)."""
        return self._supervisor.stats()

    def recover(self, session_id: str) -> bool:
        """Clear a failed session's mark and restart count; return whether it was failed."""
        return self._supervisor.recover(check_session_id(session_id))

    def active(self) -> list[ActorKey]:
        """Return the running actors, least recently used first. Cost: O(actors)."""
        return self._supervisor.active()

    def close(self) -> None:
        """Stop the run queue and every actor, then close the store. Idempotent.

        Requests already queued in an actor are served first; a caller still waiting on
        one that does not answer gets ``HubClosed``. No thread of the Hub is left. Cost:
        blocks until the actors stop (at most ``ask_timeout``) and the store closes.
        """
        self._close(self._options.ask_timeout, at_exit=False)

    def _close(self, timeout: float, *, at_exit: bool) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            runs = self._runs
        atexit.unregister(self._exit_hook)
        if self._unfollow is not None:
            self._unfollow()  # no notice reaches the actors being stopped
        if runs is not None:
            runs.close()
        deadline = time.monotonic() + timeout
        self._supervisor.close(timeout)
        self._stop_commits()
        if at_exit:
            # A writer stuck behind another process's lock must not hold the exit.
            closer = threading.Thread(target=self._store.close, daemon=True)
            closer.start()
            closer.join(max(0.0, deadline - time.monotonic()))
        else:
            self._store.close()
        _log.info("hub.closed", path=self._path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _live(self) -> None:
        if self._closing or self._supervisor.closed:
            raise HubClosed(self._path)

    def _conversation(self, session_id: str, conversation: Conversation | None) -> Conversation:
        check_session_id(session_id)
        if conversation is None:
            return Conversation(desk=session_id)
        check_conversation(conversation)
        if conversation.desk != session_id:
            raise ValidationError(
                f"conversation of desk {conversation.desk!r} asked of session {session_id!r}"
            )
        return conversation

    # -- retention -----------------------------------------------------------------------

    def apply_retention(
        self, policy: RetentionPolicy, session_id: str | None = None
    ) -> RetentionReport:
        """As :func:`sharedesk.store.retention.apply_retention` on the Hub's store."""
        self._live()
        return apply_retention(self._store, policy, session_id)

    def archived_through(self, session_id: str) -> int:
        """Return the highest sequence retention removed from ``session_id`` (0: none)."""
        check_session_id(session_id)
        self._live()
        return self._store.session_state(session_id).archived_through


def _open_store(
    path: str | os.PathLike[str] | None, options: dict[str, Any]
) -> tuple[HubStore, str | None]:
    # The store Hub.open(path, **options) names, and where it lives (see Hub.open).
    if is_postgres_dsn(path):
        # psycopg loads here, never with ``import sharedesk`` (ImportError names the extra).
        PostgresStore = load_lazy("PostgresStore", "sharedesk")
        _check_options(PostgresStore, "dsn", options)
        store = PostgresStore(path, **options)
        return store, store.path  # the DSN without its password
    if path is None:
        if options:
            raise ValidationError(
                f"store options {sorted(options)} need a path (an in-memory hub takes none)"
            )
        return MemoryStore(), None
    from sharedesk.store.lmdb import LmdbStore  # a memory-only Hub never loads LMDB

    check_path(path)
    _check_options(LmdbStore, "path", options)
    return LmdbStore(path, **options), os.fspath(path)


def _check_options(store_class: type, first: str, options: dict[str, Any]) -> None:
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = inspect.signature(store_class).parameters.values()
    named = sorted(p.name for p in params if p.name != first and p.kind in kinds)
    if unknown := sorted(name for name in options if name not in named):
        raise ValidationError(
            f"unknown options {unknown}: Hub options are {sorted(_OPTION_NAMES)}, "
            f"store options {named}"
        )


def _projector(session_id: str, viewer: SessionAuthor, conversation: Conversation) -> ActorKey:
    return ActorKey("projector", session_id, author_key(viewer), conversation)


def _close_at_exit(ref: weakref.ref[Hub]) -> None:
    hub = ref()
    if hub is None:
        return
    try:
        hub._close(min(hub.options.ask_timeout, _EXIT_GRACE), at_exit=True)
    except Exception:  # at exit there is no caller left to hand an error to
        _log.warning("hub.close_at_exit_failed", exc_info=True)
