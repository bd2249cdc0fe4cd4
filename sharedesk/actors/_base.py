"""The actor base: threads, one-at-a-time handling, supervision and log context.

Threads. Each actor is a pykka ``ThreadingActor`` whose thread (``sharedesk-<kind>-<n>``)
starts only when the first message is queued for it. A request to an idle actor (empty
inbox, no message being handled) may instead run on the caller's thread
(:meth:`HubActor.run_inline`, used for writes), which saves the two thread switches of an
ask. Either way one message is handled at a time, under the actor's ``turn_lock``, so
the actor keeps the meaning of an actor: one writer, messages in order. An actor whose
requests all run inline never costs a thread.

Supervision, in one place (the Hub holds the policy, the actor only reports):

- A handler that raises a :class:`~sharedesk.SharedeskError` (bad input, a conflict, a
  closed store) hands that error back to its caller; the actor keeps running, because
  such an error leaves its state as it was.
- A handler that raises anything else is a fault. The actor logs ``actor.crashed``,
  tells the Hub (which counts the restart against the session's restart intensity and
  forgets the actor), stops at once, and hands :class:`~sharedesk.ActorCrashed` (cause
  chained) to the caller. Requests queued behind the failed one are answered
  ``ActorDeadError`` and the Hub resends them to a fresh actor, which recovers its state
  from the store; callers see the result, never a hang.
"""

from __future__ import annotations

import abc
import itertools
import threading
from typing import Any, ClassVar, Final, Protocol

import msgspec
import pykka
import structlog
from pykka._envelope import Envelope
from structlog.contextvars import bind_contextvars, reset_contextvars

from sharedesk.protocol.errors import ActorCrashed, SharedeskError
from sharedesk.protocol.ports import RunIndexStore, SharingStateStore
from sharedesk.protocol.views import Conversation, Projection

_log = structlog.get_logger()

#: Prefix of the name of every thread the Hub starts (actors and the idle reaper).
THREAD_PREFIX: Final = "sharedesk-"

_thread_numbers = itertools.count(1)


class HubStore(RunIndexStore, SharingStateStore, Protocol):
    """What the Hub needs of a store: the event-store, sharing-state and run-index ports."""


class ActorKey(msgspec.Struct, frozen=True):
    """Names one actor of a Hub.

    Attributes:
        kind: ``"session"``, ``"projector"`` or ``"sharing"``.
        session_id: The session the actor serves.
        viewer: The viewer's author key (projectors only, else ``None``).
        conversation: The conversation projected (projectors only, else ``None``).
    """

    kind: str
    session_id: str
    viewer: str | None = None
    conversation: Conversation | None = None


class ViewSnapshot(msgspec.Struct, frozen=True):
    """The newest view a projector computed, published for lock-free reads by the Hub.

    Attributes:
        window: The window it was computed for.
        through: The session's last sequence it reflects (every event up to it).
        projection: The view.
    """

    window: int
    through: int
    projection: Projection


class Slot:
    """The Hub's record of one running actor.

    Created, replaced and removed under the Hub's lock; ``pins``, ``touched``,
    ``last_used`` and ``snapshot`` are updated without it (single assignments and list
    appends/pops, atomic in CPython).

    Attributes:
        key: The actor's name.
        ref: Its pykka reference.
        thread: The thread it runs on (set when it starts).
        pins: One entry per request in flight through the Hub (appended and popped
            without a lock: list operations are atomic); a pinned actor is not passivated.
        touched: Used since passivation last passed it over (CLOCK's reference bit).
        last_used: ``time.monotonic()`` of the end of the last request.
        snapshot: The projector's newest view (projectors only; replaced, never mutated).
        started: Set once the actor was started (``ref`` set) or failed to start.
        actor: The actor itself (for requests run on the caller's thread).
    """

    __slots__ = (
        "actor",
        "key",
        "last_used",
        "pins",
        "ref",
        "snapshot",
        "started",
        "thread",
        "touched",
    )

    def __init__(self, key: ActorKey, now: float) -> None:
        self.key = key
        self.started = threading.Event()
        self.ref: pykka.ActorRef[Any] | None = None
        self.actor: HubActor | None = None
        self.thread: threading.Thread | None = None
        self.pins: list[None] = []
        self.touched = False
        self.last_used = now
        self.snapshot: ViewSnapshot | None = None


