"""The sharedesk error tree.

Every error sharedesk raises derives from :class:`SharedeskError`. Each error takes the
figures that describe the failure as arguments, keeps them as attributes of the same
name, and builds its message from them (what was expected, what was found, where).

``SharedeskError`` derives from :class:`Exception`, not :class:`ValueError`: msgspec
rewraps ``ValueError``/``TypeError`` raised in ``__post_init__`` while decoding, and our
invariants (``PresentSetTooLarge``) must reach the caller unchanged. Note that
:class:`ValidationError` shares its name with ``msgspec.ValidationError``; inside the
package always write msgspec's in full.
"""

from __future__ import annotations

from typing import Any


class SharedeskError(Exception):
    """Base class of every error raised by sharedesk."""

    #: Names of the constructor arguments kept as attributes (used to pickle the error).
    _figures: tuple[str, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), tuple(getattr(self, name) for name in self._figures))


class ValidationError(SharedeskError):
    """Raised when input is malformed; nothing was written.

    Attributes:
        message: What is wrong, naming the offending field or value.
    """

    _figures = ("message",)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConcurrencyError(SharedeskError):
    """Raised when an append's ``expected_version`` is not the session's last sequence.

    Nothing was written.

    Attributes:
        expected: The version the caller expected.
        actual: The session's last sequence at the time of the append.
    """

    _figures = ("expected", "actual")

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"expected version {expected}, but the session is at {actual}")
        self.expected = expected
        self.actual = actual


class SharingStateConflict(ConcurrencyError):
    """Raised when a turn commits against a sharing state that moved since it was read.

    Another turn of the same viewer and conversation committed first; nothing was
    written (compare-and-swap on the stored state).

    Attributes:
        expected: The watermark the committing turn planned from (-1 for no state).
        actual: The stored watermark (-1 for no state).
    """

    def __init__(self, expected: int, actual: int) -> None:
        SharedeskError.__init__(
            self,
            f"sharing state moved: the turn planned from watermark {expected}, "
            f"but the stored watermark is {actual}",
        )
        self.expected = expected
        self.actual = actual


class LogReadError(SharedeskError):
    """Raised when a host :class:`~sharedesk.SessionLog` raised while being read.

    The original exception is the ``__cause__``.

    Attributes:
        before: The exclusive cursor that was asked for.
        limit: The number of rows that was asked for.
    """

    _figures = ("before", "limit")

    def __init__(self, before: int | None, limit: int) -> None:
        super().__init__(f"session log failed to read {limit} rows before {before}")
        self.before = before
        self.limit = limit


class PageError(SharedeskError):
    """Base of the errors raised when a host log returns a page that breaks its contract."""


class PageTooLarge(PageError):
    """Raised when a page holds more rows than the limit asked for.

    Attributes:
        requested: The limit asked for.
        actual: The number of rows the page held.
    """

    _figures = ("requested", "actual")

    def __init__(self, requested: int, actual: int) -> None:
        super().__init__(f"page holds {actual} rows, but at most {requested} were requested")
        self.requested = requested
        self.actual = actual


class EmptyPageCursor(PageError):
    """Raised when a page holds no rows but still gives a ``next_before`` cursor.

    Attributes:
        next_before: The cursor the empty page gave.
    """

    _figures = ("next_before",)

    def __init__(self, next_before: int) -> None:
        super().__init__(f"empty page gives cursor next_before={next_before}; expected None")
        self.next_before = next_before


class DuplicateSequence(PageError):
    """Raised when a row's sequence was already seen in the same walk.

    Attributes:
        sequence: The repeated sequence.
    """

    _figures = ("sequence",)

    def __init__(self, sequence: int) -> None:
        super().__init__(f"sequence {sequence} was already returned in this walk")
        self.sequence = sequence


class PageOutOfRange(PageError):
    """Raised when a row lies at or above the exclusive cursor that was asked for.

    Attributes:
        sequence: The row's sequence.
        before: The exclusive cursor asked for.
    """

    _figures = ("sequence", "before")

    def __init__(self, sequence: int, before: int) -> None:
        super().__init__(f"row {sequence} is not below the exclusive cursor {before}")
        self.sequence = sequence
        self.before = before


