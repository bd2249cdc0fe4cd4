"""The actor base: an inbox and a thread per actor, one message at a time, supervision.

Each actor owns an inbox and, once a message is queued for it, one thread of its own
(``sharedesk-<kind>-<n>``) that handles the inbox in order. A request to an idle actor
(empty inbox, no message being handled) may instead run on the caller's thread
(:meth:`HubActor.run_inline`, used for writes), which saves the two thread switches of an
ask. Either way one message is handled at a time, under the actor's ``turn_lock``, so
the actor keeps the meaning of an actor: one writer, messages in order. An actor whose
requests all run inline never costs a thread.

The inbox and its thread are ours, in the style of aiosqlite's connection thread: pykka's
public API starts an actor's thread when the actor is created, names it itself, and
neither tells whether an inbox is empty nor stops an actor before its queued messages,
all of which the Hub needs. Answers are pykka's public futures
(:class:`pykka.ThreadingFuture`), and a request that reaches a stopped actor fails with
:class:`pykka.ActorDeadError`, as with pykka's own actors.

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
import queue
import threading
from typing import Any, ClassVar, Final, Protocol, Self, TypeVar

import msgspec
import pykka
from structlog.contextvars import bind_contextvars, reset_contextvars

from sharedesk.actors._messages import Request
from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import ActorCrashed, SharedeskError
from sharedesk.protocol.ports import RunIndexStore, SharingStateStore
from sharedesk.protocol.views import Conversation, Projection

_log = logger()

#: Prefix of the name of every thread the Hub starts (actors and the idle reaper).
THREAD_PREFIX: Final = "sharedesk-"

_thread_numbers = itertools.count(1)

R = TypeVar("R")


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
        ref: The actor, once the Hub registered it (``None`` while it is being started).
        thread: The thread it runs on (set when it is created; started with the first
            queued message).
        pins: One entry per request in flight through the Hub (appended and popped
            without a lock: list operations are atomic); a pinned actor is not passivated.
        touched: Used since passivation last passed it over (CLOCK's reference bit).
        last_used: ``time.monotonic()`` of the end of the last request.
        snapshot: The projector's newest view (projectors only; replaced, never mutated).
        started: Set once the actor was started (``ref`` set) or failed to start.
        actor: The actor itself (set as soon as it is created).
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
        self.ref: HubActor | None = None
        self.actor: HubActor | None = None
        self.thread: threading.Thread | None = None
        self.pins: list[None] = []
        self.touched = False
        self.last_used = now
        self.snapshot: ViewSnapshot | None = None


class Supervisor(Protocol):
    """What an actor may ask of the Hub that started it (private to the actor runtime)."""

    @property
    def store(self) -> HubStore:
        """The store (shared by every actor of the Hub)."""
        ...

    def _crashed(self, key: ActorKey, actor: HubActor) -> None:
        """Record that ``actor``, named ``key``, failed and is stopping."""
        ...

    def _subscribers_of(self, session_id: str) -> tuple[HubActor, ...]:
        """Return the actors subscribed to ``session_id``'s committed events."""
        ...

    def _call(self, key: ActorKey, message: Request[R], *, inline: bool = False) -> R:
        """Send ``message`` to the actor ``key`` (started if needed) and return its answer."""
        ...


class _Stop(msgspec.Struct, frozen=True):
    """Queued by :meth:`HubActor.stop_soon`: the loop ends once it reaches it."""


class _Wake(msgspec.Struct, frozen=True):
    """Queued for an actor halted from another thread, so its loop ends."""


#: What the inbox holds: a message and the future of its answer (``None``: told).
_Envelope = tuple[Any, "pykka.Future[Any] | None"]


