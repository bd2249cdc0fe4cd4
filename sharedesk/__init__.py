"""sharedesk: shared desks for multi-agent conversations.

This module only re-exports the public contract; the code lives in the subpackages
``protocol``, ``projection``, ``store``, ``runs`` and ``actors``. Importing it imports only
core dependencies: the names of :data:`sharedesk.protocol._lazy.ROOT` (``LmdbStore``,
``PostgresStore``, the runs API, ``AsyncHub``, the adapters) resolve on first use.
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
from sharedesk.projection.retention import RetentionPolicy, RetentionReport
from sharedesk.protocol import *  # noqa: F403 (the names in protocol.__all__)
from sharedesk.protocol._lazy import ROOT, load_lazy

# mypy follows one star import deep: the names protocol star-imports come from their modules.
from sharedesk.protocol.authors import *  # noqa: F403
from sharedesk.protocol.errors import *  # noqa: F403
from sharedesk.protocol.events import *  # noqa: F403
from sharedesk.protocol.views import *  # noqa: F403
from sharedesk.store import MemoryStore, SessionInfo

if TYPE_CHECKING:
    from sharedesk.actors.aio import AsyncHub as AsyncHub
    from sharedesk.actors.aio import AsyncTurn as AsyncTurn
    from sharedesk.adapters.openai_chat import OpenAIChatAdapter as OpenAIChatAdapter
    from sharedesk.adapters.render import to_anthropic_messages as to_anthropic_messages
    from sharedesk.adapters.render import to_openai_messages as to_openai_messages
    from sharedesk.runs import *  # noqa: F403
    from sharedesk.store.lmdb import LmdbStore as LmdbStore
    from sharedesk.store.postgres import PostgresStore as PostgresStore

# A library never configures logging for the application.
logging.getLogger("sharedesk").addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("sharedesk")
    return load_lazy(name, __name__)


__all__ = [
    "Hub",
    "HubOptions",
    "HubStats",
    "MemoryStore",
    "RetentionPolicy",
    "RetentionReport",
    "SessionHandle",
    "SessionInfo",
    "TranscriptBuilder",
    "Turn",
    "configure_logging",
    "initialized_state",
    "note_present",
    "prepare_delta",
    "project_session",
    *ROOT,
]
__all__ += protocol.__all__
__all__.sort()
