"""OpenAIResponsesAdapter: OpenAI's Responses API (``POST {base_url}/responses``), async.

Each run sends the run's input after what the continuation mode gives it:

* ``"replay"``: the viewer-relative transcript (``session.context["transcript"]``)
  rendered by :func:`to_responses_input` (peers' messages as ``"user"`` messages
  prefixed ``"[Label] "``, since the API's messages carry no name; tool calls and their
  outputs as ``function_call``/``function_call_output`` items);
* ``"native"``: nothing but ``previous_response_id``, the provider session id stored at
  ``session.metadata["provider_sessions"][name]``: the provider continues its own
  conversation;
* ``False``: nothing.

Replies are ``Text`` events by the adapter's ``author``; with ``adapter_opts={"stream":
True}`` the response is read as server-sent events, each ``response.output_text.delta``
emitted as a ``TextDelta`` as it arrives, then the whole reply as the closing ``Text``.
Function calls become ``ToolCall`` events; when the adapter has that tool
(:class:`~sharedesk.runs.FunctionTool`) it runs it, emits the ``ToolResult`` and sends
the output back (chained with ``previous_response_id``), up to ``max_tool_rounds`` model
calls. After the last response the adapter emits ``RunStarted(provider=name, model,
provider_session_id=<that response's id>)``, which the session folds into its
``provider_sessions``, so the next run with ``continuation="native"`` (or ``"auto"``)
continues there. Usage is summed over the run's calls into ``token_usage``.

Errors: an HTTP error (e.g. 429 with ``retry-after``, 500), a body or stream event that
is not JSON, an ``error``/``response.failed`` event, or no response at all raise
:class:`~sharedesk.ProviderError` (``status_code``, ``retry_after``); nothing of the
failing model call is emitted except the deltas a stream had already delivered.
``httpx`` is imported when a run executes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from sharedesk.protocol.authors import Agent, Person, SessionAuthor
from sharedesk.protocol.errors import ProviderError, ValidationError
from sharedesk.protocol.events import Event, RunStarted, Text, TextDelta, ToolCall, ToolResult
from sharedesk.protocol.transcripts import Transcript, TranscriptMessage
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
from sharedesk.runs.types import AdapterResult, AsyncEmit, Run, Session

if TYPE_CHECKING:
    import httpx

#: ``adapter_opts`` keys copied into the request body as they are.
PASSTHROUGH_OPTS: Final = ("temperature", "max_output_tokens", "top_p", "store", "metadata")
_USAGE_KEYS: Final = ("input_tokens", "output_tokens", "total_tokens")


def _label(author: SessionAuthor | None) -> str | None:
    if isinstance(author, Person | Agent):
        return author.label or author.id
    return None


def to_responses_input(transcript: Transcript) -> list[dict[str, Any]]:
    """Render a viewer-relative transcript as Responses API input items.

    ``system``/``assistant`` messages keep their role; a ``user`` message by a person or
    an agent is prefixed ``"[Label] "``; a tool call is a ``function_call`` item
    (arguments JSON-encoded) and its result a ``function_call_output`` item. A call
    whose result is not in the transcript, or a result without its call, is left out.

    Cost: O(messages); no I/O.
    """
    calls = {m.tool_call_id for m in transcript.messages if _is_call(m)}
    results = {m.tool_call_id for m in transcript.messages if m.role == "tool"}
    items: list[dict[str, Any]] = []
    for message in transcript.messages:
        if _is_call(message):
            if message.tool_call_id in results:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": message.tool_call_id,
                        "name": message.tool_name or "",
                        "arguments": json.dumps(message.tool_input or {}, ensure_ascii=False),
                    }
                )
        elif message.role == "tool":
            if message.tool_call_id in calls:
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": message.tool_call_id,
                        "output": output_text(message.tool_output),
                    }
                )
        else:
            text = message.content or ""
            label = _label(message.author)
            if message.role == "user" and label is not None:
                text = f"[{label}] {text}"
            items.append({"role": message.role, "content": text})
    return items


def _is_call(message: TranscriptMessage) -> bool:
    return message.role == "assistant" and message.tool_call_id is not None


class OpenAIResponsesAdapter:
    """An async adapter for OpenAI's Responses API, with native continuation.

    ``adapter_opts`` it reads: ``"stream"`` (bool), ``"timeout"`` (seconds, also the
    HTTP timeout), ``"max_tool_rounds"`` (int), the keys in :data:`PASSTHROUGH_OPTS`, and
    ``"extra_body"`` (a mapping merged into each request body). Safe to share between
    tasks: each run opens its own HTTP client.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        name: str = "openai-responses",
        instructions: str | None = None,
        tools: Sequence[FunctionTool] = (),
        author: SessionAuthor | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """Create the adapter; nothing is sent until a run executes.

        Args:
            base_url: The API root, e.g. ``"https://api.openai.com/v1"``.
            model: The model sent with each request and recorded in ``RunStarted``.
            api_key: Sent as ``Authorization: Bearer <api_key>`` when given.
            name: The provider name (``RunStarted.provider``, ``provider_sessions`` key).
            instructions: Sent as ``instructions`` with every request.
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
        self.instructions = instructions
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
        """Always ``True``: ``previous_response_id`` continues the provider's conversation."""
        return True

    def first_input(self, run: Run, session: Session) -> tuple[list[dict[str, Any]], str | None]:
        """Return the first request's input items and ``previous_response_id``.

        Cost: O(transcript); no I/O.
        """
        mode = session.context.get("continuation", False)
        items: list[dict[str, Any]] = []
        previous: str | None = None
        transcript = session.context.get("transcript")
        if mode == "native":
            stored = (session.metadata.get("provider_sessions") or {}).get(self._name) or {}
            previous = stored.get("provider_session_id")
        elif isinstance(transcript, Transcript):
            items = to_responses_input(transcript)
        items.extend({"role": m["role"], "content": m["content"]} for m in run.input)
        return items, previous

    def request_body(
        self,
        items: list[dict[str, Any]],
        previous: str | None,
        opts: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Return the JSON body of one request. Cost: O(items); no I/O."""
        body: dict[str, Any] = {"model": self.model, "input": items}
        if previous is not None:
            body["previous_response_id"] = previous
        if self.instructions is not None:
            body["instructions"] = self.instructions
        if self.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }
                for tool in self.tools.values()
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
        """Send the run to the Responses API and emit what comes back.

        Args:
            run: The run; its input is the last input of the first request.
            session: ``context["continuation"]``/``["transcript"]`` and, for native
                continuation, ``metadata["provider_sessions"]``.
            emit: The run's async emit.
            opts: ``adapter_opts`` (see the class docstring).

        Returns:
            The last reply text as ``output``; the summed ``usage`` as ``token_usage``.

        Raises:
            ProviderError: An HTTP error, a malformed body or event, a failed response,
                or no response (the transport error is the ``__cause__``).

        Cost: one HTTP request per model call (at most ``max_tool_rounds``); one emit per
        streamed chunk, per tool call and result, per reply, plus the ``RunStarted``.
        """
        import httpx

        items, previous = self.first_input(run, session)
        rounds = opts.get("max_tool_rounds", DEFAULT_TOOL_ROUNDS)
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValidationError(f"max_tool_rounds must be a positive int, got {rounds!r}")
        headers = {"Accept": "text/event-stream" if opts.get("stream") else "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        usage: dict[str, Any] = {}
        reply: str | None = None
        response_id: str | None = None
        try:
            async with httpx.AsyncClient(
                timeout=http_timeout(opts), headers=headers, transport=self._transport
            ) as client:
                for _ in range(rounds):
                    body = self.request_body(items, previous, opts)
                    response = await self._call(client, body, emit)
                    response_id, output = self._parse(response)
                    _add_usage(usage, response.get("usage"))
                    text, calls = _text_and_calls(output)
                    if text or not calls:
                        reply = text
                        await emit(Event(self.author, Text(text)))
                    if not calls:
                        break
                    items = await self._run_calls(calls, emit)
                    previous = response_id
        except httpx.HTTPError as exc:
            raise transport_error(self._name, exc) from exc
        await emit(
            Event(
                self.author,
                RunStarted(provider=self._name, model=self.model, provider_session_id=response_id),
            )
        )
        return AdapterResult(output=reply, token_usage=usage)

    async def _call(
        self, client: httpx.AsyncClient, body: dict[str, Any], emit: AsyncEmit
    ) -> dict[str, Any]:
        """One model call; return the final response object."""
        url = f"{self.base_url}/responses"
        if not body.get("stream"):
            response = await client.post(url, json=body)
            await check_status(self._name, response)
            return await read_json(self._name, response)
        async with client.stream("POST", url, json=body) as streamed:
            await check_status(self._name, streamed)
            async for event in sse_events(self._name, streamed):
                kind = event.get("type")
                if kind == "response.output_text.delta":
                    delta = event.get("delta")
                    if isinstance(delta, str) and delta:
                        await emit(Event(self.author, TextDelta(delta)))
                elif kind in ("response.completed", "response.incomplete"):
                    final = event.get("response")
                    if not isinstance(final, dict):
                        raise ProviderError(self._name, 200, f"malformed {kind} event")
                    return final
                elif kind in ("error", "response.failed"):
                    raise ProviderError(self._name, streamed.status_code, _stream_error(event))
        raise ProviderError(self._name, 200, "the stream ended before response.completed")

    def _parse(self, response: dict[str, Any]) -> tuple[str | None, list[Any]]:
        error = response.get("error")
        if error:
            raise ProviderError(self._name, 200, f"response failed: {error!r}"[:500])
        output = response.get("output")
        response_id = response.get("id")
        if not isinstance(output, list) or not isinstance(response_id, str | None):
            raise ProviderError(self._name, 200, "malformed response: no output list")
        return response_id, output

    async def _run_calls(
        self, calls: list[dict[str, Any]], emit: AsyncEmit
    ) -> list[dict[str, Any]]:
        """Emit each call, run it, emit its result; return the outputs to send back."""
        outputs: list[dict[str, Any]] = []
        for call in calls:
            call_id, name, arguments = call["call_id"], call["name"], call["arguments"]
            await emit(Event(self.author, ToolCall(call_id, name, _as_input(arguments))))
            result, is_error = await call_tool(self.tools, name, arguments)
            await emit(Event(self.author, ToolResult(call_id, result, is_error=is_error)))
            outputs.append(
                {"type": "function_call_output", "call_id": call_id, "output": output_text(result)}
            )
        return outputs


def _text_and_calls(output: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    text = part.get("text")
                    if isinstance(text, str):
                        texts.append(text)
        elif item.get("type") == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if isinstance(call_id, str) and isinstance(name, str):
                raw = item.get("arguments") or "{}"
                try:
                    arguments = json.loads(raw) if isinstance(raw, str) else raw
                except ValueError:
                    arguments = raw
                calls.append({"call_id": call_id, "name": name, "arguments": arguments})
    return "".join(texts), calls


def _as_input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    return {"arguments": arguments}


def _add_usage(total: dict[str, Any], usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    for key in _USAGE_KEYS:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _stream_error(event: dict[str, Any]) -> str:
    error = event.get("error")
    if error is None and isinstance(event.get("response"), dict):
        error = event["response"].get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return str(event.get("message") or error or event)[:500]
