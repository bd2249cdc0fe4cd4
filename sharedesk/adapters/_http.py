"""The HTTP base every provider adapter stands on: async first, sync through one bridge.

:class:`HttpAdapter` owns what the providers share: checking the constructor's
arguments, one ``httpx.AsyncClient`` per run (over an injectable transport), the run's
overall deadline, server-sent events, HTTP errors and transport failures as
:class:`~sharedesk.ProviderError`, and the tools a model may call. A provider module
supplies only its request bodies and how to read its answers (:meth:`HttpAdapter.converse`,
over an :class:`Exchange`).

``aexecute`` is the adapter; ``execute`` is the bridge for the synchronous
``SessionManager.execute_run``: it runs ``aexecute`` on an event loop of the worker
thread it is called on, with the synchronous ``emit`` behind an async one.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, Final

import httpx
import msgspec

from sharedesk.adapters.render import output_text
from sharedesk.protocol.authors import Agent, SessionAuthor
from sharedesk.protocol.errors import ProviderError, ValidationError
from sharedesk.protocol.events import Event, EventBody, Text, ToolCall, ToolResult
from sharedesk.protocol.validation import check_author
from sharedesk.runs.types import AdapterResult, AsyncEmit, Emit, Run, Session

#: Seconds one HTTP read may wait for bytes (``adapter_opts["timeout"]`` lowers it).
DEFAULT_HTTP_TIMEOUT_S: Final = 60.0
#: Seconds a whole run's HTTP work may take, whatever trickles in meanwhile (a server
#: sending keep-alive comments never answering is cut there).
DEFAULT_DEADLINE_S: Final = 600.0
#: Most model calls one run makes while answering tool calls (``"max_tool_rounds"``).
DEFAULT_TOOL_ROUNDS: Final = 8
_DETAIL_MAX: Final = 500

__all__ = [
    "DEFAULT_DEADLINE_S",
    "DEFAULT_HTTP_TIMEOUT_S",
    "DEFAULT_TOOL_ROUNDS",
    "Exchange",
    "FunctionTool",
    "HttpAdapter",
    "call_tool",
    "check_tools",
    "output_text",
    "retry_after",
    "sse_events",
]


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


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Return the ``retry-after`` header in seconds (delta or HTTP date), else ``None``.

    ``retry-after-ms`` (milliseconds, sent by some providers) wins when present.
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        with contextlib.suppress(ValueError):
            return max(0.0, float(raw_ms) / 1000)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(raw))
    try:
        when = parsedate_to_datetime(raw)
        date = headers.get("date")
        now = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        return None
    if now is None:
        return None
    return max(0.0, (when - now).total_seconds())


async def sse_events(
    provider: str, response: httpx.Response, *, until_done: bool = False
) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON payload of each server-sent event of ``response``.

    Events are separated by blank lines; ``data:`` lines of one event are joined; comments
    and ``event:`` names are skipped (the payloads carry their ``type``); ``[DONE]`` ends
    the stream.

    Raises:
        ProviderError: An event whose data is not a JSON object; with ``until_done``, a
            stream that ends before ``[DONE]`` (cut, or empty).
    """
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[len("data:") :].strip())
            continue
        if line.strip() or not data:
            continue  # comments, event names, ids; or a blank line with nothing pending
        payload, data = "\n".join(data), []
        if payload == "[DONE]":
            return
        yield _event_payload(provider, response.status_code, payload)
    if data and "\n".join(data) == "[DONE]":
        return
    if data:
        yield _event_payload(provider, response.status_code, "\n".join(data))
    if until_done:
        raise ProviderError(provider, response.status_code, "the stream ended before [DONE]")


def _event_payload(provider: str, status: int, payload: str) -> dict[str, Any]:
    try:
        event = json.loads(payload)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        raise ProviderError(provider, status, f"malformed stream event: {payload[:80]!r}")
    return event


