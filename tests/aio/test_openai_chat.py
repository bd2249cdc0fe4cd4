"""OpenAIChatAdapter's async path (httpx.AsyncClient) against an SSE server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sharedesk import (
    Agent,
    AsyncHub,
    OpenAIChatAdapter,
    ProviderError,
    RunFailed,
    RunFinished,
    SessionManager,
    Text,
    TextDelta,
)
from tests.aio.conftest import Runner

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
CHUNKS = ["Hel", "lo ", "there"]
OPENAI = Agent(id="openai", label="openai")


class Provider:
    """What the loopback server received, and how it answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.garbage = False
        #: When set, a streamed answer sends its first chunk, sets ``first_sent`` and
        #: waits for ``gate`` (10 s at most; ``gate_opened`` says whether it was opened).
        self.gate: threading.Event | None = None
        self.first_sent = threading.Event()
        self.gate_opened = False


def make_handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            provider.requests.append(body)
            if provider.status != 200:
                self.send_response(provider.status)
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "overloaded"}}')
                return
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                if provider.garbage:
                    self.wfile.write(b"data: {not json\n\n")
                    return
                for index, piece in enumerate(CHUNKS):
                    chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    if index == 0 and provider.gate is not None:
                        provider.first_sent.set()
                        provider.gate_opened = provider.gate.wait(10)
                final = {"choices": [], "usage": USAGE}
                self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
                return
            data = json.dumps(
                {
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"}}],
                    "usage": USAGE,
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture
def provider() -> Iterator[tuple[str, Provider]]:
    """A chat-completions server on 127.0.0.1 (a free port), shut down after the test."""
    state = Provider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-provider"
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def adapter(base_url: str) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(base_url, "gpt-test", api_key="sk-1")


class TestStreaming:
    def test_chunks_are_stored_as_text_deltas_of_the_run_closed_by_the_final_text(
        self, arun: Runner, provider: tuple[str, Provider]
    ) -> None:
        async def body(hub: AsyncHub) -> Any:
            result = await SessionManager.arun_once(
                hub, adapter(provider[0]), "hello", adapter_opts={"stream": True}
            )
            return result, await hub.read(result.session_id)

        result, stored = arun(body)

        # Stored in order, the chunks joined per flush of the run's buffer.
        emitted = [(e.author, e.body) for e in result.events[1:-1]]
        deltas = [b.delta for _, b in emitted[:-1] if isinstance(b, TextDelta)]
        assert ("".join(CHUNKS), len(emitted) - 1, (OPENAI, Text("Hello there"))) == (
            "".join(deltas),
            len(deltas),
            emitted[-1],
        )
        assert {OPENAI} == {author for author, _ in emitted}
        assert {result.run_id} == {e.run_id for e in stored if e.run_id is not None}
        assert result.events == stored[-len(result.events) :]

    def test_a_streamed_request_asks_for_a_stream_with_usage(
        self, arun: Runner, provider: tuple[str, Provider]
    ) -> None:
        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(
                hub, adapter(provider[0]), "hello", adapter_opts={"stream": True}
            )

        result = arun(body)

        request = provider[1].requests[0]
        assert (True, {"include_usage": True}) == (request["stream"], request["stream_options"])
        assert USAGE == result.token_usage

    def test_the_loop_runs_while_the_stream_is_open(
        self, arun: Runner, provider: tuple[str, Provider]
    ) -> None:
        """The test's coroutine runs, and lets the server go on, mid-stream."""
        state = provider[1]
        state.gate = threading.Event()

        async def body(hub: AsyncHub) -> Any:
            task = asyncio.create_task(
                SessionManager.arun_once(
                    hub, adapter(provider[0]), "hello", adapter_opts={"stream": True}
                )
            )
            await asyncio.to_thread(state.first_sent.wait, 10)
            running = not task.done()
            assert state.gate is not None
            state.gate.set()
            return running, (await task).output

        assert (True, "Hello there") == arun(body)
        assert state.gate_opened

    def test_a_malformed_chunk_fails_the_run_with_a_provider_error(
        self, arun: Runner, provider: tuple[str, Provider]
    ) -> None:
        provider[1].garbage = True

        async def body(hub: AsyncHub) -> None:
            await SessionManager.arun_once(
                hub, adapter(provider[0]), "hello", adapter_opts={"stream": True}
            )

        with pytest.raises(RunFailed) as caught:
            arun(body)

        assert isinstance(caught.value.__cause__, ProviderError)


class TestPlain:
    def test_the_reply_is_stored_as_one_text_and_usage_as_token_usage(
        self, arun: Runner, provider: tuple[str, Provider]
    ) -> None:
        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(hub, adapter(provider[0]), "hello")

        result = arun(body)

        assert [(OPENAI, Text("Hi!"))] == [(e.author, e.body) for e in result.events[1:-1]]
        finished = result.events[-1].body
        assert isinstance(finished, RunFinished) and USAGE == finished.token_usage
        assert {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]} == (
            provider[1].requests[0]
        )

    def test_an_http_error_fails_the_run_with_a_provider_error(
        self, arun: Runner, provider: tuple[str, Provider]
    ) -> None:
        provider[1].status = 503

        async def body(hub: AsyncHub) -> None:
            await SessionManager.arun_once(hub, adapter(provider[0]), "hello")

        with pytest.raises(RunFailed) as caught:
            arun(body)

        cause = caught.value.__cause__
        assert isinstance(cause, ProviderError) and 503 == cause.status_code

    def test_an_unreachable_endpoint_fails_the_run_with_a_provider_error(
        self, arun: Runner
    ) -> None:
        async def body(hub: AsyncHub) -> None:
            await SessionManager.arun_once(
                hub, adapter("http://127.0.0.1:9/v1"), "hello", adapter_opts={"timeout": 2}
            )

        with pytest.raises(RunFailed) as caught:
            arun(body)

        assert isinstance(caught.value.__cause__, ProviderError)