class PageNotDescending(PageError):
    """Raised when a row's sequence is not strictly below the previous row's.

    Attributes:
        previous: The previous row's sequence.
        next: The offending row's sequence.
    """

    _figures = ("previous", "next")

    def __init__(self, previous: int, next: int) -> None:
        super().__init__(f"row {next} follows row {previous}; rows must be newest first")
        self.previous = previous
        self.next = next


class CursorDidNotAdvance(PageError):
    """Raised when ``next_before`` is at or above the cursor that was asked for.

    Attributes:
        before: The cursor asked for.
        next_before: The cursor the page gave.
    """

    _figures = ("before", "next_before")

    def __init__(self, before: int, next_before: int) -> None:
        super().__init__(f"next_before={next_before} does not advance past before={before}")
        self.before = before
        self.next_before = next_before


class CursorAfterOldest(PageError):
    """Raised when ``next_before`` lies above the oldest row of its page.

    Attributes:
        next_before: The cursor the page gave.
        oldest: The sequence of the page's oldest row.
    """

    _figures = ("next_before", "oldest")

    def __init__(self, next_before: int, oldest: int) -> None:
        super().__init__(
            f"next_before={next_before} lies above the page's oldest row {oldest}; "
            "rows would be skipped"
        )
        self.next_before = next_before
        self.oldest = oldest


class WatermarkRegression(SharedeskError):
    """Raised when a delta is asked for below the sharing state's watermark.

    Attributes:
        before: The exclusive cursor asked for.
        watermark: The state's watermark.
    """

    _figures = ("before", "watermark")

    def __init__(self, before: int, watermark: int) -> None:
        super().__init__(f"before={before} lies below the watermark {watermark}")
        self.before = before
        self.watermark = watermark


class PresentSetOverflow(SharedeskError):
    """Raised when noting one more present sequence would exceed the present-set limit.

    Attributes:
        limit: The most sequences a state may hold above its watermark.
        sequence: The sequence that did not fit.
    """

    _figures = ("limit", "sequence")

    def __init__(self, limit: int, sequence: int) -> None:
        super().__init__(f"present set is full ({limit} sequences); cannot add {sequence}")
        self.limit = limit
        self.sequence = sequence


class PresentSetTooLarge(SharedeskError):
    """Raised when a sharing state is built or decoded with too many present sequences.

    Attributes:
        limit: The most sequences a state may hold above its watermark.
        actual: The number of sequences the state holds.
    """

    _figures = ("limit", "actual")

    def __init__(self, limit: int, actual: int) -> None:
        super().__init__(f"present set holds {actual} sequences; at most {limit} are allowed")
        self.limit = limit
        self.actual = actual


class RunError(SharedeskError):
    """Base of the errors about one run; every subclass keeps the run's id as ``run_id``."""

    run_id: str


class RunNotFound(RunError):
    """Raised when no run with the given id exists (or the id is not a run id).

    Attributes:
        run_id: The id that was looked up.
    """

    _figures = ("run_id",)

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id


class RunStateError(RunError):
    """Raised when a run is not in a state that allows the action asked for.

    Examples: cancelling a finished run, executing a run twice, emitting an event into a
    run that has finished. Nothing was written.

    Attributes:
        run_id: The run.
        status: The run's status when the action was refused.
        action: What was refused (``"cancel"``, ``"execute"``, ``"emit"``).
    """

    _figures = ("run_id", "status", "action")

    def __init__(self, run_id: str, status: str, action: str) -> None:
        super().__init__(f"cannot {action} run {run_id!r}: it is {status}")
        self.run_id = run_id
        self.status = status
        self.action = action


class RunTimeout(RunError):
    """Raised when a run overran its ``adapter_opts["timeout"]``; it finished as ``"timeout"``.

    Attributes:
        run_id: The run.
        timeout_ms: The timeout that was exceeded, in milliseconds.
    """

    _figures = ("run_id", "timeout_ms")

    def __init__(self, run_id: str, timeout_ms: float) -> None:
        super().__init__(f"run {run_id!r} did not finish within {timeout_ms} ms")
        self.run_id = run_id
        self.timeout_ms = timeout_ms


