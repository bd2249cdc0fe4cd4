"""Runs: sessions and runs as folds over events, adapters, renderers and the run queue.

Imports ``protocol`` and ``projection`` only, and reaches storage only through the
:class:`~sharedesk.EventStore` port, so it works the same over ``MemoryStore``,
``LmdbStore`` and a ``Hub``.

Adapters that need an optional dependency (``OpenAIChatAdapter``: httpx, the ``http``
extra) are imported on first use of their name, so importing ``sharedesk`` never
imports them.
"""

from typing import TYPE_CHECKING, Any

from sharedesk.protocol._lazy import load_lazy
from sharedesk.runs._http import FunctionTool
from sharedesk.runs.anthropic import AnthropicMessagesAdapter
from sharedesk.runs.manager import SessionManager
from sharedesk.runs.openai_responses import OpenAIResponsesAdapter, to_responses_input
from sharedesk.runs.queue import RunFuture, RunQueue
from sharedesk.runs.render import to_anthropic_messages, to_openai_messages
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

if TYPE_CHECKING:
    from sharedesk.runs.openai_chat import OpenAIChatAdapter


def __getattr__(name: str) -> Any:
    return load_lazy(name, __name__)


__all__ = [
    "Adapter",
    "AdapterResult",
    "AnthropicMessagesAdapter",
    "AsyncEmit",
    "Emit",
    "FunctionTool",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "Run",
    "RunFuture",
    "RunQueue",
    "RunQueueStatus",
    "RunResult",
    "ScriptedAdapter",
    "ScriptedCall",
    "Session",
    "SessionManager",
    "to_anthropic_messages",
    "to_openai_messages",
    "to_responses_input",
]
