"""The sharedesk error tree.

Every error sharedesk raises derives from :class:`SharedeskError`. Each error takes the
figures that describe the failure as arguments, keeps them as attributes of the same
name, and builds its message from them (what was expected, what was found, where).

An error is declared once: its figures as annotated class attributes (in the order of
the constructor's arguments, a base class's first) and its message as a ``template``,
formatted with the figures (and any property of the error). The base class builds the
constructor (typed for mypy through ``dataclass_transform``) and ``__reduce__``, so an
error pickles with its figures::

    class PageTooLarge(PageError):
        requested: int
        actual: int
        template = "page holds {actual} rows, but at most {requested} were requested"

A subclass without a ``template`` of its own inherits its parent's figures and message;
one that only changes the message declares a new ``template``. A class written the
plain way (its own ``__init__`` calling ``super().__init__(message)`` and a ``_figures``
tuple naming its constructor's arguments, for pickling) is accepted too.

``SharedeskError`` derives from :class:`Exception`, not :class:`ValueError`: msgspec
rewraps ``ValueError``/``TypeError`` raised in ``__post_init__`` while decoding, and our
invariants (``PresentSetTooLarge``) must reach the caller unchanged. Note that
:class:`ValidationError` shares its name with ``msgspec.ValidationError``; inside the
package always write msgspec's in full.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, dataclass_transform


def _declared_figures(cls: type) -> tuple[str, ...]:
    """Return the figures (annotated, non-``ClassVar`` attributes) of ``cls``, bases first."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if name.startswith("_") or "ClassVar" in str(annotation) or name in names:
                continue
            names.append(name)
    return tuple(names)


class _Figures(dict[str, Any]):
    """The values a message template is formatted with: the error's attributes."""

    def __init__(self, error: SharedeskError) -> None:
        super().__init__()
        self._error = error

    def __missing__(self, name: str) -> Any:
        return getattr(self._error, name)


def _declared_init(self: SharedeskError, *args: Any, **kwargs: Any) -> None:
    """Bind the figures of a declared error, keep them as attributes, build the message."""
    cls = type(self)
    names = cls._figures
    if len(args) > len(names):
        raise TypeError(f"{cls.__name__}() takes {len(names)} arguments, got {len(args)}")
    values = dict(zip(names, args, strict=False))
    for name, value in kwargs.items():
        if name not in names or name in values:
            raise TypeError(f"{cls.__name__}() got an unexpected or repeated argument {name!r}")
        values[name] = value
    missing = [name for name in names if name not in values]
    if missing:
        raise TypeError(f"{cls.__name__}() is missing the arguments {missing}")
    for name in names:
        setattr(self, name, values[name])
    template = cls.template
    assert template is not None
    Exception.__init__(self, template.format_map(_Figures(self)))


@dataclass_transform()
class SharedeskError(Exception):
    """Base class of every error raised by sharedesk."""

    #: The message, formatted with the figures; a class that declares one gets a
    #: constructor taking its figures (see the module docstring).
    template: ClassVar[str | None] = None
    #: Names of the constructor's arguments, kept as attributes (used to pickle the error).
    _figures: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: object) -> None:
        super().__init__(*args)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "__init__" in own:
            return  # written the plain way: it keeps its own __init__ and _figures
        if cls.template is not None and ("template" in own or "__annotations__" in own):
            cls._figures = _declared_figures(cls)
        if own.get("template") is not None:
            cls.__init__ = _declared_init  # type: ignore[method-assign]
        if cls.__init__ is _declared_init:
            cls.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
                [
                    inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                    for name in cls._figures
                ]
            )

    def __reduce__(self) -> str | tuple[Any, ...]:
        if not self._figures:  # a family base raised with a plain message
            return super().__reduce__()
        return (type(self), tuple(getattr(self, name) for name in self._figures))


