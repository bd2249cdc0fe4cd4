"""The actor base: naming, supervision and logging context shared by the Hub's actors.

Supervision, in one place (the Hub holds the policy, the actor only reports):

- A handler that raises a :class:`~sharedesk.SharedeskError` (bad input, a conflict, a
  closed store) hands that error back to its caller; the actor keeps running, because
  such an error leaves its state as it was.
- A handler that raises anything else is a fault. The actor logs ``actor.crashed``,
  tells the Hub (which counts the restart against the session's restart intensity and
  forgets the actor), stops at once, and hands :class:`~sharedesk.ActorCrashed` (cause
  chained) to the caller. Requests queued behind the failed one are answered by pykka
  with ``ActorDeadError`` and the Hub resends them to a fresh actor, which recovers its
  state from the store; callers see the result, never a hang.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, ClassVar, Final, Protocol

import msgspec
import pykka
import structlog
from structlog.contextvars import bound_contextvars

from sharedesk.protocol.errors import ActorCrashed, SharedeskError
from sharedesk.protocol.ports import EventStore, SharingStateStore
from sharedesk.protocol.views import Conversation, Projection

_log = structlog.get_logger()

#: Prefix of the name of every thread the Hub starts (actors and the idle reaper).
THREAD_PREFIX: Final = "sharedesk-"

_thread_numbers = itertools.count(1)


class HubStore(EventStore, SharingStateStore, Protocol):
    """What the Hub needs of a store: the event-store and the sharing-state ports."""


class ActorKey(msgspec.Struct, frozen=True):
    """Names one actor of a Hub.

    Attributes:
        kind: ``"session"``, ``"projector"`` or ``"sharing"``.
        session_id: The session the actor serves.
        viewer: The viewer's author key (projectors only).
        conversation: The conversation projected (projectors only).
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
    """The Hub's record of one running actor (guarded by the Hub's lock).

    Attributes:
        key: The actor's name.
        ref: Its pykka reference.
        thread: The thread it runs on (set when it starts).
        users: Requests in flight through the Hub; an actor in use is never passivated.
        last_used: ``time.monotonic()`` of the last request.
        snapshot: The projector's newest view (projectors only; replaced, never mutated).
    """

    __slots__ = ("key", "last_used", "ref", "snapshot", "thread", "users")

    def __init__(self, key: ActorKey, now: float) -> None:
        self.key = key
        self.ref: pykka.ActorRef[Any] | None = None
        self.thread: threading.Thread | None = None
        self.users = 0
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

    def subscribers(self, session_id: str) -> tuple[pykka.ActorRef[Any], ...]:
        """Return the projectors subscribed to ``session_id``'s committed events."""
        ...

    def call(self, key: ActorKey, message: Any) -> Any:
        """Send ``message`` to the actor ``key`` (started if needed) and return its answer."""
        ...


class HubActor(pykka.ThreadingActor):
    """Base of the Hub's actors: a named thread, supervision and per-message log context.

    Threads: ``__init__`` runs in the thread that starts the actor (the Hub, holding its
    lock; it must stay cheap); every other hook and handler runs in the actor's own
    thread, named ``sharedesk-<kind>-<n>``. Subclasses implement :meth:`handle`.
    """

    #: The actor kind, as in :class:`ActorKey`.
    kind: ClassVar[str] = "actor"

    def __init__(self, hub: Supervisor, key: ActorKey, slot: Slot) -> None:
        super().__init__()
        self.hub = hub
        self.key = key
        self.slot = slot

    def _start_actor_loop(self) -> None:
        # As pykka's ThreadingActor, but the thread gets our name and the Hub keeps it,
        # so close() can join it and tests can find every thread of ours.
        thread = threading.Thread(
            target=self._actor_loop,
            name=f"{THREAD_PREFIX}{self.kind}-{next(_thread_numbers)}",
            daemon=False,
        )
        self.slot.thread = thread
        thread.start()

    def on_start(self) -> None:
        """Log the start (actor thread). Never raises: state is loaded on first use."""
        _log.debug("actor.started", actor=self.kind, session_id=self.key.session_id)

    def on_stop(self) -> None:
        """Log the stop (actor thread). Never raises."""
        _log.debug("actor.stopped", actor=self.kind, session_id=self.key.session_id)

    def context(self, message: Any) -> dict[str, Any]:
        """Return extra log context for ``message`` (``viewer``, ``run_id``); default none."""
        return {}

    def handle(self, message: Any) -> Any:
        """Handle one message and return the answer (actor thread)."""
        raise NotImplementedError

    def on_receive(self, message: Any) -> Any:
        """Run :meth:`handle` inside the message's log context, supervising it.

        Raises:
            SharedeskError: As raised by the handler; the actor keeps running.
            ActorCrashed: The handler raised anything else; the actor has stopped and
                the Hub will start a fresh one on the next request.
        """
        with bound_contextvars(
            session_id=self.key.session_id,
            actor=self.kind,
            msg=type(message).__name__,
            **self.context(message),
        ):
            try:
                return self.handle(message)
            except SharedeskError:
                raise
            except Exception as exc:
                _log.error("actor.crashed", exc_info=True)
                self.hub.crashed(self.key, self.actor_ref)
                # Stop now (not after the queued messages): those get ActorDeadError
                # from pykka and are resent by the Hub to a fresh actor.
                self._stop()
                raise ActorCrashed(self.kind, self.key.session_id, repr(exc)) from exc
