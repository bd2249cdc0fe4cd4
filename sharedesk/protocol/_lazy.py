"""Names exported on first use, so ``import sharedesk`` imports only what it needs.

A package with lazy names defines ``def __getattr__(name): return load_lazy(name,
__name__)`` and imports them for type checkers under ``TYPE_CHECKING``. Some need an
extra (httpx for ``OpenAIChatAdapter``, psycopg for ``PostgresStore``); the others are
lazy to keep ``import sharedesk`` light: ``LmdbStore``, the runs API, the asyncio front end.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

#: The names ``sharedesk`` lists and exports lazily -> (defining module, the extra that
#: installs its dependency).
ROOT: Final[Mapping[str, tuple[str, str | None]]] = MappingProxyType(
    {
        "AsyncHub": ("sharedesk.actors.aio", None),
        "AsyncTurn": ("sharedesk.actors.aio", None),
        "LmdbStore": ("sharedesk.store.lmdb", None),
        "OpenAIChatAdapter": ("sharedesk.adapters.openai_chat", "http"),
        "PostgresStore": ("sharedesk.store.postgres", "postgres"),
        "Adapter": ("sharedesk.runs", None),
        "AdapterResult": ("sharedesk.runs", None),
        "Emit": ("sharedesk.runs", None),
        "Run": ("sharedesk.runs", None),
        "RunFuture": ("sharedesk.runs", None),
        "RunQueue": ("sharedesk.runs", None),
        "RunQueueStatus": ("sharedesk.runs", None),
        "RunResult": ("sharedesk.runs", None),
        "ScriptedAdapter": ("sharedesk.runs", None),
        "ScriptedCall": ("sharedesk.runs", None),
        "Session": ("sharedesk.runs", None),
        "SessionManager": ("sharedesk.runs", None),
        "to_anthropic_messages": ("sharedesk.adapters.render", None),
        "to_openai_messages": ("sharedesk.adapters.render", None),
    }
)
#: The lazy names only a subpackage lists (``sharedesk`` resolves them too), in that form.
SUBPACKAGE: Final[Mapping[str, tuple[str, str | None]]] = MappingProxyType(
    {
        "AnthropicMessagesAdapter": ("sharedesk.adapters.anthropic", "http"),
        "AsyncEmit": ("sharedesk.runs", None),
        "FunctionTool": ("sharedesk.adapters._http", "http"),
        "HttpAdapter": ("sharedesk.adapters._http", "http"),
        "OpenAIResponsesAdapter": ("sharedesk.adapters.openai_responses", "http"),
        "to_responses_input": ("sharedesk.adapters.render", None),
    }
)


def load_lazy(name: str, owner: str) -> Any:
    """Import and return the lazy ``name`` for package ``owner``'s module ``__getattr__``.

    ``sharedesk`` resolves every lazy name, a subpackage only its own; any other name is an
    ``AttributeError``. A missing optional dependency is an ``ImportError`` naming the extra.
    """
    entry = ROOT.get(name) or SUBPACKAGE.get(name)
    if entry is None or not (owner == "sharedesk" or entry[0].startswith(owner + ".")):
        raise AttributeError(f"module {owner!r} has no attribute {name!r}")
    module, extra = entry
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if extra is None or exc.name is None or exc.name.startswith("sharedesk"):
            raise
        raise ImportError(
            f"{name} needs {exc.name}, which is not installed: pip install 'sharedesk[{extra}]'",
            name=exc.name,
        ) from exc