class HttpAdapter(abc.ABC):
    """The base of the HTTP provider adapters (see the module docstring).

    ``adapter_opts`` every subclass reads: ``"stream"`` (bool), ``"timeout"`` (seconds:
    bounds each HTTP read and the whole run's HTTP work), ``"max_tool_rounds"`` (int),
    the subclass's ``PASSTHROUGH_OPTS`` and ``"extra_body"`` (a mapping merged into each
    request body). Safe to share between threads and tasks: each run opens its own client.
    """

    #: Whether the provider keeps a conversation of its own (see ``Adapter``).
    native_continuation: bool = False
    #: ``adapter_opts`` keys copied into each request body as they are.
    PASSTHROUGH_OPTS: tuple[str, ...] = ()
    #: The provider name when none is given.
    DEFAULT_NAME: ClassVar[str]
    #: Whether the adapter runs the tools the model calls (else it takes none).
    RUNS_TOOLS: ClassVar[bool] = True

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        system: str | None = None,
        name: str | None = None,
        author: SessionAuthor | None = None,
        tools: Sequence[FunctionTool] = (),
        transport: httpx.AsyncBaseTransport | None = None,
        deadline: float = DEFAULT_DEADLINE_S,
    ) -> None:
        """Create the adapter; nothing is sent until a run executes.

        Args:
            base_url: The API root, e.g. ``"https://api.openai.com/v1"``.
            model: The model sent with each request and recorded in ``RunStarted``.
            api_key: The provider's key, sent as its API asks.
            system: The adapter's system prompt, sent with every request as the API
                asks (Chat: a leading ``"system"`` message; Responses: ``instructions``;
                Anthropic: ``system``, before the transcript's and the input's own).
            name: The provider name (``RunStarted.provider``, ``provider_sessions`` key,
                and the default author's id and label); default ``DEFAULT_NAME``.
            author: Author of the emitted events (default ``Agent(id=name, label=name)``).
            tools: Functions the model may call.
            transport: The httpx transport of each run's client (default: the network),
                e.g. ``httpx.MockTransport`` to answer without a server.
            deadline: Most seconds a run's HTTP work may take in all; past it the run
                fails with ``ProviderError`` (``status_code=None``).

        Raises:
            ValidationError: An empty ``base_url``, ``model`` or ``name``, a ``system``
                that is not a str or ``None``, a deadline
                that is not a positive number, bad tools (or any, to an adapter that runs
                none), or a bad author.
        """
        name = self.DEFAULT_NAME if name is None else name
        for field, value in (("base_url", base_url), ("model", model), ("name", name)):
            if not isinstance(value, str) or not value:
                raise ValidationError(f"{field} must be a non-empty str")
        if _seconds(deadline) is None:
            raise ValidationError(f"deadline must be a positive number of seconds: {deadline!r}")
        if system is not None and not isinstance(system, str):
            raise ValidationError(f"system must be a str or None, got {type(system).__name__}")
        self.system = system
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tools = check_tools(tools)
        if self.tools and not self.RUNS_TOOLS:
            raise ValidationError(f"{type(self).__name__} runs no tools")
        self.author: SessionAuthor = (
            Agent(id=name, label=name) if author is None else check_author(author)
        )
        self.deadline = float(deadline)
        self._api_key = api_key
        self._name = name
        self._transport = transport

    @property
    def name(self) -> str:
        """The provider name (``RunStarted.provider``)."""
        return self._name

    def auth_headers(self) -> dict[str, str]:
        """Return the headers that authenticate a request (default: a bearer token)."""
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    @abc.abstractmethod
    async def converse(self, x: Exchange) -> AdapterResult:
        """Talk to the provider for one run (what a subclass supplies)."""

    async def aexecute(
        self, run: Run, session: Session, emit: AsyncEmit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        """Execute ``run`` against the provider, emitting what comes back.

        Args:
            run: The run; its input is the last input of the first request.
            session: ``context["continuation"]``/``["transcript"]`` and
                ``metadata["provider_sessions"]``.
            emit: The run's async emit.
            opts: ``adapter_opts`` (see the class docstring).

        Returns:
            The last reply text as ``output``; the summed usage as ``token_usage``.

        Raises:
            ProviderError: An HTTP error, a malformed body or event, a stream cut before
                its end, no response (the transport error is the ``__cause__``), or the
                deadline passed.
            ValidationError: A bad ``max_tool_rounds``.

        Cost: one HTTP request per model call (at most ``max_tool_rounds``); one emit per
        streamed chunk, per tool call and result, and per reply.
        """
        deadline = min(self.deadline, _seconds(opts.get("timeout")) or self.deadline)
        headers = {
            "Accept": "text/event-stream" if opts.get("stream") else "application/json",
            **self.auth_headers(),
        }
        scope = asyncio.timeout(deadline)
        try:
            async with (
                scope,
                httpx.AsyncClient(
                    timeout=min(DEFAULT_HTTP_TIMEOUT_S, deadline),
                    headers=headers,
                    transport=self._transport,
                ) as client,
            ):
                return await self.converse(Exchange(self, client, run, session, emit, opts))
        except TimeoutError as exc:
            if not scope.expired():
                raise
            raise ProviderError(self._name, None, f"no answer within {deadline} s") from exc
        except httpx.HTTPError as exc:
            raise ProviderError(self._name, None, f"{type(exc).__name__}: {exc}") from exc

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        """:meth:`aexecute` for a synchronous run: the one bridge from sync to async.

        Runs :meth:`aexecute` on an event loop of the calling thread (the manager's
        worker thread; never a thread already running a loop), ``emit`` called as is.
        """

        async def aemit(event: Event) -> Event:
            return emit(event)

        return asyncio.run(self.aexecute(run, session, aemit, opts))

    # -- for subclasses ----------------------------------------------------------------

    def body(self, opts: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
        """Return a request body: ``model``, ``fields``, passthrough opts, ``extra_body``."""
        body: dict[str, Any] = {"model": self.model, **fields}
        body.update((key, opts[key]) for key in self.PASSTHROUGH_OPTS if key in opts)
        if opts.get("stream"):
            body["stream"] = True
        extra = opts.get("extra_body")
        if isinstance(extra, Mapping):
            body.update(extra)
        return body


@dataclass(frozen=True, eq=False)
class Exchange:
    """One run's exchange with its provider: what :meth:`HttpAdapter.converse` works with.

    Attributes:
        adapter: The adapter.
        client: The run's HTTP client (its base headers, timeout and transport set).
        run: The run.
        session: The session, with ``context``.
        emit: The run's async emit.
        opts: ``adapter_opts``.
    """

    adapter: HttpAdapter
    client: httpx.AsyncClient
    run: Run
    session: Session
    emit: AsyncEmit
    opts: Mapping[str, Any]

    async def say(self, body: EventBody) -> Event:
        """Emit an event of ``body`` by the adapter's author; return it as stored."""
        return await self.emit(Event(self.adapter.author, body))

    async def reply(self, text: str, calls: Sequence[Any], so_far: str | None) -> str | None:
        """Emit a model call's ``text`` as a ``Text``, unless it is blank beside tool calls.

        Returns the run's reply: ``text`` when emitted, else ``so_far``.
        """
        if text or not calls:
            await self.say(Text(text))
            return text
        return so_far

    async def post(self, path: str, body: Any) -> dict[str, Any]:
        """POST ``body`` to ``{base_url}/{path}`` and return the JSON object answered.

        Raises:
            ProviderError: An HTTP error, or a body that is not a JSON object.
        """
        response = await self.client.post(f"{self.adapter.base_url}/{path}", json=body)
        await self._check_status(response)
        try:
            payload = json.loads(response.content)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            raise ProviderError(
                self.adapter.name,
                response.status_code,
                f"malformed response: {response.text[:80]!r}",
            )
        return payload

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, body: Any, *, until_done: bool = False
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """POST ``body`` and give its server-sent events (see :func:`sse_events`)."""
        url = f"{self.adapter.base_url}/{path}"
        async with self.client.stream("POST", url, json=body) as response:
            await self._check_status(response)
            yield sse_events(self.adapter.name, response, until_done=until_done)

    def rounds(self) -> int:
        """Return ``opts["max_tool_rounds"]`` (default :data:`DEFAULT_TOOL_ROUNDS`).

        Raises:
            ValidationError: Not a positive int.
        """
        rounds = self.opts.get("max_tool_rounds", DEFAULT_TOOL_ROUNDS)
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValidationError(f"max_tool_rounds must be a positive int, got {rounds!r}")
        return rounds

    async def run_tool(self, call_id: str, name: str, arguments: Any) -> tuple[Any, bool]:
        """Emit the model's tool call, run the tool, emit its result; return the result.

        Arguments that are not an object are recorded as ``{"arguments": ...}`` (and the
        tool is not called: see :func:`call_tool`).
        """
        tool_input = arguments if isinstance(arguments, dict) else {"arguments": arguments}
        await self.say(ToolCall(call_id, name, tool_input))
        output, is_error = await call_tool(self.adapter.tools, name, arguments)
        await self.say(ToolResult(call_id, output, is_error=is_error))
        return output, is_error

    async def _check_status(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        await response.aread()
        raise ProviderError(
            self.adapter.name,
            response.status_code,
            response.text[:_DETAIL_MAX],
            retry_after(response.headers),
        )


def add_usage(total: dict[str, Any], usage: Any, keys: Sequence[str]) -> None:
    """Add the int counts ``usage`` holds under ``keys`` into ``total``."""
    if not isinstance(usage, dict):
        return
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _seconds(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None
