"""The actor base: a :class:`pykka.ThreadingActor` with the Hub's supervision and log context.

Supervision, in one place (the supervisor holds the policy, the actor reports): a handler
raising a :class:`~sharedesk.SharedeskError` hands it to its caller and the actor keeps
running (such an error leaves its state as it was). Anything else is a fault: the actor
logs ``actor.crashed``, marks itself failed, tells the supervisor (which forgets it,
counts the restart and stops it) and hands :class:`~sharedesk.ActorCrashed` (cause
chained) to the caller. Requests that reach it before its stop get ``ActorDeadError``
and are resent to a fresh actor, which recovers from the store.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol

import msgspec
import pykka
from structlog.contextvars import bind_contextvars, reset_contextvars

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import ActorCrashed, SharedeskError
from sharedesk.protocol.ports import RunIndexStore, SharingStateStore, WritingStore
from sharedesk.protocol.views import Conversation, Projection

if TYPE_CHECKING:
    from sharedesk.actors.supervisor import ActorSupervisor

_log = logger()

#: Prefix of the name of every thread the Hub starts (actors and the idle reaper).
THREAD_PREFIX: Final = "sharedesk-"


class HubStore(RunIndexStore, SharingStateStore, WritingStore, Protocol):
    """What the Hub needs of a store: the run-index, sharing-state and write ports."""


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
    """A projector's newest ``projection`` for ``window``, of every event up to ``through``.

    Published in the slot for the Hub's lock-free reads.
    """

    window: int
    through: int
    projection: Projection


@dataclass(eq=False, slots=True)
class Slot:
    """The supervisor's record of one running actor (created and removed under its lock).

    The fields but ``key`` and ``ref`` change without the lock (single assignments and
    list appends/pops, atomic in CPython).
    """

    key: ActorKey
    last_used: float  # time.monotonic() at the end of the last request
    ref: pykka.ActorRef[HubActor] = field(init=False)  # set as it starts, before it is kept
    thread: threading.Thread | None = None  # set by the actor as it starts; joined at close
    pins: list[None] = field(default_factory=list)  # one per request in flight: kept running
    touched: bool = False  # used since CLOCK last passed it over (its reference bit)
    snapshot: ViewSnapshot | None = None  # a projector's newest view (replaced, not mutated)


class HubActor(pykka.ThreadingActor):
    """Base of the Hub's actors; subclasses implement :meth:`handle`.

    ``__init__`` runs on the thread starting the actor (no I/O); ``on_start``,
    ``on_receive`` (one message at a time, supervised) and ``on_stop`` (only logs) on
    the actor's thread.
    """

    #: The actor kind, as in :class:`ActorKey`.
    kind: ClassVar[str] = "actor"
    #: Actor threads never keep the interpreter alive (the Hub's exit hook stops them).
    use_daemon_thread: ClassVar[bool] = True

    def __init__(self, hub: ActorSupervisor, key: ActorKey, slot: Slot) -> None:
        super().__init__()
        self.hub = hub
        self.key = key
        self.slot = slot
        #: Set once a handler failed: every later message is answered ``ActorDeadError``.
        self.failed = False

    def on_start(self) -> None:
        """Name the thread, record it in the slot, bind ``session_id``, ``actor``, ``viewer``."""
        thread = threading.current_thread()
        thread.name = self.hub.thread_name(self.kind)
        self.slot.thread = thread
        viewer = {} if self.key.viewer is None else {"viewer": self.key.viewer}
        bind_contextvars(session_id=self.key.session_id, actor=self.kind, **viewer)
        _log.debug("actor.started")

    def on_stop(self) -> None:
        """Log the stop (actor thread)."""
        _log.debug("actor.stopped")

    def context(self, message: Any) -> dict[str, Any]:
        """Return extra log context for ``message`` (``viewer``, ``run_id``); default none."""
        return {}

    def handle(self, message: Any) -> Any:
        """Handle one message and return the answer (each actor kind defines it)."""
        raise TypeError(f"unexpected message {type(message).__name__}")

    def on_receive(self, message: Any) -> Any:
        """Run :meth:`handle` in the message's log context, supervised (see the module).

        Raises ``ActorDeadError`` once the actor failed, the handler's ``SharedeskError``,
        or ``ActorCrashed``.
        """
        if self.failed:
            raise pykka.ActorDeadError(f"{self.kind} actor of {self.key.session_id} failed")
        tokens = bind_contextvars(msg=type(message).__name__, **self.context(message))
        try:
            return self.handle(message)
        except SharedeskError:
            raise
        except Exception as exc:
            _log.error("actor.crashed", exc_info=True)
            self.failed = True
            self.hub.crashed(self.key, self.slot)
            raise ActorCrashed(self.kind, self.key.session_id, repr(exc)) from exc
        finally:
            reset_contextvars(**tokens)
