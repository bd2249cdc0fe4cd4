"""sharedesk: shared desks for multi-agent conversations.

Each participant gets its own attributed view of a desk, exactly the delta it has not
seen, and a transcript rebuilt from persisted events. This module only re-exports the
public contract; the code lives in the subpackages ``protocol`` (types, errors, codecs,
ports), ``projection`` (pure folds), ``store`` (backends), ``runs`` and ``actors``.

Importing it imports only core dependencies (pykka, msgspec, structlog; lmdb on use):
names whose code needs an extra (``OpenAIChatAdapter``: httpx) and ``__version__``
(package metadata) resolve on first use, through the module ``__getattr__``, and so
do ``LmdbStore`` (with py-lmdb), ``PostgresStore`` (with psycopg, the ``postgres``
extra), the runs API (``SessionManager``, adapters, renderers, the run queue) and
``AsyncHub``/``AsyncTurn``: a program uses only what it imports.
"""

import logging
from typing import TYPE_CHECKING, Any

from sharedesk.actors import (
    Hub,
    HubOptions,
    HubStats,
    SessionHandle,
    Turn,
)
from sharedesk.logconfig import (
    configure_logging,
)
from sharedesk.projection import (
    TranscriptBuilder,
    initialized_state,
    note_present,
    prepare_delta,
    project_session,
)
from sharedesk.protocol import (
    PAGE_SIZE,
    PRESENT_SET_LIMIT,
    SCAN_LIMIT,
    SESSION_WINDOW,
    ActorCrashed,
    ActorTimeout,
    Agent,
    CommitOutcomeUnknown,
    ConcurrencyError,
    Conversation,
    CorruptRecordError,
    CursorAfterOldest,
    CursorDidNotAdvance,
    Delta,
    DuplicateSequence,
    EmptyPageCursor,
    Event,
    EventBody,
    EventStore,
    HubClosed,
    HubError,
    Item,
    LogMessage,
    LogReadError,
    Operator,
    PageError,
    PageNotDescending,
    PageOutOfRange,
    PageTooLarge,
    Person,
    PresentSetOverflow,
    PresentSetTooLarge,
    Projection,
    ProviderError,
    QueueClosed,
    QueueFull,
    Reinitialize,
    ReinitializeReason,
    Retracted,
    RunCancelled,
    RunError,
    RunFailed,
    RunFinished,
    RunNotFound,
    RunStarted,
    RunStateError,
    RunTimeout,
    SchemaTooNewError,
    SessionAuthor,
    SessionFailed,
    SessionLog,
    SessionMessage,
    SessionPage,
    SessionQuery,
    SessionStarted,
    SharedeskError,
    SharingQuery,
    SharingState,
    SharingStateConflict,
    SharingStateStore,
    StoreClosedError,
    StoreError,
    StoreFullError,
    StoreIOError,
    System,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Transcript,
    TranscriptMessage,
    ValidationError,
    WatermarkRegression,
)
from sharedesk.protocol._lazy import load_lazy
from sharedesk.store import (
    MemoryStore,
    SessionInfo,
)

if TYPE_CHECKING:
    from sharedesk.actors.aio import AsyncHub, AsyncTurn
    from sharedesk.adapters.openai_chat import OpenAIChatAdapter
    from sharedesk.adapters.render import to_anthropic_messages, to_openai_messages
    from sharedesk.runs import (
        Adapter,
        AdapterResult,
        Emit,
        Run,
        RunFuture,
        RunQueue,
        RunQueueStatus,
        RunResult,
        ScriptedAdapter,
        ScriptedCall,
        Session,
        SessionManager,
    )
    from sharedesk.store.lmdb import LmdbStore
    from sharedesk.store.postgres import PostgresStore

# A library never configures logging for the application.
logging.getLogger("sharedesk").addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("sharedesk")
    return load_lazy(name, __name__)


__all__ = [
    "ActorCrashed",
    "ActorTimeout",
    "Adapter",
    "AdapterResult",
    "Agent",
    "AsyncHub",
    "AsyncTurn",
    "CommitOutcomeUnknown",
    "ConcurrencyError",
    "Conversation",
    "CorruptRecordError",
    "CursorAfterOldest",
    "CursorDidNotAdvance",
    "Delta",
    "DuplicateSequence",
    "Emit",
    "EmptyPageCursor",
    "Event",
    "EventBody",
    "EventStore",
    "Hub",
    "HubClosed",
    "HubError",
    "HubOptions",
    "HubStats",
    "Item",
    "LmdbStore",
    "LogMessage",
    "LogReadError",
    "MemoryStore",
    "OpenAIChatAdapter",
    "Operator",
    "PAGE_SIZE",
    "PRESENT_SET_LIMIT",
    "PageError",
    "PageNotDescending",
    "PageOutOfRange",
    "PageTooLarge",
    "Person",
    "PostgresStore",
    "PresentSetOverflow",
    "PresentSetTooLarge",
    "Projection",
    "ProviderError",
    "QueueClosed",
    "QueueFull",
    "Reinitialize",
    "ReinitializeReason",
    "Retracted",
    "Run",
    "RunCancelled",
    "RunError",
    "RunFailed",
    "RunFinished",
    "RunFuture",
    "RunNotFound",
    "RunQueue",
    "RunQueueStatus",
    "RunResult",
    "RunStarted",
    "RunStateError",
    "RunTimeout",
    "SCAN_LIMIT",
    "SESSION_WINDOW",
    "SchemaTooNewError",
    "ScriptedAdapter",
    "ScriptedCall",
    "Session",
    "SessionAuthor",
    "SessionFailed",
    "SessionHandle",
    "SessionInfo",
    "SessionLog",
    "SessionManager",
    "SessionMessage",
    "SessionPage",
    "SessionQuery",
    "SessionStarted",
    "SharedeskError",
    "SharingQuery",
    "SharingState",
    "SharingStateConflict",
    "SharingStateStore",
    "StoreClosedError",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "System",
    "Text",
    "TextDelta",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "TranscriptBuilder",
    "TranscriptMessage",
    "Turn",
    "ValidationError",
    "WatermarkRegression",
    "configure_logging",
    "initialized_state",
    "note_present",
    "prepare_delta",
    "project_session",
    "to_anthropic_messages",
    "to_openai_messages",
]
