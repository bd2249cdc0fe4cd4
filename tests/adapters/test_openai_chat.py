"""OpenAIChatAdapter end to end against a real HTTP server on 127.0.0.1, sync and async."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sharedesk.actors.aio import AsyncHub
from sharedesk.adapters._http import FunctionTool
from sharedesk.adapters.openai_chat import OpenAIChatAdapter
from sharedesk.protocol.authors import Agent, Operator, Person
from sharedesk.protocol.errors import ProviderError, RunFailed, ValidationError
from sharedesk.protocol.events import Event, RunFinished, RunStarted, Text, TextDelta
from sharedesk.protocol.ports import EventStore
from sharedesk.runs import SessionManager
from tests.aio.conftest import Runner

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
CHUNKS = ["Hel", "lo ", "there"]


class FakeProvider:
    """What the loopback server received, and how it should answer."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.status = 200
        self.garbage = False
        #: The whole body of a streamed answer, when set (a cut or malformed stream).
        self.stream_body: bytes | None = None
        #: When set, a streamed answer sends its first chunk, sets ``first_sent`` and
        #: waits for ``gate`` (10 s at most; ``gate_opened`` says whether it was opened).
        self.gate: threading.Event | None = None
        self.first_sent = threading.Event()
        self.gate_opened = False


