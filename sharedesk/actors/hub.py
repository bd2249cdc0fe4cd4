"""The Hub: the public face of a desk's actors (``Hub``, ``SessionHandle``, ``Turn``).

Actors, named by :class:`~sharedesk.actors._base.ActorKey`:

- one ``SessionActor`` per active session: the only writer of its stream;
- one ``ProjectorActor`` per (session, viewer, conversation) asked for a view;
- one ``SharingActor`` per session whose participants take turns.

Projectors and the sharing actor keep the session's tail in memory (see
:mod:`sharedesk.actors._tail`): the sharing actor is fed by the events the session
actor pushes after each commit; projectors catch up from the store when asked, so the
cost of a post does not grow with the number of viewers holding warm views.

The Hub checks every input on the caller's thread (``ValidationError``, nothing sent)
and hands each request to its :class:`~sharedesk.actors.supervisor.ActorSupervisor`,
which starts, routes, passivates and restarts the actors (slots, CLOCK passivation,
restart intensity, the idle reaper, bounded waits: see :mod:`sharedesk.actors.supervisor`).
Reads (``read``, ``last_sequence``, ``log``) go straight to the store.

Threads: an actor's thread starts with the first message queued for it. Writes
(appends, turn commits) to an idle session run on the caller's thread under the actor's
lock (option ``inline_writes``): the same one-at-a-time order, two thread switches fewer,
and a session only written to costs no thread. Reads (views, turn plans, transcripts)
are asked of the actor's thread and bounded by ``ask_timeout``. Threads of ours: at most
one per actor, plus the reaper, plus the store's and the run queue's own.

Every wait for an actor's thread is bounded by ``ask_timeout`` (``ActorTimeout``) and
ends early with ``HubClosed`` when the Hub closes.

Several processes on one store: ``Hub.open("postgresql://...")`` (or ``postgres://``)
runs the Hub on a :class:`~sharedesk.store.postgres.PostgresStore`, which several Hub
processes may share. Such a store is a ``FollowingStore``: the Hub follows it from
``__init__`` to ``close()`` (one ``follow`` call), and each commit another process makes
is pushed to this Hub's subscribers (the sharing actors, :meth:`Hub.listen` listeners
such as ``AsyncHub.wait_turn``) exactly as its own appends are: consecutive stored
events, none twice, in order with its own (see :mod:`sharedesk.actors.supervisor`).
Views and turns read the store's last sequence anyway, so they follow other processes
whether pushed or not; a notice of this Hub's own commit costs one comparison.

Lifecycle in a host process: every thread of ours is a daemon thread, so none keeps the
interpreter alive, and every wait of a caller is taken in slices of a quarter second, so
Ctrl-C (``KeyboardInterrupt``) reaches a caller blocked in the Hub. A Hub not closed
when the interpreter exits is closed by an exit hook (:mod:`atexit`): each open Hub
registers one small callable holding only a weak reference to it, and ``close()``
unregisters it. That keeps no state of ours at module level (the registry is the
interpreter's), and a Hub already collected is simply skipped. Acknowledged appends do not
depend on the hook: they are durable when ``append`` returns.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

import msgspec

from sharedesk.actors._base import ActorKey, HubStore, Slot
from sharedesk.actors._messages import (
    Append,
    Commit,
    GetTranscript,
    Plan,
    Prime,
    TurnPlan,
    View,
)
from sharedesk.actors.session import SessionActor
from sharedesk.actors.supervisor import ActorSupervisor, HubOptions, HubStats, Listener
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.constants import SESSION_WINDOW
from sharedesk.protocol.errors import HubClosed, ValidationError
from sharedesk.protocol.events import Event, Text, new_event_id
from sharedesk.protocol.ports import FollowingStore, SessionLog, WriteTicket
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.validation import (
    check_append_args,
    check_author,
    check_conversation,
    check_events,
    check_int,
    check_optional_int,
    check_optional_str,
    check_path,
    check_session_id,
    is_postgres_dsn,
)
from sharedesk.protocol.views import Conversation, Projection, SessionMessage
from sharedesk.store.memory import MemoryStore

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

#: Longest wait for each actor when the exit hook closes a Hub left open, in seconds: a
#: stuck actor must not hold the exiting process for ``ask_timeout``.
_EXIT_GRACE: Final = 2.0

#: The option names ``Hub.open`` keeps for the Hub; the others go to the store.
HUB_OPTION_NAMES: Final = frozenset(HubOptions.__struct_fields__)


class Hub:
    """The in-process supervisor of a desk's actors; also an ``EventStore`` itself.

    Writes go through each session's actor; reads (``read``, ``last_sequence``,
    ``log``) go straight to the store. Thread-safe: call it from any number of threads.
    A context manager: leaving the block closes it.

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

        A store that is a :class:`~sharedesk.protocol.ports.FollowingStore` (several
        processes share it) is followed until ``close()``: commits of other processes
        are pushed to this Hub's subscribers as its own are.

        Args:
            store: A store with the event-store and sharing-state ports.
            options: How to run the actors (defaults: :class:`HubOptions`).
            path: Where the store lives, for error messages (``None``: in memory).

        Raises:
            StoreClosedError: A following store that is closed already.

        Cost: starts the reaper thread when ``idle_timeout`` is set; one ``follow`` call
        on a following store; no I/O otherwise.
        """
        self._store = store
        self._options = options if options is not None else HubOptions()
        self._path = path
        # Guards the run queue and the closing flag; the actors' slots have their own.
        self._lock = threading.Lock()
        self._closing = False
        self._runs: RunQueue | None = None
        self._supervisor = ActorSupervisor(
            store, self._options, path, following=isinstance(store, FollowingStore)
        )
        self._unfollow: Callable[[], None] | None = None
        if isinstance(store, FollowingStore):
            try:
                self._unfollow = store.follow(self._supervisor.notice)
            except BaseException:
                self._supervisor.close(self._options.ask_timeout)
                raise
        self._exit_hook = _CloseAtExit(self)
        atexit.register(self._exit_hook)
        _log.info("hub.opened", path=path, max_active=self._options.max_active)

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, **options: Any) -> Hub:
        """Open a Hub over a new store.

        Args:
            path: Where the LMDB store lives; a PostgreSQL DSN (``postgresql://...`` or
                ``postgres://...``) for a ``PostgresStore`` that several Hub processes
                may share (each follows the others' commits); ``None`` keeps everything
                in memory. Any other URL is refused.
            **options: :class:`HubOptions` fields for the Hub; every other option goes
                to the store: ``LmdbStore(path, ...)`` (e.g. ``durability="relaxed"``)
                or ``PostgresStore(dsn, ...)``.

        Returns:
            The Hub, owning its store.

        Raises:
            ValidationError: A bad option (an unknown one: the message names the valid
                ones), store options without a path, or a URL that is not a PostgreSQL
                DSN.
            StoreError: The store could not be opened.
            ImportError: A DSN, and psycopg (the ``postgres`` extra) is not installed.

        Cost: opens the store (LMDB: an environment, no fsync; PostgreSQL: its pool and
        the connection it listens on, the schema checked or created).
        """
        hub_options = {k: options.pop(k) for k in list(options) if k in HUB_OPTION_NAMES}
        settings = HubOptions(**hub_options)
        store: HubStore
        if is_postgres_dsn(path):
            return cls._open_postgres(path, settings, options)
        if path is None:
            if options:
                raise ValidationError(
                    f"store options {sorted(options)} need a path (an in-memory hub takes none)"
                )
            store = MemoryStore()
            where = None
        else:
            from sharedesk.store.lmdb import LmdbStore  # a memory-only Hub never loads LMDB

            check_path(path)
            known = inspect.signature(LmdbStore).parameters
            unknown = sorted(name for name in options if name not in known or name == "path")
            if unknown:
                raise ValidationError(
                    f"unknown options {unknown}: Hub options are {sorted(HUB_OPTION_NAMES)}, "
                    f"store options {sorted(n for n in known if n != 'path')}"
                )
            store = LmdbStore(path, **options)
            where = os.fspath(path)
        return cls(store, settings, path=where)

    @classmethod
    def _open_postgres(cls, dsn: str, settings: HubOptions, options: dict[str, Any]) -> Hub:
        # psycopg loads here, never with ``import sharedesk``.
        try:
            from sharedesk.store.postgres import PostgresStore
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.startswith("sharedesk"):
                raise
            raise ImportError(
                f"a Hub on PostgreSQL needs {exc.name}, which is not installed: "
                "pip install 'sharedesk[postgres]'",
                name=exc.name,
            ) from exc

        params = inspect.signature(PostgresStore).parameters.values()
        named = sorted(
            p.name
            for p in params
            if p.name != "dsn" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
        unknown = sorted(name for name in options if name not in named)
        if unknown:
            raise ValidationError(
                f"unknown options {unknown}: Hub options are {sorted(HUB_OPTION_NAMES)}, "
                f"store options {named}"
            )
        store = PostgresStore(dsn, **options)
        try:
            return cls(store, settings, path=store.path)  # the DSN without its password
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

    def try_submit(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_version: int | None,
        ticket: WriteTicket,
    ) -> bool:
        """Hand an append to a running, idle session actor without waiting for it.

        For front ends that must not block (``AsyncHub``): the actor submits the write
        to the store's writer (:meth:`SessionActor.try_submit`) and ``ticket`` is settled
        once it is committed, its events pushed as after any append. Only with the
        ``inline_writes`` option and a store that takes submitted writes.

        Args:
            session_id: The session (checked by the caller).
            events: A checked batch (:func:`check_event_sequence`); the store copies it.
            expected_version: As :meth:`append`.
            ticket: Gets the outcome.

        Returns:
            ``True`` when submitted; ``False`` when the session's actor is not running,
            is busy or does not know its last sequence yet (write with :meth:`append`).

        Raises:
            ValidationError: Malformed input; nothing was queued.
            StoreClosedError: The store is closed.

        Cost: O(len(events)); takes no lock of the Hub; never blocks.
        """
        return self._try_submit(
            session_id,
            Append(
                events=events if type(events) is list else list(events),
                expected_version=expected_version,
            ),
            ticket,
        )

    def try_submit_commit(self, turn: Turn, reply: str | Event | None, ticket: WriteTicket) -> bool:
        """Hand a turn's commit to a running, idle session actor without waiting for it.

        As :meth:`try_submit`, for :meth:`Turn.commit`: the ticket is settled with the
        stored reply as a list (empty without a reply).

        Returns:
            ``True`` when submitted; ``False`` when it must be committed the usual way.

        Raises:
            ValidationError: A malformed reply, or an ``Event`` by someone else.
            StoreClosedError: The store is closed.

        Cost: O(1); takes no lock of the Hub; never blocks.
        """
        event = self._reply_event(turn, reply)
        return self._try_submit(
            turn.session_id,
            Commit(viewer=author_key(turn.viewer), plan=turn.plan, reply=event),
            ticket,
        )

    def _try_submit(self, session_id: str, message: Append | Commit, ticket: WriteTicket) -> bool:
        if not self._options.inline_writes:
            return False
        slot = self._supervisor.pin_running(ActorKey(kind="session", session_id=session_id))
        if slot is None:
            return False
        actor = slot.actor
        try:
            if isinstance(actor, SessionActor) and actor.try_submit(
                message, ticket, functools.partial(self._supervisor.release, slot)
            ):
                return True
        except BaseException:
            self._supervisor.release(slot)
            raise
        self._supervisor.release(slot)
        return False

    def listen(self, session_id: str, listener: Listener) -> Callable[[], None]:
        """Have ``listener.deliver(Push)`` called with the events committed to ``session_id``.

        The listener is told what the sharing actor is told (consecutive stored events,
        on the thread that committed them, in commit order) until the returned function
        is called. It must be quick and must not block or raise. On a following Hub
        (:attr:`following`) that includes the events other processes commit after this
        call returns (pushed by the session's actor, which this call starts and which
        stays running while the session has listeners).

        Returns:
            The function that removes the listener (idempotent).

        Raises:
            ValidationError: A malformed session id.
            HubClosed: The Hub is closed.

        Cost: O(subscribers of the session) under the Hub's lock, now and on removal; on
        a following Hub also one O(1) store read and one message to the session's actor
        (so call it off an event loop; ``AsyncHub`` does).
        """
        check_session_id(session_id)
        if not self.following:
            return self._supervisor.add_listener(session_id, listener)
        self._live()
        # The base is read before the listener is added: whatever is committed later
        # lies above it, and the session actor pushes everything above what it pushed.
        base = self._store.last_sequence(session_id)
        remove = self._supervisor.add_listener(session_id, listener)
        try:
            self._supervisor.call(
                ActorKey(kind="session", session_id=session_id), Prime(base=base), inline=True
            )
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
        """Append ``events`` through the session's actor (the ``EventStore`` contract).

        Args:
            session_id: The session.
            events: Events with ``sequence`` and ``timestamp`` left ``None``.
            expected_version: Append only if the session's last sequence equals it.
            unless_stored: Append only if the session holds no event with this id
                (``AlreadyStored`` otherwise; checked inside the write transaction).

        Returns:
            The events as stored, once durable.

        Raises:
            ValidationError: Malformed input; nothing was written.
            ConcurrencyError: ``expected_version`` differs from the last sequence.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.

        Cost: one round trip to the session actor plus the store's append (LMDB: one
        group-committed fsync, shared with appends of other sessions).
        """
        # Checked here, before the actor: bad input never reaches it (never a crash).
        batch = check_append_args(session_id, events, expected_version)
        result: list[Event] = self._supervisor.call(
            ActorKey(kind="session", session_id=session_id),
            Append(
                events=batch,
                expected_version=expected_version,
                unless_stored=check_optional_str("unless_stored", unless_stored),
            ),
            inline=True,
        )
        return result

    def run_events(self, session_id: str, run_id: str) -> list[Event]:
        """Return the events carrying ``run_id``, oldest first, from the store's run index.

        Raises:
            HubClosed: The Hub is closed.
            ValidationError: A malformed argument.

        Cost: the store's ``run_events`` (O(the run's events)); no actor involved.
        """
        self._live()
        return self._store.run_events(session_id, run_id)

    def session_state(self, session_id: str) -> SessionState:
        """Return the session's state, folded by the store as events were appended.

        Raises:
            HubClosed: The Hub is closed.
            ValidationError: A malformed session id.

        Cost: one key read; no actor involved.
        """
        self._live()
        return self._store.session_state(session_id)

    def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Read stored events straight from the store (``EventStore.read``).

        Raises:
            HubClosed: The Hub is closed.
            ValidationError: A bad bound.

        Cost: the store's read (O(result)); no actor involved.
        """
        self._live()
        return self._store.read(
            session_id, after=after, before=before, limit=limit, newest_first=newest_first
        )

    def last_sequence(self, session_id: str) -> int:
        """Return the session's last sequence from the store. Cost: O(1).

        Raises:
            HubClosed: The Hub is closed.
        """
        self._live()
        return self._store.last_sequence(session_id)

    def log(self, session_id: str) -> SessionLog:
        """Return the session's ``Text`` rows as a ``SessionLog``, read from the store's tail.

        Raises:
            HubClosed: The Hub is closed.

        Cost: none until read; each ``read_before`` costs one store page.
        """
        self._live()
        return self._store.log(session_id)

    # -- the desk API ------------------------------------------------------------------

    def session(self, session_id: str) -> SessionHandle:
        """Return a handle to ``session_id`` (its actor starts on the first write).

        Raises:
            ValidationError: A malformed session id.
            HubClosed: The Hub is closed.

        Cost: O(1); starts nothing.
        """
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

        Args:
            session_id: The session (desk).
            viewer: Whose view.
            conversation: A thread or the channel of ``session_id`` (``None``: channel).
            window: Most qualifying messages.

        Returns:
            The projection, as :func:`~sharedesk.projection.project_session` gives it
            over the whole log (messages oldest first).

        Raises:
            ValidationError: A malformed argument, or a conversation of another desk.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.

        Cost: O(1) when nothing was appended since the last view of this window (the
        projector's published view, checked against the store's last sequence); else one
        round trip and a walk of the projector's in-memory rows (at most ``SCAN_LIMIT``);
        the log is read only to build a projector or to reach rows older than it holds.
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

        Args:
            session_id: The session (desk).
            viewer: Whose turn.
            conversation: A thread or the channel of ``session_id`` (``None``: channel).

        Returns:
            The :class:`Turn`: the whole window the first time (reason ``"initial"``) or
            after a reinitialize (its reason), exactly as ``view`` shows it, the
            viewer's own rows included; else the delta since the viewer's last committed
            turn (reason ``None``): every row above the watermark that qualifies for the
            view (in the channel, roots and first replies, wherever their root lies),
            except the viewer's own. Nothing moves until ``Turn.commit``.

        Raises:
            ValidationError: A malformed argument.
            PageError, LogReadError: The store's log misbehaved.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.

        A log that ends above the watermark (a young desk whose first turn came before
        its first row, or a watermark on run events below every message) has had its
        whole history walked, so it gives a delta, not ``watermark_unavailable``.

        Cost: one round trip to the session's sharing actor, one O(1) state read and one
        walk of the session's tail, held in memory by the sharing actor, down to the
        watermark (a delta: O(rows since the last turn), flat in the desk's history) or
        a full window; at most ``SCAN_LIMIT`` rows, read from the store only beyond the
        tail; for a channel delta holding replies, one read of the store's first-reply
        index (one key per root); no writes.
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

        Args:
            session_id: The session (desk).
            viewer: Whose transcript (roles are relative to it).
            limit: Fold only the newest ``limit`` events (``None``: all).
            max_messages: Keep at most this many of the newest messages.
            max_chars: Keep at most this many characters.
            max_tokens_approx: Keep at most 4 times this many characters.

        Returns:
            The transcript, as ``TranscriptBuilder.from_store`` gives it with the same
            arguments.

        Raises:
            ValidationError: A malformed argument.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.

        Cost: O(1) store work when nothing was appended since the same call; else,
        without ``limit`` or budget, a read of the events appended since (the first call
        reads the whole session); with them, a read of the newest events the answer
        needs (``limit`` events, or the tail until the budgets are met).
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

    def _commit(self, turn: Turn, reply: str | Event | None) -> Event | None:
        event = self._reply_event(turn, reply)
        stored: Event | None = self._supervisor.call(
            ActorKey(kind="session", session_id=turn.session_id),
            Commit(viewer=author_key(turn.viewer), plan=turn.plan, reply=event),
            inline=True,
        )
        return stored

    @staticmethod
    def _reply_event(turn: Turn, reply: str | Event | None) -> Event | None:
        """Return a turn's reply as the event to store (``None``: no reply).

        Raises:
            ValidationError: A malformed reply, or an ``Event`` by someone else.
        """
        event: Event | None
        if reply is None:
            event = None
        elif isinstance(reply, str):
            event = Event(
                turn.viewer, Text(reply), id=new_event_id(), parent=turn.conversation.thread_root
            )
        elif isinstance(reply, Event):
            if author_key(reply.author) != author_key(turn.viewer):
                raise ValidationError(
                    f"a turn's reply must be written by its viewer {author_key(turn.viewer)}, "
                    f"not {author_key(reply.author)}"
                )
            event = reply
        else:
            raise ValidationError(f"reply must be a str, an Event or None, got {type(reply)}")
        if event is not None:  # checked here, before the actor (see append)
            (event,) = check_events([event])
        return event

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

        Returns:
            A future of the ``RunResult``.

        Raises:
            HubClosed: The Hub is closed.
            QueueFull: Too many runs queued.

        Cost: O(1); the run executes on the run queue's threads, writing through the Hub.
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
        """Wait until no run is queued or running; return whether that happened in time.

        Cost: blocks up to ``timeout`` seconds (``None``: no limit).
        """
        with self._lock:
            runs = self._runs
        if runs is None:
            return True
        return bool(runs.drain(timeout))

    def status(self, session_id: str) -> RunQueueStatus:
        """Return the run queue's status of ``session_id``.

        Raises:
            ValidationError: ``session_id`` is not a valid session id.

        Cost: O(1).
        """
        return self._run_queue().status(check_session_id(session_id))

    # -- introspection and lifecycle ---------------------------------------------------
    def stats(self) -> HubStats:
        """Return how many actors run, by kind, and which sessions failed. Cost: O(actors)."""
        return self._supervisor.stats()

    def recover(self, session_id: str) -> bool:
        """Clear a failed session's mark and restart count, so calls on it go on again.

        Returns:
            Whether the session was marked failed.

        Raises:
            ValidationError: ``session_id`` is not a valid session id.

        Cost: O(1); the session's actors start again on their next request.
        """
        return self._supervisor.recover(check_session_id(session_id))

    def active(self) -> list[ActorKey]:
        """Return the running actors, least recently used first. Cost: O(actors)."""
        return self._supervisor.active()

    def close(self) -> None:
        """Stop the run queue, every actor and the reaper, then close the store. Idempotent.

        Requests already queued in an actor are served before it stops; a caller still
        waiting on an actor that does not answer gets ``HubClosed``. Afterwards no
        thread of the Hub is left (each is joined, up to ``ask_timeout``).

        Cost: blocks until the actors stop (at most ``ask_timeout`` each); closes the
        store (LMDB: stops its writer thread).
        """
        self._close(self._options.ask_timeout)

    def _close(self, timeout: float) -> None:
        # close(), with every wait for an actor or thread bounded by ``timeout``.
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
        self._supervisor.close(timeout)
        self._store.close()
        _log.info("hub.closed", path=self._path)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------

    def _live(self) -> None:
        if self._supervisor.closed:
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
    """The exit hook of one open Hub: closes it if still open; holds it only weakly.

    Each wait is bounded by ``_EXIT_GRACE``: an actor stuck in a store call is left to
    die with the process (its thread is a daemon) rather than hold the exit.
    """

    __slots__ = ("_hub",)

    def __init__(self, hub: Hub) -> None:
        self._hub = weakref.ref(hub)

    def __call__(self) -> None:
        hub = self._hub()
        if hub is None:
            return
        try:
            hub._close(min(hub.options.ask_timeout, _EXIT_GRACE))
        except Exception:  # at exit there is no caller left to hand an error to
            _log.warning("hub.close_at_exit_failed", path=hub._path, exc_info=True)


class SessionHandle:
    """A handle to one session of a Hub: writes go through the session's actor.

    Handles are cheap and hold no state of their own; take as many as you like.
    """

    __slots__ = ("_hub", "session_id")

    def __init__(self, hub: Hub, session_id: str) -> None:
        self._hub = hub
        #: The session's id.
        self.session_id = session_id

    def append(
        self, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        """Append events to the session (as :meth:`Hub.append`)."""
        return self._hub.append(self.session_id, events, expected_version=expected_version)

    def post(
        self,
        author: SessionAuthor,
        content: str,
        *,
        parent: int | None = None,
        id: str | None = None,
    ) -> Event:
        """Post a ``Text`` message and return it as stored.

        Args:
            author: Who writes it.
            content: The text, stored exactly as given.
            parent: The thread root it replies to, or ``None`` for a new root.
            id: Idempotency key (default: a fresh uuid4 hex); posting the same id twice
                stores it once.

        Raises:
            ValidationError: Malformed input.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.

        Cost: as :meth:`Hub.append` of one event.
        """
        if not isinstance(content, str):
            raise ValidationError(f"content must be a str, got {type(content).__name__}")
        event = Event(
            check_author(author),
            Text(content),
            id=new_event_id() if id is None else id,
            parent=parent,
        )
        return self._hub.append(self.session_id, [event])[0]

    def last_sequence(self) -> int:
        """Return the session's last sequence. Cost: O(1)."""
        return self._hub.last_sequence(self.session_id)

    def log(self) -> SessionLog:
        """Return the session's ``Text`` rows as a ``SessionLog`` (read from the tail)."""
        return self._hub.log(self.session_id)

    def read(self, **bounds: Any) -> list[Event]:
        """Read the session's events (keywords as :meth:`Hub.read`)."""
        return self._hub.read(self.session_id, **bounds)


class Turn:
    """What a viewer must read before its next turn, and the way to commit that turn.

    Nothing moves until :meth:`commit` returns: a turn abandoned (or a process killed
    before committing) is offered again in full by the next ``hub.turn``.
    """

    __slots__ = ("_hub", "plan", "session_id", "viewer")

    def __init__(self, hub: Hub, session_id: str, viewer: SessionAuthor, plan: TurnPlan) -> None:
        self._hub = hub
        #: The session (desk).
        self.session_id = session_id
        #: Whose turn it is.
        self.viewer = viewer
        #: The plan: messages, reason, and the states the commit swaps.
        self.plan = plan

    @property
    def conversation(self) -> Conversation:
        """The channel or thread of the turn."""
        return self.plan.conversation

    @property
    def messages(self) -> list[SessionMessage]:
        """What to read, oldest first.

        A full window (``reason`` not ``None``) is exactly the viewer's view, its own
        rows included; a delta holds the rows of the view above the watermark, except
        the viewer's own and its present set.
        """
        return self.plan.messages

    @property
    def reason(self) -> str | None:
        """``None`` for a delta, else ``"initial"`` or the ``ReinitializeReason`` value."""
        return self.plan.reason

    def commit(self, reply: str | Event | None = None) -> Event | None:
        """Append the reply and advance the viewer's sharing state in one durable step.

        The new watermark is the session's last sequence when the turn was planned, and
        the reply's sequence is noted as present, so the reply is never offered back to
        the viewer while rows others appended meanwhile still are.

        Args:
            reply: ``None`` (just advance), a ``str`` posted by the viewer in the turn's
                conversation (in a thread: a reply to its root), or an ``Event`` written
                by the viewer.

        Returns:
            The stored reply, or ``None``.

        Raises:
            SharingStateConflict: Another turn of the same viewer and conversation
                moved the stored state since this one was planned (or this turn was
                committed already); nothing was written. This is the only way a commit
                fails for what others did: rows appended meanwhile (in this process or
                another) never make it fail, and are offered by the next turn. Take a
                new turn: it shows what that other turn did not. The compare-and-swap
                is on the state's value, so a turn whose rival left the state as it was
                (no reply, nothing new) commits; its messages are then empty, so
                nothing is delivered twice.
            ValidationError: A malformed reply, or an ``Event`` by someone else.
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.

        Cost: one store transaction holding reply and state (LMDB: one fsync); with
        ``inline_writes`` it runs on the caller's thread when the session actor is idle,
        else one round trip to the session actor.
        """
        return self._hub._commit(self, reply)
