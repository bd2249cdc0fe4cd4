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
(:class:`~sharedesk.adapters.FunctionTool`) it runs it, emits the ``ToolResult`` and sends
the output back (chained with ``previous_response_id``), up to ``max_tool_rounds`` model
calls. After the last response the adapter emits ``RunStarted(provider=name, model,
provider_session_id=<that response's id>)``, which the session folds into its
``provider_sessions``, so the next run with ``continuation="native"`` (or ``"auto"``)
continues there. Usage is summed over the run's calls into ``token_usage``.

Errors: an HTTP error (e.g. 429 with ``retry-after``, 500), a body or stream event that
is not JSON, an ``error``/``response.failed`` event, or no response at all raise
:class:`~sharedesk.ProviderError` (``status_code``, ``retry_after``); nothing of the
failing model call is emitted except the deltas a stream had already delivered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from sharedesk.adapters._http import Exchange, HttpAdapter, add_usage
from sharedesk.adapters.render import output_text, to_responses_input
from sharedesk.protocol.errors import ProviderError
from sharedesk.protocol.events import RunStarted, TextDelta
from sharedesk.runs.types import AdapterResult, Run, Session

_USAGE_KEYS: Final = ("input_tokens", "output_tokens", "total_tokens")


class OpenAIResponsesAdapter(HttpAdapter):
    """An adapter for OpenAI's Responses API, with native continuation.

    Takes the arguments of :class:`~sharedesk.adapters.HttpAdapter` (``name`` defaults to
    ``"openai-responses"``; ``system`` is sent as ``instructions`` with every request),
    and its ``adapter_opts``; passes ``temperature``, ``max_output_tokens``, ``top_p``, ``store``
    and ``metadata`` through.
    """

    PASSTHROUGH_OPTS = ("temperature", "max_output_tokens", "top_p", "store", "metadata")
    DEFAULT_NAME = "openai-responses"
    native_continuation = True

    def first_input(self, run: Run, session: Session) -> tuple[list[dict[str, Any]], str | None]:
        """Return the first request's input items and ``previous_response_id``.

        Cost: O(transcript); no I/O.
        """
        items: list[dict[str, Any]] = []
        previous: str | None = None
        transcript = session.context.get("transcript")
        if session.context.get("continuation") == "native":
            stored = (session.metadata.get("provider_sessions") or {}).get(self.name) or {}
            previous = stored.get("provider_session_id")
        elif transcript is not None:
            items = to_responses_input(transcript)
        items.extend({"role": m["role"], "content": m["content"]} for m in run.input)
        return items, previous

    def request_body(
        self, items: list[dict[str, Any]], previous: str | None, opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return the JSON body of one request. Cost: O(items); no I/O."""
        fields: dict[str, Any] = {"input": items}
        if previous is not None:
            fields["previous_response_id"] = previous
        if self.system is not None:
            fields["instructions"] = self.system
        if self.tools:
            fields["tools"] = [
                {"type": "function", "name": t.name, "description": t.description,
                 "parameters": t.parameters}
                for t in self.tools.values()
            ]  # fmt: skip
        return self.body(opts, **fields)

    async def converse(self, x: Exchange) -> AdapterResult:
        """Send the run, run the tools the model calls, emit the replies (see the module)."""
        items, previous = self.first_input(x.run, x.session)
        usage: dict[str, Any] = {}
        reply: str | None = None
        response_id: str | None = None
        for _ in range(x.rounds()):
            response = await self._call(x, self.request_body(items, previous, x.opts))
            response_id, output = self._parse(response)
            add_usage(usage, response.get("usage"), _USAGE_KEYS)
            text, calls = _text_and_calls(output)
            reply = await x.reply(text, calls, reply)
            if not calls:
                break
            items = []
            for call_id, name, arguments in calls:
                result, _ = await x.run_tool(call_id, name, arguments)
                items.append(
                    {"type": "function_call_output", "call_id": call_id,
                     "output": output_text(result)}
                )  # fmt: skip
            previous = response_id
        await x.say(RunStarted(self.name, model=self.model, provider_session_id=response_id))
        return AdapterResult(output=reply, token_usage=usage)

    async def _call(self, x: Exchange, body: dict[str, Any]) -> dict[str, Any]:
        """One model call; return the final response object."""
        if not body.get("stream"):
            return await x.post("responses", body)
        async with x.stream("responses", body) as events:
            async for event in events:
                kind = event.get("type")
                if kind == "response.output_text.delta":
                    delta = event.get("delta")
                    if isinstance(delta, str) and delta:
                        await x.say(TextDelta(delta))
                elif kind in ("response.completed", "response.incomplete"):
                    final = event.get("response")
                    if not isinstance(final, dict):
                        raise ProviderError(self.name, 200, f"malformed {kind} event")
                    return final
                elif kind in ("error", "response.failed"):
                    raise ProviderError(self.name, 200, _stream_error(event))
        raise ProviderError(self.name, 200, "the stream ended before response.completed")

    def _parse(self, response: dict[str, Any]) -> tuple[str | None, list[Any]]:
        error = response.get("error")
        if error:
            raise ProviderError(self.name, 200, f"response failed: {error!r}"[:500])
        output = response.get("output")
        response_id = response.get("id")
        if not isinstance(output, list) or not isinstance(response_id, str | None):
            raise ProviderError(self.name, 200, "malformed response: no output list")
        return response_id, output


def _text_and_calls(output: list[Any]) -> tuple[str, list[tuple[str, str, Any]]]:
    texts: list[str] = []
    calls: list[tuple[str, str, Any]] = []
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
                calls.append((call_id, name, arguments))
    return "".join(texts), calls


def _stream_error(event: dict[str, Any]) -> str:
    error = event.get("error")
    if error is None and isinstance(event.get("response"), dict):
        error = event["response"].get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return str(event.get("message") or error or event)[:500]
