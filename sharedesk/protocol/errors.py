"""The sharedesk error tree: every error derives from :class:`SharedeskError`.

An error is declared once: its figures as annotated class attributes (the constructor's
arguments in order, a base class's first; one given a value has that default), and its
message as a ``template`` formatted with the figures and the error's properties. The
base builds the constructor (typed through ``dataclass_transform``) and ``__reduce__``,
so an error keeps its figures as attributes and pickles with them. A subclass without a
``template`` inherits its parent's figures and message. New errors go at the end.

``SharedeskError`` derives from :class:`Exception`, not :class:`ValueError`: msgspec
rewraps ``ValueError``/``TypeError`` raised in ``__post_init__`` while decoding, and our
invariants (``PresentSetTooLarge``) must reach the caller unchanged. Inside the package,
always write ``msgspec.ValidationError`` in full: ours has the same name.
"""

from __future__ import annotations

import inspect
import string
from typing import Any, ClassVar, dataclass_transform

__all__ = [
    "ActorCrashed",
    "ActorTimeout",
    "AlreadyStored",
    "CommitOutcomeUnknown",
    "ConcurrencyError",
    "CorruptRecordError",
    "CursorAfterOldest",
    "CursorDidNotAdvance",
    "DuplicateSequence",
    "EmptyPageCursor",
    "HubClosed",
    "HubError",
    "LogReadError",
    "PageError",
    "PageNotDescending",
    "PageOutOfRange",
    "PageTooLarge",
    "PresentSetOverflow",
    "PresentSetTooLarge",
    "ProviderError",
    "QueueClosed",
    "QueueFull",
    "RowsArchived",
    "RunCancelled",
    "RunError",
    "RunFailed",
    "RunNotFound",
    "RunStateError",
    "RunTimeout",
    "SessionFailed",
    "SharedeskError",
    "SharingStateConflict",
    "StoreClosedError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreIOError",
    "StoreUnreachable",
    "TurnAlreadyCommitted",
    "ValidationError",
    "WatermarkRegression",
]


@dataclass_transform()
class SharedeskError(Exception):
    """Base class of every error raised by sharedesk."""

    #: The message, formatted with the figures; a class without one (a family base)
    #: takes :class:`Exception`'s arguments.
    template: ClassVar[str | None] = None
    #: The names of the constructor's arguments, kept as attributes (and pickled).
    _figures: ClassVar[tuple[str, ...]] = ()
    __signature__: ClassVar[inspect.Signature]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if self.template is None:
            super().__init__(*args, **kwargs)
            return
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{type(self).__name__}(): {exc}") from None
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            setattr(self, name, value)
        named = {name for _, name, _, _ in string.Formatter().parse(self.template) if name}
        super().__init__(self.template.format(**{name: getattr(self, name) for name in named}))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls) or cls.template is None:
            return  # written the plain way, or a family base raised with a plain message
        names = dict.fromkeys(
            name
            for klass in reversed(cls.__mro__)
            for name, annotation in vars(klass).get("__annotations__", {}).items()
            if not name.startswith("_") and "ClassVar" not in str(annotation)
        )
        cls._figures = tuple(names)
        kind, empty = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty
        parameters = [inspect.Parameter(n, kind, default=getattr(cls, n, empty)) for n in names]
        cls.__signature__ = inspect.Signature(parameters)

    def __reduce__(self) -> str | tuple[Any, ...]:
        if not self._figures:
            return super().__reduce__()
        return (type(self), tuple(getattr(self, name) for name in self._figures))


class ValidationError(SharedeskError):
    """Raised when input is malformed; ``message`` says what is wrong. Nothing was written."""

    message: str
    template = "{message}"


class ConcurrencyError(SharedeskError):
    """Raised when an append's ``expected`` version is not the ``actual`` last one; no write."""

    expected: int
    actual: int
    template = "expected version {expected}, but the session is at {actual}"


class SharingStateConflict(ConcurrencyError):
    """Raised when another turn of the same viewer and conversation committed first.

    ``expected`` and ``actual`` are the planned and stored watermarks (-1: no state, which the
    message says in words); no write.
    """

    template = "sharing state moved: {_stored}, {_planned}"

    @property
    def _stored(self) -> str:
        return "no state is stored" if self.actual == -1 else f"it is at watermark {self.actual}"

    @property
    def _planned(self) -> str:
        if self.expected == -1:
            return "the turn was planned with no state"
        return f"the turn was planned from watermark {self.expected}"


class AlreadyStored(SharedeskError):
    """Raised when an append guarded by ``unless_stored`` finds that event stored; no write."""

    session_id: str
    event_id: str
    template = "session {session_id!r} already holds event {event_id!r}"


