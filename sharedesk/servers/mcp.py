"""The Model Context Protocol server: one participant's desks as MCP tools and resources.

``sharedesk mcp STORE --as KIND:ID[:LABEL]`` serves one participant over standard input
and output; ``sharedesk mcp STORE --http HOST:PORT --tokens FILE`` serves many over MCP's
streamable HTTP (:mod:`sharedesk.servers._mcp_http`). Both are built on the official
``mcp`` SDK's low-level :class:`mcp.server.Server` (the ``mcp`` extra) over an
:class:`~sharedesk.AsyncHub`, and negotiate the protocol versions the SDK speaks.

Tools (see the contract, "A desk over MCP"): ``desks``, ``view``, ``post``, ``turn`` and
``commit``; every result is a JSON object, given as structured content and as text;
``turn`` also takes ``start_after``, as ``hub.turn`` does (a late joiner's first turn). A
turn taken is kept here, under a random ``turn_id``, for the participant and MCP
session that took it, until it is committed; nothing of it is stored before, so a
server or client killed between ``turn`` and ``commit`` leaves the rows to be offered
again. Resources ``desk://{desk}`` hold the participant's view; a client subscribed to
one (``resources/subscribe``, or ``subscriptions/listen`` on the newest protocol) is sent a
resource-updated notification when the desk changes, whichever process wrote: the Hub
follows its store (LMDB or PostgreSQL) across processes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import json
import secrets
import sys
import weakref
from collections.abc import Callable
from typing import Any, Final, Protocol, runtime_checkable

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from sharedesk.actors import AsyncHub, AsyncTurn, Push
from sharedesk.protocol import Conversation, SessionAuthor, SharedeskError, SharingStateConflict
from sharedesk.protocol._log import logger
from sharedesk.protocol.ports import SessionInfo
from sharedesk.servers._mcp_tools import (
    TOOLS,
    ToolError,
    check_args,
    desk_of_uri,
    desk_uri,
    mark_lone_surrogates,
    message_json,
    participant_key,
    thawed,
)

__all__ = ["MAX_PENDING_TURNS", "DeskServer", "run_mcp", "serve_http", "serve_stdio"]

_log = logger()

#: The most turns kept waiting for their commit; past it the oldest is forgotten.
MAX_PENDING_TURNS: Final = 4096
#: How many committed turn ids are remembered (to say "committed already").
_REMEMBERED_COMMITS: Final = 4096
_LIST_LIMIT: Final = 1000

#: Who calls: the participant of a request (``None``: unknown, refused).
Identify = Callable[[ServerRequestContext[Any]], SessionAuthor | None]


class _Pending:
    __slots__ = ("owner", "session", "turn")

    def __init__(self, owner: str, session: str | None, turn: AsyncTurn) -> None:
        self.owner = owner
        self.session = session
        self.turn = turn


class DeskServer:
    """The MCP server of a Hub: tools, resources, pending turns and subscriptions.

    ``identify`` names the participant of each request (over stdio: always the one of
    ``--as``; over HTTP: the bearer token's). Use it on one event loop.
    """

    def __init__(self, hub: AsyncHub, identify: Identify) -> None:
        self._hub = hub
        self._identify = identify
        self._pending: collections.OrderedDict[str, _Pending] = collections.OrderedDict()
        self._committed: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._sessions: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # Subscribed MCP sessions per desk (handshake era) and the Hub listeners.
        self._subscribers: dict[str, weakref.WeakSet[Any]] = {}
        self._unlisten: dict[str, Callable[[], None]] = {}
        self._dirty: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.server: Server[Any] = Server(
            "sharedesk",
            version=_version(),
            instructions=(
                "Shared desks: call turn(desk) to read what is new for you, then"
                " commit(turn_id, reply) to answer; view(desk) shows your view."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen_for,
        )

    def close(self) -> None:
        """Stop listening to desks and forget pending turns (idempotent)."""
        for remove in self._unlisten.values():
            remove()
        self._unlisten.clear()
        self._subscribers.clear()
        self._pending.clear()
        for task in self._tasks:
            task.cancel()
        self._listen.close()

    # -- tools -----------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=name,
                    description=text,
                    input_schema=thawed(inputs),
                    output_schema=thawed(outputs),
                )
                for name, (text, inputs, outputs) in TOOLS.items()
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        who = self._identify(ctx)
        try:
            if who is None:
                raise ToolError("no participant: this request carries no known token")
            args = check_args(params.name, params.arguments)
            result = await self.call(who, self._session_of(ctx), params.name, args)
        except ToolError as exc:
            return _error(str(exc))
        except SharedeskError as exc:
            return _error(f"{type(exc).__name__}: {exc}")
        except Exception:  # the server keeps serving
            _log.exception("mcp.tool_failed", tool=params.name)
            return _error("internal error (logged by the server)")
        text = json.dumps(result, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=result
        )

    async def call(
        self, who: SessionAuthor, session: str | None, tool: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        """Run ``tool`` for ``who`` in MCP session ``session`` with checked ``args``.

        Raises:
            ToolError: The call is refused (unknown desk or turn, another's turn, ...).
            SharedeskError: The Hub refused it; nothing was written.
        """
        hub = self._hub
        if tool == "desks":
            infos = await asyncio.to_thread(_listing(hub).session_infos)
            infos.sort(key=lambda info: (info.last_activity, info.session_id), reverse=True)
            desks = [{"id": i.session_id, "last_sequence": i.last_sequence} for i in infos]
            return {"desks": desks}
        if tool == "post":
            stored = await hub.post(args["desk"], who, args["content"], parent=args["parent"])
            return {"sequence": stored.sequence}
        if tool == "commit":
            return await self._commit(who, session, args["turn_id"], args["reply"])
        desk = args["desk"]
        await self._known(desk)
        conversation = Conversation(desk=desk, thread_root=args["thread_root"])
        if tool == "view":
            view = await hub.view(desk, who, conversation)
            return {"messages": [message_json(m) for m in view.messages]}
        turn = await self._turn(who, conversation, args["wait_s"], args["start_after"])
        turn_id = secrets.token_urlsafe(18)
        self._pending[turn_id] = _Pending(participant_key(who), session, turn)
        while len(self._pending) > MAX_PENDING_TURNS:
            self._pending.popitem(last=False)
        return {
            "turn_id": turn_id,
            "reason": turn.reason,
            "messages": [message_json(m) for m in turn.messages],
        }

    async def _turn(
        self, who: SessionAuthor, conversation: Conversation, wait_s: float, after: int | None
    ) -> AsyncTurn:
        desk, hub = conversation.desk, self._hub
        if wait_s > 0:
            try:
                return await hub.wait_turn(
                    desk, who, conversation, timeout=wait_s, start_after=after
                )
            except TimeoutError:
                pass
        return await hub.turn(desk, who, conversation, start_after=after)

    async def _commit(
        self, who: SessionAuthor, session: str | None, turn_id: str, reply: str | None
    ) -> dict[str, Any]:
        pending = self._pending.get(turn_id)
        if pending is None:
            if turn_id in self._committed:
                raise ToolError(f"turn {turn_id} was committed already")
            raise ToolError(f"unknown turn_id {turn_id[:100]!r}")
        if pending.owner != participant_key(who):
            raise ToolError(f"turn {turn_id} is another participant's")
        if pending.session != session:
            raise ToolError(f"turn {turn_id} belongs to another MCP session")
        try:
            stored = await pending.turn.commit(reply)
        except SharingStateConflict as exc:
            self._forget(turn_id)
            raise ToolError(
                f"turn {turn_id} was overtaken: another commit of your turn at this desk"
                f" landed first ({exc}); nothing was written, take a new turn"
            ) from None
        self._forget(turn_id)
        return {"sequence": None if stored is None else stored.sequence}

    def _forget(self, turn_id: str) -> None:
        self._pending.pop(turn_id, None)
        self._committed[turn_id] = None
        while len(self._committed) > _REMEMBERED_COMMITS:
            self._committed.popitem(last=False)

    async def _known(self, desk: str) -> None:
        info = await asyncio.to_thread(_listing(self._hub).session_info, desk)
        if info is None:
            raise ToolError(f"unknown desk {desk[:200]!r}: it holds no message yet")

    def _session_of(self, ctx: ServerRequestContext[Any]) -> str | None:
        """Name the MCP session of a request (``None`` on the stateless 2026 protocol)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return None
        connection = _connection(ctx)
        name = self._sessions.get(connection)
        if name is None:
            name = self._sessions[connection] = secrets.token_hex(8)
        return name

    # -- resources -------------------------------------------------------------------

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        infos = await asyncio.to_thread(_listing(self._hub).session_infos)
        infos.sort(key=lambda info: (info.last_activity, info.session_id), reverse=True)
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=desk_uri(info.session_id),
                    name=info.session_id,
                    description="your view of the desk",
                    mime_type="application/json",
                )
                for info in infos[:_LIST_LIMIT]
            ]
        )

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            uri_template="desk://{desk}",
            name="desk",
            description='your view of a desk: {"messages": [...]} as the view tool returns',
            mime_type="application/json",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        who = self._identify(ctx)
        desk = self._desk(str(params.uri))
        if who is None:
            raise MCPError(types.INVALID_REQUEST, "no participant: no known token")
        try:
            view = await self.call(who, None, "view", {"desk": desk, "thread_root": None})
        except (ToolError, SharedeskError) as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        await self._follow(desk)  # a 2026 client listens after reading
        text = json.dumps(view, ensure_ascii=False)
        contents = types.TextResourceContents(
            uri=str(params.uri), mime_type="application/json", text=text
        )
        return types.ReadResourceResult(contents=[contents])

    async def _subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        desk = self._desk(str(params.uri))
        self._subscribers.setdefault(desk, weakref.WeakSet()).add(_connection(ctx))
        await self._follow(desk)
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        desk = self._desk(str(params.uri))
        self._subscribers.get(desk, weakref.WeakSet()).discard(_connection(ctx))
        return types.EmptyResult()

    async def _listen_for(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve a ``subscriptions/listen`` stream (2026 protocol), following its desks."""
        for uri in params.notifications.resource_subscriptions or ():
            with contextlib.suppress(ToolError):
                await self._follow(desk_of_uri(str(uri)))
        return await self._listen(ctx, params)

    @staticmethod
    def _desk(uri: str) -> str:
        try:
            return desk_of_uri(uri)
        except ToolError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None

    async def _follow(self, desk: str) -> None:
        """Listen to ``desk`` on the Hub (once): its commits, any process's, notify."""
        if desk in self._unlisten:
            return
        self._loop = asyncio.get_running_loop()
        listener = _Changed(self._loop, self._changed, desk)
        remove = await asyncio.to_thread(self._hub.hub.listen, desk, listener)
        if desk in self._unlisten:  # another request listened meanwhile
            remove()
        else:
            self._unlisten[desk] = remove

    def _changed(self, desk: str) -> None:
        """On the loop: send one notification per burst of changes to ``desk``."""
        if desk in self._dirty:
            return
        self._dirty.add(desk)
        task = asyncio.get_running_loop().create_task(self._notify(desk))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _notify(self, desk: str) -> None:
        self._dirty.discard(desk)
        uri = desk_uri(desk)
        for connection in list(self._subscribers.get(desk, ())):
            try:
                await connection.outbound.notify("notifications/resources/updated", {"uri": uri})
            except Exception as exc:  # a connection gone: drop it
                _log.info("mcp.notify_failed", desk=desk, error=repr(exc))
                self._subscribers[desk].discard(connection)
        await self._bus.publish(ResourceUpdated(uri=uri))


class _Changed:
    """A Hub listener that hands the desk's changes to the loop (from an actor's thread)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, changed: Callable[[str], None], desk: str
    ) -> None:
        self._loop = loop
        self._changed = changed
        self._desk = desk

    def deliver(self, message: Push) -> None:
        """Schedule one notification (quick; never blocks)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._changed, self._desk)


