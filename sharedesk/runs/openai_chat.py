"""OpenAIChatAdapter: any OpenAI-compatible chat-completions endpoint, over httpx (sync).

Each run sends one ``POST {base_url}/chat/completions`` with the replayed transcript
(rendered by :func:`~sharedesk.runs.render.to_openai_messages`, so each peer keeps its
``name``) followed by the run's input. The reply is emitted as a ``Text`` by the
adapter's ``author`` (default ``Agent(id=name, label=name)``), the participant the
transcript is relative to. With ``adapter_opts={"stream": True}`` the response is
read as server-sent events: each content chunk is emitted as a ``TextDelta`` as it
arrives, then the whole reply as the final ``Text``. The response's ``usage`` becomes
the run's ``token_usage``. The endpoint keeps no conversation state, so the adapter
has no native continuation: continue with ``"replay"`` (or ``"auto"``). ``aexecute`` is
the same over ``httpx.AsyncClient``, for ``SessionManager.aexecute_run``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

import httpx

from sharedesk.protocol.authors import Agent, SessionAuthor
from sharedesk.protocol.errors import ProviderError, ValidationError
from sharedesk.protocol.events import Event, Text, TextDelta
from sharedesk.protocol.transcripts import Transcript
from sharedesk.protocol.validation import check_author
from sharedesk.runs.render import to_openai_messages
from sharedesk.runs.types import AdapterResult, AsyncEmit, Emit, Run, Session

#: ``adapter_opts`` keys copied into the request body as they are.
PASSTHROUGH_OPTS: Final = ("temperature", "max_tokens", "top_p", "stop", "seed")
#: HTTP timeout in seconds when ``adapter_opts`` has no ``"timeout"``.
DEFAULT_HTTP_TIMEOUT_S: Final = 60.0
_DETAIL_MAX: Final = 500
#: What :meth:`OpenAIChatAdapter._chunk` returns for the stream's ``[DONE]`` line.
_DONE: Final[dict[str, Any]] = {}


def _deltas(chunk: Mapping[str, Any]) -> Iterator[str]:
    """Yield the non-empty content deltas of one streamed chunk."""
    for choice in chunk.get("choices") or []:
        delta = (choice.get("delta") or {}).get("content") if isinstance(choice, dict) else None
        if isinstance(delta, str) and delta:
            yield delta


class OpenAIChatAdapter:
    """An adapter for an OpenAI-compatible ``/chat/completions`` endpoint.

    ``adapter_opts`` it reads: ``"stream"`` (bool), ``"timeout"`` (seconds, also the HTTP
    timeout), the keys in :data:`PASSTHROUGH_OPTS`, and ``"extra_body"`` (a mapping
    merged into the request body). Thread-safe: each call opens its own HTTP client.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        name: str = "openai",
        author: SessionAuthor | None = None,
    ) -> None:
        """Create the adapter; nothing is sent until a run executes.

        Args:
            base_url: The API root, e.g. ``"http://127.0.0.1:8000/v1"``.
            model: The model name sent with each request (and recorded in ``RunStarted``).
            api_key: Sent as ``Authorization: Bearer <api_key>`` when given.
            name: The provider name (and the replies' agent id and label by default).
            author: The participant the replies are written by (default
                ``Agent(id=name, label=name)``).

        Raises:
            ValidationError: An empty ``base_url``, ``model`` or ``name``, or an
                ``author`` that is not a ``SessionAuthor``.
        """
        for field, value in (("base_url", base_url), ("model", model), ("name", name)):
            if not isinstance(value, str) or not value:
                raise ValidationError(f"{field} must be a non-empty str")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self._name = name
        self._author: SessionAuthor = (
            Agent(id=name, label=name) if author is None else check_author(author)
        )

    @property
    def author(self) -> SessionAuthor:
        """The participant the replies are written by."""
        return self._author

    @property
    def name(self) -> str:
        """The provider name (``RunStarted.provider``) and the agent id of its replies."""
        return self._name

    @property
    def native_continuation(self) -> bool:
        """Always ``False``: chat completions keep no server-side conversation."""
        return False

    def request_body(
        self, run: Run, transcript: Transcript | None, opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return the JSON body sent for ``run``.

        Cost: O(transcript); no I/O.
        """
        messages = to_openai_messages(transcript) if transcript is not None else []
        messages.extend({"role": m["role"], "content": m["content"]} for m in run.input)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        for key in PASSTHROUGH_OPTS:
            if key in opts:
                body[key] = opts[key]
        if opts.get("stream"):
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        extra = opts.get("extra_body")
        if isinstance(extra, Mapping):
            body.update(extra)
        return body

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        """Send the run to the endpoint and emit the reply.

        Args:
            run: The run; its input follows the transcript.
            session: ``context["transcript"]`` is sent first when present.
            emit: The run's emit.
            opts: ``adapter_opts`` (see the class docstring).

        Returns:
            The reply text as ``output`` and the response's ``usage`` as ``token_usage``.

        Raises:
            ProviderError: The endpoint answered with an HTTP error or a malformed body,
                or could not be reached (the transport error is the ``__cause__``).

        Cost: one HTTP request; one emit per streamed chunk plus one. Blocks.
        """
        body = self.request_body(run, session.context.get("transcript"), opts)
        headers = self._headers(body)
        agent = self._author
        try:
            with httpx.Client(timeout=self._timeout(opts), headers=headers) as client:
                if body.get("stream"):
                    return self._streamed(client, body, emit, agent)
                response = client.post(f"{self.base_url}/chat/completions", json=body)
                self._check(response)
                content, usage = self._parse_reply(response)
        except httpx.HTTPError as exc:
            raise ProviderError(self._name, None, f"{type(exc).__name__}: {exc}") from exc
        emit(Event(agent, Text(content)))
        return AdapterResult(output=content, token_usage=usage)

    async def aexecute(
        self, run: Run, session: Session, emit: AsyncEmit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        """Send the run and emit the reply, as :meth:`execute`, over ``httpx.AsyncClient``.

        ``SessionManager.aexecute_run`` prefers it to :meth:`execute`. With
        ``adapter_opts={"stream": True}`` each content chunk is emitted as a
        ``TextDelta`` of the run as it arrives, and the whole reply closes them as the
        final ``Text``; the loop is never blocked (the HTTP client is asyncio's, and
        ``emit`` is awaited).

        Args:
            run: The run; its input follows the transcript.
            session: ``context["transcript"]`` is sent first when present.
            emit: The run's coroutine emit.
            opts: ``adapter_opts`` (see the class docstring).

        Returns:
            The reply text as ``output`` and the response's ``usage`` as ``token_usage``.

        Raises:
            ProviderError: As :meth:`execute`.

        Cost: one HTTP request; one emit per streamed chunk plus one; never blocks.
        """
        body = self.request_body(run, session.context.get("transcript"), opts)
        headers = self._headers(body)
        agent = self._author
        url = f"{self.base_url}/chat/completions"
        try:
            async with httpx.AsyncClient(timeout=self._timeout(opts), headers=headers) as client:
                if body.get("stream"):
                    parts: list[str] = []
                    usage: dict[str, Any] = {}
                    async with client.stream("POST", url, json=body) as response:
                        if response.status_code >= 400:
                            await response.aread()
                            self._check(response)
                        async for line in response.aiter_lines():
                            chunk = self._chunk(line, response.status_code)
                            if chunk is None:
                                continue
                            if chunk is _DONE:
                                break
                            if isinstance(chunk.get("usage"), dict):
                                usage = chunk["usage"]
                            for delta in _deltas(chunk):
                                parts.append(delta)
                                await emit(Event(agent, TextDelta(delta)))
                    content = "".join(parts)
                else:
                    response = await client.post(url, json=body)
                    self._check(response)
                    content, usage = self._parse_reply(response)
        except httpx.HTTPError as exc:
            raise ProviderError(self._name, None, f"{type(exc).__name__}: {exc}") from exc
        await emit(Event(agent, Text(content)))
        return AdapterResult(output=content, token_usage=usage)

    def _headers(self, body: Mapping[str, Any]) -> dict[str, str]:
        headers = {"Accept": "text/event-stream" if body.get("stream") else "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    @staticmethod
    def _timeout(opts: Mapping[str, Any]) -> float:
        asked = opts.get("timeout")
        if isinstance(asked, int | float) and not isinstance(asked, bool):
            return float(asked)
        return DEFAULT_HTTP_TIMEOUT_S

    def _chunk(self, line: str, status: int) -> dict[str, Any] | None:
        """Decode one server-sent line: its JSON payload, :data:`_DONE`, or ``None`` to skip."""
        if not line.startswith("data:"):
            return None  # blank separators, comments, event names
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return _DONE
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise ProviderError(
                self._name, status, f"malformed stream chunk: {data[:80]!r}"
            ) from exc
        return chunk if isinstance(chunk, dict) else None

    def _check(self, response: httpx.Response) -> None:
        if response.status_code >= 400:
            response.read()
            raise ProviderError(self._name, response.status_code, response.text[:_DETAIL_MAX])

    def _parse_reply(self, response: httpx.Response) -> tuple[str, dict[str, Any]]:
        try:
            payload = response.json()
            content = payload["choices"][0]["message"].get("content") or ""
            usage = payload.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ProviderError(
                self._name, response.status_code, f"malformed response: {exc!r}"
            ) from exc
        if not isinstance(content, str) or not isinstance(usage, dict):
            raise ProviderError(self._name, response.status_code, "malformed response")
        return content, usage

    def _streamed(
        self, client: httpx.Client, body: dict[str, Any], emit: Emit, agent: SessionAuthor
    ) -> AdapterResult:
        parts: list[str] = []
        usage: dict[str, Any] = {}
        with client.stream("POST", f"{self.base_url}/chat/completions", json=body) as response:
            self._check(response)
            for chunk in self._events(response):
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    delta = (choice.get("delta") or {}).get("content")
                    if isinstance(delta, str) and delta:
                        parts.append(delta)
                        emit(Event(agent, TextDelta(delta)))
        content = "".join(parts)
        emit(Event(agent, Text(content)))
        return AdapterResult(output=content, token_usage=usage)

    def _events(self, response: httpx.Response) -> Iterator[dict[str, Any]]:
        """Yield the JSON payload of each ``data:`` line until ``[DONE]``."""
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                return
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                raise ProviderError(
                    self._name, response.status_code, f"malformed stream chunk: {data[:80]!r}"
                ) from exc
            if isinstance(chunk, dict):
                yield chunk
