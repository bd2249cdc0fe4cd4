"""What the async HTTP adapters share: retry-after, server-sent events, tools."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from sharedesk.protocol.errors import ProviderError, ValidationError
from sharedesk.runs._http import FunctionTool, call_tool, check_tools, retry_after, sse_events


def events_of(body: bytes) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        response = httpx.Response(200, content=body)
        return [event async for event in sse_events("p", response)]

    return asyncio.run(collect())


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
