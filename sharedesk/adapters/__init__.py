"""Provider adapters: OpenAI chat completions, OpenAI Responses, Anthropic Messages.

Each stands on one HTTP base (:class:`HttpAdapter`, over httpx: the ``http`` extra),
async first, with synchronous runs served through one bridge; the renderers turn a
transcript into each provider's input and need nothing optional. Names are imported on
first use, so ``import sharedesk.adapters`` needs no httpx until an adapter is asked for.
"""

from typing import TYPE_CHECKING, Any

from sharedesk.protocol._lazy import load_lazy

if TYPE_CHECKING:
    from sharedesk.adapters._http import FunctionTool, HttpAdapter
    from sharedesk.adapters.anthropic import AnthropicMessagesAdapter
    from sharedesk.adapters.openai_chat import OpenAIChatAdapter
    from sharedesk.adapters.openai_responses import OpenAIResponsesAdapter
    from sharedesk.adapters.render import (
        to_anthropic_messages,
        to_openai_messages,
        to_responses_input,
    )


def __getattr__(name: str) -> Any:
    return load_lazy(name, __name__)


__all__ = [
    "AnthropicMessagesAdapter",
    "FunctionTool",
    "HttpAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "to_anthropic_messages",
    "to_openai_messages",
    "to_responses_input",
]