def make_handler(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            body = json.loads(self.rfile.read(length))
            provider.requests.append((self.path, dict(self.headers), body))
            if provider.status != 200:
                self.send_response(provider.status)
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "model overloaded"}}')
                return
            if provider.garbage:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"data: {not json\n\n" if body.get("stream") else b"<html>")
                return
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                if provider.stream_body is not None:
                    self.wfile.write(provider.stream_body)
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
            reply = {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"}}],
                "usage": USAGE,
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture
def provider() -> Iterator[tuple[str, FakeProvider]]:
    """A chat-completions server on 127.0.0.1 (a free port), shut down after the test."""
    state = FakeProvider()
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


class TestPlain:
    def test_a_run_posts_the_input_to_chat_completions_with_the_model_and_key(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        base_url, state = provider
        adapter = OpenAIChatAdapter(base_url, "gpt-test", api_key="sk-1")

        SessionManager.run_once(store, adapter, "hello", session_id="s1")

        path, headers, body = state.requests[0]
        assert "/v1/chat/completions" == path
        assert "Bearer sk-1" == headers["Authorization"]
        assert {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]} == body

    def test_the_reply_is_emitted_as_text_by_the_adapters_agent(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        result = SessionManager.run_once(
            store, OpenAIChatAdapter(provider[0], "gpt-test"), "hello", session_id="s1"
        )

        replies = [(e.author, e.body) for e in result.events if isinstance(e.body, Text)]
        assert [(Agent(id="openai", label="openai"), Text("Hi!"))] == replies
        assert "Hi!" == result.output

    def test_the_reply_is_written_by_the_adapters_author_and_the_replay_is_relative_to_it(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        base_url, state = provider
        ada = Agent(id="ada", label="Ada")
        adapter = OpenAIChatAdapter(base_url, "gpt-test", author=ada)
        first = SessionManager.run_once(store, adapter, "first", session_id="s1")
        store.append("s1", [Event(Agent(id="bob", label="Bob"), Text("me too"))])

        SessionManager.run_once(store, adapter, "second", session_id="s1", continuation="replay")

        assert [ada] == [e.author for e in first.events if isinstance(e.body, Text)]
        assert [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "me too", "name": "Bob"},
            {"role": "user", "content": "second"},
        ] == state.requests[1][2]["messages"]

    def test_usage_becomes_the_runs_token_usage(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        result = SessionManager.run_once(
            store, OpenAIChatAdapter(provider[0], "gpt-test"), "hello", session_id="s1"
        )

        finished = result.events[-1].body
        assert isinstance(finished, RunFinished)
        assert (USAGE, USAGE) == (result.token_usage, finished.token_usage)

    def test_run_started_records_the_model(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        result = SessionManager.run_once(
            store, OpenAIChatAdapter(provider[0], "gpt-test"), "hello", session_id="s1"
        )

        assert RunStarted(provider="openai", model="gpt-test") == result.events[0].body

    def test_the_replayed_transcript_is_sent_before_the_input_with_peer_names(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        base_url, state = provider
        adapter = OpenAIChatAdapter(base_url, "gpt-test")
        SessionManager.run_once(store, adapter, "first", session_id="s1")
        store.append("s1", [Event(Person(id="p1", label="Alice"), Text("and me?"))])

        SessionManager.run_once(store, adapter, "second", session_id="s1", continuation="replay")

        assert [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "and me?", "name": "Alice"},
            {"role": "user", "content": "second"},
        ] == state.requests[1][2]["messages"]

    def test_the_system_prompt_is_the_first_message_before_the_replay(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        base_url, state = provider
        adapter = OpenAIChatAdapter(base_url, "gpt-test", system="Be brief.")
        SessionManager.run_once(store, adapter, "first", session_id="s1")

        SessionManager.run_once(store, adapter, "second", session_id="s1", continuation="replay")

        assert [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "second"},
        ] == state.requests[1][2]["messages"]

    def test_a_system_prompt_that_is_not_a_str_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="system must be a str"):
            OpenAIChatAdapter("http://127.0.0.1:1/v1", "gpt-test", system=3)  # type: ignore[arg-type]

    def test_sampling_options_are_passed_through_to_the_request(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        base_url, state = provider

        SessionManager.run_once(
            store,
            OpenAIChatAdapter(base_url, "gpt-test"),
            "hello",
            adapter_opts={"temperature": 0.1, "max_tokens": 5, "extra_body": {"user": "u1"}},
        )

        body = state.requests[0][2]
        assert (0.1, 5, "u1") == (body["temperature"], body["max_tokens"], body["user"])

    def test_an_http_error_fails_the_run_with_a_provider_error(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        base_url, state = provider
        state.status = 503

        with pytest.raises(RunFailed) as info:
            SessionManager.run_once(store, OpenAIChatAdapter(base_url, "gpt-test"), "hello")

        assert "ProviderError" == info.value.error_code
        assert isinstance(info.value.__cause__, ProviderError)
        assert 503 == info.value.__cause__.status_code

    def test_an_unreachable_endpoint_fails_the_run_with_a_provider_error(
        self, store: EventStore
    ) -> None:
        with socket.socket() as probe:  # a loopback port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        closed_port_url = f"http://127.0.0.1:{port}/v1"

        with pytest.raises(RunFailed) as info:
            SessionManager.run_once(store, OpenAIChatAdapter(closed_port_url, "m"), "hello")

        assert isinstance(info.value.__cause__, ProviderError)
        assert None is info.value.__cause__.status_code


class TestMalformed:
    @pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
    def test_a_malformed_response_fails_the_run_with_a_provider_error(
        self, store: EventStore, provider: tuple[str, FakeProvider], stream: bool
    ) -> None:
        base_url, state = provider
        state.garbage = True

        with pytest.raises(RunFailed) as info:
            SessionManager.run_once(
                store, OpenAIChatAdapter(base_url, "m"), "hello", adapter_opts={"stream": stream}
            )

        assert isinstance(info.value.__cause__, ProviderError)
        assert "malformed" in info.value.__cause__.detail


def chunk(content: object) -> bytes:
    payload = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return f"data: {json.dumps(payload)}\n\n".encode()


class TestStreamFaults:
    @pytest.mark.parametrize(
        "stream_body",
        [chunk("Hel") + chunk("lo"), b""],
        ids=["cut-before-done", "no-body"],
    )
    def test_a_stream_that_ends_before_done_fails_the_run_and_records_no_reply(
        self, store: EventStore, provider: tuple[str, FakeProvider], stream_body: bytes
    ) -> None:
        base_url, state = provider
        state.stream_body = stream_body

        with pytest.raises(RunFailed) as info:
            SessionManager.run_once(
                store, OpenAIChatAdapter(base_url, "m"), "hi", session_id="s1",
                adapter_opts={"stream": True},
            )  # fmt: skip

        assert isinstance(info.value.__cause__, ProviderError)
        assert "the stream ended before [DONE]" == info.value.__cause__.detail
        assert [] == [e for e in store.read("s1") if isinstance(e.body, Text) and e.run_id
                      and e.author != Operator()]  # fmt: skip

    @pytest.mark.parametrize(
        "stream_body",
        [
            b'data: {"choices": 5}\n\n',
            b'data: {"choices": ["x"]}\n\n',
            b'data: {"choices": [{"delta": "x"}]}\n\n',
            chunk(7),
            b'data: {"choices": [], "usage": 3}\n\n',
            b"data: [1, 2]\n\n",
        ],
        ids=["choices-not-a-list", "choice-not-an-object", "delta-not-an-object",
             "content-not-text", "usage-not-an-object", "chunk-not-an-object"],
    )  # fmt: skip
    def test_a_malformed_chunk_fails_the_run_with_a_provider_error(
        self, store: EventStore, provider: tuple[str, FakeProvider], stream_body: bytes
    ) -> None:
        base_url, state = provider
        state.stream_body = stream_body + b"data: [DONE]\n\n"

        with pytest.raises(RunFailed) as info:
            SessionManager.run_once(
                store, OpenAIChatAdapter(base_url, "m"), "hi", adapter_opts={"stream": True}
            )

        assert isinstance(info.value.__cause__, ProviderError)
        assert "malformed" in info.value.__cause__.detail


class TestStreamed:
    def test_streamed_chunks_are_emitted_as_text_deltas_then_the_whole_text(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        result = SessionManager.run_once(
            store,
            OpenAIChatAdapter(provider[0], "gpt-test"),
            "hello",
            session_id="s1",
            adapter_opts={"stream": True},
        )

        # The run stores the chunks in order, joined per flush (how many flushes depends
        # on how fast they arrive), then the whole text.
        stored = [e.body for e in result.events if isinstance(e.body, Text | TextDelta)]
        deltas = [b.delta for b in stored[:-1] if isinstance(b, TextDelta)]
        assert ("Hello there", len(stored) - 1, Text("Hello there")) == (
            "".join(deltas),
            len(deltas),
            stored[-1],
        )
        assert "Hello there" == result.output

    def test_a_streamed_request_asks_for_a_stream_with_usage(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        base_url, state = provider

        SessionManager.run_once(
            store, OpenAIChatAdapter(base_url, "gpt-test"), "hello", adapter_opts={"stream": True}
        )

        body = state.requests[0][2]
        assert (True, {"include_usage": True}) == (body["stream"], body["stream_options"])

    def test_streamed_usage_becomes_the_runs_token_usage(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        result = SessionManager.run_once(
            store,
            OpenAIChatAdapter(provider[0], "gpt-test"),
            "hello",
            adapter_opts={"stream": True},
        )

        assert USAGE == result.token_usage

    def test_a_streamed_reply_replays_as_one_assistant_message(
        self, store: EventStore, provider: tuple[str, FakeProvider]
    ) -> None:
        base_url, state = provider
        adapter = OpenAIChatAdapter(base_url, "gpt-test")
        SessionManager.run_once(
            store, adapter, "first", session_id="s1", adapter_opts={"stream": True}
        )

        SessionManager.run_once(store, adapter, "second", session_id="s1", continuation="replay")

        assert [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Hello there"},
            {"role": "user", "content": "second"},
        ] == state.requests[1][2]["messages"]


class TestConstruction:
    @pytest.mark.parametrize("args", [("", "m"), ("http://x", "")])
    def test_an_empty_base_url_or_model_is_refused(self, args: tuple[str, str]) -> None:
        with pytest.raises(ValidationError):
            OpenAIChatAdapter(*args)

    def test_tools_are_refused(self) -> None:
        with pytest.raises(ValidationError):
            OpenAIChatAdapter("http://127.0.0.1:1", "m", tools=[FunctionTool("t", print)])

    def test_the_adapter_cannot_continue_natively(self) -> None:
        assert False is OpenAIChatAdapter("http://127.0.0.1:1", "m").native_continuation


OPENAI = Agent(id="openai", label="openai")


def adapter(base_url: str) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(base_url, "gpt-test", api_key="sk-1")


class TestAsyncStreaming:
    def test_chunks_are_stored_as_text_deltas_of_the_run_closed_by_the_final_text(
        self, arun: Runner, provider: tuple[str, FakeProvider]
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
        self, arun: Runner, provider: tuple[str, FakeProvider]
    ) -> None:
        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(
                hub, adapter(provider[0]), "hello", adapter_opts={"stream": True}
            )

        result = arun(body)

        request = provider[1].requests[0][2]
        assert (True, {"include_usage": True}) == (request["stream"], request["stream_options"])
        assert USAGE == result.token_usage

    def test_the_loop_runs_while_the_stream_is_open(
        self, arun: Runner, provider: tuple[str, FakeProvider]
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
        self, arun: Runner, provider: tuple[str, FakeProvider]
    ) -> None:
        provider[1].garbage = True

        async def body(hub: AsyncHub) -> None:
            await SessionManager.arun_once(
                hub, adapter(provider[0]), "hello", adapter_opts={"stream": True}
            )

        with pytest.raises(RunFailed) as caught:
            arun(body)

        assert isinstance(caught.value.__cause__, ProviderError)


class TestAsyncPlain:
    def test_the_reply_is_stored_as_one_text_and_usage_as_token_usage(
        self, arun: Runner, provider: tuple[str, FakeProvider]
    ) -> None:
        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(hub, adapter(provider[0]), "hello")

        result = arun(body)

        assert [(OPENAI, Text("Hi!"))] == [(e.author, e.body) for e in result.events[1:-1]]
        finished = result.events[-1].body
        assert isinstance(finished, RunFinished) and USAGE == finished.token_usage
        assert {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]} == (
            provider[1].requests[0][2]
        )

    def test_an_http_error_fails_the_run_with_a_provider_error(
        self, arun: Runner, provider: tuple[str, FakeProvider]
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