class ValidationError(SharedeskError):
    """Raised when input is malformed; nothing was written.

    Attributes:
        message: What is wrong, naming the offending field or value.
    """

    message: str
    template = "{message}"


class ConcurrencyError(SharedeskError):
    """Raised when an append's ``expected_version`` is not the session's last sequence.

    Nothing was written.

    Attributes:
        expected: The version the caller expected.
        actual: The session's last sequence at the time of the append.
    """

    expected: int
    actual: int
    template = "expected version {expected}, but the session is at {actual}"


class SharingStateConflict(ConcurrencyError):
    """Raised when a turn commits against a sharing state that moved since it was read.

    Another turn of the same viewer and conversation committed first; nothing was
    written (compare-and-swap on the stored state).

    Attributes:
        expected: The watermark the committing turn planned from (-1 for no state).
        actual: The stored watermark (-1 for no state).
    """

    template = (
        "sharing state moved: the turn planned from watermark {expected}, "
        "but the stored watermark is {actual}"
    )


class AlreadyStored(SharedeskError):
    """Raised when an append guarded by ``unless_stored`` finds that event already stored.

    The guard is checked inside the write transaction (a run's emit is refused once the
    run's ``RunFinished`` is stored, whatever else was appended meanwhile). Nothing was
    written.

    Attributes:
        session_id: The session.
        event_id: The id the guard named.
    """

    _figures = ("session_id", "event_id")

    def __init__(self, session_id: str, event_id: str) -> None:
        super().__init__(f"session {session_id!r} already holds event {event_id!r}")
        self.session_id = session_id
        self.event_id = event_id


class LogReadError(SharedeskError):
    """Raised when a host :class:`~sharedesk.SessionLog` raised while being read.

    The original exception is the ``__cause__``.

    Attributes:
        before: The exclusive cursor that was asked for.
        limit: The number of rows that was asked for.
    """

    before: int | None
    limit: int
    template = "session log failed to read {limit} rows before {before}"


class PageError(SharedeskError):
    """Base of the errors raised when a host log returns a page that breaks its contract."""


class PageTooLarge(PageError):
    """Raised when a page holds more rows than the limit asked for.

    Attributes:
        requested: The limit asked for.
        actual: The number of rows the page held.
    """

    requested: int
    actual: int
    template = "page holds {actual} rows, but at most {requested} were requested"


class EmptyPageCursor(PageError):
    """Raised when a page holds no rows but still gives a ``next_before`` cursor.

    Attributes:
        next_before: The cursor the empty page gave.
    """

    next_before: int
    template = "empty page gives cursor next_before={next_before}; expected None"


class DuplicateSequence(PageError):
    """Raised when a row's sequence was already seen in the same walk.

    Attributes:
        sequence: The repeated sequence.
    """

    sequence: int
    template = "sequence {sequence} was already returned in this walk"


class PageOutOfRange(PageError):
    """Raised when a row lies at or above the exclusive cursor that was asked for.

    Attributes:
        sequence: The row's sequence.
        before: The exclusive cursor asked for.
    """

    sequence: int
    before: int
    template = "row {sequence} is not below the exclusive cursor {before}"


class PageNotDescending(PageError):
    """Raised when a row's sequence is not strictly below the previous row's.

    Attributes:
        previous: The previous row's sequence.
        next: The offending row's sequence.
    """

    previous: int
    next: int
    template = "row {next} follows row {previous}; rows must be newest first"


class CursorDidNotAdvance(PageError):
    """Raised when ``next_before`` is at or above the cursor that was asked for.

    Attributes:
        before: The cursor asked for.
        next_before: The cursor the page gave.
    """

    before: int
    next_before: int
    template = "next_before={next_before} does not advance past before={before}"


class CursorAfterOldest(PageError):
    """Raised when ``next_before`` lies above the oldest row of its page.

    Attributes:
        next_before: The cursor the page gave.
        oldest: The sequence of the page's oldest row.
    """

    next_before: int
    oldest: int
    template = (
        "next_before={next_before} lies above the page's oldest row {oldest}; rows would be skipped"
    )


