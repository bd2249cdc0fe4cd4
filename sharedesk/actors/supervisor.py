"""The supervisor of a Hub's actors: slots, routing, CLOCK passivation, restarts, reaper.

:class:`ActorSupervisor` is the runtime behind :class:`~sharedesk.actors.hub.Hub`: it
names each actor by an :class:`~sharedesk.actors._base.ActorKey`, starts it on first use,
routes requests to it and waits for the answers, stops it when room is needed or it idles,
and restarts it when it fails. The actors reach it only through the ``Supervisor``
protocol of :mod:`sharedesk.actors._base` (``store``, ``call``, ``crashed``,
``subscribers_of``); the Hub composes it and adds the public face.

Routing: every request pins its actor (``Slot.pins``) for the time it is in flight, so
an actor serving a request is not passivated under it; pinning a running actor takes no
lock (a list append is atomic), so requests to different actors never queue on the
supervisor. A request that reaches an actor which stopped before handling it
(``ActorDeadError``, or an actor thread that ended without answering: passivation or a
restart raced it) was not handled, so it is resent to a fresh actor.

Supervision: see :mod:`sharedesk.actors._base`. The supervisor counts the restarts of
each session's actors; more than ``max_restarts`` within ``restart_period`` seconds marks
the session failed (its actors are stopped and every call on it raises
``SessionFailed``) while other sessions go on. A restarted actor is started again on its
next request and recovers its state from the store.

Passivation: at most ``max_active`` actors exist at once; starting one more stops an
idle one chosen by CLOCK (least recently used, approximately: an actor used since the
clock hand last passed it gets a second chance). With ``idle_timeout``, a reaper thread
stops actors unused for that long. Reactivation is transparent.

Every wait for an actor's thread is bounded by ``ask_timeout`` (``ActorTimeout``) and
ends early with ``HubClosed`` when the supervisor closes; it is taken in slices of
``_POLL`` seconds, so Ctrl-C (``KeyboardInterrupt``) reaches a caller blocked in it.

Following (a store several processes share, the ``FollowingStore`` port): the Hub hands
the store :meth:`ActorSupervisor.notice` as its ``on_append`` callback. It runs on the
store's listener thread and only routes: a notice for a session nobody subscribes to
(no sharing actor, no listener) is dropped at once (views and turns catch up from the
store when asked); otherwise it goes to the session's running actor
(:meth:`SessionActor.notice`: one comparison for this Hub's own commits, else one told
``CatchUp``), the only publisher of the session's events, so events other processes
commit reach subscribers consecutively, once, in order with this Hub's own pushes. A
session with listeners keeps its session actor running (passivation skips it: the Hub
starts it when a listener is added); should it not run (it crashed), the listeners get
an empty push, a wake-up to re-check the store. ``(None, 0)`` does that for every
session with subscribers.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeVar, cast

import msgspec
import pykka

from sharedesk.actors._base import THREAD_PREFIX, ActorKey, HubActor, HubStore, Slot
from sharedesk.actors._messages import Push, Request
from sharedesk.actors.projector import ProjectorActor
from sharedesk.actors.session import SessionActor
from sharedesk.actors.sharing import SharingActor
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import (
    ActorCrashed,
    ActorTimeout,
    HubClosed,
    SessionFailed,
    ValidationError,
)
from sharedesk.protocol.validation import check_int

_log = logger()

T = TypeVar("T")

#: How often a waiting caller checks whether the Hub closed meanwhile, in seconds.
_POLL: Final = 0.25
#: Times a request is resent when its actor stopped before handling it.
_RESEND_ATTEMPTS: Final = 5

#: The kinds of actor the session actor pushes committed events to (one per session:
#: projectors catch up from the tail when asked, so a post never wakes one per viewer).
_SUBSCRIBER_KINDS: Final = frozenset({"sharing"})


class Listener(Protocol):
    """Told the events committed to a session (see :meth:`Hub.listen`)."""

    def deliver(self, message: Push) -> None:
        """Take one push (consecutive stored events); quick, never blocks or raises.

        On a following Hub a push may be empty: the session may have changed in another
        process (its events were not read here); re-check the store.
        """
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


class ActorSupervisor:
    """Starts, routes, passivates and restarts the actors of one Hub.

    Implements the ``Supervisor`` protocol the actors are started with. Thread-safe:
    slots are created, replaced and removed under one lock; a request to a running actor
    takes none (see the module docstring).
    """

    def __init__(
        self, store: HubStore, options: HubOptions, path: str | None, *, following: bool = False
    ) -> None:
        """Supervise actors over ``store`` (which the caller owns and closes).

        Args:
            store: The store every actor reads and writes.
            options: The supervision policy (timeouts, ``max_active``, restarts).
            path: Where the store lives, for error messages (``None``: in memory).
            following: Whether the store's commit notices reach :meth:`notice` (then
                session actors of sessions with listeners are not passivated).

        Cost: starts the reaper thread when ``idle_timeout`` is set; no I/O.
        """
        self._store = store
        self._options = options
        self._path = path
        self._following = following
        self._lock = threading.Lock()
        self._slots: OrderedDict[ActorKey, Slot] = OrderedDict()
        self._subscribers: dict[str, dict[ActorKey, HubActor]] = {}
        # What subscribers_of() returns: tuples replaced (never mutated) under the lock,
        # so the session actors read them without taking it.
        self._pushed_to: dict[str, tuple[HubActor, ...]] = {}
        # Listeners of committed events besides the actors (see add_listener()).
        self._listeners: dict[str, dict[object, Listener]] = {}
        self._restarts: dict[str, deque[float]] = {}
        self._failed: set[str] = set()
        self._retired: list[threading.Thread] = []
        self._restart_count = 0
        self._passivated = 0
        self._closed = False
        self._stopping = threading.Event()
        self._reaper: threading.Thread | None = None
        if self._options.idle_timeout is not None:
            self._reaper = threading.Thread(
                target=self._reap, name=f"{THREAD_PREFIX}reaper", daemon=True
            )
            self._reaper.start()

    # -- the Supervisor protocol of the actors -----------------------------------------

    @property
    def store(self) -> HubStore:
        """The store (shared by every actor)."""
        return self._store

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (requests then raise ``HubClosed``)."""
        return self._closed

    def subscribers_of(self, session_id: str) -> tuple[HubActor, ...]:
        """Return the actors ``session_id`` pushes events to (its sharing actor, if running).

        Cost: O(1); takes no lock.
        """
        return self._pushed_to.get(session_id, ())

    def crashed(self, key: ActorKey, actor: HubActor) -> None:
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

    def call(
        self,
        key: ActorKey,
        message: Request[T],
        fast: Callable[[Slot], T | None] | None = None,
        *,
        inline: bool = False,
    ) -> T:
        """Send ``message`` to the actor named ``key`` and return its answer.

        A request that reaches an actor which stopped before handling it is resent to
        a fresh one (the actors reach one another through this method too, as their
        ``Supervisor``).

        Args:
            key: The actor (started if needed).
            message: The request; its type parameter is the answer's type.
            fast: May answer from the slot without a message (``None``: no answer).
            inline: Run it on the caller's thread if the actor is idle (writes only,
                and only with the ``inline_writes`` option).

        Raises:
            HubClosed, SessionFailed, ActorTimeout, ActorCrashed: See
                :class:`~sharedesk.actors.hub.Hub`.
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
                self.release(slot)
        raise ActorCrashed(key.kind, key.session_id, "stopped before handling the request")

    # -- slots -------------------------------------------------------------------------

    def pin_running(self, key: ActorKey) -> Slot | None:
        """Pin the slot of ``key`` if its actor is running, else return ``None``.

        A pinned actor is not passivated; :meth:`release` unpins it.

        Cost: O(1); takes no lock.
        """
        # Fast path, no lock: a running actor is pinned with an atomic list append. An
        # evictor may pick it in between; the request then meets a stopped actor and
        # is resent (see call and _wait). A failed session is refused by the slow path.
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

    def release(self, slot: Slot) -> None:
        """Unpin ``slot`` (one pin of :meth:`pin_running` or of a request). Cost: O(1)."""
        slot.last_used = time.monotonic()
        slot.pins.pop()

    def slot(self, key: ActorKey) -> Slot | None:
        """Return the slot held for the actor named ``key``, if any. Cost: O(1)."""
        return self._slots.get(key)

    def notice(self, session_id: str | None, last: int) -> None:
        """Route a commit notice of the store (the ``FollowingStore`` ``on_append``).

        Args:
            session_id: The session committed to (``None``: any session may have
                changed, re-check every one with subscribers).
            last: Its last sequence after the commit (ignored with ``None``).

        Cost: O(1) for a session without subscribers or for this Hub's own commit;
        else one told message; ``(None, 0)``: O(sessions with subscribers). Never
        blocks on an actor and never raises (a failure is logged).
        """
        try:
            if session_id is None:
                self._recheck_all()
            elif session_id in self._pushed_to:
                self._notice(session_id, last)
        except Exception:  # the store's thread must go on; nothing here is worth more
            _log.exception("hub.notice_failed", session_id=session_id, last=last)

    def _notice(self, session_id: str, last: int | None) -> None:
        slot = self._slots.get(ActorKey(kind="session", session_id=session_id))
        actor = slot.actor if slot is not None else None
        if isinstance(actor, SessionActor) and actor.is_alive():
            actor.notice(last)
            return
        if session_id in self._listeners:  # no session actor to push: wake them to re-check
            wake = Push(events=())
            for subscriber in self._pushed_to.get(session_id, ()):
                subscriber.deliver(wake)  # a sharing actor applies nothing

    def _recheck_all(self) -> None:
        with self._lock:
            sessions = list(self._pushed_to)
        _log.info("hub.recheck", sessions=len(sessions))
        for session_id in sessions:
            self._notice(session_id, None)

    def add_listener(self, session_id: str, listener: Listener) -> Callable[[], None]:
        """Push ``session_id``'s committed events to ``listener`` too, until removed.

        Returns:
            The function that removes the listener (idempotent).

        Raises:
            HubClosed: The supervisor is closed.

        Cost: O(subscribers of the session) under the lock, now and on removal.
        """
        token = object()
        with self._lock:
            if self._closed:
                raise HubClosed(self._path)
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

    def close(self, timeout: float) -> None:
        """Stop every actor and the reaper; later requests raise ``HubClosed``.

        Requests already queued in an actor are served before it stops; a caller still
        waiting on an actor that does not answer gets ``HubClosed``.

        Cost: blocks until the actors stop and their threads end (each wait at most
        ``timeout``); does not close the store.
        """
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

    # -- internals ---------------------------------------------------------------------

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

    def _kept_locked(self, key: ActorKey) -> bool:
        # A following Hub keeps the session actor of a session with listeners: it is
        # the one that pushes them what other processes commit.
        return self._following and key.kind == "session" and key.session_id in self._listeners

    def _acquire(self, key: ActorKey) -> Slot:
        slot = self.pin_running(key)
        return slot if slot is not None else self._acquire_slow(key)

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
            if slot.pins or slot.touched or self._kept_locked(key):
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
                    if (
                        not slot.pins
                        and slot.ref is not None
                        and now - slot.last_used >= idle
                        and not self._kept_locked(slot.key)
                    ):
                        victims.append(slot)
                for victim in victims:
                    self._forget_locked(victim)
                self._passivated += len(victims)
            if victims:
                _log.debug("hub.passivated", actors=len(victims))
                self._stop_slots(victims)
