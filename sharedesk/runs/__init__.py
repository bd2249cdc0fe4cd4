"""Runs: sessions and runs as folds over events, their executors and the run queue.

Imports ``protocol`` and ``projection`` only, and reaches storage only through the
:class:`~sharedesk.EventStore` port, so it works the same over ``MemoryStore``,
``LmdbStore`` and a ``Hub``. Provider adapters live in :mod:`sharedesk.adapters`.
"""

from sharedesk.runs.manager import SessionManager
from sharedesk.runs.queue import RunFuture, RunQueue
from sharedesk.runs.scripted import ScriptedAdapter
from sharedesk.runs.types import (
    Adapter,
    AdapterResult,
    AsyncEmit,
    Emit,
    Run,
    RunQueueStatus,
    RunResult,
    ScriptedCall,
    Session,
)

__all__ = [
    "Adapter",
    "AdapterResult",
    "AsyncEmit",
    "Emit",
    "Run",
    "RunFuture",
    "RunQueue",
    "RunQueueStatus",
    "RunResult",
    "ScriptedAdapter",
    "ScriptedCall",
    "Session",
    "SessionManager",
]
