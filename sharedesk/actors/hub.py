"""The Hub: the in-process supervisor that starts, routes, passivates and restarts actors.

Actors, named by :class:`~sharedesk.actors._base.ActorKey`:

- one ``SessionActor`` per active session: the only writer of its stream;
- one ``ProjectorActor`` per (session, viewer, conversation) asked for a view;
- one ``SharingActor`` per session whose participants take turns.

Projectors and the sharing actor keep the session's tail in memory (see
:mod:`sharedesk.actors._tail`): the sharing actor is fed by the events the session
actor pushes after each commit; projectors catch up from the store when asked, so the
cost of a post does not grow with the number of viewers holding warm views.

Threads: an actor's thread starts with the first message queued for it. Writes
(appends, turn commits) to an idle session run on the caller's thread under the actor's
lock (option ``inline_writes``): the same one-at-a-time order, two thread switches fewer,
and a session only written to costs no thread. Reads (views, turn plans, transcripts)
are asked of the actor's thread and bounded by ``ask_timeout``.

Routing: every request pins its actor (``Slot.pins``) for the time it is in flight, so
an actor serving a request is not passivated under it; pinning a running actor takes no
lock (a list append is atomic), so requests to different actors never queue on the Hub.
A request that reaches an actor which stopped before handling it (``ActorDeadError``, or
an actor thread that ended without answering: passivation or a restart raced it) was not
handled, so the Hub resends it to a fresh actor.

Supervision: see :mod:`sharedesk.actors._base`. The Hub counts the restarts of each
session's actors; more than ``max_restarts`` within ``restart_period`` seconds marks the
session failed (its actors are stopped and every call on it raises ``SessionFailed``)
while other sessions go on. A restarted actor is started again on its next request and
recovers its state from the store.

Passivation: at most ``max_active`` actors exist at once; starting one more stops an
idle one chosen by CLOCK (least recently used, approximately: an actor used since the
clock hand last passed it gets a second chance). With ``idle_timeout``, a reaper thread
stops actors unused for that long. Reactivation is transparent. Threads of ours: at most
one per actor, plus the reaper, plus the store's and the run queue's own.

Every wait for an actor's thread is bounded by ``ask_timeout`` (``ActorTimeout``) and
ends early with ``HubClosed`` when the Hub closes.

Lifecycle in a host process: every thread of ours is a daemon thread, so none keeps the
interpreter alive, and every wait of a caller is taken in slices of ``_POLL`` seconds, so
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
import math
import os
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, TypeVar, cast

import msgspec
import pykka

from sharedesk.actors._base import THREAD_PREFIX, ActorKey, HubActor, HubStore, Slot
from sharedesk.actors._messages import (
    Append,
    Commit,
    GetTranscript,
    Plan,
    Push,
    Request,
    TurnPlan,
    View,
)
from sharedesk.actors.projector import ProjectorActor
from sharedesk.actors.session import SessionActor
from sharedesk.actors.sharing import SharingActor
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.constants import SESSION_WINDOW
from sharedesk.protocol.errors import (
    ActorCrashed,
    ActorTimeout,
    HubClosed,
    SessionFailed,
    ValidationError,
)
from sharedesk.protocol.events import Event, Text, new_event_id
from sharedesk.protocol.ports import SessionLog, WriteTicket
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
)
from sharedesk.protocol.views import Conversation, Projection, SessionMessage
from sharedesk.store.memory import MemoryStore

if TYPE_CHECKING:
    from sharedesk.runs.queue import RunQueue
    from sharedesk.runs.types import RunQueueStatus

_log = logger()

T = TypeVar("T")

#: How often a waiting caller checks whether the Hub closed meanwhile, in seconds.
_POLL: Final = 0.25
#: Longest wait for each actor when the exit hook closes a Hub left open, in seconds: a
#: stuck actor must not hold the exiting process for ``ask_timeout``.
_EXIT_GRACE: Final = 2.0
#: Times a request is resent when its actor stopped before handling it.
_RESEND_ATTEMPTS: Final = 5

#: The kinds of actor the session actor pushes committed events to (one per session:
#: projectors catch up from the tail when asked, so a post never wakes one per viewer).
_SUBSCRIBER_KINDS: Final = frozenset({"sharing"})


class Listener(Protocol):
    """Told the events committed to a session (see :meth:`Hub.listen`)."""

    def deliver(self, message: Push) -> None:
        """Take one push (consecutive stored events); quick, never blocks or raises."""
        ...


_ACTOR_CLASSES: Final[Mapping[str, type[HubActor]]] = MappingProxyType(
    {"session": SessionActor, "projector": ProjectorActor, "sharing": SharingActor}
)


class HubOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a Hub runs its actors.

    Attributes:
        ask_timeout: Longest wait for an actor's answer, in seconds (``ActorTimeout``).
        idle_timeout: Stop actors unused for this many seconds (``None``: never).
        max_active: Most actors running at once (least recently used stop first).
        max_restarts: Restarts of a session's actors allowed within ``restart_period``;
            one more marks the session failed.
        restart_period: The period of the restart intensity, in seconds.
        max_concurrent_runs: Passed to the run queue.
        max_queued_runs: Passed to the run queue.
        inline_writes: Let a write (append, turn commit) to an idle session actor run
            on the caller's thread, under the actor's lock, instead of waiting for the
            actor's thread: the same one-at-a-time order, two thread switches fewer.
            Such a write waits as long as the store takes (no ``ask_timeout``); set
            ``False`` to bound every write by ``ask_timeout``.

    Raises:
        ValidationError: A value out of range.
    """

    ask_timeout: float = 30.0
    idle_timeout: float | None = None
    max_active: int = 1024
    max_restarts: int = 5
    restart_period: float = 10.0
    max_concurrent_runs: int = 1
    max_queued_runs: int = 100
    inline_writes: bool = True

    def __post_init__(self) -> None:
        positive = {
            "ask_timeout": self.ask_timeout,
            "restart_period": self.restart_period,
            "max_active": self.max_active,
            "max_concurrent_runs": self.max_concurrent_runs,
            "max_queued_runs": self.max_queued_runs,
        }
        if self.idle_timeout is not None:
            positive["idle_timeout"] = self.idle_timeout
        for name, value in positive.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (value > 0 and math.isfinite(value))  # NaN and infinity too
            ):
                raise ValidationError(f"{name} must be a positive, finite number, got {value!r}")
        for name in ("max_active", "max_concurrent_runs", "max_queued_runs"):
            check_int(name, getattr(self, name))
        if self.max_active < 3:
            raise ValidationError(f"max_active must be at least 3, got {self.max_active}")
        check_int("max_restarts", self.max_restarts)
        if not isinstance(self.inline_writes, bool):
            raise ValidationError(f"inline_writes must be a bool, got {self.inline_writes!r}")


