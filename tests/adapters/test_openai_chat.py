"""OpenAIChatAdapter end to end against a scripted chat-completions API on 127.0.0.1.

The runs go through ``SessionManager.run_once`` (the sync bridge) on a MemoryStore, and
through ``SessionManager.arun_once`` on an AsyncHub (in memory and on LMDB). What the HTTP
adapters share (the default deadline, a server that only sends keep-alive comments) is
specified once, for all three adapters, in ``test_http.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from sharedesk.actors.aio import AsyncHub
from sharedesk.adapters._http import FunctionTool
from sharedesk.adapters.openai_chat import OpenAIChatAdapter
from sharedesk.protocol.authors import Agent, Person
from sharedesk.protocol.errors import ProviderError, RunFailed, ValidationError
from sharedesk.protocol.events import Event, RunFinished, RunStarted, Text, TextDelta
from sharedesk.protocol.ports import EventStore
from sharedesk.runs import SessionManager
from tests.adapters.fake_http import FakeServer, Gate, Reply, fake_server, unused_url
from tests.aio.conftest import Runner

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
OPENAI = Agent(id="openai", label="openai")
DONE = b"data: [DONE]\n\n"
STREAM = {"stream": True}


def completion(content: str = "Hi!") -> Reply:
    """A plain chat completion answering ``content``, with :data:`USAGE`."""
    message = {"role": "assistant", "content": content}
    return Reply(json_body={"choices": [{"index": 0, "message": message}], "usage": USAGE})


def chunk(content: object) -> bytes:
    """One streamed chunk whose first choice's delta carries ``content``."""
    payload = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return f"data: {json.dumps(payload)}\n\n".encode()


def streamed(*pieces: Any) -> Reply:
    """A whole stream: a chunk per piece (a :class:`Gate` stays a gate), usage, ``[DONE]``."""
    events = [p if isinstance(p, Gate) else chunk(p) for p in pieces]
    usage = f"data: {json.dumps({'choices': [], 'usage': USAGE})}\n\n".encode()
    return Reply(events=[*events, usage, DONE])


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with fake_server() as running:
        yield running


def adapter(server: FakeServer, **options: Any) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(server.url, "gpt-test", **options)


def failure(store: EventStore, server: FakeServer, reply: Reply, stream: bool) -> RunFailed:
    """Run once against ``reply`` and return the run's failure."""
    server.replies.append(reply)
    with pytest.raises(RunFailed) as info:
        SessionManager.run_once(
            store, adapter(server), "hi", session_id="s1", adapter_opts={"stream": stream}
        )
    return info.value


def cause(failed: RunFailed) -> ProviderError:
    assert isinstance(failed.__cause__, ProviderError)
    return failed.__cause__


def replies_of_the_run(store: EventStore) -> list[Event]:
    """The texts the adapter stored in session ``s1`` (the run's input is not one)."""
    return [e for e in store.read("s1") if isinstance(e.body, Text) and e.author == OPENAI]


