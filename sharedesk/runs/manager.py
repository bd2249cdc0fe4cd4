"""SessionManager: sessions and runs as folds over a session's events.

Design (everything below is a rule the tests check):

* **One source of truth.** A session and its runs are never stored as records: their
  state is folded from events. ``start_session`` appends ``SessionStarted(metadata)``;
  ``start_run`` appends the input as ``Text`` rows by its ``author`` (``Operator()`` by
  default, ``System(kind="prompt")`` for role ``"system"``); execution appends
  ``RunStarted(provider, model, provider_session_id)``, whatever the adapter emits, and
  ``RunFinished(status, ...)``. Every event of a run carries its ``run_id``.
* **Reads cost the answer, not the history.** A store with the run-index port
  (:class:`~sharedesk.protocol.ports.RunIndexStore`: ``MemoryStore``, ``LmdbStore``, the
  ``Hub``) folds each session's state as events are appended and indexes each run's
  events, so ``get_session`` is one lookup, ``get_run`` reads the run's own events, and
  ``execute_run`` reads those plus, for a replay, the newest events its budget needs
  (read from the tail, see ``TranscriptBuilder.from_store``). Over a store with only the
  event-store port the manager walks the session instead (newest first down to the
  run's first input row; the whole session for ``get_session``).
* **Run ids name their session.** A run id is ``"<32 hex>@<session_id>"``, so
  ``execute_run(store, adapter, run_id)`` and ``cancel_run(store, run_id)`` find the
  session in O(1) with nothing but the store port. The run's own events get ids derived
  from the hex part (``<hex>.input.<i>``, ``<hex>.started``, ``<hex>.finished``), which
  makes each lifecycle step idempotent and single: the store keeps the first
  ``<hex>.finished`` and returns it to any later writer, so a cancel racing a timeout or
  a completion has exactly one winner, and every loser learns who won.
* **Participants.** An adapter may carry ``author`` (a ``SessionAuthor``): the replayed
  transcript is built for it (its own rows ``"assistant"``, everyone else's ``"user"``
  with their author kept), and the rows it emits are its own. Without one the adapter
  is ``Agent(id=name, label=name)``.
* **A busy desk never fails a run.** ``emit`` appends with ``unless_stored`` naming the
  run's ``<hex>.finished``: the store checks, inside its write transaction, only what
  must hold (the run has not finished), never the desk's last sequence, so rows others
  append meanwhile cannot refuse it. (Over a store with only the event-store port,
  ``emit`` falls back to ``expected_version`` and retries.) Emitting into a finished run
  raises ``RunStateError``: nothing ever lands after a run's ``RunFinished``.
* **Streaming.** ``emit`` of a ``TextDelta`` returns at once, unstamped (``sequence``
  ``None``): chunks are buffered and appended, in order, in one append with the run's
  next other event (usually the closing ``Text``) or once they are more than
  ``STREAM_FLUSH_S`` old or ``STREAM_FLUSH_CHUNKS`` many; consecutive chunks of one
  author are stored joined, as one ``TextDelta`` per flush (:func:`coalesce_chunks`). A
  crash in the middle of a stream can lose only chunks not yet appended, never an
  acknowledged event.
* **Cancellation crosses threads through the store.** ``cancel_run`` appends the run's
  ``RunFinished(status="cancelled")``. The thread executing the run polls the store
  (5 ms, doubling to at most 100 ms; the session's state, one lookup) and stops waiting
  as soon as it sees its run finished.
* **Adapters run in a worker thread** (a daemon thread per execution), so a timeout or a
  cancel returns promptly. An adapter still running then is *abandoned*, not killed
  (Python cannot kill a thread): it runs to its end, and each event it emits is refused.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import msgspec

from sharedesk.projection.runstate import fold_session_events
from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import Agent, Operator, SessionAuthor, System
from sharedesk.protocol.constants import PAGE_SIZE
from sharedesk.protocol.errors import (
    AlreadyStored,
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
    TextDelta,
)
from sharedesk.protocol.ports import EventStore, RunIndexStore
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SESSION_STARTED_ID, SessionState
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.validation import check_author, check_optional_int, check_session_id
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

#: Author of the lifecycle events the manager writes.
LIFECYCLE_AUTHOR: Final = System(kind="run", label="sharedesk")
#: Author of ``SessionStarted``.
SESSION_AUTHOR: Final = System(kind="session", label="sharedesk")
#: The default author of a run's input rows.
OPERATOR: Final = Operator()
#: Author of input rows with role ``"system"``.
SYSTEM_PROMPT_AUTHOR: Final = System(kind="prompt", label="system")

_HEX_LEN: Final = 32
_FIRST_POLL_S: Final = 0.005
_MAX_POLL_S: Final = 0.1
_EMIT_ATTEMPTS: Final = 64
_INPUT_ROLES: Final = frozenset({"user", "system"})
#: A buffered ``TextDelta`` older than this (seconds) is appended with the next emit.
STREAM_FLUSH_S: Final = 0.05
#: Most ``TextDelta`` chunks buffered before they are appended.
STREAM_FLUSH_CHUNKS: Final = 1024

__all__ = [
    "LIFECYCLE_AUTHOR",
    "SESSION_AUTHOR",
    "SESSION_STARTED_ID",
    "STREAM_FLUSH_CHUNKS",
    "STREAM_FLUSH_S",
    "SYSTEM_PROMPT_AUTHOR",
    "SessionManager",
    "ExecutionPlan",
    "adapter_author",
    "coalesce_chunks",
    "fold_run",
    "fold_session",
    "new_run_id",
    "normalize_input",
    "parse_run_id",
    "plan_execution",
    "read_run_events",
    "run_index",
    "session_of",
]


def coalesce_chunks(chunks: Sequence[Event]) -> list[Event]:
    """Join each run of consecutive ``TextDelta`` chunks that differ only in id and text.

    Chunks buffered together are stored as one ``TextDelta`` holding their text in order
    (the first chunk's id, author, run, parent and metadata): a reader sees the same text
    in the same order, and a stream costs one stored row per flush, not one per chunk.

    Cost: O(len(chunks)); no I/O.
    """
    joined: list[Event] = []
    parts: list[str] = []
    for chunk in chunks:
        body = chunk.body
        assert isinstance(body, TextDelta)
        if joined:
            last = joined[-1]
            if (
                last.author == chunk.author
                and last.run_id == chunk.run_id
                and last.parent == chunk.parent
                and last.metadata == chunk.metadata
            ):
                parts.append(body.delta)
                continue
            joined[-1] = _with_delta(last, parts)
        joined.append(chunk)
        parts = [body.delta]
    if joined:
        joined[-1] = _with_delta(joined[-1], parts)
    return joined


def _with_delta(event: Event, parts: list[str]) -> Event:
    if len(parts) == 1:
        return event
    return msgspec.structs.replace(event, body=TextDelta("".join(parts)))


def run_index(store: Any) -> RunIndexStore | None:
    """Return ``store`` when it has the run-index port (state and run index), else ``None``.

    Cost: O(1).
    """
    if callable(getattr(store, "run_events", None)) and callable(
        getattr(store, "session_state", None)
    ):
        return store  # type: ignore[no-any-return]
    return None


def adapter_author(adapter: Any) -> SessionAuthor:
    """Return the participant an adapter runs as: its ``author``, else ``Agent(name, name)``.

    Raises:
        ValidationError: ``adapter.author`` is set but not a ``SessionAuthor``.

    Cost: O(1).
    """
    author = getattr(adapter, "author", None)
    if author is None:
        return Agent(id=adapter.name, label=adapter.name)
    return check_author(author, "adapter.author")


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
            role = event.metadata.get("role")
            if role not in _INPUT_ROLES:  # rows written before the role was recorded
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


def session_of(session_id: str, state: SessionState) -> Session:
    """Return the :class:`Session` a folded :class:`SessionState` describes. Cost: O(state)."""
    metadata = dict(state.metadata)
    metadata["provider_sessions"] = {
        provider: dict(entry) for provider, entry in state.provider_sessions.items()
    }
    return Session(
        id=session_id,
        status="active" if state.open_runs else "idle",
        metadata=metadata,
        context={},
    )


def fold_session(session_id: str, events: Sequence[Event]) -> Session:
    """Fold a session's state from all its events.

    ``metadata`` is the ``SessionStarted`` metadata plus ``provider_sessions``, one entry
    per provider from the latest ``RunStarted`` that carried a provider session id.
    ``status`` is ``"active"`` while a run is pending or running, else ``"idle"``. The
    fold is the one stores apply as events are appended
    (:func:`~sharedesk.projection.runstate.fold_session_state`).

    Cost: O(len(events)); no I/O.
    """
    return session_of(session_id, fold_session_events(EMPTY_SESSION_STATE, list(events)))


def _read_session(store: EventStore, session_id: str) -> Session:
    index = run_index(store)
    if index is not None:
        return session_of(session_id, index.session_state(session_id))
    return fold_session(session_id, store.read(session_id))


def _read_run(store: EventStore, run_id: str) -> list[Event]:
    """Return the run's events from the run index, else the session's from its first row."""
    _, session_id = parse_run_id(run_id)
    check_session_id(session_id)
    index = run_index(store)
    if index is None:
        return read_run_events(store, run_id)
    events = index.run_events(session_id, run_id)
    if not events:
        raise RunNotFound(run_id)
    return events


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


def start_once(
    store: EventStore, adapter: Any, session_id: str | None, input: Any, author: SessionAuthor
) -> str:
    """Check ``adapter``, then start the session (if none is given) and the run; return its id.

    Shared by :meth:`SessionManager.run_once` and the async runs module, so both refuse
    something that is not an adapter before anything is written.

    Raises:
        ValidationError: Not an adapter (nothing written), or bad ``start_run`` input.

    Cost: :meth:`SessionManager.start_session` (new session only), then
    :meth:`SessionManager.start_run`.
    """
    check_adapter(adapter)
    if session_id is None:
        session_id = SessionManager.start_session(store).id
    return SessionManager.start_run(store, session_id, input, author=author).id


def check_adapter(adapter: Any) -> None:
    """Check that ``adapter`` has a non-empty ``name``, ``native_continuation`` and ``execute``.

    Raises:
        ValidationError: It lacks one of them, or its name is not a non-empty str.

    Cost: O(1).
    """
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
    store: EventStore,
    session_id: str,
    run_id: str,
    viewer: SessionAuthor,
    budget: Mapping[str, int | None],
) -> Transcript:
    """Build the replay transcript: the session's events minus the current run's own.

    Read from the tail: the newest ``limit`` earlier events, fewer when the message and
    character budgets are met first.
    """
    return TranscriptBuilder.from_store(
        store,
        session_id,
        limit=budget.get("limit"),
        viewer=viewer,
        max_messages=budget.get("max_messages"),
        max_chars=budget.get("max_chars"),
        max_tokens_approx=budget.get("max_tokens_approx"),
        exclude_run_id=run_id,
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
class ExecutionPlan:
    """What executing a pending run needs, decided before any write (see :func:`plan_execution`).

    Attributes:
        mode: The continuation used: ``False``, ``"replay"`` or ``"native"``.
        viewer: The participant the adapter runs as (the replay transcript's viewer).
        budget: The checked ``continuation_opts``.
        timeout: The checked ``adapter_opts["timeout"]`` (seconds), or ``None``.
        context: ``session.context`` for the adapter (the caller adds the replayed
            ``"transcript"`` when ``mode == "replay"``).
        claim: The run's ``RunStarted`` to append (its ``writer`` token tells whether
            this execution won the claim).
        opts: ``adapter_opts`` as the adapter receives them.
    """

    mode: str | bool
    viewer: SessionAuthor
    budget: dict[str, int | None]
    timeout: float | None
    context: dict[str, Any]
    claim: Event
    opts: Mapping[str, Any]


def plan_execution(
    run: Run,
    session: Session,
    adapter: Any,
    continuation: Any,
    continuation_opts: Any,
    adapter_opts: Any,
) -> ExecutionPlan:
    """Check an execution's arguments and decide its continuation; pure (no I/O).

    Shared by the synchronous manager and the async runs module: both read the run and
    the session, call this, append ``plan.claim``, and drive the adapter.

    Raises:
        ValidationError: Not an adapter, or a bad continuation, continuation_opts,
            timeout or adapter author (the caller records the run as failed).

    Cost: O(len(continuation_opts)); no I/O.
    """
    check_adapter(adapter)
    viewer = adapter_author(adapter)
    mode = _check_continuation(continuation, adapter)
    budget = _check_continuation_opts(continuation_opts)
    timeout = _check_timeout(adapter_opts)
    provider_sessions: dict[str, Any] = session.metadata.get("provider_sessions", {})
    stored_session = provider_sessions.get(adapter.name, {})
    continued = stored_session.get("provider_session_id")
    if mode == "auto":
        mode = "native" if adapter.native_continuation and continued else "replay"
    model = getattr(adapter, "model", None)
    if not isinstance(model, str):
        model = stored_session.get("model") if mode == "native" else None
    hexid, _ = parse_run_id(run.id)
    claim = Event(
        LIFECYCLE_AUTHOR,
        RunStarted(
            provider=adapter.name,
            model=model,
            provider_session_id=continued if mode == "native" else None,
        ),
        id=_started_id(hexid),
        run_id=run.id,
        metadata={"writer": uuid.uuid4().hex},
    )
    opts = {} if adapter_opts is None or adapter_opts is _NO_OPTS else adapter_opts
    return ExecutionPlan(
        mode=mode,
        viewer=viewer,
        budget=budget,
        timeout=timeout,
        context={"continuation": mode},
        claim=claim,
        opts=opts,
    )


@dataclass(eq=False)
class _Execution:
    """One execution's in-process state, shared by the executing thread and the worker.

    ``index`` is the store's run-index port, or ``None`` (then ``last_seen`` tracks the
    session's last sequence for the ``expected_version`` fallback).
    """

    store: EventStore
    index: RunIndexStore | None
    run_id: str
    session_id: str
    last_seen: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    finished: RunFinished | None = None
    result: AdapterResult | None = None
    error: BaseException | None = None
    emitted: list[Event] = field(default_factory=list)
    #: Buffered ``TextDelta`` events (run id set), oldest first, and when the first came.
    chunks: list[Event] = field(default_factory=list)
    chunks_since: float = 0.0

    @property
    def finished_id(self) -> str:
        return _finished_id(parse_run_id(self.run_id)[0])

    def check_store(self) -> None:
        """Note our run's ``RunFinished`` if another writer stored it (lock held)."""
        if self.index is not None:
            if self.run_id in self.index.session_state(self.session_id).open_runs:
                return
            self._learn_finished()
            return
        for event in self.store.read(self.session_id, after=self.last_seen):
            assert event.sequence is not None
            self.last_seen = max(self.last_seen, event.sequence)
            if event.run_id == self.run_id and isinstance(event.body, RunFinished):
                self.finished = event.body

    def _learn_finished(self) -> None:
        assert self.index is not None
        finished_id = self.finished_id
        for event in reversed(self.index.run_events(self.session_id, self.run_id)):
            if event.id == finished_id and isinstance(event.body, RunFinished):
                self.finished = event.body
                return

    def emit(self, event: Event) -> Event:
        """Store one event of the run (a ``TextDelta`` is buffered); refused once finished."""
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
            if self.finished is not None:
                raise RunStateError(self.run_id, self.finished.status, "emit")
            if isinstance(event.body, TextDelta):
                now = time.monotonic()
                if not self.chunks:
                    self.chunks_since = now
                self.chunks.append(event)
                if (
                    len(self.chunks) >= STREAM_FLUSH_CHUNKS
                    or now - self.chunks_since >= STREAM_FLUSH_S
                ):
                    self._store_locked([])
                return event
            return self._store_locked([event])[-1]

    def flush(self) -> None:
        """Append the buffered chunks, if any (lock held); a refusal drops them."""
        if self.chunks and self.finished is None:
            with contextlib.suppress(RunStateError):
                self._store_locked([])

    def _store_locked(self, events: list[Event]) -> list[Event]:
        """Append the buffered chunks then ``events`` in one append; return them stored."""
        batch = [*coalesce_chunks(self.chunks), *events]
        self.chunks = []
        if self.index is not None:
            try:
                stored = self.index.append(self.session_id, batch, unless_stored=self.finished_id)
            except AlreadyStored:
                self._learn_finished()
                status = self.finished.status if self.finished is not None else "finished"
                raise RunStateError(self.run_id, status, "emit") from None
        else:
            stored = self._append_checked(batch)
        self.emitted.extend(stored)
        return stored

    def _append_checked(self, batch: list[Event]) -> list[Event]:
        # Fallback without the run-index port: the append carries the last sequence
        # checked, so a RunFinished stored meanwhile refuses it.
        for _ in range(_EMIT_ATTEMPTS):
            self.check_store()
            if self.finished is not None:
                raise RunStateError(self.run_id, self.finished.status, "emit")
            try:
                stored = self.store.append(self.session_id, batch, expected_version=self.last_seen)
            except ConcurrencyError:
                continue
            for event in stored:
                assert event.sequence is not None
                self.last_seen = max(self.last_seen, event.sequence)
            return stored
        raise ConcurrencyError(self.last_seen, self.store.last_sequence(self.session_id))

    def finish(self, body: RunFinished) -> tuple[Event, bool]:
        """Write our ``RunFinished`` and close emit; return it as stored and whether ours won."""
        with self.lock:
            self.flush()
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

        Cost: one append of one event, then :meth:`get_session`.
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
        return _read_session(store, sid)

    @staticmethod
    def get_session(store: EventStore, session_id: str) -> Session:
        """Return a session folded from its events (a session with no events is idle).

        Raises:
            ValidationError: A bad session id.

        Cost: with the run-index port, one lookup of the session's folded state; else one
        read of the whole session. No writes.
        """
        check_session_id(session_id)
        return _read_session(store, session_id)

    @staticmethod
    def start_run(
        store: EventStore, session_id: str, input: Any, *, author: SessionAuthor = OPERATOR
    ) -> Run:
        """Create a pending run by appending its input rows.

        The session need not have been started (any session id works, e.g. a Hub desk).

        Args:
            store: The store (or Hub).
            session_id: The session.
            input: A prompt string, or a list of ``{"role", "content"}`` dicts with role
                ``"user"`` (stored as a ``Text`` by ``author``) or ``"system"`` (stored
                as a ``Text`` by ``System(kind="prompt", label="system")``).
            author: Who asks: the author of the ``"user"`` input rows.

        Returns:
            The pending run.

        Raises:
            ValidationError: A bad session id, input or author; nothing was written.

        Cost: one append of ``len(input)`` events.
        """
        check_session_id(session_id)
        messages = normalize_input(input)
        asker = check_author(author)
        run_id = new_run_id(session_id)
        hexid, _ = parse_run_id(run_id)
        events: list[Event] = []
        for index, message in enumerate(messages):
            role = message["role"]
            writer: SessionAuthor = SYSTEM_PROMPT_AUTHOR if role == "system" else asker
            events.append(
                Event(
                    writer,
                    Text(message["content"]),
                    id=_input_id(hexid, index),
                    run_id=run_id,
                    metadata={"role": role},
                )
            )
        store.append(session_id, events)
        logger().debug("run.created", session_id=session_id, run_id=run_id)
        return Run(id=run_id, session_id=session_id, status="pending", input=messages)

    @staticmethod
    def get_run(store: EventStore, run_id: str) -> Run:
        """Return a run folded from its events.

        Raises:
            RunNotFound: No such run.

        Cost: with the run-index port, a read of the run's own events; else see
        :func:`read_run_events` (rows since the run started). No writes.
        """
        run = fold_run(run_id, _read_run(store, run_id))
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
        duplicated) in ``session.context["transcript"]``, seen by the adapter's author
        (``adapter.author``, else ``Agent(id=adapter.name, label=adapter.name)``) and cut
        by ``continuation_opts`` (``limit`` keeps the newest events; ``max_messages``,
        ``max_chars``, ``max_tokens_approx`` bound the messages, read from the tail
        until they are met); ``"native"`` lets the adapter continue
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

        Cost: with the run-index port: a read of the run's own events and one lookup of
        the session's state, plus for a replay the newest events its budget needs; one
        append each for ``RunStarted``, each emitted event (buffered ``TextDelta``
        chunks join the next one) and ``RunFinished``; while waiting, one state lookup
        every 5-100 ms. Without it, one read of the whole session and of the new rows at
        each emit and poll. Blocks until the run ends.
        """
        hexid, session_id = parse_run_id(run_id)
        check_session_id(session_id)
        index = run_index(store)
        if index is not None:
            run = fold_run(run_id, _read_run(store, run_id))
            session = session_of(session_id, index.session_state(session_id))
            last_seen = 0
        else:
            events = store.read(session_id)
            run = fold_run(run_id, events)
            session = fold_session(session_id, events)
            last_seen = events[-1].sequence or 0 if events else 0
        if run is None:
            raise RunNotFound(run_id)
        if run.status != "pending":
            raise RunStateError(run_id, run.status, "execute")
        log = logger().bind(session_id=session_id, run_id=run_id)
        try:
            plan = plan_execution(
                run, session, adapter, continuation, continuation_opts, adapter_opts
            )
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
        if plan.mode == "replay":
            plan.context["transcript"] = _replay(
                store, session_id, run_id, plan.viewer, plan.budget
            )
        stored_claim = store.append(session_id, [plan.claim])[0]
        if stored_claim.metadata != plan.claim.metadata:
            raise RunStateError(run_id, "running", "execute")
        assert stored_claim.sequence is not None
        execution = _Execution(store, index, run_id, session_id, last_seen=last_seen)
        execution.emitted.append(stored_claim)
        log.debug("run.started", provider=adapter.name, continuation=plan.mode)
        running = msgspec.structs.replace(
            run,
            status="running",
            provider=adapter.name,
            model=stored_claim.body.model,  # type: ignore[union-attr]
        )
        live_session = msgspec.structs.replace(session, status="active", context=plan.context)
        opts = plan.opts

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
            return SessionManager._wait(execution, plan.timeout, log)
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
        author: SessionAuthor = OPERATOR,
    ) -> RunResult:
        """Start a session (or continue ``session_id``), start a run and execute it.

        A given ``session_id`` is continued as it is (no ``SessionStarted`` is written).
        Arguments and errors as :meth:`start_run` (``author`` asks) and
        :meth:`execute_run`.

        An adapter that is not one is refused before anything is written.

        Cost: :meth:`start_session` (new session only), :meth:`start_run`, then
        :meth:`execute_run`. Blocks until the run ends.
        """
        run_id = start_once(store, adapter, session_id, input, author)
        return SessionManager.execute_run(
            store,
            adapter,
            run_id,
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
        author: SessionAuthor = OPERATOR,
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
            author=author,
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
