"""AnthropicMessagesAdapter: Anthropic's Messages API (``POST {base_url}/messages``), async.

Each run sends the replayed transcript (``session.context["transcript"]``, when the
manager gives one) rendered by :func:`~sharedesk.runs.render.to_anthropic_messages`,
so names are kept exactly as that renderer keeps them (a peer's turn is prefixed
``"[Label] "``; leading system messages become the system prompt), followed by the
run's input as the last user turn (its ``"system"`` rows join the system prompt, after
the adapter's own ``system``). The API keeps no conversation on its side, so the adapter
has no native continuation: continue with ``"replay"`` (or ``"auto"``).

Replies are ``Text`` events by the adapter's ``author``; with ``adapter_opts={"stream":
True}`` the response is read as server-sent events, each ``text_delta`` emitted as a
``TextDelta`` as it arrives, then the whole reply as the closing ``Text``. ``tool_use``
blocks become ``ToolCall`` events; when the adapter has that tool
(:class:`~sharedesk.runs.FunctionTool`) it runs it, emits the ``ToolResult`` and sends a
``tool_result`` turn back, up to ``max_tool_rounds`` model calls. Usage
(``input_tokens``, ``output_tokens``) is summed into ``token_usage``.

Errors: an HTTP error (e.g. 429 with ``retry-after``, 500, 529), a body or stream event
that is not JSON, an ``error`` event, or no response at all raise
:class:`~sharedesk.ProviderError` (``status_code``, ``retry_after``); nothing of the
failing model call is emitted except the deltas a stream had already delivered.
``httpx`` is imported when a run executes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from sharedesk.protocol.authors import Agent, SessionAuthor
from sharedesk.protocol.errors import ProviderError, ValidationError
from sharedesk.protocol.events import Event, Text, TextDelta, ToolCall, ToolResult
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.validation import check_author
from sharedesk.runs._http import (
    DEFAULT_TOOL_ROUNDS,
    FunctionTool,
    call_tool,
    check_status,
    check_tools,
    http_timeout,
    output_text,
    read_json,
    sse_events,
    transport_error,
)
from sharedesk.runs.render import to_anthropic_messages
from sharedesk.runs.types import AdapterResult, AsyncEmit, Run, Session

if TYPE_CHECKING:
    import httpx

#: The ``anthropic-version`` header sent with each request.
ANTHROPIC_VERSION: Final = "2023-06-01"
#: ``max_tokens`` when ``adapter_opts`` has none (the API requires one).
DEFAULT_MAX_TOKENS: Final = 1024
#: ``adapter_opts`` keys copied into the request body as they are.
PASSTHROUGH_OPTS: Final = ("temperature", "top_p", "top_k", "stop_sequences", "metadata")
_USAGE_KEYS: Final = ("input_tokens", "output_tokens")


class AnthropicMessagesAdapter:
    """An async adapter for Anthropic's Messages API.

    ``adapter_opts`` it reads: ``"stream"`` (bool), ``"timeout"`` (seconds, also the
    HTTP timeout), ``"max_tokens"`` (default :data:`DEFAULT_MAX_TOKENS`),
    ``"max_tool_rounds"``, the keys in :data:`PASSTHROUGH_OPTS`, and ``"extra_body"``
    (merged into each request body). Safe to share between tasks.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        name: str = "anthropic",
        system: str | None = None,
        tools: Sequence[FunctionTool] = (),
        author: SessionAuthor | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """Create the adapter; nothing is sent until a run executes.

        Args:
            base_url: The API root with its version, e.g. ``"https://api.anthropic.com/v1"``.
            model: The model sent with each request.
            api_key: Sent as ``x-api-key`` when given.
            name: The provider name (``RunStarted.provider``).
            system: The system prompt, before any the transcript or input carries.
            tools: Functions the model may call.
            author: Author of the emitted events (default ``Agent(id=name, label=name)``).
            transport: The httpx transport of each run's client (default: the network),
                e.g. ``httpx.MockTransport`` to answer without a server.

        Raises:
            ValidationError: An empty ``base_url``, ``model`` or ``name``; bad tools or
                author.
        """
        for field, value in (("base_url", base_url), ("model", model), ("name", name)):
            if not isinstance(value, str) or not value:
                raise ValidationError(f"{field} must be a non-empty str")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.system = system
        self.tools = check_tools(tools)
        self.author: SessionAuthor = (
            Agent(id=name, label=name) if author is None else check_author(author)
        )
        self._api_key = api_key
        self._name = name
        self._transport = transport

    @property
    def name(self) -> str:
        """The provider name (``RunStarted.provider``)."""
        return self._name

    @property
    def native_continuation(self) -> bool:
        """Always ``False``: the Messages API keeps no conversation of its own."""
        return False

    def first_messages(self, run: Run, session: Session) -> tuple[str | None, list[Any]]:
        """Return the system prompt and the messages of the first request.

        Cost: O(transcript); no I/O.
        """
        transcript = session.context.get("transcript")
        system_parts = [self.system] if self.system else []
        messages: list[dict[str, Any]] = []
        if isinstance(transcript, Transcript):
            rendered_system, messages = to_anthropic_messages(transcript)
            if rendered_system:
                system_parts.append(rendered_system)
        blocks = [{"type": "text", "text": m["content"]} for m in run.input if m["role"] == "user"]
        system_parts.extend(m["content"] for m in run.input if m["role"] == "system")
        if blocks:
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": "user", "content": blocks})
        return ("\n\n".join(system_parts) if system_parts else None), messages

    def request_body(
        self, system: str | None, messages: list[Any], opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return the JSON body of one request. Cost: O(messages); no I/O."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": opts.get("max_tokens", DEFAULT_MAX_TOKENS),
            "messages": messages,
        }
        if system is not None:
            body["system"] = system
        if self.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in self.tools.values()
            ]
        for key in PASSTHROUGH_OPTS:
            if key in opts:
                body[key] = opts[key]
        if opts.get("stream"):
            body["stream"] = True
        extra = opts.get("extra_body")
        if isinstance(extra, Mapping):
            body.update(extra)
        return body

    async def execute(
        self, run: Run, session: Session, emit: AsyncEmit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        """Send the run to the Messages API and emit what comes back.

        Args:
            run: The run; its input is the last user turn.
            session: ``context["transcript"]`` is sent first when present.
            emit: The run's async emit.
            opts: ``adapter_opts`` (see the class docstring).

        Returns:
            The last reply text as ``output``; the summed usage as ``token_usage``.

        Raises:
            ProviderError: An HTTP error, a malformed body or event, an ``error`` event,
                or no response (the transport error is the ``__cause__``).

        Cost: one HTTP request per model call (at most ``max_tool_rounds``); one emit per
        streamed chunk, per tool call and result, and per reply.
        """
        import httpx

        system, messages = self.first_messages(run, session)
        rounds = opts.get("max_tool_rounds", DEFAULT_TOOL_ROUNDS)
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValidationError(f"max_tool_rounds must be a positive int, got {rounds!r}")
        headers = {
            "anthropic-version": ANTHROPIC_VERSION,
            "Accept": "text/event-stream" if opts.get("stream") else "application/json",
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        usage: dict[str, Any] = {}
        reply: str | None = None
        try:
            async with httpx.AsyncClient(
                timeout=http_timeout(opts), headers=headers, transport=self._transport
            ) as client:
                for _ in range(rounds):
                    body = self.request_body(system, messages, opts)
                    message = await self._call(client, body, emit)
                    content = message.get("content")
                    if not isinstance(content, list):
                        raise ProviderError(self._name, 200, "malformed response: no content")
                    _add_usage(usage, message.get("usage"))
                    text, uses = _text_and_uses(content)
                    if text or not uses:
                        reply = text
                        await emit(Event(self.author, Text(text)))
                    if not uses:
                        break
                    results = await self._run_uses(uses, emit)
                    messages = [
                        *messages,
                        {"role": "assistant", "content": content},
                        {"role": "user", "content": results},
                    ]
        except httpx.HTTPError as exc:
            raise transport_error(self._name, exc) from exc
        return AdapterResult(output=reply, token_usage=usage)

    async def _call(
        self, client: httpx.AsyncClient, body: dict[str, Any], emit: AsyncEmit
    ) -> dict[str, Any]:
        """One model call; return the whole message (assembled from the stream)."""
        url = f"{self.base_url}/messages"
        if not body.get("stream"):
            response = await client.post(url, json=body)
            await check_status(self._name, response)
            return await read_json(self._name, response)
        async with client.stream("POST", url, json=body) as streamed:
            await check_status(self._name, streamed)
            return await self._assemble(streamed, emit)

    async def _assemble(self, streamed: httpx.Response, emit: AsyncEmit) -> dict[str, Any]:
        message: dict[str, Any] | None = None
        blocks: dict[int, dict[str, Any]] = {}
        partial_json: dict[int, list[str]] = {}
        async for event in sse_events(self._name, streamed):
            kind = event.get("type")
            if kind == "message_start" and isinstance(event.get("message"), dict):
                message = dict(event["message"])
            elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
                blocks[int(event.get("index", len(blocks)))] = dict(event["content_block"])
            elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
                index, delta = int(event.get("index", 0)), event["delta"]
                block = blocks.setdefault(index, {"type": "text", "text": ""})
                if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                    block["text"] = block.get("text", "") + delta["text"]
                    if delta["text"]:
                        await emit(Event(self.author, TextDelta(delta["text"])))
                elif delta.get("type") == "input_json_delta":
                    partial_json.setdefault(index, []).append(str(delta.get("partial_json", "")))
            elif kind == "message_delta" and message is not None:
                if isinstance(event.get("delta"), dict):
                    message.update(event["delta"])
                if isinstance(event.get("usage"), dict):
                    message["usage"] = {**(message.get("usage") or {}), **event["usage"]}
            elif kind == "error":
                error = event.get("error")
                detail = error.get("message") if isinstance(error, dict) else error
                raise ProviderError(self._name, streamed.status_code, str(detail or event)[:500])
            elif kind == "message_stop":
                break
        if message is None:
            raise ProviderError(self._name, 200, "the stream ended before message_start")
        for index, parts in partial_json.items():
            try:
                blocks[index]["input"] = json.loads("".join(parts) or "{}")
            except ValueError as exc:
                raise ProviderError(self._name, 200, "malformed tool input in stream") from exc
        message["content"] = [blocks[i] for i in sorted(blocks)]
        return message

    async def _run_uses(self, uses: list[dict[str, Any]], emit: AsyncEmit) -> list[Any]:
        """Emit each tool use, run it, emit its result; return the ``tool_result`` blocks."""
        results: list[dict[str, Any]] = []
        for use in uses:
            use_id, name, arguments = use["id"], use["name"], use.get("input", {})
            tool_input = arguments if isinstance(arguments, dict) else {"input": arguments}
            await emit(Event(self.author, ToolCall(use_id, name, tool_input)))
            output, is_error = await call_tool(self.tools, name, arguments)
            await emit(Event(self.author, ToolResult(use_id, output, is_error=is_error)))
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": use_id,
                "content": output_text(output),
            }
            if is_error:
                block["is_error"] = True
            results.append(block)
        return results


def _text_and_uses(content: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    texts: list[str] = []
    uses: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif (
            block.get("type") == "tool_use"
            and isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
        ):
            uses.append(block)
    return "".join(texts), uses


def _add_usage(total: dict[str, Any], usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    for key in _USAGE_KEYS:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