class RunFailed(RunError):
    """Raised when a run's adapter raised; the run finished as ``"failed"``.

    The adapter's exception is the ``__cause__``.

    Attributes:
        run_id: The run.
        error_code: The recorded error code (the exception's class name).
        error_message: The recorded error message.
    """

    _figures = ("run_id", "error_code", "error_message")

    def __init__(self, run_id: str, error_code: str, error_message: str) -> None:
        super().__init__(f"run {run_id!r} failed: {error_code}: {error_message}")
        self.run_id = run_id
        self.error_code = error_code
        self.error_message = error_message


class RunCancelled(RunError):
    """Raised by ``execute_run`` (or a queued run's future) when the run was cancelled.

    Attributes:
        run_id: The run.
    """

    _figures = ("run_id",)

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} was cancelled")
        self.run_id = run_id


class QueueFull(SharedeskError):
    """Raised when a session already has ``max_queued_runs`` runs waiting; nothing was written.

    Attributes:
        session_id: The session.
        max_queued_runs: The most runs that may wait per session.
    """

    _figures = ("session_id", "max_queued_runs")

    def __init__(self, session_id: str, max_queued_runs: int) -> None:
        super().__init__(
            f"session {session_id!r} already has {max_queued_runs} queued runs "
            f"(max_queued_runs={max_queued_runs})"
        )
        self.session_id = session_id
        self.max_queued_runs = max_queued_runs


class QueueClosed(SharedeskError):
    """Raised when a run is submitted to a run queue that was closed.

    Attributes:
        session_id: The session the run was submitted for.
    """

    _figures = ("session_id",)

    def __init__(self, session_id: str) -> None:
        super().__init__(f"the run queue is closed; cannot submit a run for {session_id!r}")
        self.session_id = session_id


class ProviderError(SharedeskError):
    """Raised by a provider adapter when its provider answered with an error or not at all.

    The transport's exception, when there was one, is the ``__cause__``.

    Attributes:
        provider: The adapter's name.
        status_code: The HTTP status, or ``None`` when no response came back.
        detail: What went wrong (the response body, shortened, or the transport error).
        retry_after: Seconds the provider asked the caller to wait before retrying (its
            ``retry-after`` header, e.g. with HTTP 429), or ``None``.
    """

    _figures = ("provider", "status_code", "detail", "retry_after")

    def __init__(
        self,
        provider: str,
        status_code: int | None,
        detail: str,
        retry_after: float | None = None,
    ) -> None:
        status = "no response" if status_code is None else f"HTTP {status_code}"
        wait = "" if retry_after is None else f", retry after {retry_after:g} s"
        super().__init__(f"provider {provider!r} failed ({status}{wait}): {detail}")
        self.provider = provider
        self.status_code = status_code
        self.detail = detail
        self.retry_after = retry_after

    @property
    def status(self) -> int | None:
        """The HTTP status (the same as ``status_code``), or ``None``."""
        return self.status_code


class StoreError(SharedeskError):
    """Base of the errors a store backend raises in place of its driver's errors."""


class StoreClosedError(StoreError):
    """Raised when a store (or a Hub) is used after ``close()``.

    Attributes:
        path: Where the store lives, or ``None`` for an in-memory store.
    """

    _figures = ("path",)

    def __init__(self, path: str | None) -> None:
        where = "in-memory store" if path is None else f"store at {path}"
        super().__init__(f"the {where} is closed")
        self.path = path


class HubClosed(StoreClosedError):
    """Raised when a Hub (or a handle, view or turn taken from it) is used after ``close()``.

    Also raised to callers still waiting on an actor when the Hub closes. It is a
    :class:`StoreClosedError`, because a Hub serves the store interface too.

    Attributes:
        path: Where the Hub's store lives, or ``None`` for an in-memory Hub.
    """

    _figures = ("path",)

    def __init__(self, path: str | None) -> None:
        where = "in-memory hub" if path is None else f"hub at {path}"
        StoreError.__init__(self, f"the {where} is closed")
        self.path = path


