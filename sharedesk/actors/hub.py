"""The Hub: the public face of a desk's actors (``Hub``; ``SessionHandle`` and ``Turn``).

Actors (:class:`~sharedesk.actors._base.ActorKey`) are pykka actors run by the
:class:`~sharedesk.actors.supervisor.ActorSupervisor`: a ``ProjectorActor`` per
(session, viewer, conversation) asked for a view, a ``SharingActor`` per session whose
participants take turns, and a ``SessionActor`` per session with subscribers, the one
publisher of its committed events. The Hub checks every input on the caller's thread
(``ValidationError``, nothing sent). Writes go to the store's writer (``submit``); the
store's ``on_commit`` hands each commit to the session's publisher. Reads go straight
to the store. A ``FollowingStore`` (LMDB, PostgreSQL) is followed from ``__init__`` to
``close()``, so commits of other processes are published as this Hub's own are.

Lifecycle: every thread of ours is a daemon; every wait of a caller is taken in slices
of a quarter second, so Ctrl-C reaches a caller blocked in the Hub. A Hub left open at
exit is closed by an :mod:`atexit` hook (holding it weakly) that waits at most
``_EXIT_GRACE`` seconds in all, the store's ``close`` included (on a thread of its own:
a writer stuck behind another process's lock never holds the exit). Acknowledged
appends are durable already.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Concatenate, Final, ParamSpec, Self, TypeVar

import msgspec

from sharedesk.actors._base import ActorKey, HubStore, Slot
from sharedesk.actors._handles import SessionHandle, Turn, interruptible, reply_event
from sharedesk.actors._messages import GetTranscript, Plan, Prime, TurnPlan, View
from sharedesk.actors._open import open_store
from sharedesk.actors._options import HubOptions, HubStats
from sharedesk.actors.supervisor import ActorSupervisor, Listener
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.constants import SESSION_WINDOW
from sharedesk.protocol.errors import HubClosed, TurnAlreadyCommitted, ValidationError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import EventStore, FollowingStore, RunIndexStore
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.validation import (
    check_author,
    check_conversation,
    check_int,
    check_optional_int,
    check_session_id,
    check_write,
)
from sharedesk.protocol.views import Conversation, Projection
from sharedesk.protocol.writes import Share, Write

__all__ = [
    "HUB_OPTION_NAMES",
    "Hub",
    "HubOptions",
    "HubStats",
    "Listener",
    "SessionHandle",
    "Turn",
]

if TYPE_CHECKING:
    from sharedesk.runs.queue import RunQueue
    from sharedesk.runs.types import RunQueueStatus

_log = logger()

T = TypeVar("T")
P = ParamSpec("P")

#: Longest wait, in all, when the exit hook closes a Hub left open, in seconds: a stuck
#: actor or store writer must not hold the exiting process.
_EXIT_GRACE: Final = 1.0

#: The option names ``Hub.open`` keeps for the Hub; the others go to the store.
HUB_OPTION_NAMES: Final = frozenset(HubOptions.__struct_fields__)


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

    Every method that reaches an actor may also raise:

    - ``HubClosed``: the Hub is closed (or closed while the caller waited);
    - ``SessionFailed``: the session exceeded its restart intensity;
    - ``ActorTimeout``: no answer within ``ask_timeout``;
    - ``ActorCrashed``: the handler failed; the actor was restarted.
    """

    def __init__(
        self, store: HubStore, options: HubOptions | None = None, *, path: str | None = None
    ) -> None:
        """Run actors over ``store``, which the Hub now owns (``close()`` closes it).

        ``options`` default to :class:`HubOptions`; ``path`` names the store in errors.

        Raises:
            StoreClosedError: A following store that is closed already.
        """
        self._store = store
        self._options = options if options is not None else HubOptions()
        self._path = path
        self._lock = threading.Lock()  # guards the run queue and the closing flag
        self._closing = False
        self._runs: RunQueue | None = None
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
        self._exit_hook = _CloseAtExit(self)
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
        hub_options = {k: options.pop(k) for k in list(options) if k in HUB_OPTION_NAMES}
        settings = HubOptions(**hub_options)
        store, where = open_store(path, options, HUB_OPTION_NAMES)
        try:
            return cls(store, settings, path=where)
        except BaseException:
            store.close()
            raise

    # -- what the Hub runs on ---------------------------------------------------------

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
        """Have ``listener.deliver(Push)`` called with the events committed to ``session_id``.

        It is told what the sharing actor is told (consecutive stored events, in commit
        order, on the session actor's thread) until the returned function (idempotent) is
        called; on a following Hub, other processes' commits too. It must be quick; one that
        raises is logged and dropped, and the write stands.

        Raises:
            ValidationError: A malformed session id.
            HubClosed: The Hub is closed.

        Cost: O(listeners) under a lock; on a following Hub also one store read and one
        round trip to the session actor (so call it off an event loop; ``AsyncHub`` does).
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

    # -- the store port ----------------------------------------------------------------

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        unless_stored: str | None = None,
    ) -> list[Event]:
        """As :meth:`RunIndexStore.append`, through :meth:`submit`; return the events stored.

        Raises:
            ValidationError: Malformed input; nothing was written.
            HubClosed, SessionFailed: The Hub is closed, or the session failed.

        Cost: the store's write (LMDB: one group-committed fsync); a told message to the
        session's publisher when it has subscribers.
        """
        write = check_write(
            session_id, events, expected_version=expected_version, unless_stored=unless_stored
        )
        return interruptible(self.submit(write))

    def submit(self, write: Write) -> Future[list[Event]]:
        """Hand a checked write to the store's writer (as :meth:`WritingStore.submit`).

        The Hub's one write path: :meth:`append` and :meth:`Turn.commit` wait on it,
        ``AsyncHub`` resolves it in its loop. Never blocks on a writer (an in-memory store
        writes right here).

        Raises:
            HubClosed, SessionFailed: The Hub is closed, or the session failed; nothing
                was queued.
        """
        self._supervisor.check(write.session_id)
        return self._store.submit(write)

    read = _from_store(EventStore.read)
    last_sequence = _from_store(EventStore.last_sequence)
    log = _from_store(EventStore.log)
    run_events = _from_store(RunIndexStore.run_events)
    session_state = _from_store(RunIndexStore.session_state)

    # -- the desk API ------------------------------------------------------------------

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
        """Return ``viewer``'s view of a conversation, served by its projector actor.

        The projection is what :func:`~sharedesk.projection.project_session` gives over the
        whole log, for ``window`` messages; ``conversation=None`` is the channel.

        Raises:
            ValidationError: A malformed argument, or a conversation of another desk.

        Cost: O(1) when nothing was appended since the last view of this window; else one
        round trip and a walk of the projector's in-memory rows (at most ``SCAN_LIMIT``).
        """
        conversation = self._conversation(session_id, conversation)
        check_int("window", window)
        key = ActorKey(
            kind="projector",
            session_id=session_id,
            viewer=author_key(check_author(viewer, "viewer")),
            conversation=conversation,
        )

        def published(slot: Slot) -> Projection | None:
            snapshot = slot.snapshot
            if (
                snapshot is not None
                and snapshot.window == window
                and snapshot.through == self._store.last_sequence(session_id)
            ):
                return snapshot.projection
            return None

        view: Projection = self._supervisor.call(key, View(window=window), fast=published)
        # The projector keeps serving this view: hand out a list of one's own.
        return Projection(messages=list(view.messages), partial=view.partial)

    def turn(
        self, session_id: str, viewer: SessionAuthor, conversation: Conversation | None = None
    ) -> Turn:
        """Plan ``viewer``'s next turn in a conversation: what it must read first.

        Returns the :class:`Turn`: the whole window (as ``view`` shows it, own rows
        included) the first time (reason ``"initial"``) or after a reinitialize; else the
        delta since the viewer's last committed turn (reason ``None``): every row above the
        watermark that qualifies for the view, except the viewer's own. Nothing moves until
        ``Turn.commit``.

        Raises:
            ValidationError: A malformed argument.
            PageError, LogReadError: The store's log misbehaved.

        Cost: one round trip to the sharing actor, one state read and a walk of its
        in-memory tail down to the watermark (at most ``SCAN_LIMIT`` rows); no writes.
        """
        conversation = self._conversation(session_id, conversation)
        viewer = check_author(viewer, "viewer")
        plan: TurnPlan = self._supervisor.call(
            ActorKey(kind="sharing", session_id=session_id),
            Plan(viewer=viewer, conversation=conversation),
        )
        return Turn(self, session_id, viewer, plan)

    def transcript(
        self,
        session_id: str,
        viewer: SessionAuthor,
        *,
        limit: int | None = None,
        max_messages: int | None = None,
        max_chars: int | None = None,
        max_tokens_approx: int | None = None,
    ) -> Transcript:
        """Return ``viewer``'s transcript of the session, kept warm by its projector.

        The arguments and the result are those of ``TranscriptBuilder.from_store``.

        Raises:
            ValidationError: A malformed argument.

        Cost: O(1) store work when nothing was appended since the same call; else a read of
        what was appended since (with a budget: of the newest events the answer needs).
        """
        conversation = self._conversation(session_id, None)
        viewer = check_author(viewer, "viewer")
        ask = GetTranscript(
            viewer=viewer,
            limit=check_optional_int("limit", limit),
            max_messages=check_optional_int("max_messages", max_messages),
            max_chars=check_optional_int("max_chars", max_chars),
            max_tokens_approx=check_optional_int("max_tokens_approx", max_tokens_approx),
        )
        key = ActorKey(
            kind="projector",
            session_id=session_id,
            viewer=author_key(viewer),
            conversation=conversation,
        )
        transcript: Transcript = self._supervisor.call(key, ask)
        # The projector keeps serving this transcript: hand out a list of one's own.
        return msgspec.structs.replace(transcript, messages=list(transcript.messages))

    def submit_commit(self, turn: Turn, reply: str | Event | None) -> Future[list[Event]]:
        """Check a turn's commit and hand it to the store's writer (see :meth:`Turn.commit`).

        Returns the future of the stored reply as a list (empty without one); finish with
        :meth:`committed`. Raises as ``Turn.commit`` does, before anything is queued.
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
        future = self.submit(
            check_write(turn.session_id, [] if event is None else [event], share=share)
        )

        def mark(done: Future[list[Event]]) -> None:
            if not done.cancelled() and done.exception() is None:
                turn.committed = True  # a cancelled caller's turn too

        future.add_done_callback(mark)
        return future

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
        return stored[0] if stored else None

    # -- runs --------------------------------------------------------------------------

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

    def submit_run(
        self,
        session_id: str,
        adapter: Any,
        input: Any,
        *,
        continuation: Any = False,
        continuation_opts: dict[str, Any] | None = None,
        adapter_opts: dict[str, Any] | None = None,
    ) -> Future[Any]:
        """Queue a run on ``session_id`` (the Hub's ``RunQueue``, created on first use).

        Returns the future of its ``RunResult``. Raises ``HubClosed``, ``QueueFull``.
        """
        future: Future[Any] = self._run_queue().submit(
            session_id,
            adapter,
            input,
            continuation=continuation,
            continuation_opts=continuation_opts,
            adapter_opts=adapter_opts,
        )
        return future

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no run is queued or running; return whether that happened in time."""
        with self._lock:
            runs = self._runs
        if runs is None:
            return True
        return bool(runs.drain(timeout))

    def status(self, session_id: str) -> RunQueueStatus:
        """Return the run queue's status of ``session_id`` (``ValidationError``)."""
        return self._run_queue().status(check_session_id(session_id))

    # -- introspection and lifecycle ---------------------------------------------------

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

        Requests already queued in an actor are served before it stops; a caller still
        waiting on an actor that does not answer gets ``HubClosed``. Afterwards no
        thread of the Hub is left.

        Cost: blocks until the actors stop (at most ``ask_timeout`` in all) and the
        store closes.
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

    # -- internals ---------------------------------------------------------------------

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


class _CloseAtExit:
    """The exit hook of one open Hub: closes it if still open; holds it only weakly."""

    __slots__ = ("_hub",)

    def __init__(self, hub: Hub) -> None:
        self._hub = weakref.ref(hub)

    def __call__(self) -> None:
        hub = self._hub()
        if hub is None:
            return
        try:
            hub._close(min(hub.options.ask_timeout, _EXIT_GRACE), at_exit=True)
        except Exception:  # at exit there is no caller left to hand an error to
            _log.warning("hub.close_at_exit_failed", exc_info=True)