#: The option names ``Hub.open`` keeps for the Hub; the others go to the store.
HUB_OPTION_NAMES: Final = frozenset(HubOptions.__struct_fields__)


class HubStats(msgspec.Struct, frozen=True):
    """A snapshot of a Hub's actors.

    Attributes:
        active: Actors running.
        sessions: Session actors running.
        projectors: Projector actors running.
        sharing: Sharing actors running.
        failed: Sessions marked failed, sorted.
        restarts: Actor restarts since the Hub opened.
        passivated: Actors stopped by passivation since the Hub opened.
    """

    active: int
    sessions: int
    projectors: int
    sharing: int
    failed: list[str]
    restarts: int
    passivated: int


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

        Args:
            store: A store with the event-store and sharing-state ports.
            options: How to run the actors (defaults: :class:`HubOptions`).
            path: Where the store lives, for error messages (``None``: in memory).

        Cost: starts the reaper thread when ``idle_timeout`` is set; no I/O.
        """
        self._store = store
        self._options = options if options is not None else HubOptions()
        self._path = path
        self._lock = threading.Lock()
        self._slots: OrderedDict[ActorKey, Slot] = OrderedDict()
        self._subscribers: dict[str, dict[ActorKey, HubActor]] = {}
        # What subscribers() returns: tuples replaced (never mutated) under the lock, so
        # the session actors read them without taking it.
        self._pushed_to: dict[str, tuple[HubActor, ...]] = {}
        # Listeners of committed events besides the actors (see listen()).
        self._listeners: dict[str, dict[object, Listener]] = {}
        self._restarts: dict[str, deque[float]] = {}
        self._failed: set[str] = set()
        self._retired: list[threading.Thread] = []
        self._restart_count = 0
        self._passivated = 0
        self._closing = False
        self._closed = False
        self._runs: RunQueue | None = None
        self._stopping = threading.Event()
        self._reaper: threading.Thread | None = None
        if self._options.idle_timeout is not None:
            self._reaper = threading.Thread(
                target=self._reap, name=f"{THREAD_PREFIX}reaper", daemon=True
            )
            self._reaper.start()
        self._exit_hook = _CloseAtExit(self)
        atexit.register(self._exit_hook)
        _log.info("hub.opened", path=path, max_active=self._options.max_active)

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, **options: Any) -> Hub:
        """Open a Hub over a new store.

        Args:
            path: Where the LMDB store lives; ``None`` keeps everything in memory.
            **options: :class:`HubOptions` fields for the Hub; every other option goes
                to ``LmdbStore(path, ...)`` (e.g. ``durability="relaxed"``).

        Returns:
            The Hub, owning its store.

        Raises:
            ValidationError: A bad option, or store options without a path.
            StoreError: The store could not be opened.

        Cost: opens the store (LMDB: an environment; no fsync).
        """
        hub_options = {k: options.pop(k) for k in list(options) if k in HUB_OPTION_NAMES}
        settings = HubOptions(**hub_options)
        store: HubStore
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

    # -- the supervisor interface of the actors ----------------------------------------

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

    def _subscribers_of(self, session_id: str) -> tuple[HubActor, ...]:
        """Return the actors ``session_id`` pushes events to (its sharing actor, if running).

        Cost: O(1); takes no lock.
        """
        return self._pushed_to.get(session_id, ())

    def _crashed(self, key: ActorKey, actor: HubActor) -> None:
        """Forget a failed actor and count its restart (called by the failing handler).

        Past the restart intensity, marks the session failed and stops its other actors.

        Cost: O(actors of the Hub) when the session fails, else O(1); never blocks.
        """
        now = time.monotonic()
        victims: list[Slot] = []
        with self._lock:
            slot = self._slots.get(key)
            if slot is not None and slot.ref is actor:
                self._forget_locked(slot)
                if slot.thread is not None:
                    self._retired.append(slot.thread)
            self._restart_count += 1
            window = self._restarts.setdefault(key.session_id, deque())
            window.append(now)
            while window and now - window[0] > self._options.restart_period:
                window.popleft()
            if len(window) > self._options.max_restarts and key.session_id not in self._failed:
                self._failed.add(key.session_id)
                victims = [s for k, s in self._slots.items() if k.session_id == key.session_id]
                for victim in victims:
                    self._forget_locked(victim)
                    if victim.thread is not None:
                        self._retired.append(victim.thread)
                _log.error(
                    "session.failed",
                    session_id=key.session_id,
                    restarts=len(window),
                    period=self._options.restart_period,
                )
        for victim in victims:
            if victim.actor is not None:
                victim.actor.stop_soon()

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
        slot = self._pin_running(ActorKey(kind="session", session_id=session_id))
        if slot is None:
            return False
        actor = slot.actor
        try:
            if isinstance(actor, SessionActor) and actor.try_submit(
                message, ticket, functools.partial(self._release, slot)
            ):
                return True
        except BaseException:
            self._release(slot)
            raise
        self._release(slot)
        return False

    def listen(self, session_id: str, listener: Listener) -> Callable[[], None]:
        """Have ``listener.deliver(Push)`` called with the events committed to ``session_id``.

        The listener is told what projectors are told (consecutive stored events, on
        the thread that committed them, in commit order) until the returned function is
        called. It must be quick and must not block or raise.

        Returns:
            The function that removes the listener (idempotent).

        Cost: O(subscribers of the session) under the Hub's lock, now and on removal.
        """
        check_session_id(session_id)
        token = object()
        with self._lock:
            self._live()
            self._listeners.setdefault(session_id, {})[token] = listener
            self._publish_subscribers_locked(session_id)

        def remove() -> None:
            with self._lock:
                listeners = self._listeners.get(session_id)
                if listeners is None or listeners.pop(token, None) is None:
                    return
                if not listeners:
                    del self._listeners[session_id]
                self._publish_subscribers_locked(session_id)

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
        result: list[Event] = self._call(
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

        view: Projection = self._call(key, View(window=window), fast=published)
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
        plan: TurnPlan = self._call(
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
        transcript: Transcript = self._call(key, ask)
        # The projector keeps serving this transcript: hand out a list of one's own.
        return msgspec.structs.replace(transcript, messages=list(transcript.messages))

    def _commit(self, turn: Turn, reply: str | Event | None) -> Event | None:
        event = self._reply_event(turn, reply)
        stored: Event | None = self._call(
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
        """Return the run queue's status of ``session_id``. Cost: O(1)."""
        return self._run_queue().status(session_id)

    # -- introspection and lifecycle ---------------------------------------------------

    def stats(self) -> HubStats:
        """Return how many actors run, by kind, and which sessions failed. Cost: O(actors)."""
        with self._lock:
            kinds = [key.kind for key in self._slots]
            return HubStats(
                active=len(kinds),
                sessions=kinds.count("session"),
                projectors=kinds.count("projector"),
                sharing=kinds.count("sharing"),
                failed=sorted(self._failed),
                restarts=self._restart_count,
                passivated=self._passivated,
            )

    def recover(self, session_id: str) -> bool:
        """Clear a failed session's mark and restart count, so calls on it go on again.

        Returns:
            Whether the session was marked failed.

        Cost: O(1); the session's actors start again on their next request.
        """
        with self._lock:
            self._restarts.pop(session_id, None)
            if session_id not in self._failed:
                return False
            self._failed.discard(session_id)
        _log.info("session.recovered", session_id=session_id)
        return True

    def active(self) -> list[ActorKey]:
        """Return the running actors, least recently used first. Cost: O(actors)."""
        with self._lock:
            return list(self._slots)

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
        if runs is not None:
            runs.close()
        with self._lock:
            self._closed = True
            slots = list(self._slots.values())
            self._slots.clear()
            self._subscribers.clear()
            self._listeners.clear()
            self._pushed_to = {}
            retired, self._retired = self._retired, []
        self._stopping.set()
        if self._reaper is not None:
            self._reaper.join(timeout)
        self._stop_slots(slots, timeout)
        for thread in retired:
            if thread.ident is not None:
                thread.join(timeout)
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
        if self._closed:
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

    def _forget_locked(self, slot: Slot) -> None:
        key = slot.key
        if self._slots.get(key) is slot:
            del self._slots[key]
        if key.kind in _SUBSCRIBER_KINDS:
            subs = self._subscribers.get(key.session_id)
            if subs is not None and subs.get(key) is slot.actor:
                del subs[key]
                self._publish_subscribers_locked(key.session_id)

    def _publish_subscribers_locked(self, session_id: str) -> None:
        subs = self._subscribers.get(session_id)
        listeners = self._listeners.get(session_id)
        if subs or listeners:
            pushed: tuple[Any, ...] = tuple(subs.values()) if subs else ()
            if listeners:
                pushed += tuple(listeners.values())
            self._pushed_to[session_id] = pushed
        else:
            self._subscribers.pop(session_id, None)
            self._pushed_to.pop(session_id, None)

    def _acquire(self, key: ActorKey) -> Slot:
        slot = self._pin_running(key)
        return slot if slot is not None else self._acquire_slow(key)

    def _pin_running(self, key: ActorKey) -> Slot | None:
        # Fast path, no lock: a running actor is pinned with an atomic list append. An
        # evictor may pick it in between; the request then meets a stopped actor and
        # is resent (see _call and _wait). A failed session is refused by the slow path.
        slot = self._slots.get(key)
        if slot is not None and slot.ref is not None and not self._closed:
            slot.pins.append(None)
            if (
                self._slots.get(key) is slot
                and slot.ref.is_alive()
                and key.session_id not in self._failed
            ):
                slot.touched = True
                return slot
            slot.pins.pop()
        return None

    def _acquire_slow(self, key: ActorKey) -> Slot:
        victims: list[Slot] = []
        starting = False
        with self._lock:
            if self._closed:
                raise HubClosed(self._path)
            if key.session_id in self._failed:
                raise SessionFailed(
                    key.session_id, self._options.max_restarts, self._options.restart_period
                )
            now = time.monotonic()
            slot = self._slots.get(key)
            if slot is not None and (slot.ref is None or slot.ref.is_alive()):
                slot.touched = True  # running, or being started by another caller
            else:
                if slot is not None:
                    self._forget_locked(slot)
                victims = self._make_room_locked()
                slot = Slot(key, now)
                self._slots[key] = slot
                starting = True
            slot.pins.append(None)
        if victims:
            self._stop_slots(victims)
        if starting:
            self._start(slot)
        else:
            while not slot.started.wait(_POLL):  # in slices: Ctrl-C reaches the caller
                if self._closed:
                    slot.pins.pop()
                    raise HubClosed(self._path)
            if slot.ref is None:  # its start failed
                slot.pins.pop()
                raise ActorCrashed(key.kind, key.session_id, "the actor could not be started")
        return slot

    def _start(self, slot: Slot) -> None:
        # Outside the lock: creating an actor builds its inbox and state; callers of
        # other actors need not wait for that. (Its thread starts later, with the first
        # message queued for it.)
        key = slot.key
        try:
            ref = _ACTOR_CLASSES[key.kind].start(self, key, slot)
        except BaseException:
            with self._lock:
                self._forget_locked(slot)
            slot.pins.pop()
            slot.started.set()
            raise
        with self._lock:
            slot.ref = ref
            if key.kind in _SUBSCRIBER_KINDS and self._slots.get(key) is slot and slot.actor:
                self._subscribers.setdefault(key.session_id, {})[key] = slot.actor
                self._publish_subscribers_locked(key.session_id)
        slot.started.set()

    def _release(self, slot: Slot) -> None:
        slot.last_used = time.monotonic()
        slot.pins.pop()

    def _make_room_locked(self) -> list[Slot]:
        # CLOCK, an O(1) approximation of least recently used: from the oldest end, an
        # actor used since it was last passed over gets a second chance (moves to the
        # young end); one in use is skipped; the first other one is stopped.
        excess = len(self._slots) + 1 - self._options.max_active
        victims: list[Slot] = []
        budget = 2 * len(self._slots)
        while excess > len(victims) and budget > 0:
            budget -= 1
            key = next(iter(self._slots))
            slot = self._slots[key]
            if slot.pins or slot.touched:
                slot.touched = False
                self._slots.move_to_end(key)
                continue
            victims.append(slot)
            self._forget_locked(slot)
        self._passivated += len(victims)
        return victims

    def _stop_slots(self, slots: list[Slot], timeout: float | None = None) -> None:
        if timeout is None:
            timeout = self._options.ask_timeout
        for slot in slots:
            slot.started.wait(timeout)  # one being started (only at close) is stopped too
        stopping = [
            (slot, slot.actor.stop_soon())
            for slot in slots
            if slot.actor is not None and slot.ref is not None
        ]
        for slot, future in stopping:
            if future is None:
                continue
            try:
                future.get(timeout=timeout)
            except pykka.Timeout:
                _log.warning(
                    "actor.stop_timeout", actor=slot.key.kind, session_id=slot.key.session_id
                )
        current = threading.current_thread()
        for slot in slots:
            thread = slot.thread
            if thread is not None and thread.ident is not None and thread is not current:
                thread.join(timeout)

    def _call(
        self,
        key: ActorKey,
        message: Request[T],
        fast: Callable[[Slot], T | None] | None = None,
        *,
        inline: bool = False,
    ) -> T:
        """Send ``message`` to the actor named ``key`` and return its answer.

        A request that reaches an actor which stopped before handling it is resent to
        a fresh one (the actors reach the Hub through this method too, as their
        ``Supervisor``).

        Args:
            key: The actor (started if needed).
            message: The request; its type parameter is the answer's type.
            fast: May answer from the slot without a message (``None``: no answer).
            inline: Run it on the caller's thread if the actor is idle (writes only,
                and only with the ``inline_writes`` option).

        Raises:
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See :class:`Hub`.
            SharedeskError: Whatever the handler raised.

        Cost: one message round trip (none when run inline or answered by ``fast``);
        blocks the caller.
        """
        for _attempt in range(_RESEND_ATTEMPTS):
            slot = self._acquire(key)
            try:
                if fast is not None:
                    hit = fast(slot)
                    if hit is not None:
                        return hit
                actor = slot.actor
                assert actor is not None and slot.ref is not None
                if inline and self._options.inline_writes:
                    ran, answer = actor.run_inline(message)
                    if ran:
                        return cast(T, answer)  # the handler answers a Request[T] with a T
                if not actor.ensure_running():
                    continue  # stopped meanwhile: resend to a fresh actor
                return self._wait(actor.ask(message), slot)
            except pykka.ActorDeadError:
                continue  # stopped before handling it: resend to a fresh actor
            finally:
                self._release(slot)
        raise ActorCrashed(key.kind, key.session_id, "stopped before handling the request")

    def _wait(self, future: pykka.Future[T], slot: Slot) -> T:
        timeout = self._options.ask_timeout
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                return future.get(timeout=max(0.0, min(remaining, _POLL)))
            except pykka.Timeout:
                if self._closed:
                    raise HubClosed(self._path) from None
                thread = slot.thread
                if thread is not None and thread.ident is not None and not thread.is_alive():
                    # The actor's thread ended: whatever it answered is set by now. No
                    # answer means the request reached the inbox after it was drained,
                    # so it was never handled: resend it.
                    try:
                        return future.get(timeout=0)
                    except pykka.Timeout:
                        raise pykka.ActorDeadError(f"{slot.key.kind} actor ended") from None
                if time.monotonic() >= deadline:
                    key = slot.key
                    raise ActorTimeout(key.kind, key.session_id, timeout) from None

    def _reap(self) -> None:
        idle = self._options.idle_timeout
        assert idle is not None
        interval = max(0.01, min(idle / 4, 1.0))
        while not self._stopping.wait(interval):
            now = time.monotonic()
            victims: list[Slot] = []
            with self._lock:
                for slot in self._slots.values():
                    if not slot.pins and slot.ref is not None and now - slot.last_used >= idle:
                        victims.append(slot)
                for victim in victims:
                    self._forget_locked(victim)
                self._passivated += len(victims)
            if victims:
                _log.debug("hub.passivated", actors=len(victims))
                self._stop_slots(victims)


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
