"""``sharedesk mcp STORE --as WHO`` over stdio, driven by the SDK's real ``ClientSession``.

Every server is a child process on one LMDB path; two servers are two processes, so
what one participant posts reaches the other through the store (LMDB's follower).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from sharedesk.store import LmdbStore
from tests.servers.client import CALL_TIMEOUT, Desk, server_parameters, stdio_desk

pytestmark = pytest.mark.slow

ADA, PAT = "agent:ada:Ada", "person:pat:Pat"


def contents(result: dict[str, Any]) -> list[str]:
    return [message["content"] for message in result["messages"]]


def run(main: Any) -> Any:
    return asyncio.run(main())


class TestTools:
    def test_the_server_offers_five_tools_each_with_its_argument_schema(
        self, tmp_path: Path
    ) -> None:
        async def main() -> dict[str, list[str]]:
            async with stdio_desk(str(tmp_path), ADA) as ada:
                listed = await ada.session.list_tools()
            return {tool.name: sorted(tool.input_schema["properties"]) for tool in listed.tools}

        assert {
            "desks": [],
            "view": ["desk", "thread_root"],
            "post": ["content", "desk", "parent"],
            "turn": ["desk", "start_after", "thread_root", "wait_s"],
            "commit": ["reply", "turn_id"],
        } == run(main)

    def test_a_post_shows_in_the_other_participants_turn_and_the_reply_in_the_first_view(
        self, tmp_path: Path
    ) -> None:
        async def main() -> tuple[Any, ...]:
            async with stdio_desk(str(tmp_path), ADA) as ada, stdio_desk(str(tmp_path), PAT) as pat:
                posted = await ada.call("post", desk="desk", content="hello")
                turn = await pat.call("turn", desk="desk")
                committed = await pat.call("commit", turn_id=turn["turn_id"], reply="hi Ada")
                view = await ada.call("view", desk="desk")
                desks = await ada.call("desks")
            return posted, turn["reason"], contents(turn), committed, contents(view), desks

        assert (
            {"sequence": 1},
            "initial",
            ["hello"],
            {"sequence": 2},
            ["hello", "hi Ada"],
            {"desks": [{"id": "desk", "last_sequence": 2}]},
        ) == run(main)

    def test_messages_carry_author_sequence_and_parent(self, tmp_path: Path) -> None:
        async def main() -> list[dict[str, Any]]:
            async with stdio_desk(str(tmp_path), ADA) as ada:
                await ada.call("post", desk="desk", content="root")
                await ada.call("post", desk="desk", content="reply", parent=1)
                messages: list[dict[str, Any]] = (
                    await ada.call("view", desk="desk", thread_root=1)
                )["messages"]
            return messages

        ada = {"kind": "agent", "id": "ada", "label": "Ada"}
        assert [
            {"sequence": 1, "author": ada, "content": "root", "parent": None},
            {"sequence": 2, "author": ada, "content": "reply", "parent": 1},
        ] == run(main)

    def test_a_turn_with_wait_s_is_woken_by_another_server_processes_post(
        self, tmp_path: Path
    ) -> None:
        async def main() -> tuple[list[str], str | None]:
            async with stdio_desk(str(tmp_path), ADA) as ada, stdio_desk(str(tmp_path), PAT) as pat:
                await ada.call("post", desk="desk", content="first")
                first = await pat.call("turn", desk="desk")
                await pat.call("commit", turn_id=first["turn_id"])
                async with anyio.create_task_group() as group:
                    waited: dict[str, Any] = {}

                    async def wait() -> None:
                        waited.update(await pat.call("turn", desk="desk", wait_s=CALL_TIMEOUT / 2))

                    group.start_soon(wait)
                    await ada.call("post", desk="desk", content="second")
            return contents(waited), waited["reason"]

        assert (["second"], None) == run(main)

    def test_a_late_joiner_starting_after_a_sequence_reads_the_rows_since_in_pages_once(
        self, tmp_path: Path
    ) -> None:
        async def main() -> list[list[int]]:
            async with stdio_desk(str(tmp_path), ADA) as ada, stdio_desk(str(tmp_path), PAT) as pat:
                for i in range(35):
                    await ada.call("post", desk="desk", content=f"row {i + 1}")
                pages = []
                turn = await pat.call("turn", desk="desk", start_after=2)
                while turn["messages"]:
                    pages.append([message["sequence"] for message in turn["messages"]])
                    await pat.call("commit", turn_id=turn["turn_id"])
                    turn = await pat.call("turn", desk="desk")
            return pages

        assert [list(range(3, 33)), [33, 34, 35]] == run(main)

    def test_a_late_joiner_waiting_with_wait_s_is_woken_by_the_first_row_after_its_start(
        self, tmp_path: Path
    ) -> None:
        async def main() -> list[str]:
            async with stdio_desk(str(tmp_path), ADA) as ada, stdio_desk(str(tmp_path), PAT) as pat:
                await ada.call("post", desk="desk", content="before pat came")
                async with anyio.create_task_group() as group:
                    waited: dict[str, Any] = {}

                    async def wait() -> None:
                        waited.update(
                            await pat.call(
                                "turn", desk="desk", start_after=1, wait_s=CALL_TIMEOUT / 2
                            )
                        )

                    group.start_soon(wait)
                    await ada.call("post", desk="desk", content="after")
            return contents(waited)

        assert ["after"] == run(main)

    def test_a_turn_past_wait_s_is_the_turn_as_it_stands(self, tmp_path: Path) -> None:
        async def main() -> list[str]:
            async with stdio_desk(str(tmp_path), ADA) as ada, stdio_desk(str(tmp_path), PAT) as pat:
                await ada.call("post", desk="desk", content="first")
                first = await pat.call("turn", desk="desk")
                await pat.call("commit", turn_id=first["turn_id"])
                return contents(await pat.call("turn", desk="desk", wait_s=0.05))

        assert [] == run(main)

    def test_a_turn_committed_twice_is_a_tool_error_naming_it(self, tmp_path: Path) -> None:
        async def main() -> str:
            async with stdio_desk(str(tmp_path), ADA) as ada:
                await ada.call("post", desk="desk", content="hello")
                turn = await ada.call("turn", desk="desk")
                await ada.call("commit", turn_id=turn["turn_id"], reply="once")
                error = await ada.error("commit", turn_id=turn["turn_id"], reply="twice")
                assert ["hello", "once"] == contents(await ada.call("view", desk="desk"))
                return error

        assert "committed already" in run(main)

    def test_a_turn_overtaken_by_a_later_turns_commit_is_a_tool_error_writing_nothing(
        self, tmp_path: Path
    ) -> None:
        async def main() -> tuple[str, list[str]]:
            async with stdio_desk(str(tmp_path), ADA) as ada, stdio_desk(str(tmp_path), PAT) as pat:
                await pat.call("post", desk="desk", content="question")
                older = await ada.call("turn", desk="desk")
                newer = await ada.call("turn", desk="desk")
                await ada.call("commit", turn_id=newer["turn_id"], reply="answer")
                error = await ada.error("commit", turn_id=older["turn_id"], reply="late")
                return error, contents(await pat.call("view", desk="desk"))

        error, view = run(main)

        assert ("overtaken" in error, ["question", "answer"]) == (True, view)


class TestKilledBetweenTurnAndCommit:
    def test_a_server_killed_9_after_turn_offers_the_same_rows_again(self, tmp_path: Path) -> None:
        pid_file = tmp_path / "pid"
        store = str(tmp_path / "store")

        async def main() -> tuple[list[str], list[str], str | None]:
            async with stdio_desk(store, ADA) as ada:
                await ada.call("post", desk="desk", content="before")
                async with stdio_desk(store, PAT) as pat:
                    await pat.call(
                        "commit", turn_id=(await pat.call("turn", desk="desk"))["turn_id"]
                    )
                await ada.call("post", desk="desk", content="one")
                await ada.call("post", desk="desk", content="two")
                offered: dict[str, Any] = {}
                closed = False
                try:
                    async with stdio_desk(store, PAT, pid_file=pid_file) as doomed:
                        offered = await doomed.call("turn", desk="desk")
                        os.kill(int(pid_file.read_text()), signal.SIGKILL)
                        await doomed.call("commit", turn_id=offered["turn_id"], reply="lost")
                except* MCPError:  # the connection closed under the commit
                    closed = True
                assert closed
                async with stdio_desk(store, PAT) as pat:
                    again = await pat.call("turn", desk="desk")
            return contents(offered), contents(again), again["reason"]

        offered, again, reason = run(main)
        with LmdbStore(tmp_path / "store") as written:
            rows = [event.body for event in written.read("desk")]

        assert (["one", "two"], ["one", "two"], None, 3) == (offered, again, reason, len(rows))


class TestNotifications:
    def test_a_subscribed_client_is_notified_when_another_process_posts(
        self, tmp_path: Path
    ) -> None:
        async def main() -> list[str]:
            updated: list[str] = []
            arrived = anyio.Event()

            async def handle(message: Any) -> None:
                if isinstance(message, types.ResourceUpdatedNotification):
                    updated.append(str(message.params.uri))
                    arrived.set()

            async with stdio_desk(str(tmp_path), PAT, message_handler=handle) as pat:
                await pat.session.send_request(
                    types.SubscribeRequest(params=types.SubscribeRequestParams(uri="desk://desk")),
                    types.EmptyResult,
                )
                async with stdio_desk(str(tmp_path), ADA) as ada:
                    await ada.call("post", desk="desk", content="news")
                with anyio.fail_after(CALL_TIMEOUT):
                    await arrived.wait()
                read = await pat.session.read_resource("desk://desk")
            text = read.contents[0].text  # type: ignore[union-attr]
            return [updated[0], text]

        uri, text = run(main)

        assert ("desk://desk", '"content": "news"' in text) == (uri, True)

    def test_a_client_on_the_newest_protocol_listening_is_told_of_another_processes_post(
        self, tmp_path: Path
    ) -> None:
        async def main() -> tuple[str, list[str], str]:
            async with Client(server_parameters(str(tmp_path), PAT)) as pat:
                async with pat.listen(resource_subscriptions=["desk://desk"]) as subscription:
                    async with stdio_desk(str(tmp_path), ADA) as ada:
                        await ada.call("post", desk="desk", content="news")
                    with anyio.fail_after(CALL_TIMEOUT):
                        event = await anext(aiter(subscription))
                assert isinstance(event, ResourceUpdated)
                return (
                    pat.protocol_version,
                    list(subscription.honored.resource_subscriptions or ()),
                    event.uri,
                )

        version, honored, uri = run(main)

        assert (True, ["desk://desk"], "desk://desk") == (
            version in MODERN_PROTOCOL_VERSIONS,
            honored,
            uri,
        )


del Desk
