"""Values of the runs layer: sessions, runs, results, and the adapter port.

The adapter port lives here, not in ``protocol/ports.py``: it takes :class:`Run` and
:class:`Session`, and nothing below ``runs/`` needs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import msgspec

from sharedesk.protocol.events import Event
from sharedesk.protocol.transcripts import Transcript

#: The continuation modes ``execute_run`` accepts (besides ``False``).
CONTINUATION_MODES: frozenset[str] = frozenset({"auto", "replay", "native"})

#: The keys ``continuation_opts`` accepts.
CONTINUATION_OPTS: frozenset[str] = frozenset(
    {"limit", "max_messages", "max_chars", "max_tokens_approx"}
)


class Session(msgspec.Struct, frozen=True):
    """A session, folded from its events.

    Attributes:
        id: The session id (the store's session key).
        status: ``"active"`` while one of its runs is pending or running, else ``"idle"``.
        metadata: The metadata given to ``start_session``, plus
            ``metadata["provider_sessions"][provider] == {"provider_session_id", "model"}``
            from the latest ``RunStarted`` of each provider carrying a provider session id.
        context: What an execution hands its adapter: ``"continuation"`` (the mode used)
            and, for a replay, ``"transcript"``. Empty on a session read from the store.
    """

    id: str
    status: str
    metadata: dict[str, Any] = {}
    context: dict[str, Any] = {}


class Run(msgspec.Struct, frozen=True):
    """A run, folded from the events that carry its id.

    Attributes:
        id: The run id (``"<32 hex>@<session_id>"``).
        status: ``"pending"`` (input stored), ``"running"`` (``RunStarted`` stored), or
            the status of its ``RunFinished``.
        input: The input messages as ``{"role", "content"}`` dicts.
        provider: The adapter that executed it, once started.
        model: The model its ``RunStarted`` named, when known.
        provider_session_id: The provider session the run used, when known.
        error_code: Why it did not complete (``RunFinished.error_code``).
        error_message: A description of the failure.
        token_usage: Token counts recorded when it finished.
    """

    id: str
    session_id: str
    status: str
    input: list[dict[str, str]] = []
    provider: str | None = None
    model: str | None = None
    provider_session_id: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    token_usage: dict[str, Any] = {}


class RunResult(msgspec.Struct, frozen=True):
    """What a completed run produced.

    Attributes:
        output: ``AdapterResult.output``, else the content of the last ``Text`` emitted.
        token_usage: Token counts reported by the adapter.
        events: The events this execution stored: ``RunStarted``, what the adapter
            emitted, ``RunFinished``.
    """

    output: Any
    token_usage: dict[str, Any]
    events: list[Event]
    session_id: str
    run_id: str


class AdapterResult(msgspec.Struct, frozen=True):
    """What an adapter's ``execute`` may return (returning ``None`` is also allowed).

    Attributes:
        output: The run's output (e.g. the reply text).
        token_usage: Token counts reported by the provider; recorded in ``RunFinished``.
    """

    output: Any = None
    token_usage: dict[str, Any] = {}


class ScriptedCall(msgspec.Struct, frozen=True):
    """One call a :class:`~sharedesk.runs.ScriptedAdapter` received.

    Attributes:
        input: The run's input messages.
        transcript: ``session.context["transcript"]``, or ``None`` when none was given.
        opts: The ``adapter_opts`` the call received.
    """

    input: list[dict[str, str]]
    transcript: Transcript | None
    opts: dict[str, Any]


class RunQueueStatus(msgspec.Struct, frozen=True):
    """A snapshot of one session's run queue.

    Attributes:
        running: Runs of the session executing now.
        queued: Runs of the session waiting for a free slot.
        max_concurrent_runs: The queue's per-session concurrency limit.
        max_queued_runs: The queue's per-session waiting limit.
        closed: Whether the queue was closed.
    """

    session_id: str
    running: int
    queued: int
    max_concurrent_runs: int
    max_queued_runs: int
    closed: bool = False


#: ``emit(event)`` appends ``event`` to the run's session (``run_id`` set to the run's)
#: and returns it as stored; a ``TextDelta`` is buffered and returned at once, unstamped.
#: It raises ``RunStateError`` once the run has finished.
Emit = Callable[[Event], Event]

#: The emit a coroutine adapter gets from ``SessionManager.aexecute_run``, awaited.
AsyncEmit = Callable[[Event], Awaitable[Event]]


@runtime_checkable
class Adapter(Protocol):
    """A provider adapter: what ``SessionManager.execute_run`` drives.

    It reports output by emitting events (a provider session as ``RunStarted(provider=
    self.name, model=..., provider_session_id=...)``) and may return an
    :class:`AdapterResult`. ``SessionManager.aexecute_run`` prefers a coroutine
    ``aexecute(run, session, emit, opts)`` (``emit`` an :data:`AsyncEmit`). An optional
    ``author`` is the participant it runs as (default ``Agent(id=name, label=name)``).
    """

    @property
    def name(self) -> str:
        """The provider name: ``RunStarted.provider`` and the replay viewer's agent id."""
        ...

    @property
    def native_continuation(self) -> bool:
        """Whether the adapter can continue its provider's own session."""
        ...

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult | None:
        """Execute ``run`` (on a worker thread); ``session.context`` carries the continuation.

        ``opts`` are the ``adapter_opts`` given to ``execute_run``.
        """
        ...