class WatermarkRegression(SharedeskError):
    """Raised when a delta is asked for below the sharing state's watermark.

    Attributes:
        before: The exclusive cursor asked for.
        watermark: The state's watermark.
    """

    before: int
    watermark: int
    template = "before={before} lies below the watermark {watermark}"


class PresentSetOverflow(SharedeskError):
    """Raised when noting one more present sequence would exceed the present-set limit.

    Attributes:
        limit: The most sequences a state may hold above its watermark.
        sequence: The sequence that did not fit.
    """

    limit: int
    sequence: int
    template = "present set is full ({limit} sequences); cannot add {sequence}"


class PresentSetTooLarge(SharedeskError):
    """Raised when a sharing state is built or decoded with too many present sequences.

    Attributes:
        limit: The most sequences a state may hold above its watermark.
        actual: The number of sequences the state holds.
    """

    limit: int
    actual: int
    template = "present set holds {actual} sequences; at most {limit} are allowed"


class RunError(SharedeskError):
    """Base of the errors about one run; every subclass keeps the run's id as ``run_id``."""

    run_id: str


class RunNotFound(RunError):
    """Raised when no run with the given id exists (or the id is not a run id).

    Attributes:
        run_id: The id that was looked up.
    """

    template = "no run with id {run_id!r}"


class RunStateError(RunError):
    """Raised when a run is not in a state that allows the action asked for.

    Examples: cancelling a finished run, executing a run twice, emitting an event into a
    run that has finished. Nothing was written.

    Attributes:
        run_id: The run.
        status: The run's status when the action was refused.
        action: What was refused (``"cancel"``, ``"execute"``, ``"emit"``).
    """

    status: str
    action: str
    template = "cannot {action} run {run_id!r}: it is {status}"


class RunTimeout(RunError):
    """Raised when a run overran its ``adapter_opts["timeout"]``; it finished as ``"timeout"``.

    Attributes:
        run_id: The run.
        timeout: The timeout that was exceeded, in seconds.
    """

    timeout: float
    template = "run {run_id!r} did not finish within {timeout} s"


class RunFailed(RunError):
    """Raised when a run's adapter raised; the run finished as ``"failed"``.

    The adapter's exception is the ``__cause__``.

    Attributes:
        run_id: The run.
        error_code: The recorded error code (the exception's class name).
        error_message: The recorded error message.
    """

    error_code: str
    error_message: str
    template = "run {run_id!r} failed: {error_code}: {error_message}"


class RunCancelled(RunError):
    """Raised by ``execute_run`` (or a queued run's future) when the run was cancelled.

    Attributes:
        run_id: The run.
    """

    template = "run {run_id!r} was cancelled"


class QueueFull(SharedeskError):
    """Raised when a session already has ``max_queued_runs`` runs waiting; nothing was written.

    Attributes:
        session_id: The session.
        max_queued_runs: The most runs that may wait per session.
    """

    session_id: str
    max_queued_runs: int
    template = (
        "session {session_id!r} already has {max_queued_runs} queued runs "
        "(max_queued_runs={max_queued_runs})"
    )


class QueueClosed(SharedeskError):
    """Raised when a run is submitted to a run queue that was closed.

    Attributes:
        session_id: The session the run was submitted for.
    """

    session_id: str
    template = "the run queue is closed; cannot submit a run for {session_id!r}"


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
        wait = "" if retry_after is None else f", retry after {retry_after} s"
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

    path: str | None
    template = "the {_where} is closed"

    @property
    def _where(self) -> str:
        return "in-memory store" if self.path is None else f"store at {self.path}"


