"""OpenAIChatAdapter: any OpenAI-compatible chat-completions endpoint.

Each run sends one ``POST {base_url}/chat/completions`` with the replayed transcript
(rendered by :func:`~sharedesk.adapters.render.to_openai_messages`, so each peer keeps
its ``name``) followed by the run's input. The reply is emitted as a ``Text`` by the
adapter's ``author``. With ``adapter_opts={"stream": True}`` the response is read as
server-sent events: each content chunk is emitted as a ``TextDelta`` as it arrives, then
the whole reply as the final ``Text``; a stream must end with ``[DONE]`` (one cut
before it, or a 200 with no body, is a :class:`~sharedesk.ProviderError`, never a
completed reply). The response's ``usage`` becomes the run's ``token_usage``. The
endpoint keeps no conversation state, so the adapter has no native continuation:
continue with ``"replay"`` (or ``"auto"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sharedesk.adapters._http import Exchange, HttpAdapter
from sharedesk.adapters.render import to_openai_messages
from sharedesk.protocol.errors import ProviderError
from sharedesk.protocol.events import Text, TextDelta
from sharedesk.runs.types import AdapterResult, Run, Session


class OpenAIChatAdapter(HttpAdapter):
    """An adapter for an OpenAI-compatible ``/chat/completions`` endpoint.

    Takes the arguments of :class:`~sharedesk.adapters.HttpAdapter` but ``tools``
    (``name`` defaults to ``"openai"``; ``system`` is a leading ``"system"`` message) and
    its ``adapter_opts``; passes ``temperature``,
    ``max_tokens``, ``top_p``, ``stop`` and ``seed`` through.
    """

    PASSTHROUGH_OPTS = ("temperature", "max_tokens", "top_p", "stop", "seed")
    DEFAULT_NAME = "openai"
    RUNS_TOOLS = False

    def request_body(self, run: Run, session: Session, opts: Mapping[str, Any]) -> dict[str, Any]:
        """Return the JSON body sent for ``run``. Cost: O(transcript); no I/O."""
        transcript = session.context.get("transcript")
        messages = [] if self.system is None else [{"role": "system", "content": self.system}]
        if transcript is not None:
            messages.extend(to_openai_messages(transcript))
        messages.extend({"role": m["role"], "content": m["content"]} for m in run.input)
        body = self.body(opts, messages=messages)
        if body.get("stream"):
            body["stream_options"] = {"include_usage": True}
        return body

    async def converse(self, x: Exchange) -> AdapterResult:
        """Send the run and emit the reply (see the module docstring)."""
        body = self.request_body(x.run, x.session, x.opts)
        if not body.get("stream"):
            content, usage = self._reply(await x.post("chat/completions", body))
        else:
            parts: list[str] = []
            usage = {}
            async with x.stream("chat/completions", body, until_done=True) as chunks:
                async for chunk in chunks:
                    found = chunk.get("usage")
                    if found is not None:
                        usage = self._usage(found)
                    for delta in self._deltas(chunk):
                        parts.append(delta)
                        await x.say(TextDelta(delta))
            content = "".join(parts)
        await x.say(Text(content))
        return AdapterResult(output=content, token_usage=usage)

    def _reply(self, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        choices = payload.get("choices")
        message = choices[0].get("message") if _dicts(choices) and choices else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(content, str | None):
            raise ProviderError(self.name, 200, "malformed response: no choices[0].message")
        return content or "", self._usage(payload.get("usage"))

    def _deltas(self, chunk: dict[str, Any]) -> list[str]:
        choices = chunk.get("choices") or []
        deltas = [c.get("delta") or {} for c in choices] if _dicts(choices) else None
        if deltas is None or not _dicts(deltas):
            raise ProviderError(self.name, 200, f"malformed stream chunk: {str(chunk)[:80]!r}")
        texts = [d.get("content") for d in deltas]
        if not all(isinstance(t, str | None) for t in texts):
            raise ProviderError(self.name, 200, f"malformed stream chunk: {str(chunk)[:80]!r}")
        return [t for t in texts if t]

    def _usage(self, usage: Any) -> dict[str, Any]:
        if usage is None:
            return {}
        if not isinstance(usage, dict):
            raise ProviderError(self.name, 200, f"malformed usage: {str(usage)[:80]!r}")
        return usage


def _dicts(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(item, dict) for item in items)
