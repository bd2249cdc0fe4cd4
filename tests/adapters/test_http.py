"""What the HTTP adapters share: the deadline, retry-after, server-sent events, tools."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from sharedesk.adapters._http import (
    DEFAULT_DEADLINE_S,
    FunctionTool,
    HttpAdapter,
    call_tool,
    check_tools,
    retry_after,
    sse_events,
)
from sharedesk.adapters.anthropic import AnthropicMessagesAdapter
from sharedesk.adapters.openai_chat import OpenAIChatAdapter
from sharedesk.adapters.openai_responses import OpenAIResponsesAdapter
from sharedesk.protocol.errors import ProviderError, ValidationError
from sharedesk.protocol.events import Text
from tests.adapters.fake_http import Desk, Reply, fake_server

ADAPTERS = [OpenAIChatAdapter, OpenAIResponsesAdapter, AnthropicMessagesAdapter]


def events_of(body: bytes) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        response = httpx.Response(200, content=body)
        return [event async for event in sse_events("p", response)]

    return asyncio.run(collect())


class TestDeadline:
    @pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
    @pytest.mark.parametrize("kind", ADAPTERS, ids=lambda k: k.__name__)
    def test_a_server_that_only_sends_keep_alive_comments_fails_the_run_at_the_deadline(
        self, kind: type[HttpAdapter], stream: bool
    ) -> None:
        desk = Desk()
        with fake_server() as server:
            server.replies.append(Reply(events=[], forever=b": keep-alive\n\n"))
            adapter = kind(server.url, "m", deadline=0.2)

            with pytest.raises(ProviderError) as caught:
                asyncio.run(
                    adapter.aexecute(desk.run("hi"), desk.session(), desk.emit, {"stream": stream})
                )

        assert (None, "no answer within 0.2 s") == (caught.value.status_code, caught.value.detail)
        assert [] == [b for b in desk.bodies() if isinstance(b, Text)]

    @pytest.mark.parametrize("kind", ADAPTERS, ids=lambda k: k.__name__)
    def test_every_adapter_has_a_finite_deadline_by_default(self, kind: type[HttpAdapter]) -> None:
        assert DEFAULT_DEADLINE_S == kind("http://127.0.0.1:1", "m").deadline

    @pytest.mark.parametrize("deadline", [0, -1, "10", True])
    def test_a_deadline_that_is_not_a_positive_number_is_refused(self, deadline: object) -> None:
        with pytest.raises(ValidationError):
            OpenAIChatAdapter("http://127.0.0.1:1", "m", deadline=deadline)  # type: ignore[arg-type]


class TestRetryAfter:
    @pytest.mark.parametrize(
        ("headers", "seconds"),
        [
            ({"retry-after": "3"}, 3.0),
            ({"retry-after": "1.5"}, 1.5),
            ({"retry-after": "3", "retry-after-ms": "250"}, 0.25),
            (
                {
                    "retry-after": "Wed, 21 Oct 2026 07:28:30 GMT",
                    "date": "Wed, 21 Oct 2026 07:28:00 GMT",
                },
                30.0,
            ),
            ({"retry-after": "soon"}, None),
            ({}, None),
        ],
        ids=["seconds", "fraction", "milliseconds-win", "http-date", "garbage", "absent"],
    )
    def test_retry_after_reads_seconds_milliseconds_or_a_date(
        self, headers: dict[str, str], seconds: float | None
    ) -> None:
        assert seconds == retry_after(headers)


class TestServerSentEvents:
    def test_each_event_yields_its_json_data_and_names_and_comments_are_skipped(self) -> None:
        body = b': keep-alive\n\nevent: a\ndata: {"type": "a"}\n\nevent: b\ndata: {"type": "b"}\n\n'

        assert [{"type": "a"}, {"type": "b"}] == events_of(body)

    def test_data_lines_of_one_event_are_joined(self) -> None:
        assert [{"type": "a", "n": 1}] == events_of(b'data: {"type": "a",\ndata: "n": 1}\n\n')

    def test_done_ends_the_stream(self) -> None:
        assert [{"n": 1}] == events_of(b'data: {"n": 1}\n\ndata: [DONE]\n\ndata: {"n": 2}\n\n')

    def test_an_event_that_is_not_json_is_a_provider_error(self) -> None:
        with pytest.raises(ProviderError, match="malformed stream event"):
            events_of(b"data: {nope\n\n")


class TestTools:
    def test_a_coroutine_tool_is_awaited(self) -> None:
        async def add(a: int, b: int) -> int:
            return a + b

        tools = check_tools([FunctionTool("add", add)])

        assert (5, False) == asyncio.run(call_tool(tools, "add", {"a": 2, "b": 3}))

    def test_arguments_that_are_not_an_object_give_an_error_result(self) -> None:
        tools = check_tools([FunctionTool("add", lambda: 0)])

        assert (True,) == asyncio.run(call_tool(tools, "add", "[1, 2]"))[1:]

    def test_two_tools_of_one_name_are_refused(self) -> None:
        with pytest.raises(ValidationError):
            check_tools([FunctionTool("t", print), FunctionTool("t", print)])
