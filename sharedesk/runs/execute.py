"""The synchronous executor: a run's reads, writes and waiting, over the run-index port.

* A busy desk never fails a run: ``emit`` appends with ``unless_stored`` naming the run's
  ``<hex>.finished``, so rows others append cannot refuse it, and nothing ever lands
  after a run's ``RunFinished`` (``RunStateError``).
* ``emit`` buffers a ``TextDelta`` and returns it unstamped; chunks are appended with the
  run's next other event, or once ``STREAM_FLUSH_S`` old or ``STREAM_FLUSH_CHUNKS`` many.
* Cancellation crosses threads through the store: the executing thread polls the
  session's state (5 ms, doubling to 100 ms) for the run's ``RunFinished``. An adapter
  still running after a timeout or a cancel is abandoned; each event it emits is refused.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import msgspec

from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.errors import (
    AlreadyStored,
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunStateError,
    RunTimeout,
    SharedeskError,
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
from sharedesk.protocol.sessions import SESSION_STARTED_ID
from sharedesk.protocol.validation import check_session_id
from sharedesk.runs import rules
from sharedesk.runs.rules import NO_OPTS, RunOptions
from sharedesk.runs.types import AdapterResult, Run, RunResult, Session

T = TypeVar("T")

_FIRST_POLL_S: Final = 0.005
_MAX_POLL_S: Final = 0.1


def run_index(store: Any) -> RunIndexStore:
    """Return ``store`` as the run-index port (``ValidationError`` when it is not one)."""
    if callable(getattr(store, "run_events", None)) and callable(
        getattr(store, "session_state", None)
    ):
        return store  # type: ignore[no-any-return]
    raise ValidationError(
        f"runs need a store with the run-index port (run_events, session_state), "
        f"got {type(store).__name__}"
    )


def get_session(store: EventStore, session_id: str) -> Session:
    """Return a session folded from its events (one lookup); ``ValidationError``: a bad id."""
    check_session_id(session_id)
    return rules.session_of(session_id, run_index(store).session_state(session_id))


def get_run(store: EventStore, run_id: str) -> Run:
    """Return a run folded from its own events (one read); ``RunNotFound``: no such run."""
    _, session_id = rules.parse_run_id(run_id)
    check_session_id(session_id)
    run = rules.fold_run(run_id, run_index(store).run_events(session_id, run_id))
    if run is None:
        raise RunNotFound(run_id)
    return run


def start_session(
    store: EventStore, *, session_id: str | None = None, metadata: Mapping[str, Any] = NO_OPTS
) -> Session:
    """Start a session (a fresh uuid4 hex id when ``None``) by appending ``SessionStarted``.

    Starting it again with equal metadata is a no-op; with other metadata, or metadata
    holding the reserved key ``"provider_sessions"``, it is ``ValidationError``. Cost: one
    append of one event, then one lookup of the session's state.
    """
    session_id = uuid.uuid4().hex if session_id is None else check_session_id(session_id)
    if not isinstance(metadata, Mapping):
        raise ValidationError(f"metadata must be a mapping, got {type(metadata).__name__}")
    if "provider_sessions" in metadata:
        raise ValidationError(
            "metadata key 'provider_sessions' is reserved: it is folded from RunStarted"
        )
    given = dict(metadata)
    event = Event(rules.SESSION_AUTHOR, SessionStarted(metadata=given), id=SESSION_STARTED_ID)
    stored = run_index(store).append(session_id, [event])[0]
    assert isinstance(stored.body, SessionStarted)
    if stored.body.metadata != given:
        raise ValidationError(
            f"session {session_id!r} was already started with other metadata "
            f"({stored.body.metadata!r})"
        )
    logger().debug("session.started", session_id=session_id)
    return get_session(store, session_id)


def start_run(
    store: EventStore, session_id: str, input: Any, *, author: SessionAuthor = rules.OPERATOR
) -> Run:
    """Create a pending run by appending its input rows (the session need not be started).

    ``input`` is a prompt string, or a list of ``{"role", "content"}`` dicts: role
    ``"user"`` is stored as a ``Text`` by ``author``, role ``"system"`` as a ``Text`` by
    ``System(kind="prompt", label="system")``. Cost: one append of ``len(input)`` events.
    """
    check_session_id(session_id)
    run_id = rules.new_run_id(session_id)
    events = rules.input_events(run_id, input, author)
    run_index(store).append(session_id, events)
    logger().debug("run.created", session_id=session_id, run_id=run_id)
    run = rules.fold_run(run_id, events)
    assert run is not None
    return run


def finish(store: Any, run_id: str, body: RunFinished) -> tuple[Event, bool]:
    """Append the run's ``RunFinished``; return it as stored and whether ours won."""
    writer, event_id = uuid.uuid4().hex, rules.lifecycle_id(run_id, "finished")
    event = Event(
        rules.LIFECYCLE_AUTHOR, body, id=event_id, run_id=run_id, metadata={"writer": writer}
    )
    stored = run_index(store).append(rules.parse_run_id(run_id)[1], [event])[0]
    return stored, stored.metadata.get("writer") == writer


