"""The supervisor of a Hub's pykka actors: slots, routing, CLOCK passivation, restarts.

Supervision is described in :mod:`sharedesk.actors._base`. A request its actor never
handled (pykka answered ``ActorDeadError``, or the actor stopped first) is resent.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeVar

import pykka

from sharedesk.actors._base import THREAD_PREFIX, ActorKey, HubActor, HubStore, Slot
from sharedesk.actors._messages import CatchUp, Committed, Push, Request
from sharedesk.actors._options import HubOptions, HubStats
from sharedesk.actors.projector import ProjectorActor
from sharedesk.actors.session import SessionActor
from sharedesk.actors.sharing import SharingActor
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import ActorCrashed, ActorTimeout, HubClosed, SessionFailed
from sharedesk.protocol.events import Event

_log = logger()

T = TypeVar("T")

#: How often a waiting caller checks whether the Hub closed meanwhile, in seconds.
_POLL: Final = 0.25
#: Times a request is resent when its actor stopped before handling it.
_RESEND_ATTEMPTS: Final = 5

_ACTOR_CLASSES: Final[Mapping[str, type[HubActor]]] = MappingProxyType(
    {"session": SessionActor, "projector": ProjectorActor, "sharing": SharingActor}
)


class Listener(Protocol):
    """Told the events committed to a session (see :meth:`Hub.listen`)."""

    def deliver(self, message: Push) -> None:
        """Take one push; quick, never blocks; one that raises is logged and dropped.

        On a following Hub a push may be empty: re-check the store.
        """
        ...


class ActorSupervisor:
    """Starts, routes, passivates and restarts the actors of one Hub (thread-safe).

    Slots are created and removed under one lock; a request to a running actor takes none.
    The store's threads call :meth:`committed` and :meth:`notice`, which never raise.
    """

    def __init__(self, store: HubStore, options: HubOptions, path: str | None) -> None:
        """Supervise actors over ``store`` (which the caller owns and closes); no I/O."""
        #: The store (shared by every actor).
        self.store = store
        self._options = options
        self._path = path
        self._lock = threading.Lock()
        self._slots: OrderedDict[ActorKey, Slot] = OrderedDict()
        # Per session with listeners, its listeners (dicts replaced, never mutated).
        self._listeners: dict[str, dict[object, Listener]] = {}
        self._restarts: dict[str, deque[float]] = {}
        self._failed: set[str] = set()
        self._retired: list[Slot] = []
        self._restart_count = 0
        self._passivated = 0
        #: Whether :meth:`close` was called (requests then raise ``HubClosed``).
        self.closed = False
        self._thread_numbers = itertools.count(1)  # actor threads are numbered per Hub
        self._stopping = threading.Event()
        self._reaper: threading.Thread | None = None
        if options.idle_timeout is not None:
            self._reaper = threading.Thread(
                target=self._reap, name=f"{THREAD_PREFIX}reaper", daemon=True
            )
            self._reaper.start()

    def thread_name(self, kind: str) -> str:
        """Return the name of this Hub's next actor thread of ``kind``."""
        return f"{THREAD_PREFIX}{kind}-{next(self._thread_numbers)}"

    def call(
        self, key: ActorKey, message: Request[T], fast: Callable[[Slot], T | None] | None = None
    ) -> T:
        """Ask the actor named ``key`` (started if needed); ``fast`` may answer from its slot."""

        def ask(slot: Slot) -> T:
            if fast is not None and (hit := fast(slot)) is not None:
                return hit
            answer: T = self._wait(slot.ref.ask(message, block=False), slot)
            return answer

        return self._send(key, ask)

    def _send(self, key: ActorKey, send: Callable[[Slot], T], *, wait: bool = True) -> T:
        for _attempt in range(_RESEND_ATTEMPTS):
            slot = self._acquire(key, wait=wait)
            try:
                return send(slot)
            except pykka.ActorDeadError:
                continue  # stopped before handling it: resend to a fresh actor
            finally:
                slot.last_used = time.monotonic()
                slot.pins.pop()
        raise ActorCrashed(key.kind, key.session_id, "stopped before handling the request")

    def committed(self, session_id: str, events: list[Event]) -> None:
        """Tell a commit to the session's publisher, if it has subscribers; never waits."""
        if events and self.has_subscribers(session_id):
            self._tell(session_id, Committed(events=tuple(events)))

    def notice(self, session_id: str | None, last: int) -> None:
        """Tell a following store's commit notice as ``CatchUp`` (``None``: every session)."""
        try:
            if session_id is None:
                with self._lock:
                    sharing = {key.session_id for key in self._slots if key.kind == "sharing"}
                sessions = list(sharing | self._listeners.keys())
                _log.info("hub.recheck", sessions=len(sessions))
                for each in sessions:
                    self._tell(each, CatchUp())
            elif self.has_subscribers(session_id):
                self._tell(session_id, CatchUp(last=last))
        except Exception:  # the store's thread must go on
            _log.exception("hub.notice_failed", session_id=session_id, last=last)

    def _tell(self, session_id: str, message: Any) -> None:
        key = ActorKey(kind="session", session_id=session_id)
        with contextlib.suppress(HubClosed, SessionFailed, ActorCrashed):
            self._send(key, lambda slot: slot.ref.tell(message), wait=False)

    def check(self, session_id: str) -> None:
        """Raise ``HubClosed`` or ``SessionFailed`` for a write refused. Cost: O(1), no lock."""
        if self.closed:
            raise HubClosed(self._path)
        if session_id in self._failed:
            raise SessionFailed(
                session_id, self._options.max_restarts, self._options.restart_period
            )

    def has_subscribers(self, session_id: str) -> bool:
        """Whether ``session_id`` has a sharing actor or listeners. Cost: O(1), no lock."""
        return _sharing(session_id) in self._slots or session_id in self._listeners

    def publish(self, session_id: str, events: tuple[Event, ...]) -> None:
        """Push committed events to the sharing actor and listeners (one raising is dropped)."""
        push = Push(events=events)
        sharing = self._slots.get(_sharing(session_id))
        if sharing is not None:
            with contextlib.suppress(pykka.ActorDeadError):  # a fresh one rebuilds
                sharing.ref.tell(push)
        for token, listener in list(self._listeners.get(session_id, {}).items()):
            try:
                listener.deliver(push)
            except Exception:
                _log.warning("hub.listener_failed", session_id=session_id, exc_info=True)
                self._remove_listener(session_id, token)

    def crashed(self, key: ActorKey, slot: Slot) -> None:
        """Forget, stop and count a failed actor; past the intensity, fail its session."""
        now = time.monotonic()
        with self._lock:
            victims = [slot] if self._forget_locked(slot) else []
            self._restart_count += 1
            window = self._restarts.setdefault(key.session_id, deque())
            window.append(now)
            while window and now - window[0] > self._options.restart_period:
                window.popleft()
            if len(window) > self._options.max_restarts and key.session_id not in self._failed:
                self._failed.add(key.session_id)
                others = [s for k, s in self._slots.items() if k.session_id == key.session_id]
                victims += [other for other in others if self._forget_locked(other)]
                _log.error(
                    "session.failed",
                    session_id=key.session_id,
                    restarts=len(window),
                    period=self._options.restart_period,
                )
            self._retired.extend(victims)
        for victim in victims:
            _stop(victim)

    def add_listener(self, session_id: str, listener: Listener) -> Callable[[], None]:
        """Push ``session_id``'s commits to ``listener``; return its remover (``HubClosed``)."""
        token = object()
        with self._lock:
            if self.closed:
                raise HubClosed(self._path)
            listeners = dict(self._listeners.get(session_id, {}))
            listeners[token] = listener
            self._listeners[session_id] = listeners
        return lambda: self._remove_listener(session_id, token)

    def _remove_listener(self, session_id: str, token: object) -> None:
        # Dicts are replaced, never mutated, so publish() iterates them without the lock.
        with self._lock:
            listeners = dict(self._listeners.get(session_id, {}))
            if listeners.pop(token, None) is None:
                return
            if listeners:
                self._listeners[session_id] = listeners
            else:
                del self._listeners[session_id]

    def stats(self) -> HubStats:
        """As :meth:`Hub.stats`."""
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
        """As :meth:`Hub.recover`."""
        with self._lock:
            self._restarts.pop(session_id, None)
            if session_id not in self._failed:
                return False
            self._failed.discard(session_id)
        _log.info("session.recovered", session_id=session_id)
        return True

    def active(self) -> list[ActorKey]:
        """As :meth:`Hub.active`."""
        with self._lock:
            return list(self._slots)

    def close(self, timeout: float) -> None:
        """Stop every actor and the reaper, waiting at most ``timeout`` (see :meth:`Hub.close`)."""
        with self._lock:
            self.closed = True
            slots = list(self._slots.values()) + self._retired
            self._slots.clear()
            self._retired = []
            self._listeners = {}
        self._stopping.set()
        deadline = time.monotonic() + timeout
        if self._reaper is not None:
            self._reaper.join(timeout)
        _join(slots, deadline)

    def _forget_locked(self, slot: Slot) -> bool:
        # Remove the slot (if it is still the current one); return whether it was.
        key = slot.key
        if self._slots.get(key) is not slot:
            return False
        del self._slots[key]
        return True

    def _kept_locked(self, key: ActorKey) -> bool:
        # The session actor of a session with listeners publishes to them: keep it.
        return key.kind == "session" and key.session_id in self._listeners

    def _acquire(self, key: ActorKey, *, wait: bool = True) -> Slot:
        # Fast path, no lock: a running actor is pinned with an atomic list append. An
        # evictor may pick it in between; the request then meets a stopped actor and
        # is resent (see call and _wait). A failed session is refused by the slow path.
        slot = self._slots.get(key)
        if slot is not None and not self.closed:
            slot.pins.append(None)
            if self._slots.get(key) is slot and key.session_id not in self._failed:
                slot.touched = True
                return slot
            slot.pins.pop()
        return self._acquire_slow(key, wait)

    def _acquire_slow(self, key: ActorKey, wait: bool) -> Slot:
        with self._lock:
            self.check(key.session_id)
            slot = self._slots.get(key)
            victims: list[Slot] = []
            if slot is None:
                victims = self._make_room_locked()
                slot = Slot(key, time.monotonic())
                # pykka starts the actor's thread here: under the lock, so that no two
                # callers start the same actor (about a thread start's cost).
                slot.ref = _ACTOR_CLASSES[key.kind].start(self, key, slot)
                self._slots[key] = slot
            else:
                slot.touched = True
            slot.pins.append(None)
        if victims and wait:  # outside the lock: wait for them, so threads stay bounded
            _join(victims, time.monotonic() + self._options.ask_timeout)
        else:
            for victim in victims:
                _stop(victim)
        return slot

    def _make_room_locked(self) -> list[Slot]:
        # CLOCK, an O(1) approximation of least recently used: from the oldest end, an
        # actor used since it was last passed over gets a second chance (moves to the
        # young end); one in use or kept is skipped; the first other one is stopped.
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
        self._retired.extend(victims)
        return victims

    def _wait(self, future: pykka.Future[T], slot: Slot) -> T:
        timeout = self._options.ask_timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                return future.get(timeout=max(0.0, min(deadline - time.monotonic(), _POLL)))
            except pykka.Timeout:
                if self.closed:
                    raise HubClosed(self._path) from None
                if not slot.ref.is_alive():
                    # Stopped: pykka answers what is left in the inbox as it ends. No
                    # answer by then means the request came after: never handled.
                    try:
                        return future.get(timeout=_POLL)
                    except pykka.Timeout:
                        raise pykka.ActorDeadError(f"{slot.key.kind} actor stopped") from None
                if time.monotonic() >= deadline:
                    raise ActorTimeout(slot.key.kind, slot.key.session_id, timeout) from None

    def _reap(self) -> None:
        idle = self._options.idle_timeout
        assert idle is not None
        interval = max(0.01, min(idle / 4, 1.0))
        while not self._stopping.wait(interval):
            now = time.monotonic()
            with self._lock:
                victims = [
                    slot
                    for slot in self._slots.values()
                    if not slot.pins
                    and now - slot.last_used >= idle
                    and not self._kept_locked(slot.key)
                ]
                for victim in victims:
                    self._forget_locked(victim)
                self._passivated += len(victims)
                self._retired.extend(victims)
                # Threads of actors stopped long ago have ended: forget them.
                self._retired = [s for s in self._retired if _running(s)]
            if victims:
                _log.debug("hub.passivated", actors=len(victims))
                for victim in victims:
                    _stop(victim)


def _sharing(session_id: str) -> ActorKey:
    return ActorKey(kind="sharing", session_id=session_id)


def _stop(slot: Slot) -> pykka.Future[bool] | None:
    try:
        return slot.ref.stop(block=False)
    except pykka.ActorDeadError:  # stopped already
        return None


def _running(slot: Slot) -> bool:
    return slot.ref.is_alive() or (slot.thread is not None and slot.thread.is_alive())


def _join(slots: list[Slot], deadline: float) -> None:
    stopping = [(slot, _stop(slot)) for slot in slots]
    current = threading.current_thread()
    for slot, future in stopping:
        if future is not None:
            try:
                future.get(timeout=max(0.0, deadline - time.monotonic()))
            except pykka.Timeout:
                _log.warning(
                    "actor.stop_timeout", actor=slot.key.kind, session_id=slot.key.session_id
                )
                continue
        thread = slot.thread
        if thread is not None and thread is not current:
            thread.join(max(0.0, deadline - time.monotonic()))