class LogReadError(SharedeskError):
    """Raised when a host log's ``read_before(before, limit)`` raised; the cause is chained."""

    before: int | None
    limit: int
    template = "session log failed to read {limit} rows before {before}"


class PageError(SharedeskError):
    """Base of the errors raised when a host log returns a page that breaks its contract."""


class PageTooLarge(PageError):
    """Raised when a page holds more rows (``actual``) than were asked for (``requested``)."""

    requested: int
    actual: int
    template = "page holds {actual} rows, but at most {requested} were requested"


class EmptyPageCursor(PageError):
    """Raised when a page holds no rows but still gives a cursor, ``next_before``."""

    next_before: int
    template = "empty page gives cursor next_before={next_before}; expected None"


class DuplicateSequence(PageError):
    """Raised when a row's ``sequence`` was already seen in the same walk."""

    sequence: int
    template = "sequence {sequence} was already returned in this walk"


class PageOutOfRange(PageError):
    """Raised when a row's ``sequence`` is at or above the exclusive cursor ``before``."""

    sequence: int
    before: int
    template = "row {sequence} is not below the exclusive cursor {before}"


class PageNotDescending(PageError):
    """Raised when a row (``next``) is not below the row before it (``previous``)."""

    previous: int
    next: int
    template = "row {next} follows row {previous}; rows must be newest first"


class CursorDidNotAdvance(PageError):
    """Raised when a page's ``next_before`` is not below the cursor asked for, ``before``."""

    before: int
    next_before: int
    template = "next_before={next_before} does not advance past before={before}"


class CursorAfterOldest(PageError):
    """Raised when a page's ``next_before`` lies above its oldest row, ``oldest``."""

    next_before: int
    oldest: int
    template = "next_before={next_before} above the page's oldest row {oldest} would skip rows"


class WatermarkRegression(SharedeskError):
    """Raised when a delta is asked for below (``before``) the state's ``watermark``."""

    before: int
    watermark: int
    template = "before={before} lies below the watermark {watermark}"


class PresentSetOverflow(SharedeskError):
    """Raised when noting ``sequence`` would overflow the present set past its ``limit``."""

    limit: int
    sequence: int
    template = "present set is full ({limit} sequences); cannot add {sequence}"


class PresentSetTooLarge(SharedeskError):
    """Raised when a sharing state holds more present sequences (``actual``) than ``limit``."""

    limit: int
    actual: int
    template = "present set holds {actual} sequences; at most {limit} are allowed"


class RunError(SharedeskError):
    """Base of the errors about one run; every subclass keeps the run's id as ``run_id``."""

    run_id: str


class RunNotFound(RunError):
    """Raised when no run with the given id exists (or the id is not a run id)."""

    template = "no run with id {run_id!r}"


class RunStateError(RunError):
    """Raised when a run's ``status`` refuses an ``action`` (cancel, execute or emit); no write."""

    status: str
    action: str
    template = "cannot {action} run {run_id!r}: it is {status}"


class RunTimeout(RunError):
    """Raised when a run overran ``adapter_opts["timeout"]`` and finished as ``"timeout"``."""

    timeout: float
    template = "run {run_id!r} did not finish within {timeout} s"


class RunFailed(RunError):
    """Raised when a run's adapter raised; the run finished as ``"failed"``, cause chained.

    ``error_code`` (the exception's class name) and ``error_message`` are as recorded.
    """

    error_code: str
    error_message: str
    template = "run {run_id!r} failed: {error_code}: {error_message}"


class RunCancelled(RunError):
    """Raised by ``execute_run`` (or a queued run's future) when the run was cancelled."""

    template = "run {run_id!r} was cancelled"


class QueueFull(SharedeskError):
    """Raised when a session already has ``max_queued_runs`` runs waiting; nothing was written."""

    session_id: str
    max_queued_runs: int
    template = "session {session_id!r} already has max_queued_runs={max_queued_runs} runs queued"


class QueueClosed(SharedeskError):
    """Raised when a run for ``session_id`` is submitted to a run queue that was closed."""

    session_id: str
    template = "the run queue is closed; cannot submit a run for {session_id!r}"


class ProviderError(SharedeskError):
    """Raised by a provider adapter when its provider answered with an error or not at all.

    ``status_code`` is the HTTP status (``None``: no response), ``detail`` the (shortened)
    response body or the transport error, ``retry_after`` the seconds the provider's
    ``retry-after`` header asked to wait, or ``None``. A transport error is the ``__cause__``.
    """

    provider: str
    status_code: int | None
    detail: str
    retry_after: float | None = None
    template = "provider {provider!r} failed ({_answer}): {detail}"

    @property
    def _answer(self) -> str:
        wait = "" if self.retry_after is None else f", retry after {self.retry_after} s"
        return ("no response" if self.status_code is None else f"HTTP {self.status_code}") + wait


