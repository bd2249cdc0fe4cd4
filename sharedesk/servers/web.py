"""``sharedesk serve``: a web page and a JSON API over one store (the ``web`` extra).

Routes (all JSON under ``/api``; authors are ``{"kind", "id", "label"}``; a row is
``{"sequence", "type", "author", "content", "parent", "run_id", "timestamp"}`` plus
``"status"`` on a run's end and ``"model"`` on its start):

- ``GET /api/desks`` -> ``{"desks": [{"id", "last_sequence", "last_activity"}]}``,
  newest activity first;
- ``GET /api/desks/{desk}/rows?before=N&limit=N`` -> ``{"rows", "next_before"}``: one
  page of the desk's rows, oldest first, below ``before`` (default: the newest);
- ``GET /api/desks/{desk}/view?as=KIND:ID[&thread=N][&window=N]`` -> ``{"participant",
  "messages", "partial", "watermark", "present"}``: that participant's view and where
  its sharing state stands (``watermark`` ``null``: it never committed a turn there;
  the participant's label is the one on its newest row in the view, else its id);
- ``GET /api/desks/{desk}/participants`` -> ``{"participants": [{"author",
  "watermark"}]}``: who wrote among the newest rows;
- ``GET /api/desks/{desk}/runs/{run_id}`` -> ``{"run_id", "status", "provider", "model",
  "agent", "rows", "transcript"}``: a run's status, its rows and the transcript its
  adapter received (``sharedesk.servers._web_runs``);
- ``POST /api/desks/{desk}/messages`` with ``{"content", "parent"}`` -> 201
  ``{"sequence"}``, written as the token's participant;
- ``GET /api/desks/{desk}/events?after=N``: server-sent events, one ``row`` event per
  stored row with the row's sequence as its id, resumed after ``Last-Event-ID`` (or
  ``after``; default: only rows from now on); nothing missed or repeated;
- ``GET /api/me`` -> ``{"participant", "can_post"}``; ``GET /login?token=T`` sets the
  token's cookie and opens the page.

Errors are ``{"error": message}``: 400 for bad input, 410 with ``"archived_through"``
added for a read (a reply, an event stream) that needs rows retention removed, 503 for any other
sharedesk error.

Security: without tokens the server is read-only (``POST`` -> 403) and :func:`serve`
binds only to a loopback address. With :class:`~sharedesk.servers._web_auth.Tokens`,
every request but ``/login`` needs a known token (``Authorization: Bearer T`` or the
cookie ``/login`` sets: ``HttpOnly``, ``SameSite=Strict``), else 401 and no desk is
read. A post needs the header ``X-Sharedesk-Request: 1`` (a cross-site page cannot send
it without a CORS preflight, which this server never grants), a JSON body and, when the
browser sends an ``Origin``, this server's own; else 403. The page sets its content with
``textContent`` only, under a ``Content-Security-Policy`` that allows no inline script,
no image and no frame; only the page's own three files are served, by name.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from sharedesk.actors import Hub
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.errors import RowsArchived, SharedeskError, ValidationError
from sharedesk.protocol.events import Event, Text, new_event_id
from sharedesk.protocol.validation import MAX_INT, is_postgres_dsn
from sharedesk.protocol.views import Conversation
from sharedesk.servers._web_auth import Tokens, parse_participant
from sharedesk.servers._web_feed import Feeds
from sharedesk.servers._web_runs import run_json
from sharedesk.servers._web_shapes import author_json, row_json

__all__ = ["COOKIE", "ROWS_LIMIT", "Tokens", "create_app", "row_json", "serve"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The cookie ``/login`` sets to the token.
COOKIE: Final = "sharedesk_token"
#: Most rows one ``rows`` page holds (and its default).
ROWS_LIMIT: Final = 200
_ROWS_DEFAULT: Final = 50
#: The header a post must carry (see the module docstring).
CSRF_HEADER: Final = "x-sharedesk-request"
_LOOPBACK: Final = frozenset({"127.0.0.1", "::1", "localhost"})
_STATIC: Final = MappingProxyType(
    {
        "/": ("index.html", "text/html; charset=utf-8"),
        "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
        "/static/app.css": ("app.css", "text/css; charset=utf-8"),
    }
)
_HEADERS: Final = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)


def _json(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def sse_row(event: Event) -> bytes:
    """Return one stored row as a server-sent event: its sequence as id, ``row``, JSON."""
    data = msgspec.json.encode(row_json(event))
    return b"id: %d\nevent: row\ndata: %s\n\n" % (event.sequence or 0, data)


def _int_arg(request: Request, name: str, default: int | None) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or int(text) > MAX_INT:
        raise ValidationError(f"{name} must be a whole number, got {text!r}")
    return int(text)


class _Api:
    """The routes' handlers over one Hub (blocking Hub calls run on Starlette's threads)."""

    def __init__(self, hub: Hub, tokens: Tokens | None, keepalive: float):
        self.hub, self.tokens = hub, tokens
        self.feeds = Feeds(hub, sse_row, keepalive=keepalive)

    async def page(self, request: Request) -> Response:
        name, media = _STATIC[request.url.path]
        data = resources.files("sharedesk.servers").joinpath("web_static", name).read_bytes()
        return Response(data, media_type=media)

    async def login(self, request: Request) -> Response:
        token = request.query_params.get("token", "")
        if self.tokens is None:
            return RedirectResponse("/", status_code=303)
        if self.tokens.holder(token) is None:
            return _error(401, "unknown token")
        response = RedirectResponse("/", status_code=303)
        secure = request.url.scheme == "https"
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=secure)
        return response

    async def me(self, request: Request) -> Response:
        who: SessionAuthor | None = request.state.participant
        return _json(
            {"participant": None if who is None else author_json(who), "can_post": who is not None}
        )

    async def desks(self, request: Request) -> Response:
        limit = _int_arg(request, "limit", ROWS_LIMIT)
        infos = await run_in_threadpool(self.hub.store.session_infos)  # type: ignore[attr-defined]
        infos = sorted(infos, key=lambda info: (info.last_activity, info.session_id), reverse=True)
        desks = [
            {"id": i.session_id, "last_sequence": i.last_sequence, "last_activity": i.last_activity}
            for i in infos[:limit]
        ]
        return _json({"desks": desks})

    async def rows(self, request: Request) -> Response:
        desk = request.path_params["desk"]
        before = _int_arg(request, "before", None)
        limit = min(_int_arg(request, "limit", _ROWS_DEFAULT) or _ROWS_DEFAULT, ROWS_LIMIT)
        page = await run_in_threadpool(
            self.hub.read, desk, before=before, limit=limit, newest_first=True
        )
        oldest = page[-1].sequence if page else None
        next_before = oldest if oldest is not None and oldest > 1 and len(page) == limit else None
        return _json({"rows": [row_json(e) for e in reversed(page)], "next_before": next_before})

    async def view(self, request: Request) -> Response:
        desk = request.path_params["desk"]
        who = parse_participant(request.query_params.get("as", ""), label=False)
        thread = _int_arg(request, "thread", None)
        window = min(_int_arg(request, "window", 30) or 30, ROWS_LIMIT)
        conversation = Conversation(desk=desk, thread_root=thread)

        def read() -> dict[str, Any]:
            view = self.hub.view(desk, who, conversation, window=window)
            key = author_key(who)
            state = self.hub.store.get_sharing_state(desk, key, conversation)
            own = [m.author for m in view.messages if author_key(m.author) == key]
            return {
                "participant": author_json(own[-1] if own else who),  # its label as written
                "messages": [
                    {
                        "sequence": m.sequence,
                        "author": author_json(m.author),
                        "content": m.content,
                        "parent": m.parent,
                    }
                    for m in view.messages
                ],
                "partial": view.partial,
                "watermark": None if state is None else state.watermark,
                "present": [] if state is None else sorted(state.present_above_watermark),
            }

        return _json(await run_in_threadpool(read))

    async def participants(self, request: Request) -> Response:
        desk = request.path_params["desk"]

        def read() -> list[dict[str, Any]]:
            found: dict[str, SessionAuthor] = {}
            for event in self.hub.read(desk, limit=512, newest_first=True):
                found.setdefault(author_key(event.author), event.author)
            channel = Conversation(desk=desk)
            out = []
            for key, author in sorted(found.items()):
                state = self.hub.store.get_sharing_state(desk, key, channel)
                watermark = None if state is None else state.watermark
                out.append({"author": author_json(author), "watermark": watermark})
            return out

        return _json({"participants": await run_in_threadpool(read)})

    async def run(self, request: Request) -> Response:
        desk, run_id = request.path_params["desk"], request.path_params["run"]
        found = await run_in_threadpool(run_json, self.hub, desk, run_id)
        return _error(404, "no such run on this desk") if found is None else _json(found)

    async def post(self, request: Request) -> Response:
        who: SessionAuthor | None = request.state.participant
        if who is None:
            return _error(403, "read-only: start the server with --tokens to post")
        refusal = _cross_site(request)
        if refusal is not None:
            return _error(403, refusal)
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "the body must be JSON")
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            return _error(400, 'the body must be {"content": str, "parent": int | null}')
        parent = body.get("parent")
        if parent is not None and (not isinstance(parent, int) or isinstance(parent, bool)):
            return _error(400, "parent must be a whole number or null")
        event = Event(who, Text(body["content"]), id=new_event_id(), parent=parent)
        desk = request.path_params["desk"]
        (stored,) = await run_in_threadpool(self.hub.append, desk, [event])
        return _json({"sequence": stored.sequence}, 201)

    async def events(self, request: Request) -> Response:
        desk = request.path_params["desk"]
        resume = request.headers.get("last-event-id")
        if resume is not None and (not resume.isdigit() or int(resume) > MAX_INT):
            raise ValidationError(f"Last-Event-ID must be a sequence, got {resume!r}")
        last = await run_in_threadpool(self.hub.last_sequence, desk)  # a bad desk id fails here
        asked = _int_arg(request, "after", None) if resume is None else int(resume)
        after = last if asked is None else asked
        archived = await run_in_threadpool(self.hub.archived_through, desk)
        if after < archived:  # answered before the stream starts, as every read is
            raise RowsArchived(desk, archived)

        async def stream() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n\n"
            async for chunk in self.feeds.follow(desk, after):
                yield chunk

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
        )


def _cross_site(request: Request) -> str | None:
    """Return why a post is refused as possibly cross-site, or ``None``."""
    if request.headers.get(CSRF_HEADER) != "1":
        return f"a post needs the header {CSRF_HEADER}: 1"
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return "a post's body must be application/json"
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        return f"a post from another origin ({origin}) is refused"
    return None


class _Guard:
    """ASGI middleware: names the request's participant, refuses unknown tokens, adds headers."""

    def __init__(self, app: ASGIApp, tokens: Tokens | None) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        who: SessionAuthor | None = None
        if self.tokens is not None and scope["path"] != "/login":
            who = self.tokens.holder(_token(scope))
            if who is None:
                refusal = _error(401, "a known token is required")
                refusal.headers["www-authenticate"] = 'Bearer realm="sharedesk"'
                await refusal(scope, receive, with_headers)
                return
        scope = dict(scope)
        scope["state"] = {**scope.get("state", {}), "participant": who}
        await self.app(scope, receive, with_headers)


