"""OpenAIResponsesAdapter end to end against a scripted Responses API on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sharedesk.actors.aio import AsyncHub
from sharedesk.adapters._http import FunctionTool
from sharedesk.adapters.openai_responses import OpenAIResponsesAdapter
from sharedesk.adapters.render import to_responses_input
from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol.authors import Agent, Person
from sharedesk.protocol.errors import ProviderError, RunFailed, ValidationError
from sharedesk.protocol.events import (
    Event,
    RunStarted,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
)
from sharedesk.runs import SessionManager
from tests.adapters.fake_http import Desk, FakeServer, Reply, fake_server, unused_url

USAGE = {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
AGENT = Agent(id="openai-responses", label="openai-responses")


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def response(rid: str, *output: dict[str, Any]) -> dict[str, Any]:
    return {"id": rid, "object": "response", "status": "completed", "output": list(output),
            "usage": USAGE, "error": None}  # fmt: skip


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}  # fmt: skip


def streamed(rid: str, *chunks: str) -> list[Any]:
    """The SSE events of a streamed text response."""
    text = "".join(chunks)
    events: list[Any] = [
        {"type": "response.created",
         "response": {"id": rid, "output": [], "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}},
    ]  # fmt: skip
    events += [
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "delta": chunk}
        for chunk in chunks
    ]  # fmt: skip
    events.append({"type": "response.output_text.done", "item_id": "msg_1", "text": text})
    events.append({"type": "response.completed", "response": response(rid, message(text))})
    return events


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with fake_server() as running:
        yield running


@pytest.fixture
def desk() -> Iterator[Desk]:
    opened = Desk()
    yield opened
    opened.close()


def execute(
    adapter: OpenAIResponsesAdapter, desk: Desk, text: str, opts: dict[str, Any] | None = None,
    **context: Any,
) -> Any:  # fmt: skip
    session = desk.session(**context)
    return asyncio.run(adapter.aexecute(desk.run(text), session, desk.emit, opts or {}))


class TestPlain:
    def test_a_run_posts_its_input_to_responses_with_the_model_and_key(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(json_body=response("resp_1", message("Hi!"))))

        execute(OpenAIResponsesAdapter(server.url, "gpt-test", api_key="sk-1"), desk, "hello")

        path, headers, body = server.requests[0]
        assert ("/v1/responses", "Bearer sk-1") == (path, headers["Authorization"])
        assert {"model": "gpt-test", "input": [{"role": "user", "content": "hello"}]} == body

    def test_the_reply_is_a_text_and_the_response_id_is_recorded_as_the_provider_session(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(json_body=response("resp_1", message("Hi!"))))

        result = execute(OpenAIResponsesAdapter(server.url, "gpt-test"), desk, "hello")

        assert [
            Text("Hi!"),
            RunStarted(provider="openai-responses", model="gpt-test", provider_session_id="resp_1"),
        ] == desk.bodies()
        assert [AGENT, AGENT] == [e.author for e in desk.emitted]
        assert ("Hi!", USAGE) == (result.output, result.token_usage)

    def test_a_given_transport_answers_in_place_of_the_network(self, desk: Desk) -> None:
        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, json=response("resp_9", message("mocked")))

        adapter = OpenAIResponsesAdapter(
            "http://nowhere.invalid/v1", "m", transport=httpx.MockTransport(answer)
        )

        assert "mocked" == execute(adapter, desk, "hi").output

    def test_the_system_prompt_is_sent_as_instructions(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(json_body=response("resp_1", message("Hi!"))))

        execute(OpenAIResponsesAdapter(server.url, "m", system="Be brief."), desk, "hi")

        assert "Be brief." == server.bodies()[0]["instructions"]


class TestContinuation:
    def test_native_continuation_sends_only_the_input_after_the_stored_response(
        self, server: FakeServer, desk: Desk
    ) -> None:
        adapter = OpenAIResponsesAdapter(server.url, "gpt-test")
        server.replies += [
            Reply(json_body=response("resp_1", message("Hi!"))),
            Reply(json_body=response("resp_2", message("Again!"))),
        ]
        execute(adapter, desk, "first")

        execute(adapter, desk, "second", continuation="native")

        second = server.bodies()[1]
        assert ("resp_1", [{"role": "user", "content": "second"}]) == (
            second["previous_response_id"],
            second["input"],
        )
        assert (
            "resp_2"
            == desk.session().metadata["provider_sessions"]["openai-responses"][
                "provider_session_id"
            ]
        )

    def test_replay_sends_the_viewer_relative_transcript_before_the_input(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(json_body=response("resp_1", message("ok"))))
        events = [
            Event(Person(id="alice", label="Alice"), Text("hello"), sequence=1),
            Event(AGENT, Text("hi Alice"), sequence=2),
            Event(AGENT, ToolCall("c1", "lookup", {"q": 1}), sequence=3),
            Event(AGENT, ToolResult("c1", {"found": True}), sequence=4),
        ]
        transcript = TranscriptBuilder.from_events(events, session_id="s1", viewer=AGENT)

        execute(OpenAIResponsesAdapter(server.url, "m"), desk, "next", continuation="replay",
                transcript=transcript)  # fmt: skip

        assert [
            {"role": "user", "content": "[Alice] hello"},
            {"role": "assistant", "content": "hi Alice"},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": 1}'},
            {"type": "function_call_output", "call_id": "c1", "output": '{"found": true}'},
            {"role": "user", "content": "next"},
        ] == server.bodies()[0]["input"]

    def test_a_call_without_its_result_is_not_rendered(self) -> None:
        events = [Event(AGENT, ToolCall("c1", "lookup", {}), sequence=1)]
        transcript = TranscriptBuilder.from_events(events, session_id="s1", viewer=AGENT)

        assert [] == to_responses_input(transcript)

    def test_the_adapter_can_continue_natively(self) -> None:
        assert OpenAIResponsesAdapter("http://127.0.0.1:1", "m").native_continuation


class TestStreamed:
    def test_deltas_are_emitted_as_they_arrive_then_the_whole_text(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(events=streamed("resp_1", "Hel", "lo ", "there")))

        result = execute(OpenAIResponsesAdapter(server.url, "m"), desk, "hi", {"stream": True})

        assert [TextDelta("Hel"), TextDelta("lo "), TextDelta("there"), Text("Hello there")] == [
            b for b in desk.bodies() if isinstance(b, Text | TextDelta)
        ]
        assert (True, "Hello there", USAGE) == (
            server.bodies()[0]["stream"],
            result.output,
            result.token_usage,
        )

    def test_a_streamed_reply_replays_as_one_assistant_message(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(events=streamed("resp_1", "Hel", "lo")))
        execute(OpenAIResponsesAdapter(server.url, "m"), desk, "hi", {"stream": True})

        transcript = TranscriptBuilder.from_events(
            desk.store.read("s1"), session_id="s1", viewer=AGENT
        )

        assert [("assistant", "Hello")] == [(m.role, m.content) for m in transcript.messages]

    def test_an_error_event_fails_with_a_provider_error(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(
            Reply(events=[{"type": "error", "code": "server_error", "message": "boom"}])
        )

        with pytest.raises(ProviderError, match="boom"):
            execute(OpenAIResponsesAdapter(server.url, "m"), desk, "hi", {"stream": True})
        assert [] == desk.emitted


class TestTools:
    def test_a_function_call_is_run_and_its_output_sent_back_on_the_same_response_chain(
        self, server: FakeServer, desk: Desk
    ) -> None:
        weather = FunctionTool("weather", lambda city: {"city": city, "sky": "clear"})
        server.replies += [
            Reply(json_body=response("resp_1", call("c1", "weather", '{"city": "Paris"}'))),
            Reply(json_body=response("resp_2", message("Clear in Paris."))),
        ]

        result = execute(OpenAIResponsesAdapter(server.url, "m", tools=[weather]), desk, "sky?")

        assert [
            ToolCall("c1", "weather", {"city": "Paris"}),
            ToolResult("c1", {"city": "Paris", "sky": "clear"}),
            Text("Clear in Paris."),
            RunStarted(provider="openai-responses", model="m", provider_session_id="resp_2"),
        ] == desk.bodies()
        second = server.bodies()[1]
        assert "resp_1" == second["previous_response_id"]
        assert [
            {"type": "function_call_output", "call_id": "c1",
             "output": '{"city": "Paris", "sky": "clear"}'}
        ] == second["input"]  # fmt: skip
        assert ("Clear in Paris.", 2 * USAGE["total_tokens"]) == (
            result.output,
            result.token_usage["total_tokens"],
        )

    def test_the_tools_are_declared_in_the_request(self, server: FakeServer, desk: Desk) -> None:
        tool = FunctionTool("weather", lambda: None, "Sky", {"type": "object"})
        server.replies.append(Reply(json_body=response("resp_1", message("ok"))))

        execute(OpenAIResponsesAdapter(server.url, "m", tools=[tool]), desk, "hi")

        assert [{"type": "function", "name": "weather", "description": "Sky",
                 "parameters": {"type": "object"}}] == server.bodies()[0]["tools"]  # fmt: skip

    def test_an_unknown_tool_gives_an_error_result(self, server: FakeServer, desk: Desk) -> None:
        server.replies += [
            Reply(json_body=response("resp_1", call("c1", "nope", "{}"))),
            Reply(json_body=response("resp_2", message("Sorry."))),
        ]

        execute(OpenAIResponsesAdapter(server.url, "m"), desk, "hi")

        assert ToolResult("c1", "no tool named 'nope'", is_error=True) == desk.bodies()[1]


class TestErrors:
    def test_429_gives_a_provider_error_with_its_retry_after_and_nothing_on_the_desk(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(
            Reply(status=429, json_body={"error": {"message": "slow down"}},
                  headers={"retry-after": "2"})
        )  # fmt: skip

        with pytest.raises(ProviderError) as info:
            execute(OpenAIResponsesAdapter(server.url, "m"), desk, "hi")

        assert (429, 2.0) == (info.value.status_code, info.value.retry_after)
        assert [] == desk.emitted

    @pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
    def test_500_gives_a_provider_error_and_nothing_on_the_desk(
        self, server: FakeServer, desk: Desk, stream: bool
    ) -> None:
        server.replies.append(Reply(status=500, json_body={"error": {"message": "oops"}}))

        with pytest.raises(ProviderError) as info:
            execute(OpenAIResponsesAdapter(server.url, "m"), desk, "hi", {"stream": stream})

        assert (500, None) == (info.value.status_code, info.value.retry_after)
        assert [] == desk.emitted

    @pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
    def test_malformed_json_gives_a_provider_error_and_nothing_on_the_desk(
        self, server: FakeServer, desk: Desk, stream: bool
    ) -> None:
        reply = Reply(events=[b"data: {not json\n\n"]) if stream else Reply(raw=b"<html>")
        server.replies.append(reply)

        with pytest.raises(ProviderError, match="malformed"):
            execute(OpenAIResponsesAdapter(server.url, "m"), desk, "hi", {"stream": stream})
        assert [] == desk.emitted

    def test_an_unreachable_endpoint_gives_a_provider_error_without_status(
        self, desk: Desk
    ) -> None:
        with pytest.raises(ProviderError) as info:
            execute(OpenAIResponsesAdapter(unused_url(), "m"), desk, "hi")

        assert None is info.value.status_code

    @pytest.mark.parametrize("args", [("", "m"), ("http://x", "")])
    def test_an_empty_base_url_or_model_is_refused(self, args: tuple[str, str]) -> None:
        with pytest.raises(ValidationError):
            OpenAIResponsesAdapter(*args)


class TestThroughTheManager:
    """The adapter driven by ``SessionManager.arun_once`` on an AsyncHub."""

    def test_auto_continues_natively_once_a_response_id_is_stored(
        self, server: FakeServer, hub: AsyncHub
    ) -> None:
        adapter = OpenAIResponsesAdapter(server.url, "m")
        server.replies += [
            Reply(json_body=response("resp_1", message("one"))),
            Reply(json_body=response("resp_2", message("two"))),
        ]

        async def scenario() -> None:
            await SessionManager.arun_once(
                hub, adapter, "first", session_id="d", continuation="auto"
            )
            await SessionManager.arun_once(
                hub, adapter, "second", session_id="d", continuation="auto"
            )

        asyncio.run(scenario())

        first, second = server.bodies()
        assert ("previous_response_id" in first, second.get("previous_response_id")) == (
            False,
            "resp_1",
        )
        assert [{"role": "user", "content": "second"}] == second["input"]

    def test_native_continuation_is_accepted_and_the_run_records_its_provider_session(
        self, server: FakeServer, hub: AsyncHub
    ) -> None:
        adapter = OpenAIResponsesAdapter(server.url, "m")
        server.replies += [
            Reply(json_body=response("resp_1", message("one"))),
            Reply(events=streamed("resp_2", "t", "wo")),
        ]

        async def scenario() -> Any:
            await SessionManager.arun_once(hub, adapter, "first", session_id="d")
            return await SessionManager.arun_once(
                hub, adapter, "second", session_id="d", continuation="native",
                adapter_opts={"stream": True},
            )  # fmt: skip

        result = asyncio.run(scenario())

        assert "resp_1" == server.bodies()[1]["previous_response_id"]
        *chunks, final = [e.body for e in result.events if isinstance(e.body, Text | TextDelta)]
        # The run stores its chunks joined per flush; the text and its order are what count.
        assert (["two"], Text("two")) == (
            ["".join(c.delta for c in chunks if isinstance(c, TextDelta))],
            final,
        )
        assert all(isinstance(c, TextDelta) for c in chunks)
        assert "resp_2" == SessionManager.get_run(hub.hub, result.run_id).provider_session_id

    def test_a_provider_error_fails_the_run_and_leaves_only_its_lifecycle_on_the_desk(
        self, server: FakeServer, hub: AsyncHub
    ) -> None:
        server.replies.append(Reply(status=429, headers={"retry-after": "1"}, json_body={}))

        async def scenario() -> list[Event]:
            with pytest.raises(RunFailed) as info:
                await SessionManager.arun_once(
                    hub, OpenAIResponsesAdapter(server.url, "m"), "hi", session_id="d"
                )
            assert isinstance(info.value.__cause__, ProviderError)
            assert 1.0 == info.value.__cause__.retry_after
            return await hub.read("d")

        bodies = [type(e.body).__name__ for e in asyncio.run(scenario())]

        assert ["Text", "RunStarted", "RunFinished"] == bodies