def cancel_run(store: EventStore, session_or_run_id: str, run_id: str | None = None) -> Run:
    """Cancel a pending or running run: ``cancel_run(store, [session_id,] run_id)``.

    Appends its ``RunFinished(status="cancelled")``; a thread executing the run sees it
    within 100 ms and raises ``RunCancelled``. Safe from any thread or process. Raises
    ``RunNotFound`` (also when ``session_id`` is not the run's), or ``RunStateError`` with
    the status a finished run finished with. Cost: a read of the run's events, one append.
    """
    if run_id is None:
        run_id = session_or_run_id
    elif rules.parse_run_id(run_id)[1] != session_or_run_id:
        raise RunNotFound(run_id)
    run = get_run(store, run_id)
    if run.status not in ("pending", "running"):
        raise RunStateError(run_id, run.status, "cancel")
    cancelled = RunFinished(status="cancelled", error_code="cancelled", error_message="cancelled")
    stored, won = finish(store, run_id, cancelled)
    if not won:
        assert isinstance(stored.body, RunFinished)
        raise RunStateError(run_id, stored.body.status, "cancel")
    logger().info("run.cancelled", session_id=run.session_id, run_id=run_id, was=run.status)
    return msgspec.structs.replace(
        run, status="cancelled", error_code="cancelled", error_message="cancelled"
    )


def try_cancel(store: Any, run_id: str) -> None:
    """Cancel the run unless it finished first (or the store closed): logged, not raised."""
    try:
        cancel_run(store, run_id)
    except SharedeskError as exc:
        logger().debug("run.cancel_skipped", run_id=run_id, error=str(exc))


def prepare(
    store: Any, adapter: Any, run_id: str, options: RunOptions
) -> tuple[Execution, Run, Session]:
    """Claim a pending run; return its execution, and the run and session the adapter gets.

    Raises ``RunNotFound``, or ``RunStateError`` when the run is not pending or was claimed.
    """
    run = get_run(store, run_id)
    index = run_index(store)
    session_id = run.session_id
    session = get_session(index, session_id)
    if run.status != "pending":
        raise RunStateError(run_id, run.status, "execute")
    claim, mode = rules.plan_claim(run, session, adapter, options)
    context: dict[str, Any] = {"continuation": mode}
    if mode == "replay":
        context["transcript"] = TranscriptBuilder.from_store(
            index, session_id, viewer=options.viewer, exclude_run_id=run_id, **options.budget
        )
    stored = index.append(session_id, [claim])[0]
    if stored.metadata != claim.metadata:
        raise RunStateError(run_id, "running", "execute")
    assert isinstance(stored.body, RunStarted)
    execution = Execution(index, run_id, session_id, emitted=[stored])
    logger().debug(
        "run.started", session_id=session_id, run_id=run_id, provider=adapter.name,
        continuation=mode,
    )  # fmt: skip
    running = msgspec.structs.replace(
        run, status="running", provider=adapter.name, model=stored.body.model
    )
    return execution, running, msgspec.structs.replace(session, status="active", context=context)


def execute_run(store: Any, adapter: Any, run_id: str, options: RunOptions) -> RunResult:
    """Execute a pending run with checked ``options`` (see ``SessionManager.execute_run``)."""
    execution, run, session = prepare(store, adapter, run_id, options)
    return execution.drive(
        lambda: adapter.execute(run, session, execution.emit, options.opts),
        adapter.name,
        options.timeout,
    )