class HubError(SharedeskError):
    """Base of the errors raised by the Hub's actor runtime (time-outs, crashes, failures)."""


class ActorTimeout(HubError):
    """Raised when an actor did not answer a request within the Hub's ``ask_timeout``.

    The request may still take effect later; appends are idempotent by event ``id``, so
    retrying with the same ids is safe.

    Attributes:
        actor: The kind of actor asked (``"session"``, ``"projector"``, ``"sharing"``).
        session_id: The session the actor serves.
        timeout: The time waited, in seconds.
    """

    _figures = ("actor", "session_id", "timeout")

    def __init__(self, actor: str, session_id: str, timeout: float) -> None:
        super().__init__(
            f"{actor} actor of session {session_id!r} did not answer within {timeout} s"
        )
        self.actor = actor
        self.session_id = session_id
        self.timeout = timeout


class ActorCrashed(HubError):
    """Raised to the caller whose request made an actor's handler fail unexpectedly.

    The actor was replaced by a fresh one that recovers its state from the store; the
    original exception is the ``__cause__``. Requests queued behind the failed one are
    served by the fresh actor.

    Attributes:
        actor: The kind of actor that failed.
        session_id: The session the actor serves.
        detail: The failure, as ``repr`` of the original exception.
    """

    _figures = ("actor", "session_id", "detail")

    def __init__(self, actor: str, session_id: str, detail: str) -> None:
        super().__init__(
            f"{actor} actor of session {session_id!r} failed and was restarted: {detail}"
        )
        self.actor = actor
        self.session_id = session_id
        self.detail = detail


class SessionFailed(HubError):
    """Raised for every call on a session whose actors failed too often.

    The session's actors restarted more than ``restarts`` times within ``period``
    seconds; the Hub stopped restarting them until ``hub.recover(session_id)``. Other
    sessions are unaffected.

    Attributes:
        session_id: The failed session.
        restarts: The restart intensity that was exceeded (most restarts allowed).
        period: The period of the restart intensity, in seconds.
    """

    _figures = ("session_id", "restarts", "period")

    def __init__(self, session_id: str, restarts: int, period: float) -> None:
        super().__init__(
            f"session {session_id!r} failed: its actors restarted more than {restarts} "
            f"times within {period} s"
        )
        self.session_id = session_id
        self.restarts = restarts
        self.period = period


class StoreFullError(StoreError):
    """Raised when an append would grow the store past its ``max_map_size``.

    Nothing from the failing append was written.

    Attributes:
        path: Where the store lives.
        map_size: The store's current map size in bytes.
        max_map_size: The configured ceiling in bytes.
    """

    _figures = ("path", "map_size", "max_map_size")

    def __init__(self, path: str, map_size: int, max_map_size: int) -> None:
        super().__init__(
            f"store at {path} is full: map size {map_size} bytes may not grow past "
            f"max_map_size={max_map_size}"
        )
        self.path = path
        self.map_size = map_size
        self.max_map_size = max_map_size


class CorruptRecordError(StoreError):
    """Raised when a stored record cannot be decoded; other records stay readable.

    Attributes:
        session_id: The session the record belongs to.
        sequence: The record's sequence.
        detail: What the decoder reported.
    """

    _figures = ("session_id", "sequence", "detail")

    def __init__(self, session_id: str, sequence: int, detail: str) -> None:
        super().__init__(f"record {sequence} of session {session_id!r} cannot be decoded: {detail}")
        self.session_id = session_id
        self.sequence = sequence
        self.detail = detail


class StoreIOError(StoreError):
    """Raised when the storage engine fails (disk, permissions, lock); the cause is chained.

    Attributes:
        path: Where the store lives.
        operation: What was being done (``"open"``, ``"append"``, ``"read"``, ...).
    """

    _figures = ("path", "operation")

    def __init__(self, path: str, operation: str) -> None:
        super().__init__(f"store at {path} failed during {operation}")
        self.path = path
        self.operation = operation
