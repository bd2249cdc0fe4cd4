"""What the async HTTP adapters share: tools, server-sent events, provider errors.

``httpx`` is imported by the adapters when a run executes, never at import time; this
module only names its types for the checker.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec

from sharedesk.protocol.errors import ProviderError, ValidationError

if TYPE_CHECKING:
    import httpx

#: HTTP timeout in seconds when ``adapter_opts`` has no ``"timeout"`` (seconds).
DEFAULT_HTTP_TIMEOUT_S: Final = 60.0
#: Most model calls one run makes while answering tool calls (``"max_tool_rounds"``).
DEFAULT_TOOL_ROUNDS: Final = 8
_DETAIL_MAX: Final = 500


class FunctionTool(msgspec.Struct, frozen=True):
    """A function the model may call; the adapter runs it and sends its result back.

    Attributes:
        name: The tool's name, as the model calls it.
        function: Called with the model's arguments as keywords; may be a coroutine
            function. Its return value (JSON-like) is the tool's output; an exception
            becomes an error result (``ToolResult.is_error``) carrying its message.
        description: What the tool does, for the model.
        parameters: The JSON schema of its arguments.
    """

    name: str
    function: Callable[..., Any]
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


def check_tools(tools: Any) -> dict[str, FunctionTool]:
    """Return the tools by name.

    Raises:
        ValidationError: Not a sequence of ``FunctionTool`` with distinct, non-empty names.

    Cost: O(len(tools)).
    """
    found: dict[str, FunctionTool] = {}
    for index, tool in enumerate(tools or ()):
        if not isinstance(tool, FunctionTool) or not tool.name or not callable(tool.function):
            raise ValidationError(f"tools[{index}] must be a FunctionTool with a name")
        if tool.name in found:
            raise ValidationError(f"tools[{index}] repeats the name {tool.name!r}")
        found[tool.name] = tool
    return found


async def call_tool(
    tools: Mapping[str, FunctionTool], name: str, arguments: Any
) -> tuple[Any, bool]:
    """Run the tool ``name`` with ``arguments``; return ``(output, is_error)``.

    An unknown tool, arguments that are not a mapping, and an exception raised by the
    function all give an error result (the model is told, the run goes on).

    Cost: the function's.
    """
    tool = tools.get(name)
    if tool is None:
        return f"no tool named {name!r}", True
    if not isinstance(arguments, Mapping):
        return f"arguments of {name!r} must be an object", True
    try:
        output = tool.function(**arguments)
        if inspect.isawaitable(output):
            output = await output
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", True
    return output, False


def output_text(output: Any) -> str:
    """Return a tool output as the text providers take. Cost: O(size of output)."""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, default=str)


def http_timeout(opts: Mapping[str, Any]) -> float:
    """Return the HTTP timeout in seconds: ``opts["timeout"]`` (seconds) or the default."""
    timeout = opts.get("timeout")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        return float(timeout)
    return DEFAULT_HTTP_TIMEOUT_S


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Return the ``retry-after`` header in seconds (delta or HTTP date), else ``None``.

    ``retry-after-ms`` (milliseconds, sent by some providers) wins when present.

    Cost: O(1).
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
        date = headers.get("date")
        now = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        return None
    if now is None:
        return None
    return max(0.0, (when - now).total_seconds())


async def check_status(provider: str, response: httpx.Response) -> None:
    """Raise ``ProviderError`` (with ``retry_after``) for an HTTP error response.

    Cost: reads the error body (at most what the server sends).
    """
    if response.status_code < 400:
        return
    await response.aread()
    raise ProviderError(
        provider,
        response.status_code,
        response.text[:_DETAIL_MAX],
        retry_after(response.headers),
    )


async def read_json(provider: str, response: httpx.Response) -> dict[str, Any]:
    """Return a response's JSON object body, or raise ``ProviderError`` when malformed."""
    await response.aread()
    try:
        payload = json.loads(response.content)
    except ValueError as exc:
        raise ProviderError(
            provider, response.status_code, f"malformed response: {response.text[:80]!r}"
        ) from exc
    if not isinstance(payload, dict):
        raise ProviderError(provider, response.status_code, "malformed response: not an object")
    return payload


async def sse_events(provider: str, response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON payload of each server-sent event of ``response``.

    Events are separated by blank lines; ``data:`` lines of one event are joined; comments
    and ``event:`` names are skipped (the payloads carry their ``type``); ``[DONE]`` ends
    the stream.

    Raises:
        ProviderError: An event whose data is not a JSON object.
    """
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[len("data:") :].strip())
            continue
        if line.strip() or not data:
            continue  # comments, event names, ids; or a blank line with nothing pending
        payload = "\n".join(data)
        data = []
        if payload == "[DONE]":
            return
        yield _event_payload(provider, response.status_code, payload)
    if data and "\n".join(data) != "[DONE]":
        yield _event_payload(provider, response.status_code, "\n".join(data))


def _event_payload(provider: str, status: int, payload: str) -> dict[str, Any]:
    try:
        event = json.loads(payload)
    except ValueError as exc:
        raise ProviderError(provider, status, f"malformed stream event: {payload[:80]!r}") from exc
    if not isinstance(event, dict):
        raise ProviderError(provider, status, f"malformed stream event: {payload[:80]!r}")
    return event


def transport_error(provider: str, exc: Exception) -> ProviderError:
    """Return the ``ProviderError`` for a transport failure (no response)."""
    return ProviderError(provider, None, f"{type(exc).__name__}: {exc}")