def _token(scope: Scope) -> str | None:
    """Return the request's bearer token, else its cookie's, else ``None``."""
    request = Request(scope)
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.cookies.get(COOKIE)


def _handled(handler: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except ValidationError as exc:
            return _error(400, str(exc))
        except RowsArchived as exc:
            return _json({"error": str(exc), "archived_through": exc.archived_through}, 410)
        except SharedeskError as exc:
            return _error(503, f"{type(exc).__name__}: {exc}")

    return route


def create_app(hub: Hub, tokens: Tokens | None = None, *, keepalive: float = 15.0) -> ASGIApp:
    """Return the ASGI app serving ``hub``'s desks (the routes of the module docstring).

    Args:
        hub: The Hub to serve; the caller keeps it and closes it after the app stops.
        tokens: The known tokens; ``None`` serves read-only, to anyone who can connect.
        keepalive: Seconds without a row after which a feed sends a comment.

    Cost: O(1); nothing is read until a request comes.
    """
    api = _Api(hub, tokens, keepalive)
    routes = [
        *(Route(path, _handled(api.page)) for path in _STATIC),
        Route("/login", _handled(api.login)),
        Route("/api/me", _handled(api.me)),
        Route("/api/desks", _handled(api.desks)),
        Route("/api/desks/{desk:path}/rows", _handled(api.rows)),
        Route("/api/desks/{desk:path}/view", _handled(api.view)),
        Route("/api/desks/{desk:path}/participants", _handled(api.participants)),
        Route("/api/desks/{desk:path}/runs/{run:path}", _handled(api.run)),
        Route("/api/desks/{desk:path}/messages", _handled(api.post), methods=["POST"]),
        Route("/api/desks/{desk:path}/events", _handled(api.events)),
    ]
    return _Guard(Starlette(routes=routes), tokens)


def serve(
    store: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    tokens: str | os.PathLike[str] | None = None,
) -> None:
    """Serve the store at ``store`` (an existing LMDB directory or a DSN) until Ctrl-C.

    Raises:
        ValidationError: No tokens and a ``host`` that is not loopback; a malformed
            tokens file; a path that holds no store.
        OSError: The tokens file is unreadable, or the port is taken.

    Cost: opens one Hub over the store, closed when the server stops.
    """
    import uvicorn

    known = None if tokens is None else Tokens.load(tokens)
    if known is None and host not in _LOOPBACK:
        raise ValidationError(f"without --tokens the server binds only to 127.0.0.1, not {host}")
    if not is_postgres_dsn(store) and not (Path(store) / "data.mdb").is_file():
        raise ValidationError(f"not a store: {store} holds no data.mdb")
    with Hub.open(store) as hub:
        config = uvicorn.Config(
            create_app(hub, known), host=host, port=port, log_level="warning", lifespan="off"
        )
        uvicorn.Server(config).run()