@runtime_checkable
class _Listing(Protocol):
    def session_info(self, session_id: str) -> SessionInfo | None: ...

    def session_infos(self) -> list[SessionInfo]: ...


def _listing(hub: AsyncHub) -> _Listing:
    store = hub.hub.store
    if not isinstance(store, _Listing):  # every store of sharedesk lists its sessions
        raise ToolError("this store does not list its desks")
    return store


def _connection(ctx: ServerRequestContext[Any]) -> Any:
    """Return the SDK's per-client ``Connection`` (a ``ServerSession`` is per request)."""
    return ctx.session._connection


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _version() -> str:
    from sharedesk import __version__

    return str(__version__)


async def serve_stdio(store: str, participant: SessionAuthor) -> None:
    """Serve ``participant``'s desks on ``store`` over MCP on standard input and output.

    Returns when the client closes standard input; the Hub is closed then.

    Raises:
        StoreError: The store could not be opened.
    """
    from mcp.server.stdio import stdio_server

    async with AsyncHub.open(store) as hub:
        desks = DeskServer(hub, lambda ctx: participant)
        try:
            async with stdio_server(stdin=_Lines()) as (read, write):  # type: ignore[arg-type]
                server = desks.server
                await server.run(read, write, server.create_initialization_options())
        finally:
            desks.close()