class HubActor(abc.ABC):
    """Base of the Hub's actors: an inbox, a named thread, supervision, log context.

    Which thread runs what:

    - ``__init__``: the Hub's caller that starts the actor (cheap: no I/O, no thread).
    - ``on_start``: the actor's thread, when the first queued message starts it (an
      actor served only inline never runs it). It only binds log context; it never
      raises.
    - messages from the inbox: the actor's thread; a request run through
      :meth:`run_inline`: the caller's thread. One at a time either way, under
      :attr:`turn_lock`. A failure is supervised (see the module docstring).
    - ``on_stop``: the actor's thread, as it ends; or, for an actor stopped before its
      thread ever started, the thread that stops it. It only logs.

    Subclasses implement :meth:`handle`.
    """

    #: The actor kind, as in :class:`ActorKey`.
    kind: ClassVar[str] = "actor"
    #: pykka's switch: actor threads never keep the interpreter alive (a script that
    #: forgets ``close()`` still exits; the Hub's exit hook stops what is left).
    use_daemon_thread: ClassVar[bool] = True

    def __init__(self, hub: Supervisor, key: ActorKey, slot: Slot) -> None:
        self.hub = hub
        self.key = key
        self.slot = slot
        #: Held while a message is handled, on whichever thread: one message at a time.
        self.turn_lock = threading.Lock()
        self._inbox: queue.SimpleQueue[_Envelope] = queue.SimpleQueue()
        self._stopped = threading.Event()
        #: Set (under ``_post_lock``) once the inbox takes no more messages.
        self._sealed = False
        self._post_lock = threading.Lock()
        self._thread_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._loop,
            name=f"{THREAD_PREFIX}{self.kind}-{next(_thread_numbers)}",
            daemon=self.use_daemon_thread,
        )
        slot.actor = self
        slot.thread = self._thread

    @classmethod
    def start(cls, hub: Supervisor, key: ActorKey, slot: Slot) -> Self:
        """Create the actor for ``slot``; its thread starts with the first queued message.

        Cost: O(1); no I/O, no thread.
        """
        return cls(hub, key, slot)

    # -- the mailbox -------------------------------------------------------------------

    def is_alive(self) -> bool:
        """Whether the actor still takes messages. Cost: O(1)."""
        return not self._stopped.is_set()

    def queued(self) -> int:
        """Return how many messages wait in the inbox (approximately). Cost: O(1)."""
        return self._inbox.qsize()

    def ensure_running(self) -> bool:
        """Start the actor's thread unless it runs already; ``False`` if the actor stopped.

        Call before queueing a message. Cost: O(1); the first call starts a thread.
        """
        thread = self._thread
        if thread.ident is not None:
            return True
        with self._thread_lock:
            if self._stopped.is_set():
                return False
            if thread.ident is None:
                thread.start()
        return True

    def ask(self, message: Request[R]) -> pykka.Future[R]:
        """Queue ``message``; return the future of its answer (:meth:`ensure_running` first).

        Raises:
            pykka.ActorDeadError: The actor has stopped.

        Cost: O(1); never blocks.
        """
        future: pykka.Future[R] = pykka.ThreadingFuture()
        if self._stopped.is_set() or not self._post(message, future):
            raise self._dead()[1]
        return future

    def deliver(self, message: Any) -> None:
        """Queue ``message`` without waiting for an answer, starting the thread if needed.

        A message for an actor that has stopped is dropped (a projector started again
        rebuilds from the log). Cost: O(1); never blocks.
        """
        if self._stopped.is_set() or not self.ensure_running():
            return
        self._post(message, None)

    def _post(self, message: Any, reply: pykka.Future[Any] | None) -> bool:
        # Queue unless the inbox is sealed, so every message queued is answered: the
        # loop seals the inbox (under the same lock) before it answers what is left.
        with self._post_lock:
            if self._sealed:
                return False
            self._inbox.put((message, reply))
        return True

    def halt_unstarted(self) -> bool:
        """Stop the actor at once if its thread never started; return whether it did.

        Such an actor has nothing queued (messages are queued only once it runs), so it
        is stopped without a thread and ``on_stop`` runs here.
        """
        with self._thread_lock:
            if self._thread.ident is not None:
                return False
            if not self._stopped.is_set():
                self._stopped.set()
                with self._post_lock:
                    self._sealed = True
                self.on_stop()
            return True

    def stop_soon(self) -> pykka.Future[Any] | None:
        """Ask the actor to stop once its queued messages are handled.

        Returns the stop's future, or ``None`` when its thread never started (it is
        stopped at once instead, see :meth:`halt_unstarted`). Cost: O(1), no wait.
        """
        if self.halt_unstarted():
            return None
        future: pykka.Future[Any] = pykka.ThreadingFuture()
        if not self._post(_Stop(), future):
            future.set(None)  # its loop has ended already: nothing left to stop
        return future

    def _loop(self) -> None:
        # The actor's thread: handle the inbox in order until stopped, then answer
        # whatever is left ActorDeadError (the Hub resends those to a fresh actor).
        self.on_start()
        try:
            while not self._stopped.is_set():
                message, reply = self._inbox.get()
                if isinstance(message, _Stop):
                    self._stopped.set()
                    if reply is not None:
                        reply.set(None)
                    break
                if not isinstance(message, _Wake):
                    self._receive(message, reply)
        finally:
            self._stopped.set()
            with self._post_lock:
                self._sealed = True
            self.on_stop()
            self._answer_left()

    def _receive(self, message: Any, reply: pykka.Future[Any] | None) -> None:
        with self.turn_lock:
            if self._stopped.is_set():  # halted meanwhile by a failure run inline
                if reply is not None:
                    reply.set_exception(self._dead())
                return
            try:
                answer = self._supervised(message)
            except Exception:
                if reply is not None:
                    reply.set_exception()
                    return
                # A told message has nobody to hand the error to: stop, as pykka does
                # (a fault was logged and reported by _supervised already).
                if not self._stopped.is_set():
                    _log.error("actor.tell_failed", exc_info=True)
                    self._stopped.set()
                return
        if reply is not None:
            reply.set(answer)

    def _answer_left(self) -> None:
        while True:
            try:
                message, reply = self._inbox.get_nowait()
            except queue.Empty:
                return
            if reply is None:
                continue
            if isinstance(message, _Stop):
                reply.set(None)
            else:
                reply.set_exception(self._dead())

    def _dead(self) -> tuple[type[BaseException], BaseException, None]:
        error = pykka.ActorDeadError(f"{self.kind} actor of {self.key.session_id} stopped")
        return (type(error), error, None)

    # -- hooks and handling ------------------------------------------------------------

    def on_start(self) -> None:
        """Bind ``session_id`` and ``actor`` for the thread's life, log the start.

        Runs on the actor thread, which serves only this actor, so the binding holds for
        every message it handles. Never raises: state is loaded on first use.
        """
        bind_contextvars(session_id=self.key.session_id, actor=self.kind)
        _log.debug("actor.started")

    def on_stop(self) -> None:
        """Log the stop (actor thread, or the thread that stopped an unstarted actor)."""
        _log.debug("actor.stopped", actor=self.kind, session_id=self.key.session_id)

    def context(self, message: Any) -> dict[str, Any]:
        """Return extra log context for ``message`` (``viewer``, ``run_id``); default none."""
        return {}

    @abc.abstractmethod
    def handle(self, message: Any) -> Any:
        """Handle one message and return the answer (each actor kind defines it)."""

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
        inbox = self._inbox
        if not inbox.empty() or not self.turn_lock.acquire(blocking=False):
            return False, None
        try:
            if not inbox.empty() or self._stopped.is_set():
                return False, None
            return True, self._supervised(message, session_id=self.key.session_id, actor=self.kind)
        finally:
            self.turn_lock.release()

    def hold(self) -> bool:
        """Take :attr:`turn_lock` if the actor is idle, for a write settled on another thread.

        Idle means what it means for :meth:`run_inline`. The caller hands the lock on
        (e.g. to the store's writer, which releases it once the write is settled), so
        the actor keeps handling one message at a time while no thread waits.

        Returns:
            Whether the lock is now held (the caller must see it released).

        Cost: O(1); never blocks.
        """
        inbox = self._inbox
        if not inbox.empty() or not self.turn_lock.acquire(blocking=False):
            return False
        if not inbox.empty() or self._stopped.is_set():
            self.turn_lock.release()
            return False
        return True

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
            self.hub._crashed(self.key, self)
            self._halt()
            raise ActorCrashed(self.kind, self.key.session_id, repr(exc)) from exc
        finally:
            reset_contextvars(**tokens)

    def _halt(self) -> None:
        # Stop now, not after the queued messages: those are answered ActorDeadError
        # (by the loop's teardown, or by _receive seeing the stopped flag) and resent by
        # the Hub to a fresh actor. From another thread, wake the loop so it ends.
        if threading.current_thread() is self._thread:
            self._stopped.set()
            return
        if self.halt_unstarted():
            return
        self._stopped.set()
        self._post(_Wake(), None)
