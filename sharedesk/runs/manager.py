"""SessionManager: sessions and runs as folds over a session's events.

Design (everything below is a rule the tests check):

* **One source of truth.** A session and its runs are never stored as records: their
  state is folded from events. ``start_session`` appends ``SessionStarted(metadata)``;
  ``start_run`` appends the input as ``Text`` rows (``Operator()``, or
  ``System(kind="prompt")`` for role ``"system"``); execution appends
  ``RunStarted(provider, model, provider_session_id)``, whatever the adapter emits, and
  ``RunFinished(status, ...)``. Every event of a run carries its ``run_id``.
* **Run ids name their session.** A run id is ``"<32 hex>@<session_id>"``, so
  ``execute_run(store, adapter, run_id)`` and ``cancel_run(store, run_id)`` find the
  session in O(1) with nothing but the store port. The run's own events get ids derived
  from the hex part (``<hex>.input.<i>``, ``<hex>.started``, ``<hex>.finished``), which
  makes each lifecycle step idempotent and single: the store keeps the first
  ``<hex>.finished`` and returns it to any later writer, so a cancel racing a timeout or
  a completion has exactly one winner, and every loser learns who won.
* **Finding a run** walks the session newest first in pages of ``PAGE_SIZE`` until it
  reaches the run's first input row: the cost grows with the events appended since the
  run was started, not with the whole history.
* **Cancellation crosses threads through the store.** ``cancel_run`` appends the run's
  ``RunFinished(status="cancelled")``. The thread executing the run polls the store for
  events after the last one it saw (5 ms, doubling to at most 100 ms) and stops waiting
  as soon as it sees its run finished. ``emit`` appends with ``expected_version`` (the
  last sequence it checked), so an event can never land after the run's
  ``RunFinished``: emitting into a finished run raises ``RunStateError``.
* **Adapters run in a worker thread** (a daemon thread per execution), so a timeout or a
  cancel returns promptly. An adapter still running then is *abandoned*, not killed
  (Python cannot kill a thread): it runs to its end, and each event it emits is refused.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import msgspec

from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import Agent, Operator, SessionAuthor, System
from sharedesk.protocol.constants import PAGE_SIZE
from sharedesk.protocol.errors import (
    ConcurrencyError,
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunStateError,
    RunTimeout,
    ValidationError,
)
from sharedesk.protocol.events import (
    Event,
    RunFinished,
    RunStarted,
    SessionStarted,
    Text,
)
from sharedesk.protocol.ports import EventStore
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.validation import check_optional_int, check_session_id
from sharedesk.runs.types import (
    CONTINUATION_MODES,
    CONTINUATION_OPTS,
    Adapter,
    AdapterResult,
    Run,
    RunResult,
    Session,
)

_NO_OPTS: Final[Mapping[str, Any]] = MappingProxyType({})

#: Id of the one ``SessionStarted`` event of a session (idempotent start).
SESSION_STARTED_ID: Final = "sharedesk.session_started"
#: Author of the lifecycle events the manager writes.
LIFECYCLE_AUTHOR: Final = System(kind="run", label="sharedesk")
#: Author of ``SessionStarted``.
SESSION_AUTHOR: Final = System(kind="session", label="sharedesk")
#: Author of input rows with role ``"system"``.
SYSTEM_PROMPT_AUTHOR: Final = System(kind="prompt", label="system")

_HEX_LEN: Final = 32
_FIRST_POLL_S: Final = 0.005
_MAX_POLL_S: Final = 0.1
_EMIT_ATTEMPTS: Final = 64
_INPUT_ROLES: Final = frozenset({"user", "system"})


def new_run_id(session_id: str) -> str:
    """Return a fresh run id of ``session_id``: ``"<32 hex>@<session_id>"``. Cost: O(1)."""
    return f"{uuid.uuid4().hex}@{session_id}"


def parse_run_id(run_id: Any) -> tuple[str, str]:
    """Split a run id into its hex part and its session id.

    Raises:
        RunNotFound: ``run_id`` is not shaped like a run id.

    Cost: O(len(run_id)); no I/O.
    """
    if not isinstance(run_id, str) or len(run_id) <= _HEX_LEN + 1 or run_id[_HEX_LEN] != "@":
        raise RunNotFound(str(run_id))
    hexid, session_id = run_id[:_HEX_LEN], run_id[_HEX_LEN + 1 :]
    if any(c not in "0123456789abcdef" for c in hexid):
        raise RunNotFound(run_id)
    return hexid, session_id


def _input_id(hexid: str, index: int) -> str:
    return f"{hexid}.input.{index}"


def _started_id(hexid: str) -> str:
    return f"{hexid}.started"


def _finished_id(hexid: str) -> str:
    return f"{hexid}.finished"


def normalize_input(input: Any) -> list[dict[str, str]]:
    """Return a run input as a list of ``{"role", "content"}`` dicts.

    Args:
        input: A prompt string, or a non-empty sequence of mappings with exactly the keys
            ``"role"`` (``"user"`` or ``"system"``) and ``"content"`` (a ``str``).

    Raises:
        ValidationError: Any other shape, naming the offending item.

    Cost: O(len(input)); no I/O.
    """
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    if not isinstance(input, Sequence) or isinstance(input, bytes):
        raise ValidationError(
            f"input must be a str or a list of {{'role', 'content'}} dicts, "
            f"got {type(input).__name__}"
        )
    if not input:
        raise ValidationError("input must hold at least one message")
    messages: list[dict[str, str]] = []
    for index, item in enumerate(input):
        where = f"input[{index}]"
        if not isinstance(item, Mapping) or set(item) != {"role", "content"}:
            raise ValidationError(f"{where} must be a mapping with exactly 'role' and 'content'")
        role, content = item["role"], item["content"]
        if role not in _INPUT_ROLES:
            raise ValidationError(f"{where}.role must be 'user' or 'system', got {role!r}")
        if not isinstance(content, str):
            raise ValidationError(f"{where}.content must be a str, got {type(content).__name__}")
        messages.append({"role": role, "content": content})
    return messages


def fold_run(run_id: str, events: Sequence[Event]) -> Run | None:
    """Fold a run's state from events (others' events are ignored).

    Args:
        run_id: The run.
        events: Events of its session, oldest first (any subset holding the run's).

    Returns:
        The run, or ``None`` when its first input row is not among ``events``.

    Cost: O(len(events)); no I/O.
    """
    hexid, session_id = parse_run_id(run_id)
    first, started, finished = _input_id(hexid, 0), _started_id(hexid), _finished_id(hexid)
    inputs: list[dict[str, str]] = []
    seen_first = False
    status = "pending"
    provider = model = provider_session_id = None
    error_code = error_message = None
    token_usage: dict[str, Any] = {}
    done = False
    for event in events:
        if event.run_id != run_id:
            continue
        body = event.body
        if event.id == first:
            seen_first = True
        if event.id.startswith(f"{hexid}.input.") and isinstance(body, Text):
            role = "system" if isinstance(event.author, System) else "user"
            inputs.append({"role": role, "content": body.content})
        elif isinstance(body, RunStarted):
            if event.id == started:
                provider, model = body.provider, body.model
                if not done:
                    status = "running"
            if body.provider_session_id is not None:
                provider_session_id = body.provider_session_id
                model = body.model if body.model is not None else model
        elif isinstance(body, RunFinished) and event.id == finished:
            done = True
            status = body.status
            error_code, error_message = body.error_code, body.error_message
            token_usage = dict(body.token_usage)
    if not seen_first:
        return None
    return Run(
        id=run_id,
        session_id=session_id,
        status=status,
        input=inputs,
        provider=provider,
        model=model,
        provider_session_id=provider_session_id,
        error_code=error_code,
        error_message=error_message,
        token_usage=token_usage,
    )


def fold_session(session_id: str, events: Sequence[Event]) -> Session:
    """Fold a session's state from all its events.

    ``metadata`` is the ``SessionStarted`` metadata plus ``provider_sessions``, one entry
    per provider from the latest ``RunStarted`` that carried a provider session id.
    ``status`` is ``"active"`` while a run is pending or running, else ``"idle"``.

    Cost: O(len(events)); no I/O.
    """
    metadata: dict[str, Any] = {}
    provider_sessions: dict[str, dict[str, Any]] = {}
    open_runs: set[str] = set()
    for event in events:
        body = event.body
        if isinstance(body, SessionStarted) and event.id == SESSION_STARTED_ID:
            metadata = dict(body.metadata)
        elif isinstance(body, RunStarted) and body.provider_session_id is not None:
            provider_sessions[body.provider] = {
                "provider_session_id": body.provider_session_id,
                "model": body.model,
            }
        if event.run_id is None:
            continue
        if isinstance(body, RunFinished):
            open_runs.discard(event.run_id)
        elif event.id.endswith(".input.0"):
            open_runs.add(event.run_id)
    metadata["provider_sessions"] = provider_sessions
    return Session(
        id=session_id, status="active" if open_runs else "idle", metadata=metadata, context={}
    )


def read_run_events(store: EventStore, run_id: str) -> list[Event]:
    """Return the events of ``run_id``'s session from its first input row on, oldest first.

    Raises:
        RunNotFound: The run's first input row is not in its session.

    Cost: reads the session newest first in pages of ``PAGE_SIZE`` until the run's first
    input row; rows read = events appended since the run started (rounded up to a page).
    """
    hexid, session_id = parse_run_id(run_id)
    check_session_id(session_id)
    first = _input_id(hexid, 0)
    collected: list[Event] = []
    before: int | None = None
    while True:
        page = store.read(session_id, before=before, limit=PAGE_SIZE, newest_first=True)
        if not page:
            raise RunNotFound(run_id)
        for event in page:
            collected.append(event)
            if event.id == first and event.run_id == run_id:
                collected.reverse()
                return collected
        before = page[-1].sequence


def _check_adapter(adapter: Any) -> None:
    # Explicit attribute checks: isinstance() against the runtime-checkable Protocol
    # costs about 90 us a call, a tenth of a whole run on MemoryStore.
    if not (
        callable(getattr(adapter, "execute", None))
        and hasattr(adapter, "name")
        and hasattr(adapter, "native_continuation")
    ):
        raise ValidationError(
            f"adapter must have name, native_continuation and execute; got {type(adapter).__name__}"
        )
    if not isinstance(adapter.name, str) or not adapter.name:
        raise ValidationError(f"adapter.name must be a non-empty str, got {adapter.name!r}")


def _check_continuation(continuation: Any, adapter: Adapter) -> str | bool:
    if continuation is False:
        return False
    if not isinstance(continuation, str) or continuation not in CONTINUATION_MODES:
        raise ValidationError(
            f"continuation must be False, 'auto', 'replay' or 'native', got {continuation!r}"
        )
    if continuation == "native" and not adapter.native_continuation:
        raise ValidationError(
            f"continuation='native' but adapter {adapter.name!r} cannot continue natively"
        )
    return continuation


def _check_continuation_opts(opts: Any) -> dict[str, int | None]:
    if opts is None:
        return {}
    if not isinstance(opts, Mapping):
        raise ValidationError(f"continuation_opts must be a mapping, got {type(opts).__name__}")
    unknown = sorted(str(key) for key in opts if key not in CONTINUATION_OPTS)
    if unknown:
        raise ValidationError(
            f"continuation_opts has unknown keys {unknown}; allowed: {sorted(CONTINUATION_OPTS)}"
        )
    return {key: check_optional_int(f"continuation_opts[{key!r}]", opts[key]) for key in opts}


def _check_timeout(adapter_opts: Any) -> float | None:
    if adapter_opts is None:
        return None
    if not isinstance(adapter_opts, Mapping):
        raise ValidationError(f"adapter_opts must be a mapping, got {type(adapter_opts).__name__}")
    timeout = adapter_opts.get("timeout")
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValidationError(
            f"adapter_opts['timeout'] must be a positive number of seconds, got {timeout!r}"
        )
    return float(timeout)


def _replay(
    events: Sequence[Event],
    session_id: str,
    run_id: str,
    adapter: Adapter,
    budget: Mapping[str, int | None],
) -> Transcript:
    """Build the replay transcript: the session's events minus the current run's own."""
    earlier = [event for event in events if event.run_id != run_id]
    limit = budget.get("limit")
    if limit is not None:
        earlier = earlier[len(earlier) - limit :] if limit else []
    return TranscriptBuilder.from_events(
        earlier,
        session_id=session_id,
        viewer=Agent(id=adapter.name, label=adapter.name),
        max_messages=budget.get("max_messages"),
        max_chars=budget.get("max_chars"),
        max_tokens_approx=budget.get("max_tokens_approx"),
    )


def _finish(store: EventStore, run_id: str, body: RunFinished) -> tuple[Event, bool]:
    """Append the run's ``RunFinished``; return it as stored and whether ours won."""
    hexid, session_id = parse_run_id(run_id)
    token = uuid.uuid4().hex
    event = Event(
        LIFECYCLE_AUTHOR,
        body,
        id=_finished_id(hexid),
        run_id=run_id,
        metadata={"writer": token},
    )
    stored = store.append(session_id, [event])[0]
    return stored, stored.metadata.get("writer") == token


@dataclass(eq=False)
class _Execution:
    """One execution's in-process state, shared by the executing thread and the worker."""

    store: EventStore
    run_id: str
    session_id: str
    last_seen: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    finished: RunFinished | None = None
    result: AdapterResult | None = None
    error: BaseException | None = None
    emitted: list[Event] = field(default_factory=list)

    def check_store(self) -> None:
        """Read events after ``last_seen``; note our run's ``RunFinished`` (lock held)."""
        for event in self.store.read(self.session_id, after=self.last_seen):
            assert event.sequence is not None
            self.last_seen = max(self.last_seen, event.sequence)
            if event.run_id == self.run_id and isinstance(event.body, RunFinished):
                self.finished = event.body

    def emit(self, event: Event) -> Event:
        """Store one event of the run; refused once the run has finished."""
        if not isinstance(event, Event):
            raise ValidationError(f"emit takes an Event, got {type(event).__name__}")
        if event.run_id not in (None, self.run_id):
            raise ValidationError(f"emitted event carries run_id {event.run_id!r}, not this run's")
        if isinstance(event.body, RunFinished | SessionStarted):
            raise ValidationError(
                f"an adapter may not emit {type(event.body).__name__}; the manager writes it"
            )
        if event.run_id is None:
            event = msgspec.structs.replace(event, run_id=self.run_id)
        with self.lock:
            for _ in range(_EMIT_ATTEMPTS):
                if self.finished is not None:
                    raise RunStateError(self.run_id, self.finished.status, "emit")
                self.check_store()
                if self.finished is not None:
                    continue
                try:
                    stored = self.store.append(
                        self.session_id, [event], expected_version=self.last_seen
                    )[0]
                except ConcurrencyError:
                    continue
                assert stored.sequence is not None
                self.last_seen = max(self.last_seen, stored.sequence)
                self.emitted.append(stored)
                return stored
            raise ConcurrencyError(self.last_seen, self.store.last_sequence(self.session_id))

    def finish(self, body: RunFinished) -> tuple[Event, bool]:
        """Write our ``RunFinished`` and close emit; return it as stored and whether ours won."""
        with self.lock:
            stored, won = _finish(self.store, self.run_id, body)
            assert isinstance(stored.body, RunFinished)
            self.finished = stored.body
            self.emitted.append(stored)
            return stored, won


class SessionManager:
    """Sessions and runs over any :class:`~sharedesk.EventStore` (a store or a Hub).

    All methods are static: the manager keeps no state of its own; everything it knows
    it folds from the store.
    """

    @staticmethod
    def start_session(
        store: EventStore,
        *,
        session_id: str | None = None,
        metadata: Mapping[str, Any] = _NO_OPTS,
    ) -> Session:
        """Start a session by appending its ``SessionStarted(metadata)`` event.

        Starting the same session again with equal metadata is a no-op.

        Args:
            store: The store (or Hub).
            session_id: The session id; a fresh uuid4 hex when ``None``.
            metadata: JSON-like metadata; the key ``"provider_sessions"`` is reserved.

        Returns:
            The session, folded from all its events.

        Raises:
            ValidationError: A bad session id or metadata, or the session was already
                started with other metadata; nothing was written.

        Cost: one append of one event, then one read of the whole session.
        """
        sid = uuid.uuid4().hex if session_id is None else check_session_id(session_id)
        if not isinstance(metadata, Mapping):
            raise ValidationError(f"metadata must be a mapping, got {type(metadata).__name__}")
        if "provider_sessions" in metadata:
            raise ValidationError(
                "metadata key 'provider_sessions' is reserved: it is folded from RunStarted"
            )
        given = dict(metadata)
        event = Event(SESSION_AUTHOR, SessionStarted(metadata=given), id=SESSION_STARTED_ID)
        stored = store.append(sid, [event])[0]
        assert isinstance(stored.body, SessionStarted)
        if stored.body.metadata != given:
            raise ValidationError(
                f"session {sid!r} was already started with other metadata "
                f"({stored.body.metadata!r})"
            )
        logger().debug("session.started", session_id=sid)
        return fold_session(sid, store.read(sid))

    @staticmethod
    def get_session(store: EventStore, session_id: str) -> Session:
        """Return a session folded from its events (a session with no events is idle).

        Raises:
            ValidationError: A bad session id.

        Cost: one read of the whole session; no writes.
        """
        check_session_id(session_id)
        return fold_session(session_id, store.read(session_id))

    @staticmethod
    def start_run(store: EventStore, session_id: str, input: Any) -> Run:
        """Create a pending run by appending its input rows.

        The session need not have been started (any session id works, e.g. a Hub desk).

        Args:
            store: The store (or Hub).
            session_id: The session.
            input: A prompt string, or a list of ``{"role", "content"}`` dicts with role
                ``"user"`` (stored as a ``Text`` by ``Operator()``) or ``"system"``
                (stored as a ``Text`` by ``System(kind="prompt", label="system")``).

        Returns:
            The pending run.

        Raises:
            ValidationError: A bad session id or input; nothing was written.

        Cost: one append of ``len(input)`` events.
        """
        check_session_id(session_id)
        messages = normalize_input(input)
        run_id = new_run_id(session_id)
        hexid, _ = parse_run_id(run_id)
        events: list[Event] = []
        for index, message in enumerate(messages):
            author: SessionAuthor = (
                SYSTEM_PROMPT_AUTHOR if message["role"] == "system" else Operator()
            )
            events.append(
                Event(author, Text(message["content"]), id=_input_id(hexid, index), run_id=run_id)
            )
        store.append(session_id, events)
        logger().debug("run.created", session_id=session_id, run_id=run_id)
        return Run(id=run_id, session_id=session_id, status="pending", input=messages)

    @staticmethod
    def get_run(store: EventStore, run_id: str) -> Run:
        """Return a run folded from its events.

        Raises:
            RunNotFound: No such run.

        Cost: see :func:`read_run_events` (rows since the run started); no writes.
        """
        run = fold_run(run_id, read_run_events(store, run_id))
        if run is None:  # pragma: no cover - read_run_events found its first row
            raise RunNotFound(run_id)
        return run

    @staticmethod
    def execute_run(
        store: EventStore,
        adapter: Adapter,
        run_id: str,
        *,
        continuation: str | bool = False,
        continuation_opts: Mapping[str, Any] | None = _NO_OPTS,
        adapter_opts: Mapping[str, Any] | None = _NO_OPTS,
    ) -> RunResult:
        """Execute a pending run with ``adapter`` and record its life as events.

        Continuation: ``False`` gives the adapter no transcript; ``"replay"`` puts the
        transcript of the session's events (all but this run's own, so its input is not
        duplicated) in ``session.context["transcript"]``, seen by
        ``Agent(id=adapter.name, label=adapter.name)`` and cut by ``continuation_opts``
        (``limit`` keeps the newest events; ``max_messages``, ``max_chars``,
        ``max_tokens_approx`` bound the messages); ``"native"`` lets the adapter continue
        ``session.metadata["provider_sessions"][adapter.name]`` (its ``RunStarted``
        names that provider session); ``"auto"`` is native when the adapter can and a
        provider session id is stored, else replay.

        Args:
            store: The store (or Hub).
            adapter: The adapter; its ``execute`` runs in a worker thread.
            run_id: A pending run.
            continuation: ``False``, ``"auto"``, ``"replay"`` or ``"native"``.
            continuation_opts: ``limit``, ``max_messages``, ``max_chars``,
                ``max_tokens_approx`` (ints or ``None``).
            adapter_opts: Passed to ``adapter.execute`` unchanged (``None``: an empty
                dict); ``"timeout"`` (seconds) bounds the run.

        Returns:
            The run's result.

        Raises:
            RunNotFound: No such run.
            RunStateError: The run is not pending (already executed or cancelled).
            ValidationError: Not an adapter, or a bad continuation, continuation_opts or
                timeout; the run is recorded as failed (``error_code="validation_error"``).
            RunTimeout: The adapter overran ``adapter_opts["timeout"]``; recorded as
                ``"timeout"``; the adapter thread is abandoned.
            RunFailed: The adapter raised (chained as ``__cause__``); recorded as
                ``"failed"``.
            RunCancelled: ``cancel_run`` cancelled it while it ran.

        Cost: one read of the whole session; appends ``RunStarted``, each emitted event
        (one read of new rows plus one append each) and ``RunFinished``; while waiting,
        one read of new rows every 5-100 ms. Blocks until the run ends.
        """
        hexid, session_id = parse_run_id(run_id)
        check_session_id(session_id)
        events = store.read(session_id)
        run = fold_run(run_id, events)
        if run is None:
            raise RunNotFound(run_id)
        if run.status != "pending":
            raise RunStateError(run_id, run.status, "execute")
        log = logger().bind(session_id=session_id, run_id=run_id)
        session = fold_session(session_id, events)
        try:
            _check_adapter(adapter)
            mode = _check_continuation(continuation, adapter)
            budget = _check_continuation_opts(continuation_opts)
            timeout = _check_timeout(adapter_opts)
        except ValidationError as exc:
            _finish(
                store,
                run_id,
                RunFinished(
                    status="failed", error_code="validation_error", error_message=exc.message
                ),
            )
            log.info("run.refused", error=exc.message)
            raise
        provider_sessions: dict[str, Any] = session.metadata["provider_sessions"]
        stored_session = provider_sessions.get(adapter.name, {})
        continued = stored_session.get("provider_session_id")
        if mode == "auto":
            mode = "native" if adapter.native_continuation and continued else "replay"
        context: dict[str, Any] = {"continuation": mode}
        if mode == "replay":
            context["transcript"] = _replay(events, session_id, run_id, adapter, budget)
        model = getattr(adapter, "model", None)
        if not isinstance(model, str):
            model = stored_session.get("model") if mode == "native" else None
        claim = Event(
            LIFECYCLE_AUTHOR,
            RunStarted(
                provider=adapter.name,
                model=model,
                provider_session_id=continued if mode == "native" else None,
            ),
            id=_started_id(hexid),
            run_id=run_id,
            metadata={"writer": uuid.uuid4().hex},
        )
        stored_claim = store.append(session_id, [claim])[0]
        if stored_claim.metadata != claim.metadata:
            raise RunStateError(run_id, "running", "execute")
        assert stored_claim.sequence is not None
        execution = _Execution(store, run_id, session_id, last_seen=events[-1].sequence or 0)
        execution.emitted.append(stored_claim)
        log.debug("run.started", provider=adapter.name, continuation=mode)
        running = msgspec.structs.replace(
            run,
            status="running",
            provider=adapter.name,
            model=stored_claim.body.model,  # type: ignore[union-attr]
        )
        live_session = msgspec.structs.replace(session, status="active", context=context)
        opts = {} if adapter_opts is None or adapter_opts is _NO_OPTS else adapter_opts

        def work() -> None:
            try:
                outcome = adapter.execute(running, live_session, execution.emit, opts)
                if outcome is not None and not isinstance(outcome, AdapterResult):
                    raise ValidationError(
                        f"adapter {adapter.name!r} returned {type(outcome).__name__}, "
                        "expected AdapterResult or None"
                    )
                execution.result = outcome
            except BaseException as exc:
                execution.error = exc
            finally:
                execution.done.set()

        worker = threading.Thread(target=work, name=f"sharedesk-run-{hexid[:8]}", daemon=True)
        worker.start()
        try:
            return SessionManager._wait(execution, timeout, log)
        finally:
            if execution.done.is_set():
                worker.join()  # it has returned; only a timed-out or cancelled one is left

    @staticmethod
    def _wait(execution: _Execution, timeout: float | None, log: Any) -> RunResult:
        """Wait for the adapter, a cancel or the timeout, and finish the run once."""
        run_id = execution.run_id
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = _FIRST_POLL_S
        with execution.lock:
            execution.check_store()
        while execution.finished is None:
            wait = interval
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            if execution.done.wait(wait):
                break
            interval = min(interval * 2, _MAX_POLL_S)
            with execution.lock:
                execution.check_store()
            if (
                deadline is not None
                and time.monotonic() >= deadline
                and not execution.done.is_set()
            ):
                assert timeout is not None
                _, won = execution.finish(
                    RunFinished(
                        status="timeout",
                        error_code="timeout",
                        error_message=f"no result within {timeout} s",
                    )
                )
                if won:
                    log.info("run.timeout", timeout=timeout)
                    raise RunTimeout(run_id, timeout)
                break
        if execution.finished is None:
            # The adapter returned (or raised) before any other writer finished the run.
            if execution.error is not None:
                exc = execution.error
                code, message = type(exc).__name__, str(exc)
                _, won = execution.finish(
                    RunFinished(status="failed", error_code=code, error_message=message)
                )
                if won:
                    log.info("run.failed", error_code=code)
                    raise RunFailed(run_id, code, message) from exc
            else:
                outcome = execution.result or AdapterResult()
                _, won = execution.finish(
                    RunFinished(status="completed", token_usage=dict(outcome.token_usage))
                )
                if won:
                    log.debug("run.finished", status="completed")
                    output = outcome.output
                    if output is None:
                        texts = [e for e in execution.emitted if isinstance(e.body, Text)]
                        output = texts[-1].body.content if texts else None  # type: ignore[union-attr]
                    return RunResult(
                        output=output,
                        token_usage=dict(outcome.token_usage),
                        events=list(execution.emitted),
                        session_id=execution.session_id,
                        run_id=run_id,
                    )
        finished = execution.finished
        assert finished is not None
        log.info("run.finished_elsewhere", status=finished.status)
        if finished.status == "cancelled":
            raise RunCancelled(run_id)
        raise RunStateError(run_id, finished.status, "execute")

    @staticmethod
    def run_once(
        store: EventStore,
        adapter: Adapter,
        input: Any,
        *,
        session_id: str | None = None,
        continuation: str | bool = False,
        continuation_opts: Mapping[str, Any] | None = _NO_OPTS,
        adapter_opts: Mapping[str, Any] | None = _NO_OPTS,
    ) -> RunResult:
        """Start a session (or continue ``session_id``), start a run and execute it.

        A given ``session_id`` is continued as it is (no ``SessionStarted`` is written).
        Arguments and errors as :meth:`start_run` and :meth:`execute_run`.

        Cost: :meth:`start_session` (new session only), :meth:`start_run`, then
        :meth:`execute_run`. Blocks until the run ends.
        """
        if session_id is None:
            session_id = SessionManager.start_session(store).id
        run = SessionManager.start_run(store, session_id, input)
        return SessionManager.execute_run(
            store,
            adapter,
            run.id,
            continuation=continuation,
            continuation_opts=continuation_opts,
            adapter_opts=adapter_opts,
        )

    @staticmethod
    async def aexecute_run(
        store: Any,
        adapter: Any,
        run_id: str,
        *,
        continuation: str | bool = False,
        continuation_opts: Mapping[str, Any] | None = _NO_OPTS,
        adapter_opts: Mapping[str, Any] | None = _NO_OPTS,
    ) -> RunResult:
        """:meth:`execute_run` for asyncio code: never blocks the event loop.

        ``store`` may be an ``AsyncEventStore`` (an ``AsyncHub``) or an ``EventStore``;
        ``adapter.execute`` (or ``adapter.aexecute``, preferred when present) may be a
        coroutine function, handed a coroutine ``emit``. See :mod:`sharedesk.runs.aio`.

        Raises:
            As :meth:`execute_run`; ``CancelledError`` when the awaiting task is
            cancelled (the run is then cancelled as by :meth:`cancel_run`).

        Cost: as :meth:`execute_run`, on a thread of its own; the loop stays free.
        """
        from sharedesk.runs import aio

        return await aio.aexecute_run(
            store,
            adapter,
            run_id,
            continuation=continuation,
            continuation_opts=continuation_opts,
            adapter_opts=adapter_opts,
        )

    @staticmethod
    async def arun_once(
        store: Any,
        adapter: Any,
        input: Any,
        *,
        session_id: str | None = None,
        continuation: str | bool = False,
        continuation_opts: Mapping[str, Any] | None = _NO_OPTS,
        adapter_opts: Mapping[str, Any] | None = _NO_OPTS,
    ) -> RunResult:
        """:meth:`run_once` for asyncio code (see :meth:`aexecute_run`).

        Cost: as :meth:`run_once`; the loop stays free.
        """
        from sharedesk.runs import aio

        return await aio.arun_once(
            store,
            adapter,
            input,
            session_id=session_id,
            continuation=continuation,
            continuation_opts=continuation_opts,
            adapter_opts=adapter_opts,
        )

    @staticmethod
    def cancel_run(store: EventStore, session_or_run_id: str, run_id: str | None = None) -> Run:
        """Cancel a pending or running run.

        Call it as ``cancel_run(store, run_id)`` or ``cancel_run(store, session_id,
        run_id)``. The run's ``RunFinished(status="cancelled")`` is appended; a thread executing the
        run sees it within 100 ms, stops waiting and raises ``RunCancelled``. Safe to call
        from any thread (or, with a shared store, any process).

        Returns:
            The cancelled run.

        Raises:
            RunNotFound: No such run (or ``session_id`` is not the run's session).
            RunStateError: The run had already finished (``action="cancel"``, with the
                status it finished with); nothing was written.

        Cost: the rows since the run started (to find it), then one append.
        """
        if run_id is None:
            run_id = session_or_run_id
        elif parse_run_id(run_id)[1] != session_or_run_id:
            raise RunNotFound(run_id)
        run = SessionManager.get_run(store, run_id)
        if run.status not in ("pending", "running"):
            raise RunStateError(run_id, run.status, "cancel")
        stored, won = _finish(
            store,
            run_id,
            RunFinished(status="cancelled", error_code="cancelled", error_message="cancelled"),
        )
        if not won:
            assert isinstance(stored.body, RunFinished)
            raise RunStateError(run_id, stored.body.status, "cancel")
        logger().info("run.cancelled", session_id=run.session_id, run_id=run_id, was=run.status)
        return msgspec.structs.replace(
            run, status="cancelled", error_code="cancelled", error_message="cancelled"
        )
