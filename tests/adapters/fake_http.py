"""A scripted HTTP server on 127.0.0.1 for provider wire tests, and an async run harness."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec

from sharedesk.protocol.events import Event
from sharedesk.runs.manager import SessionManager
from sharedesk.runs.types import Run, Session
from sharedesk.store.memory import MemoryStore


@dataclass
class Gate:
    """A point in a scripted stream where the server stops until the test opens it."""

    #: Set by the server when the stream reached the gate (what came before it is sent).
    reached: threading.Event = field(default_factory=threading.Event)
    #: Set by the test to let the stream go on (the server waits 10 s at most).
    opened: threading.Event = field(default_factory=threading.Event)
    #: Whether the server went on because the gate was opened (not because it gave up).
    passed: bool = False


@dataclass
class Reply:
    """One scripted answer: a status, headers, and a JSON body or SSE events.

    ``events`` items are sent in order: a dict as one named event (:func:`sse`), bytes
    as they are, and a :class:`Gate` stops the stream until the test opens it.
    """

    status: int = 200
    json_body: Any = None
    events: list[Any] | None = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Sent again and again after ``events`` until the client goes away (a keep-alive
    #: comment: a server that never answers yet never falls silent).
    forever: bytes | None = None


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``event`` (its ``type`` as the event name)."""
    return f"event: {event.get('type', 'message')}\ndata: {json.dumps(event)}\n\n".encode()


@dataclass
class FakeServer:
    """Answers each POST with the next scripted reply and records the requests."""

    url: str = ""
    replies: list[Reply] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, _, body in self.requests]


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            body = json.loads(self.rfile.read(length))
            server.requests.append((self.path, dict(self.headers), body))
            reply = server.replies.pop(0) if server.replies else Reply(status=404)
            self.send_response(reply.status)
            for key, value in reply.headers.items():
                self.send_header(key, value)
            if reply.events is not None:
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for event in reply.events:
                    if isinstance(event, Gate):
                        event.reached.set()
                        event.passed = event.opened.wait(10)
                        continue
                    self.wfile.write(event if isinstance(event, bytes) else sse(event))
                    self.wfile.flush()
                while reply.forever is not None:
                    try:
                        self.wfile.write(reply.forever)
                    except OSError:  # the client gave up
                        return
                return
            data = reply.raw if reply.raw is not None else json.dumps(reply.json_body).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def unused_url() -> str:
    """The URL of a loopback port nobody listens on (a connection to it is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


@contextmanager
def fake_server(prefix: str = "/v1") -> Iterator[FakeServer]:
    """A scripted server on a free loopback port, shut down (and joined) on exit."""
    state = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}{prefix}"
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-provider"
    )
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


class Desk:
    """A session in a MemoryStore with an async ``emit`` for one run at a time."""

    def __init__(self, session_id: str = "s1") -> None:
        self.store = MemoryStore()
        self.session_id = session_id
        self.emitted: list[Event] = []
        self.run_id = "0" * 32 + "@" + session_id

    async def emit(self, event: Event) -> Event:
        stored = self.store.append(
            self.session_id, [msgspec.structs.replace(event, run_id=self.run_id)]
        )[0]
        self.emitted.append(stored)
        return stored

    def run(self, text: str) -> Run:
        return Run(
            id=self.run_id,
            session_id=self.session_id,
            status="running",
            input=[{"role": "user", "content": text}],
        )

    def session(self, **context: Any) -> Session:
        folded = SessionManager.get_session(self.store, self.session_id)
        return Session(
            id=self.session_id, status="active", metadata=folded.metadata, context=context
        )

    def bodies(self) -> list[Any]:
        return [e.body for e in self.emitted]

    def close(self) -> None:
        self.store.close()
