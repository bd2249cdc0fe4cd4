"""AnthropicMessagesAdapter end to end against a scripted Messages API on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sharedesk.actors.aio import AsyncHub
from sharedesk.adapters._http import FunctionTool
from sharedesk.adapters.anthropic import ANTHROPIC_VERSION, AnthropicMessagesAdapter
from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol.authors import Agent, Person, System
from sharedesk.protocol.errors import ProviderError, RunFailed
from sharedesk.protocol.events import Event, Text, TextDelta, ToolCall, ToolResult
from sharedesk.runs import SessionManager
from tests.adapters.fake_http import Desk, FakeServer, Reply, fake_server

AGENT = Agent(id="anthropic", label="anthropic")
USAGE = {"input_tokens": 9, "output_tokens": 4}


def message(*content: dict[str, Any], stop: str = "end_turn") -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": list(content), "stop_reason": stop, "usage": USAGE}  # fmt: skip


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(use_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": tool_input}


def streamed_text(*chunks: str) -> list[Any]:
    """The SSE events of a streamed text message, as the API sends them."""
    start = {**message(), "content": [], "stop_reason": None,
             "usage": {"input_tokens": 9, "output_tokens": 1}}  # fmt: skip
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": text("")},
        {"type": "ping"},
        *(
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": chunk}}
            for chunk in chunks
        ),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 4}},
        {"type": "message_stop"},
    ]  # fmt: skip


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
    adapter: AnthropicMessagesAdapter, desk: Desk, prompt: str,
    opts: dict[str, Any] | None = None, **context: Any,
) -> Any:  # fmt: skip
    session = desk.session(**context)
    return asyncio.run(adapter.aexecute(desk.run(prompt), session, desk.emit, opts or {}))


class TestPlain:
    def test_a_run_posts_to_messages_with_key_version_model_and_max_tokens(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(json_body=message(text("Hi!"))))

        execute(AnthropicMessagesAdapter(server.url, "claude-test", api_key="k"), desk, "hello")

        path, headers, body = server.requests[0]
        assert ("/v1/messages", "k", ANTHROPIC_VERSION) == (
            path,
            headers["x-api-key"],
            headers["anthropic-version"],
        )
        assert {
            "model": "claude-test",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
        } == body

    def test_the_reply_is_a_text_by_the_adapters_author_with_its_usage(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(json_body=message(text("Hi!"))))

        result = execute(AnthropicMessagesAdapter(server.url, "m"), desk, "hello")

        assert [(AGENT, Text("Hi!"))] == [(e.author, e.body) for e in desk.emitted]
        assert ("Hi!", USAGE) == (result.output, result.token_usage)

    def test_the_system_prompt_joins_the_adapters_and_the_inputs(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(json_body=message(text("ok"))))
        adapter = AnthropicMessagesAdapter(server.url, "m", system="Be brief.")
        run = desk.run("hi")
        run = type(run)(id=run.id, session_id=run.session_id, status=run.status,
                        input=[{"role": "system", "content": "Say ok."}, *run.input])  # fmt: skip

        asyncio.run(adapter.aexecute(run, desk.session(), desk.emit, {}))

        assert "Be brief.\n\nSay ok." == server.bodies()[0]["system"]

    def test_a_given_transport_answers_in_place_of_the_network(self, desk: Desk) -> None:
        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, json=message(text("mocked")))

        adapter = AnthropicMessagesAdapter(
            "http://nowhere.invalid/v1", "m", transport=httpx.MockTransport(answer)
        )

        assert "mocked" == execute(adapter, desk, "hi").output

    def test_the_adapter_cannot_continue_natively(self) -> None:
        assert not AnthropicMessagesAdapter("http://127.0.0.1:1", "m").native_continuation


class TestReplay:
    def test_the_transcript_is_rendered_as_the_renderer_does_with_the_input_last(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(json_body=message(text("ok"))))
        events = [
            Event(System(kind="prompt", label="system"), Text("You are billing."), sequence=1),
            Event(Person(id="alice", label="Alice"), Text("I was charged twice"), sequence=2),
            Event(AGENT, Text("Let me look."), sequence=3),
            Event(Agent(id="triage", label="Triage"), Text("She is a VIP."), sequence=4),
        ]
        transcript = TranscriptBuilder.from_events(events, session_id="s1", viewer=AGENT)

        execute(AnthropicMessagesAdapter(server.url, "m"), desk, "go on", transcript=transcript)

        body = server.bodies()[0]
        assert "You are billing." == body["system"]
        assert [
            {"role": "user", "content": [text("[Alice] I was charged twice")]},
            {"role": "assistant", "content": [text("Let me look.")]},
            {"role": "user", "content": [text("[Triage] She is a VIP."), text("go on")]},
        ] == body["messages"]


class TestStreamed:
    def test_text_deltas_are_emitted_as_they_arrive_then_the_whole_text(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(Reply(events=streamed_text("Hel", "lo ", "there")))

        result = execute(AnthropicMessagesAdapter(server.url, "m"), desk, "hi", {"stream": True})

        assert [TextDelta("Hel"), TextDelta("lo "), TextDelta("there"), Text("Hello there")] == [
            e.body for e in desk.emitted
        ]
        assert (True, "Hello there", USAGE) == (
            server.bodies()[0]["stream"],
            result.output,
            result.token_usage,
        )

    def test_a_streamed_tool_use_is_assembled_from_its_json_deltas(
        self, server: FakeServer, desk: Desk
    ) -> None:
        start = {**message(), "content": [], "stop_reason": None}
        events: list[Any] = [
            {"type": "message_start", "message": start},
            {"type": "content_block_start", "index": 0,
             "content_block": tool_use("toolu_1", "weather", {})},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "input_json_delta", "partial_json": '{"city": "Pa'}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "input_json_delta", "partial_json": 'ris"}'}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
            {"type": "message_stop"},
        ]  # fmt: skip
        server.replies += [Reply(events=events), Reply(events=streamed_text("Sunny."))]
        weather = FunctionTool("weather", lambda city: f"sunny in {city}")

        execute(AnthropicMessagesAdapter(server.url, "m", tools=[weather]), desk, "sky?",
                {"stream": True})  # fmt: skip

        assert [
            ToolCall("toolu_1", "weather", {"city": "Paris"}),
            ToolResult("toolu_1", "sunny in Paris"),
        ] == [e.body for e in desk.emitted][:2]

    def test_an_error_event_fails_with_a_provider_error(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(
            Reply(events=[{"type": "error",
                           "error": {"type": "overloaded_error", "message": "Overloaded"}}])
        )  # fmt: skip

        with pytest.raises(ProviderError, match="Overloaded"):
            execute(AnthropicMessagesAdapter(server.url, "m"), desk, "hi", {"stream": True})
        assert [] == desk.emitted


class TestTools:
    def test_a_tool_use_is_run_and_its_result_sent_back_as_a_tool_result_turn(
        self, server: FakeServer, desk: Desk
    ) -> None:
        weather = FunctionTool("weather", lambda city: {"sky": "clear"}, "Sky", {"type": "object"})
        first = message(text("Checking."), tool_use("toolu_1", "weather", {"city": "Paris"}),
                        stop="tool_use")  # fmt: skip
        server.replies += [Reply(json_body=first), Reply(json_body=message(text("Clear.")))]

        result = execute(AnthropicMessagesAdapter(server.url, "m", tools=[weather]), desk, "sky?")

        assert [
            Text("Checking."),
            ToolCall("toolu_1", "weather", {"city": "Paris"}),
            ToolResult("toolu_1", {"sky": "clear"}),
            Text("Clear."),
        ] == [e.body for e in desk.emitted]
        first_body, second_body = server.bodies()
        assert [{"name": "weather", "description": "Sky", "input_schema": {"type": "object"}}] == (
            first_body["tools"]
        )
        assert [
            {"role": "user", "content": [text("sky?")]},
            {"role": "assistant", "content": first["content"]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"sky": "clear"}'}
            ]},
        ] == second_body["messages"]  # fmt: skip
        assert ("Clear.", {"input_tokens": 18, "output_tokens": 8}) == (
            result.output,
            result.token_usage,
        )

    def test_a_failing_tool_gives_an_error_result_and_the_run_goes_on(
        self, server: FakeServer, desk: Desk
    ) -> None:
        def broken() -> None:
            raise RuntimeError("no sky")

        first = message(tool_use("toolu_1", "weather", {}), stop="tool_use")
        server.replies += [Reply(json_body=first), Reply(json_body=message(text("Sorry.")))]

        execute(AnthropicMessagesAdapter(server.url, "m", tools=[FunctionTool("weather", broken)]),
                desk, "sky?")  # fmt: skip

        assert ToolResult("toolu_1", "RuntimeError: no sky", is_error=True) == (
            desk.emitted[1].body
        )
        assert True is server.bodies()[1]["messages"][-1]["content"][0]["is_error"]


class TestErrors:
    def test_429_gives_a_provider_error_with_its_retry_after_and_nothing_on_the_desk(
        self, server: FakeServer, desk: Desk
    ) -> None:
        server.replies.append(
            Reply(status=429, headers={"retry-after": "7"},
                  json_body={"type": "error", "error": {"type": "rate_limit_error",
                                                        "message": "slow down"}})
        )  # fmt: skip

        with pytest.raises(ProviderError) as info:
            execute(AnthropicMessagesAdapter(server.url, "m"), desk, "hi")

        assert (429, 7.0) == (info.value.status_code, info.value.retry_after)
        assert "rate_limit_error" in info.value.detail
        assert [] == desk.emitted

    @pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
    def test_500_gives_a_provider_error_and_nothing_on_the_desk(
        self, server: FakeServer, desk: Desk, stream: bool
    ) -> None:
        server.replies.append(Reply(status=500, json_body={"type": "error"}))

        with pytest.raises(ProviderError) as info:
            execute(AnthropicMessagesAdapter(server.url, "m"), desk, "hi", {"stream": stream})

        assert 500 == info.value.status_code
        assert [] == desk.emitted

    @pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
    def test_malformed_json_gives_a_provider_error_and_nothing_on_the_desk(
        self, server: FakeServer, desk: Desk, stream: bool
    ) -> None:
        reply = Reply(events=[b"event: message_start\ndata: {oops\n\n"]) if stream else (
            Reply(raw=b"not json")
        )  # fmt: skip
        server.replies.append(reply)

        with pytest.raises(ProviderError, match="malformed"):
            execute(AnthropicMessagesAdapter(server.url, "m"), desk, "hi", {"stream": stream})
        assert [] == desk.emitted


class TestThroughTheManager:
    """The adapter driven by ``SessionManager.arun_once`` on an AsyncHub."""

    def test_replay_names_the_peers_of_the_desk(self, server: FakeServer, hub: AsyncHub) -> None:
        server.replies.append(Reply(events=streamed_text("Noted.")))
        adapter = AnthropicMessagesAdapter(server.url, "m")

        async def scenario() -> Any:
            await hub.post("d", Person(id="alice", label="Alice"), "My invoice is wrong")
            return await SessionManager.arun_once(
                hub, adapter, "Summarise", session_id="d", continuation="auto",
                adapter_opts={"stream": True},
            )  # fmt: skip

        result = asyncio.run(scenario())

        assert [
            {"role": "user", "content": [text("[Alice] My invoice is wrong"), text("Summarise")]}
        ] == server.bodies()[0]["messages"]
        assert [TextDelta("Noted."), Text("Noted.")] == [
            e.body for e in result.events if isinstance(e.body, Text | TextDelta)
        ]

    def test_a_provider_error_fails_the_run_and_leaves_only_its_lifecycle_on_the_desk(
        self, server: FakeServer, hub: AsyncHub
    ) -> None:
        server.replies.append(Reply(status=500, json_body={"type": "error"}))

        async def scenario() -> list[Event]:
            with pytest.raises(RunFailed) as info:
                await SessionManager.arun_once(
                    hub, AnthropicMessagesAdapter(server.url, "m"), "hi", session_id="d"
                )
            assert isinstance(info.value.__cause__, ProviderError)
            return await hub.read("d")

        bodies = [type(e.body).__name__ for e in asyncio.run(scenario())]

        assert ["Text", "RunStarted", "RunFinished"] == bodies
