"""AnthropicMessagesAdapter: Anthropic's Messages API (``POST {base_url}/messages``), async.

Each run sends the replayed transcript (``session.context["transcript"]``, when the
manager gives one) rendered by :func:`~sharedesk.adapters.render.to_anthropic_messages`,
so names are kept exactly as that renderer keeps them (a peer's turn is prefixed
``"[Label] "``; leading system messages become the system prompt), followed by the
run's input as the last user turn (its ``"system"`` rows join the system prompt, after
the adapter's own ``system``). The API keeps no conversation on its side, so the adapter
has no native continuation: continue with ``"replay"`` (or ``"auto"``).

Replies are ``Text`` events by the adapter's ``author``; with ``adapter_opts={"stream":
True}`` the response is read as server-sent events, each ``text_delta`` emitted as a
``TextDelta`` as it arrives, then the whole reply as the closing ``Text``. ``tool_use``
blocks become ``ToolCall`` events; when the adapter has that tool
(:class:`~sharedesk.adapters.FunctionTool`) it runs it, emits the ``ToolResult`` and sends a
``tool_result`` turn back, up to ``max_tool_rounds`` model calls. Usage
(``input_tokens``, ``output_tokens``) is summed into ``token_usage``.

Errors: an HTTP error (e.g. 429 with ``retry-after``, 500, 529), a body or stream event
that is not JSON, an ``error`` event, or no response at all raise
:class:`~sharedesk.ProviderError` (``status_code``, ``retry_after``); nothing of the
failing model call is emitted except the deltas a stream had already delivered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from sharedesk.adapters._http import Exchange, HttpAdapter, add_usage
from sharedesk.adapters.render import output_text, to_anthropic_messages
from sharedesk.protocol.errors import ProviderError
from sharedesk.protocol.events import TextDelta
from sharedesk.runs.types import AdapterResult, Run, Session

#: The ``anthropic-version`` header sent with each request.
ANTHROPIC_VERSION: Final = "2023-06-01"
#: ``max_tokens`` when ``adapter_opts`` has none (the API requires one).
DEFAULT_MAX_TOKENS: Final = 1024
_USAGE_KEYS: Final = ("input_tokens", "output_tokens")


class AnthropicMessagesAdapter(HttpAdapter):
    """An adapter for Anthropic's Messages API.

    Takes the arguments of :class:`~sharedesk.adapters.HttpAdapter` (``name`` defaults to
    ``"anthropic"``; the key is sent as ``x-api-key``; ``system`` comes before any system
    prompt the transcript or input carries), and its ``adapter_opts``, with
    ``"max_tokens"`` (default :data:`DEFAULT_MAX_TOKENS`); passes ``temperature``,
    ``top_p``, ``top_k``, ``stop_sequences`` and ``metadata`` through.
    """

    PASSTHROUGH_OPTS = ("temperature", "top_p", "top_k", "stop_sequences", "metadata")
    DEFAULT_NAME = "anthropic"

    def auth_headers(self) -> dict[str, str]:
        """Return the API version header and ``x-api-key``."""
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def first_messages(self, run: Run, session: Session) -> tuple[str | None, list[Any]]:
        """Return the system prompt and the messages of the first request.

        Cost: O(transcript); no I/O.
        """
        transcript = session.context.get("transcript")
        system_parts = [self.system] if self.system else []
        messages: list[dict[str, Any]] = []
        if transcript is not None:
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
        fields: dict[str, Any] = {
            "max_tokens": opts.get("max_tokens", DEFAULT_MAX_TOKENS),
            "messages": messages,
        }
        if system is not None:
            fields["system"] = system
        if self.tools:
            fields["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in self.tools.values()
            ]
        return self.body(opts, **fields)

    async def converse(self, x: Exchange) -> AdapterResult:
        """Send the run, run the tools the model uses, emit the replies (see the module)."""
        system, messages = self.first_messages(x.run, x.session)
        usage: dict[str, Any] = {}
        reply: str | None = None
        for _ in range(x.rounds()):
            body = self.request_body(system, messages, x.opts)
            if body.get("stream"):
                async with x.stream("messages", body) as events:
                    message = await self._assemble(x, events)
            else:
                message = await x.post("messages", body)
            content = message.get("content")
            if not isinstance(content, list):
                raise ProviderError(self.name, 200, "malformed response: no content")
            add_usage(usage, message.get("usage"), _USAGE_KEYS)
            text, uses = _text_and_uses(content)
            reply = await x.reply(text, uses, reply)
            if not uses:
                break
            results: list[dict[str, Any]] = []
            for use in uses:
                output, is_error = await x.run_tool(use["id"], use["name"], use.get("input", {}))
                results.append(
                    {"type": "tool_result", "tool_use_id": use["id"],
                     "content": output_text(output), **({"is_error": True} if is_error else {})}
                )  # fmt: skip
            messages = [
                *messages,
                {"role": "assistant", "content": content},
                {"role": "user", "content": results},
            ]
        return AdapterResult(output=reply, token_usage=usage)

    async def _assemble(self, x: Exchange, events: Any) -> dict[str, Any]:
        """Return the whole message a stream of events describes, emitting its deltas."""
        message: dict[str, Any] | None = None
        blocks: dict[int, dict[str, Any]] = {}
        partial_json: dict[int, list[str]] = {}
        async for event in events:
            kind = event.get("type")
            if kind == "message_start" and isinstance(event.get("message"), dict):
                message = dict(event["message"])
            elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
                blocks[_index(self.name, event, len(blocks))] = dict(event["content_block"])
            elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
                index, delta = _index(self.name, event, 0), event["delta"]
                block = blocks.setdefault(index, {"type": "text", "text": ""})
                if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                    block["text"] = block.get("text", "") + delta["text"]
                    if delta["text"]:
                        await x.say(TextDelta(delta["text"]))
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
                raise ProviderError(self.name, 200, str(detail or event)[:500])
            elif kind == "message_stop":
                break
        if message is None:
            raise ProviderError(self.name, 200, "the stream ended before message_start")
        for index, parts in partial_json.items():
            try:
                blocks[index]["input"] = json.loads("".join(parts) or "{}")
            except ValueError as exc:
                raise ProviderError(self.name, 200, "malformed tool input in stream") from exc
        message["content"] = [blocks[i] for i in sorted(blocks)]
        return message


def _index(provider: str, event: dict[str, Any], default: int) -> int:
    index = event.get("index", default)
    if isinstance(index, bool) or not isinstance(index, int):
        raise ProviderError(provider, 200, f"malformed stream event: index {index!r}")
    return index


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