class _Lines:
    """Standard input as the SDK's stdio transport reads it, lone surrogates marked."""

    def __init__(self) -> None:
        text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        self._file = anyio.wrap_file(text)

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._file.readline()
        if not line:
            raise StopAsyncIteration
        return mark_lone_surrogates(line)


async def serve_http(store: str, host: str, port: int, tokens: dict[str, Any]) -> None:
    """Serve the desks of ``store`` over MCP's streamable HTTP at ``/mcp`` until stopped.

    Each request is its bearer token's participant (``tokens``: token → participant);
    one without a known token gets HTTP 401 and reaches no desk.

    Raises:
        StoreError: The store could not be opened.
    """
    import uvicorn

    from sharedesk.servers._mcp_http import BearerGate, participant_of

    async with AsyncHub.open(store) as hub:
        desks = DeskServer(hub, lambda ctx: participant_of(ctx.request))
        try:
            app = BearerGate(desks.server.streamable_http_app(host=host), tokens)
            config = uvicorn.Config(app, host=host, port=port, log_level="warning")
            await uvicorn.Server(config).serve()
        finally:
            desks.close()


def run_mcp(store: str, participant: str | None, http: str | None, tokens: str | None) -> None:
    """Run ``sharedesk mcp``: over stdio with ``--as``, or over HTTP with ``--tokens``.

    Raises:
        ValidationError: A bad combination of options, participant, address or tokens.
        StoreError: The store could not be opened.
        OSError: The tokens file could not be read.
    """
    from sharedesk.protocol import ValidationError
    from sharedesk.servers._mcp_http import parse_host_port, read_tokens
    from sharedesk.servers._mcp_tools import parse_participant

    if http is None:
        if participant is None or tokens is not None:
            raise ValidationError("sharedesk mcp takes --as KIND:ID[:LABEL] (or --http, --tokens)")
        asyncio.run(serve_stdio(store, parse_participant(participant)))
        return
    if tokens is None or participant is not None:
        raise ValidationError("sharedesk mcp --http takes --tokens FILE (and no --as)")
    host, port = parse_host_port(http)
    asyncio.run(serve_http(store, host, port, read_tokens(tokens)))