class TestPlain:
    def test_a_run_posts_to_chat_completions_with_the_bearer_key(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(completion())

        SessionManager.run_once(store, adapter(server, api_key="sk-1"), "hello")

        path, headers, _ = server.requests[0]
        assert ("/v1/chat/completions", "Bearer sk-1") == (path, headers["Authorization"])

    def test_the_request_carries_the_model_and_the_input_as_messages(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(completion())

        SessionManager.run_once(store, adapter(server), "hello")

        assert [{"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}] == (
            server.bodies()
        )

    def test_the_reply_is_stored_as_a_text_by_the_adapters_agent(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(completion("Hi!"))

        result = SessionManager.run_once(store, adapter(server), "hello")

        assert [(OPENAI, Text("Hi!"))] == [
            (e.author, e.body) for e in result.events if isinstance(e.body, Text)
        ]

    def test_the_reply_is_the_runs_output(self, store: EventStore, server: FakeServer) -> None:
        server.replies.append(completion("Hi!"))

        assert "Hi!" == SessionManager.run_once(store, adapter(server), "hello").output

    def test_the_reply_is_written_by_the_given_author(
        self, store: EventStore, server: FakeServer
    ) -> None:
        ada = Agent(id="ada", label="Ada")
        server.replies.append(completion())

        result = SessionManager.run_once(store, adapter(server, author=ada), "hello")

        assert [ada] == [e.author for e in result.events if isinstance(e.body, Text)]

    def test_usage_becomes_the_runs_token_usage_and_its_finish_records_it(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(completion())

        result = SessionManager.run_once(store, adapter(server), "hello")

        finished = result.events[-1].body
        assert isinstance(finished, RunFinished)
        assert (USAGE, USAGE) == (result.token_usage, finished.token_usage)

    def test_run_started_records_the_provider_and_model(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(completion())

        result = SessionManager.run_once(store, adapter(server), "hello")

        assert RunStarted(provider="openai", model="gpt-test") == result.events[0].body

    def test_sampling_options_are_passed_through_to_the_request(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(completion())
        opts = {"temperature": 0.1, "max_tokens": 5, "extra_body": {"user": "u1"}}

        SessionManager.run_once(store, adapter(server), "hello", adapter_opts=opts)

        body = server.bodies()[0]
        assert (0.1, 5, "u1") == (body["temperature"], body["max_tokens"], body["user"])


class TestReplay:
    def test_the_transcript_is_sent_before_the_input_with_peer_names(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies += [completion("Hi!"), completion()]
        SessionManager.run_once(store, adapter(server), "first", session_id="s1")
        store.append("s1", [Event(Person(id="p1", label="Alice"), Text("and me?"))])

        SessionManager.run_once(
            store, adapter(server), "second", session_id="s1", continuation="replay"
        )

        assert [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "and me?", "name": "Alice"},
            {"role": "user", "content": "second"},
        ] == server.bodies()[1]["messages"]

    def test_the_transcript_is_relative_to_the_adapters_author(
        self, store: EventStore, server: FakeServer
    ) -> None:
        ada = adapter(server, author=Agent(id="ada", label="Ada"))
        server.replies += [completion("Hi!"), completion()]
        SessionManager.run_once(store, ada, "first", session_id="s1")
        store.append("s1", [Event(Agent(id="bob", label="Bob"), Text("me too"))])

        SessionManager.run_once(store, ada, "second", session_id="s1", continuation="replay")

        # Ada's own reply is the assistant's; another agent's is a named user's.
        replayed = server.bodies()[1]["messages"][1:3]
        assert [("assistant", "Hi!", None), ("user", "me too", "Bob")] == [
            (m["role"], m["content"], m.get("name")) for m in replayed
        ]

    def test_the_system_prompt_is_the_first_message_before_the_replay(
        self, store: EventStore, server: FakeServer
    ) -> None:
        brief = adapter(server, system="Be brief.")
        server.replies += [completion("Hi!"), completion()]
        SessionManager.run_once(store, brief, "first", session_id="s1")

        SessionManager.run_once(store, brief, "second", session_id="s1", continuation="replay")

        assert [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "second"},
        ] == server.bodies()[1]["messages"]

    def test_a_streamed_reply_replays_as_one_assistant_message(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies += [streamed("Hel", "lo ", "there"), completion()]
        chat = adapter(server)
        SessionManager.run_once(store, chat, "first", session_id="s1", adapter_opts=STREAM)

        SessionManager.run_once(store, chat, "second", session_id="s1", continuation="replay")

        assert [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Hello there"},
            {"role": "user", "content": "second"},
        ] == server.bodies()[1]["messages"]


class TestStreamed:
    def test_chunks_are_stored_as_text_deltas_then_the_whole_text(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(streamed("Hel", "lo ", "there"))

        result = SessionManager.run_once(store, adapter(server), "hello", adapter_opts=STREAM)

        # The run stores the chunks in order, joined per flush (how many flushes depends
        # on how fast they arrive), then the whole text.
        stored = [e.body for e in result.events if isinstance(e.body, Text | TextDelta)]
        deltas = [b.delta for b in stored[:-1] if isinstance(b, TextDelta)]
        assert ("Hello there", len(stored) - 1, Text("Hello there")) == (
            "".join(deltas),
            len(deltas),
            stored[-1],
        )

    def test_the_whole_text_is_the_runs_output(self, store: EventStore, server: FakeServer) -> None:
        server.replies.append(streamed("Hel", "lo ", "there"))

        result = SessionManager.run_once(store, adapter(server), "hello", adapter_opts=STREAM)

        assert "Hello there" == result.output

    def test_a_streamed_request_asks_for_a_stream_with_usage(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(streamed("Hi"))

        SessionManager.run_once(store, adapter(server), "hello", adapter_opts=STREAM)

        body = server.bodies()[0]
        assert (True, {"include_usage": True}) == (body["stream"], body["stream_options"])

    def test_streamed_usage_becomes_the_runs_token_usage(
        self, store: EventStore, server: FakeServer
    ) -> None:
        server.replies.append(streamed("Hi"))

        result = SessionManager.run_once(store, adapter(server), "hello", adapter_opts=STREAM)

        assert USAGE == result.token_usage


#: Streams that end without ``[DONE]``: cut after two chunks, and a 200 with no body.
UNFINISHED = {"cut-before-done": [chunk("Hel"), chunk("lo")], "no-body": []}


class TestUnfinishedStream:
    @pytest.mark.parametrize("events", UNFINISHED.values(), ids=UNFINISHED.keys())
    def test_a_stream_that_ends_before_done_is_a_provider_error(
        self, store: EventStore, server: FakeServer, events: list[bytes]
    ) -> None:
        failed = failure(store, server, Reply(events=events), stream=True)

        assert ("ProviderError", "the stream ended before [DONE]") == (
            failed.error_code,
            cause(failed).detail,
        )

    @pytest.mark.parametrize("events", UNFINISHED.values(), ids=UNFINISHED.keys())
    def test_a_stream_that_ends_before_done_stores_no_reply(
        self, store: EventStore, server: FakeServer, events: list[bytes]
    ) -> None:
        failure(store, server, Reply(events=events), stream=True)

        assert [] == replies_of_the_run(store)


#: Chunks that are JSON but not chat-completion chunks.
MALFORMED_CHUNKS = {
    "choices-not-a-list": b'data: {"choices": 5}\n\n',
    "choice-not-an-object": b'data: {"choices": ["x"]}\n\n',
    "delta-not-an-object": b'data: {"choices": [{"delta": "x"}]}\n\n',
    "content-not-text": chunk(7),
    "usage-not-an-object": b'data: {"choices": [], "usage": 3}\n\n',
    "chunk-not-an-object": b"data: [1, 2]\n\n",
    "chunk-not-json": b"data: {not json\n\n",
}


class TestMalformed:
    @pytest.mark.parametrize("raw", [b"<html>", b""], ids=["not-json", "no-body"])
    def test_a_plain_answer_that_is_not_a_completion_is_a_provider_error(
        self, store: EventStore, server: FakeServer, raw: bytes
    ) -> None:
        failed = failure(store, server, Reply(raw=raw), stream=False)

        assert "malformed" in cause(failed).detail

    @pytest.mark.parametrize("body", MALFORMED_CHUNKS.values(), ids=MALFORMED_CHUNKS.keys())
    def test_a_malformed_chunk_is_a_provider_error(
        self, store: EventStore, server: FakeServer, body: bytes
    ) -> None:
        failed = failure(store, server, Reply(events=[body, DONE]), stream=True)

        assert "malformed" in cause(failed).detail

    def test_a_malformed_chunk_stores_no_reply(self, store: EventStore, server: FakeServer) -> None:
        failure(store, server, Reply(events=[chunk("Hel"), chunk(7), DONE]), stream=True)

        assert [] == replies_of_the_run(store)


class TestHttpFailures:
    def test_an_http_error_is_a_provider_error_with_its_status(
        self, store: EventStore, server: FakeServer
    ) -> None:
        overloaded = Reply(status=503, json_body={"error": {"message": "model overloaded"}})

        failed = failure(store, server, overloaded, stream=False)

        assert ("ProviderError", 503) == (failed.error_code, cause(failed).status_code)

    def test_an_unreachable_endpoint_is_a_provider_error_without_a_status(
        self, store: EventStore
    ) -> None:
        with pytest.raises(RunFailed) as info:
            SessionManager.run_once(store, OpenAIChatAdapter(unused_url(), "m"), "hello")

        assert None is cause(info.value).status_code


class TestConstruction:
    @pytest.mark.parametrize("args", [("", "m"), ("http://x", "")])
    def test_an_empty_base_url_or_model_is_refused(self, args: tuple[str, str]) -> None:
        with pytest.raises(ValidationError):
            OpenAIChatAdapter(*args)

    def test_a_system_prompt_that_is_not_a_str_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="system must be a str"):
            OpenAIChatAdapter("http://127.0.0.1:1/v1", "gpt-test", system=3)  # type: ignore[arg-type]

    def test_tools_are_refused(self) -> None:
        with pytest.raises(ValidationError):
            OpenAIChatAdapter("http://127.0.0.1:1", "m", tools=[FunctionTool("t", print)])

    def test_the_adapter_cannot_continue_natively(self) -> None:
        assert False is OpenAIChatAdapter("http://127.0.0.1:1", "m").native_continuation


class TestAsync:
    """The adapter driven by ``SessionManager.arun_once`` on an AsyncHub."""

    @pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
    def test_an_async_run_sends_the_request_a_sync_run_sends(
        self, arun: Runner, store: EventStore, server: FakeServer, stream: bool
    ) -> None:
        server.replies += [streamed("Hi") if stream else completion()] * 2
        opts = {"stream": stream}
        SessionManager.run_once(store, adapter(server), "hello", adapter_opts=opts)

        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(hub, adapter(server), "hello", adapter_opts=opts)

        arun(body)

        sync, async_ = server.bodies()
        assert sync == async_

    def test_the_plain_reply_is_stored_as_one_text_of_the_run(
        self, arun: Runner, server: FakeServer
    ) -> None:
        server.replies.append(completion("Hi!"))

        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(hub, adapter(server), "hello")

        result = arun(body)

        assert [(OPENAI, Text("Hi!"))] == [(e.author, e.body) for e in result.events[1:-1]]

    def test_the_plain_reply_usage_is_recorded_by_the_runs_finish(
        self, arun: Runner, server: FakeServer
    ) -> None:
        server.replies.append(completion())

        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(hub, adapter(server), "hello")

        finished = arun(body).events[-1].body

        assert isinstance(finished, RunFinished) and USAGE == finished.token_usage

    def test_chunks_are_stored_as_text_deltas_of_the_run_closed_by_the_final_text(
        self, arun: Runner, server: FakeServer
    ) -> None:
        server.replies.append(streamed("Hel", "lo ", "there"))

        async def body(hub: AsyncHub) -> Any:
            result = await SessionManager.arun_once(
                hub, adapter(server), "hello", adapter_opts=STREAM
            )
            return result, await hub.read(result.session_id)

        result, stored = arun(body)

        # Stored in order, the chunks joined per flush of the run's buffer.
        emitted = [(e.author, e.body) for e in result.events[1:-1]]
        deltas = [b.delta for _, b in emitted[:-1] if isinstance(b, TextDelta)]
        assert ("Hello there", len(emitted) - 1, (OPENAI, Text("Hello there"))) == (
            "".join(deltas),
            len(deltas),
            emitted[-1],
        )
        assert {OPENAI} == {author for author, _ in emitted}
        assert {result.run_id} == {e.run_id for e in stored if e.run_id is not None}
        assert result.events == stored[-len(result.events) :]

    def test_streamed_usage_becomes_the_runs_token_usage(
        self, arun: Runner, server: FakeServer
    ) -> None:
        server.replies.append(streamed("Hi"))

        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(
                hub, adapter(server), "hello", adapter_opts=STREAM
            )

        assert USAGE == arun(body).token_usage

    def test_the_loop_runs_while_the_stream_is_open(self, arun: Runner, server: FakeServer) -> None:
        """The test's coroutine runs, and lets the server go on, mid-stream."""
        gate = Gate()
        server.replies.append(streamed("Hel", gate, "lo ", "there"))

        async def body(hub: AsyncHub) -> Any:
            task = asyncio.create_task(
                SessionManager.arun_once(hub, adapter(server), "hello", adapter_opts=STREAM)
            )
            assert await asyncio.to_thread(gate.reached.wait, 10)
            running = not task.done()
            gate.opened.set()
            return running, (await task).output

        assert (True, "Hello there", True) == (*arun(body), gate.passed)

    def test_a_malformed_chunk_is_a_provider_error(self, arun: Runner, server: FakeServer) -> None:
        server.replies.append(Reply(events=[b"data: {not json\n\n"]))

        async def body(hub: AsyncHub) -> None:
            await SessionManager.arun_once(hub, adapter(server), "hello", adapter_opts=STREAM)

        with pytest.raises(RunFailed) as caught:
            arun(body)

        assert "malformed" in cause(caught.value).detail

    def test_an_http_error_is_a_provider_error_with_its_status(
        self, arun: Runner, server: FakeServer
    ) -> None:
        server.replies.append(Reply(status=503, json_body={"error": {"message": "overloaded"}}))

        async def body(hub: AsyncHub) -> None:
            await SessionManager.arun_once(hub, adapter(server), "hello")

        with pytest.raises(RunFailed) as caught:
            arun(body)

        assert 503 == cause(caught.value).status_code

    def test_an_unreachable_endpoint_is_a_provider_error_without_a_status(
        self, arun: Runner
    ) -> None:
        unreachable = OpenAIChatAdapter(unused_url(), "gpt-test")

        async def body(hub: AsyncHub) -> None:
            await SessionManager.arun_once(hub, unreachable, "hello")

        with pytest.raises(RunFailed) as caught:
            arun(body)

        assert None is cause(caught.value).status_code