class Supervisor(Protocol):
    """What an actor may ask of the Hub that started it."""

    @property
    def store(self) -> HubStore:
        """The store (shared by every actor of the Hub)."""
        ...

    def crashed(self, key: ActorKey, ref: pykka.ActorRef[Any]) -> None:
        """Record that the actor ``ref`` named ``key`` failed and is stopping."""
        ...

    def subscribers(self, session_id: str) -> tuple[HubActor, ...]:
        """Return the actors subscribed to ``session_id``'s committed events."""
        ...

    def call(self, key: ActorKey, message: Any, *, inline: bool = False) -> Any:
        """Send ``message`` to the actor ``key`` (started if needed) and return its answer."""
        ...


class _Wake(msgspec.Struct, frozen=True):
    """Put in the inbox of an actor stopped from another thread, so its loop ends."""


class HubActor(pykka.ThreadingActor, abc.ABC):
    """Base of the Hub's actors: a named thread, supervision and per-message log context.

    Which thread runs what:

    - ``__init__``: the Hub's caller that starts the actor (cheap: no I/O, no thread).
    - ``on_start``: the actor's thread, when the first queued message starts it (an
      actor served only inline never runs it). It only binds log context; it never
      raises.
    - messages from the inbox: the actor's thread; a request run through
      :meth:`run_inline`: the caller's thread. One at a time either way, under
      :attr:`turn_lock`. A failure is supervised (see the module docstring).
    - ``on_stop``: the actor's thread; or, for an actor stopped before its thread ever
      started or after a failure inline, the thread that stops it. It only logs.

    Subclasses implement :meth:`handle`.
    """

    #: The actor kind, as in :class:`ActorKey`.
    kind: ClassVar[str] = "actor"

    def __init__(self, hub: Supervisor, key: ActorKey, slot: Slot) -> None:
        super().__init__()
        self.hub = hub
        self.key = key
        self.slot = slot
        #: Held while a message is handled, on whichever thread: one message at a time.
        self.turn_lock = threading.Lock()
        self._thread_lock = threading.Lock()
        self._halted = False
        slot.actor = self

    def _start_actor_loop(self) -> None:
        # As pykka's ThreadingActor, but the thread gets our name, the Hub keeps it (so
        # close() can join it and tests can find every thread of ours), and it starts
        # only when the first message is queued (ensure_running): an actor whose
        # requests all run inline never costs a thread.
        self.slot.thread = threading.Thread(
            target=self._actor_loop,
            name=f"{THREAD_PREFIX}{self.kind}-{next(_thread_numbers)}",
            daemon=False,
        )

    def ensure_running(self) -> bool:
        """Start the actor's thread unless it runs already; ``False`` if the actor stopped.

        Call before queueing a message. Cost: O(1); the first call starts a thread.
        """
        thread = self.slot.thread
        assert thread is not None
        if thread.ident is not None:
            return True
        with self._thread_lock:
            if self._halted:
                return False
            if thread.ident is None:
                thread.start()
        return True

    def halt_unstarted(self) -> bool:
        """Stop the actor at once if its thread never started; return whether it did.

        Such an actor has nothing queued (messages are queued only once it runs), so it
        is stopped without a thread: it is unregistered and ``on_stop`` runs here.
        """
        with self._thread_lock:
            thread = self.slot.thread
            if thread is not None and thread.ident is not None:
                return False
            if not self._halted:
                self._halted = True
                self._stop()
            return True

    def stop_soon(self) -> pykka.Future[Any] | None:
        """Ask the actor to stop once its queued messages are handled.

        Returns the stop's future, or ``None`` when its thread never started (it is
        stopped at once instead, see :meth:`halt_unstarted`). Cost: O(1), no wait.
        """
        if self.halt_unstarted():
            return None
        return self.actor_ref.stop(block=False)

    def deliver(self, message: Any) -> None:
        """Queue ``message`` without waiting for an answer, starting the thread if needed.

        A message for an actor that has stopped is dropped (a projector started again
        rebuilds from the log). Cost: O(1); never blocks.
        """
        if not self.ensure_running():
            return
        try:
            self.actor_ref.tell(message)
        except pykka.ActorDeadError:
            return

    def on_start(self) -> None:
        """Bind ``session_id`` and ``actor`` for the thread's life, log the start.

        Runs on the actor thread, which serves only this actor, so the binding holds for
        every message it handles. Never raises: state is loaded on first use.
        """
        bind_contextvars(session_id=self.key.session_id, actor=self.kind)
        _log.debug("actor.started")

    def on_stop(self) -> None:
        """Log the stop (actor thread, or the thread that stopped a failed actor)."""
        _log.debug("actor.stopped", actor=self.kind, session_id=self.key.session_id)

    def context(self, message: Any) -> dict[str, Any]:
        """Return extra log context for ``message`` (``viewer``, ``run_id``); default none."""
        return {}

    @abc.abstractmethod
    def handle(self, message: Any) -> Any:
        """Handle one message and return the answer (each actor kind defines it)."""

    def on_receive(self, message: Any) -> Any:
        """Handle a message from the inbox (actor thread), one at a time.

        Raises:
            pykka.ActorDeadError: The actor was stopped (it failed while running a
                request inline); the Hub resends the request to a fresh actor.
            SharedeskError, ActorCrashed: As :meth:`_supervised`.
        """
        with self.turn_lock:
            if self.actor_stopped.is_set():
                if isinstance(message, _Wake):
                    return None
                raise pykka.ActorDeadError(f"{self.kind} actor of {self.key.session_id} stopped")
            return self._supervised(message)

    def run_inline(self, message: Any) -> tuple[bool, Any]:
        """Handle ``message`` on the caller's thread if the actor is idle, else do nothing.

        Idle means: nothing waits in the inbox and no message is being handled. Order is
        kept: a message queued meanwhile waits for :attr:`turn_lock`. This saves the two
        thread switches of an ask; the price is that the caller's wait is then the
        handler's (the store's), not bounded by the Hub's ``ask_timeout``.

        Returns:
            ``(True, answer)`` when it ran, ``(False, None)`` when the actor was busy.

        Raises:
            SharedeskError, ActorCrashed: As :meth:`_supervised`.
        """
        waiting = self.actor_inbox.queue  # type: ignore[attr-defined]  # a queue.Queue
        if waiting or not self.turn_lock.acquire(blocking=False):
            return False, None
        try:
            if waiting or self.actor_stopped.is_set():
                return False, None
            return True, self._supervised(message, session_id=self.key.session_id, actor=self.kind)
        finally:
            self.turn_lock.release()

    def _supervised(self, message: Any, **bind: Any) -> Any:
        """Run :meth:`handle` inside the message's log context, supervising it.

        ``bind`` adds keys to the context (the caller's thread lacks the actor's own).

        Raises:
            SharedeskError: As raised by the handler; the actor keeps running.
            ActorCrashed: The handler raised anything else; the actor has stopped and
                the Hub will start a fresh one on the next request.
        """
        # Per-message keys are bound here and reset to what they were afterwards, so
        # nothing leaks into the next message (cheaper than bound_contextvars, which
        # copies the whole context each time).
        tokens = bind_contextvars(msg=type(message).__name__, **bind, **self.context(message))
        try:
            return self.handle(message)
        except SharedeskError:
            raise
        except Exception as exc:
            _log.error("actor.crashed", exc_info=True)
            self.hub.crashed(self.key, self.actor_ref)
            self._halt()
            raise ActorCrashed(self.kind, self.key.session_id, repr(exc)) from exc
        finally:
            reset_contextvars(**tokens)

    def _halt(self) -> None:
        # Stop now, not after the queued messages: those are answered ActorDeadError
        # (by pykka's teardown, or by on_receive seeing the stopped flag) and resent by
        # the Hub to a fresh actor. From another thread, wake the loop so it ends.
        if threading.current_thread() is self.slot.thread:
            self._stop()
            return
        if self.halt_unstarted():
            return
        self._stop()
        self.actor_inbox.put(Envelope(_Wake()))
