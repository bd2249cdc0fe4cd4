"""Runs: sessions and runs as folds over events, adapters, renderers and the run queue.

Imports ``protocol`` and ``projection`` only, and reaches storage only through the
:class:`~sharedesk.EventStore` port, so it works the same over ``MemoryStore``,
``LmdbStore`` and a ``Hub``.
"""

from sharedesk.runs._http import FunctionTool
from sharedesk.runs.anthropic import AnthropicMessagesAdapter
from sharedesk.runs.manager import SessionManager
from sharedesk.runs.openai_chat import OpenAIChatAdapter
from sharedesk.runs.openai_responses import OpenAIResponsesAdapter, to_responses_input
from sharedesk.runs.queue import RunFuture, RunQueue
from sharedesk.runs.render import to_anthropic_messages, to_openai_messages
from sharedesk.runs.scripted import ScriptedAdapter
from sharedesk.runs.types import (
    Adapter,
    AdapterResult,
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
    "AnthropicMessagesAdapter",
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