@dataclass(eq=False)
class Execution:
    """One execution's in-process state, shared by the waiting thread and the adapter's."""

    store: RunIndexStore
    run_id: str
    session_id: str
    emitted: list[Event]
    lock: threading.Lock = field(default_factory=threading.Lock)
    finished: RunFinished | None = None
    #: Buffered ``TextDelta`` events (run id set), oldest first, and when the first came.
    chunks: list[Event] = field(default_factory=list)
    chunks_since: float = 0.0

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
            if not isinstance(event.body, TextDelta):
                return self._store([event])[-1]
            now = time.monotonic()
            if not self.chunks:
                self.chunks_since = now
            self.chunks.append(event)
            full = len(self.chunks) >= rules.STREAM_FLUSH_CHUNKS
            if full or now - self.chunks_since >= rules.STREAM_FLUSH_S:
                self._store([])
            return event

    def _store(self, events: list[Event]) -> list[Event]:
        """Append the buffered chunks then ``events`` in one append (lock held)."""
        batch = [*rules.coalesce_chunks(self.chunks), *events]
        self.chunks = []
        try:
            stored = self.store.append(
                self.session_id, batch, unless_stored=rules.lifecycle_id(self.run_id, "finished")
            )
        except AlreadyStored:
            self._learn_finished()
            status = self.finished.status if self.finished is not None else "finished"
            raise RunStateError(self.run_id, status, "emit") from None
        self.emitted.extend(stored)
        return stored

    def _learn_finished(self) -> None:
        """Note our run's ``RunFinished`` if another writer stored it (lock held)."""
        if self.run_id in self.store.session_state(self.session_id).open_runs:
            return
        finished = rules.lifecycle_id(self.run_id, "finished")
        for event in reversed(self.store.run_events(self.session_id, self.run_id)):
            if event.id == finished and isinstance(event.body, RunFinished):
                self.finished = event.body
                return

    def finish(self, body: RunFinished) -> bool:
        """Store the buffered chunks and our ``RunFinished``; return whether ours won."""
        with self.lock:
            if self.chunks and self.finished is None:
                with contextlib.suppress(RunStateError):
                    self._store([])
            stored, won = finish(self.store, self.run_id, body)
            assert isinstance(stored.body, RunFinished)
            self.finished = stored.body
            self.emitted.append(stored)
            return won

    def drive(self, call: Callable[[], Any], provider: str, timeout: float | None) -> RunResult:
        """Run ``call`` (the adapter) on a worker thread; wait; finish the run once."""

        def work() -> AdapterResult:
            outcome = call()
            if outcome is not None and not isinstance(outcome, AdapterResult):
                raise ValidationError(
                    f"adapter {provider!r} returned {type(outcome).__name__}, "
                    "expected AdapterResult or None"
                )
            return outcome or AdapterResult()

        job, worker = on_thread(work, f"sharedesk-run-{self.run_id[:8]}")
        try:
            return self._wait(job, timeout)
        finally:
            if job.done():
                worker.join()  # it has returned; only a timed-out or cancelled one is left

    def _wait(self, job: Future[AdapterResult], timeout: float | None) -> RunResult:
        log = logger().bind(session_id=self.session_id, run_id=self.run_id)
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        interval = _FIRST_POLL_S
        while True:
            with self.lock:
                self._learn_finished()
            if self.finished is not None:
                break
            if wait((job,), max(0.0, min(interval, deadline - time.monotonic()))).done:
                break
            interval = min(interval * 2, _MAX_POLL_S)
            if time.monotonic() >= deadline and not job.done():
                assert timeout is not None
                message = f"no result within {timeout} s"
                if self.finish(RunFinished("timeout", error_code="timeout", error_message=message)):
                    log.info("run.timeout", timeout=timeout)
                    raise RunTimeout(self.run_id, timeout)
                break
        if self.finished is None and (exc := job.exception()) is not None:
            code, message = type(exc).__name__, str(exc)
            if self.finish(RunFinished("failed", error_code=code, error_message=message)):
                log.info("run.failed", error_code=code)
                raise RunFailed(self.run_id, code, message) from exc
        elif self.finished is None:
            outcome = job.result()
            usage = dict(outcome.token_usage)
            if self.finish(RunFinished("completed", token_usage=usage)):
                log.debug("run.finished", status="completed")
                output = outcome.output
                if output is None:
                    texts = [e.body.content for e in self.emitted if isinstance(e.body, Text)]
                    output = texts[-1] if texts else None
                return RunResult(output, usage, list(self.emitted), self.session_id, self.run_id)
        finished = self.finished
        assert finished is not None
        log.info("run.finished_elsewhere", status=finished.status)
        if finished.status == "cancelled":
            raise RunCancelled(self.run_id)
        raise RunStateError(self.run_id, finished.status, "execute")


def on_thread(fn: Callable[[], T], name: str) -> tuple[Future[T], threading.Thread]:
    """Run ``fn`` on a daemon thread named ``name``; return its (unrecallable) future."""
    job: Future[T] = Future()
    job.set_running_or_notify_cancel()

    def run() -> None:
        try:
            job.set_result(fn())
        except BaseException as exc:
            job.set_exception(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return job, thread