class StoreError(SharedeskError):
    """Base of the errors a store backend raises in place of its driver's errors."""


class StoreClosedError(StoreError):
    """Raised when a store is used after ``close()``; ``path`` is ``None`` in memory."""

    path: str | None
    template = "the {_where} is closed"
    _noun: ClassVar = "store"

    @property
    def _where(self) -> str:
        return f"in-memory {self._noun}" if self.path is None else f"{self._noun} at {self.path}"


class HubClosed(StoreClosedError):
    """Raised when a Hub (or a handle or turn of it) is used, or waited on, after ``close()``."""

    _noun = "hub"


class HubError(SharedeskError):
    """Base of the errors raised by the Hub's actor runtime (time-outs, crashes, failures)."""


class ActorTimeout(HubError):
    """Raised when an ``actor`` did not answer within the Hub's ``ask_timeout`` (``timeout``).

    The request may still take effect later; appends are idempotent by event ``id``, so a
    retry with the same ids is safe.
    """

    actor: str
    session_id: str
    timeout: float
    template = "{actor} actor of session {session_id!r} did not answer within {timeout} s"


class ActorCrashed(HubError):
    """Raised to the caller whose request made an actor's handler fail unexpectedly.

    A fresh actor recovering from the store serves the requests queued behind it.
    ``detail`` is the ``repr`` of the original exception, which is the ``__cause__``.
    """

    actor: str
    session_id: str
    detail: str
    template = "{actor} actor of session {session_id!r} failed and was restarted: {detail}"


class SessionFailed(HubError):
    """Raised for every call on a session whose actors restarted too often.

    They restarted more than ``restarts`` times within ``period`` seconds; the Hub stops
    restarting them until ``hub.recover(session_id)``. Other sessions are unaffected.
    """

    session_id: str
    restarts: int
    period: float
    template = "session {session_id!r} failed: actors restarted over {restarts} times in {period} s"


class StoreFullError(StoreError):
    """Raised when an append would grow the store past ``max_map_size`` or the disk is full.

    Sizes are bytes (``max_map_size`` 0: no ceiling). Nothing of the append was written.
    """

    path: str
    map_size: int
    max_map_size: int
    disk_full: bool = False
    template = "store at {path} is full: {_reason}"

    @property
    def _reason(self) -> str:
        if self.disk_full:
            return f"the disk has no space left (map size {self.map_size} bytes)"
        return f"map size {self.map_size} bytes may not grow past max_map_size={self.max_map_size}"


class CorruptRecordError(StoreError):
    """Raised when record ``sequence`` cannot be decoded (``detail``); others stay readable."""

    session_id: str
    sequence: int
    detail: str
    template = "record {sequence} of session {session_id!r} cannot be decoded: {detail}"


class StoreIOError(StoreError):
    """Raised when the storage engine fails during ``operation``; the cause is chained."""

    path: str
    operation: str
    template = "store at {path} failed during {operation}"


class CommitOutcomeUnknown(StoreIOError):
    """Raised when the connection was lost while a write's ``COMMIT`` was under way.

    The write to ``session_id`` may or may not be stored; retrying with the same ids is safe.
    """

    session_id: str
    template = (
        "the connection to the store at {path} was lost while committing {operation} to "
        "session {session_id!r}: it may or may not be stored; retrying with the same "
        "event ids is safe"
    )


class StoreFormatError(StoreError):
    """Raised at open when a store holds a format this code does not know (``found``).

    An LMDB file another program wrote, or a database schema newer than this code's.
    Nothing was changed.
    """

    path: str
    found: str
    supported: int
    template = (
        "the store at {path} holds {found}, not sharedesk store format {supported}: it was "
        "not written by this version of sharedesk"
    )


class StoreUnreachable(StoreIOError):
    """Raised when a store's server refuses a connection or cannot be reached (``reason``)."""

    reason: str
    template = "cannot connect to the store at {path} during {operation}: {reason}"


class TurnAlreadyCommitted(SharingStateConflict):
    """Raised when ``commit`` is called again on a committed turn; nothing is written."""

    template = "this turn was committed already: its commit moved the watermark to {actual}"


class RowsArchived(SharedeskError):
    """Raised when a read asks for rows at or below ``archived_through``: retention removed them.

    They are in the archive the retention wrote (``docs/long-lived-desks.md``); nothing
    above ``archived_through`` is missing.
    """

    session_id: str
    archived_through: int
    template = (
        "session {session_id!r} holds no rows at or below {archived_through}: retention "
        "archived them"
    )
