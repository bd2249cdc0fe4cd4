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

from sharedesk import protocol
from sharedesk.actors import Hub, HubOptions, HubStats, SessionHandle, Turn
from sharedesk.logconfig import configure_logging
from sharedesk.projection import (
    TranscriptBuilder,
    initialized_state,
    note_present,
    prepare_delta,
    project_session,
)
from sharedesk.protocol import *  # noqa: F403 (the names in protocol.__all__)
from sharedesk.protocol._lazy import load_lazy
from sharedesk.store import MemoryStore, SessionInfo

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


# The names defined outside ``protocol``; the protocol's own come from its list.
__all__ = [
    "Adapter",
    "AdapterResult",
    "AsyncHub",
    "AsyncTurn",
    "Emit",
    "Hub",
    "HubOptions",
    "HubStats",
    "LmdbStore",
    "MemoryStore",
    "OpenAIChatAdapter",
    "PostgresStore",
    "Run",
    "RunFuture",
    "RunQueue",
    "RunQueueStatus",
    "RunResult",
    "ScriptedAdapter",
    "ScriptedCall",
    "Session",
    "SessionHandle",
    "SessionInfo",
    "SessionManager",
    "TranscriptBuilder",
    "Turn",
    "configure_logging",
    "initialized_state",
    "note_present",
    "prepare_delta",
    "project_session",
    "to_anthropic_messages",
    "to_openai_messages",
]
__all__ += protocol.__all__
__all__.sort()