class HubClosed(StoreClosedError):
    """Raised when a Hub (or a handle, view or turn taken from it) is used after ``close()``.

    Also raised to callers still waiting on an actor when the Hub closes. It is a
    :class:`StoreClosedError`, because a Hub serves the store interface too.

    Attributes:
        path: Where the Hub's store lives, or ``None`` for an in-memory Hub.
    """

    template = "the {_where} is closed"

    @property
    def _where(self) -> str:
        return "in-memory hub" if self.path is None else f"hub at {self.path}"


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

    actor: str
    session_id: str
    timeout: float
    template = "{actor} actor of session {session_id!r} did not answer within {timeout} s"


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

    actor: str
    session_id: str
    detail: str
    template = "{actor} actor of session {session_id!r} failed and was restarted: {detail}"


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

    session_id: str
    restarts: int
    period: float
    template = (
        "session {session_id!r} failed: its actors restarted more than {restarts} "
        "times within {period} s"
    )


class StoreFullError(StoreError):
    """Raised when an append would grow the store past its ``max_map_size``, or the disk is full.

    Nothing from the failing append was written.

    Attributes:
        path: Where the store lives.
        map_size: The store's current map size in bytes.
        max_map_size: The configured ceiling in bytes (0: none).
        disk_full: The file system holding the store had no space left.
    """

    _figures = ("path", "map_size", "max_map_size", "disk_full")

    def __init__(
        self, path: str, map_size: int, max_map_size: int, disk_full: bool = False
    ) -> None:
        if disk_full:
            reason = f"the disk has no space left (map size {map_size} bytes)"
        else:
            reason = f"map size {map_size} bytes may not grow past max_map_size={max_map_size}"
        super().__init__(f"store at {path} is full: {reason}")
        self.path = path
        self.map_size = map_size
        self.max_map_size = max_map_size
        self.disk_full = disk_full


class CorruptRecordError(StoreError):
    """Raised when a stored record cannot be decoded; other records stay readable.

    Attributes:
        session_id: The session the record belongs to.
        sequence: The record's sequence.
        detail: What the decoder reported.
    """

    session_id: str
    sequence: int
    detail: str
    template = "record {sequence} of session {session_id!r} cannot be decoded: {detail}"


class StoreIOError(StoreError):
    """Raised when the storage engine fails (disk, permissions, lock); the cause is chained.

    Attributes:
        path: Where the store lives.
        operation: What was being done (``"open"``, ``"append"``, ``"read"``, ...).
    """

    path: str
    operation: str
    template = "store at {path} failed during {operation}"


class CommitOutcomeUnknown(StoreIOError):
    """Raised when the connection was lost while a write's ``COMMIT`` was under way.

    The write may or may not have been stored: the server may have committed it before
    the connection went. Retrying it with the same event ids is safe (a stored id is
    answered with its stored event); read the session to learn which happened.

    Attributes:
        path: Where the store lives (a DSN without its password).
        operation: What was being done (``"append"``, ``"append_and_share"``).
        session_id: The session written to.
    """

    session_id: str
    template = (
        "the connection to the store at {path} was lost while committing {operation} to "
        "session {session_id!r}: it may or may not be stored; retrying with the same "
        "event ids is safe"
    )


class SchemaTooNewError(StoreError):
    """Raised when a database's store schema is newer than this code; nothing was changed.

    Attributes:
        path: Where the store lives (a DSN without its password).
        schema: The PostgreSQL schema holding the store's tables.
        found: The schema version the database holds.
        supported: The newest version this code knows.
    """

    path: str
    schema: str
    found: int
    supported: int
    template = (
        "the store at {path} (schema {schema!r}) is at version {found}, newer than the "
        "{supported} this version of sharedesk supports: upgrade sharedesk"
    )


class TurnAlreadyCommitted(SharingStateConflict):
    """Raised when ``commit`` is called again on a turn that was committed; nothing is written.

    Attributes:
        expected: The watermark the turn planned from (-1 for no state).
        actual: The watermark its commit stored.
    """

    template = "this turn was committed already: its commit moved the watermark to {actual}"
