"""``sharedesk mcp STORE --http HOST:PORT --tokens FILE``: MCP's streamable HTTP at ``/mcp``.

The server is a child process; clients are the SDK's ``ClientSession`` over its
streamable HTTP client, each carrying a bearer token of the tokens file. A request
without a known token is answered 401 before it reaches a desk.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from sharedesk.store import LmdbStore
from tests.servers.client import CLI, http_desk
from tests.store.conftest import ROOT, child_env

pytestmark = pytest.mark.slow

TOKENS = "# token participant\nada-token agent:ada:Ada\npat-token person:pat:Pat\n"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
#: Most attempts to connect to the starting server (each waits up to 0.1 s for its exit).
ATTEMPTS = 600


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Start the HTTP server on a fresh LMDB path; yield its URL and the path."""
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    store = tmp_path / "store"
    port = free_port()
    command = [sys.executable, "-c", CLI, "mcp", str(store)]
    command += ["--http", f"127.0.0.1:{port}", "--tokens", str(tokens)]
    child = subprocess.Popen(
        command,
        env=child_env(),
        cwd=ROOT,
    )
    try:
        for _ in range(ATTEMPTS):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                with pytest.raises(subprocess.TimeoutExpired):
                    child.wait(timeout=0.1)  # still starting, not dead
        yield f"http://127.0.0.1:{port}/mcp", store
    finally:
        child.terminate()
        child.wait(timeout=60)


class TestBearerTokens:
    @pytest.mark.parametrize(
        "authorization", [None, "Bearer wrong-token", "Basic ada-token", "Bearer"]
    )
    def test_a_request_without_a_known_token_is_401_and_touches_no_desk(
        self, server: tuple[str, Path], authorization: str | None
    ) -> None:
        url, store = server
        headers = HEADERS | ({} if authorization is None else {"Authorization": authorization})
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "post", "arguments": {"desk": "desk", "content": "intruder"}},
        }

        statuses = [
            httpx.post(url, json=body, headers=headers, timeout=30).status_code
            for body in (INITIALIZE, call)
        ]
        with LmdbStore(store) as opened:
            desks = opened.sessions()

        assert ([401, 401], []) == (statuses, desks)

    def test_a_known_token_is_its_participant_for_turn_and_commit(
        self, server: tuple[str, Path]
    ) -> None:
        url, _ = server

        async def main() -> tuple[Any, ...]:
            async with http_desk(url, "ada-token") as ada, http_desk(url, "pat-token") as pat:
                await ada.call("post", desk="desk", content="hello over HTTP")
                turn = await pat.call("turn", desk="desk")
                committed = await pat.call("commit", turn_id=turn["turn_id"], reply="hi Ada")
                answer = await ada.call("turn", desk="desk", wait_s=30)
            return (
                [m["content"] for m in turn["messages"]],
                committed,
                [(m["author"]["id"], m["content"]) for m in answer["messages"]],
            )

        assert (
            ["hello over HTTP"],
            {"sequence": 2},
            [("ada", "hello over HTTP"), ("pat", "hi Ada")],
        ) == asyncio.run(main())

    def test_another_participants_turn_cannot_be_committed(self, server: tuple[str, Path]) -> None:
        url, _ = server

        async def main() -> tuple[str, list[str]]:
            async with http_desk(url, "ada-token") as ada, http_desk(url, "pat-token") as pat:
                await ada.call("post", desk="desk", content="question")
                turn = await pat.call("turn", desk="desk")
                error = await ada.error("commit", turn_id=turn["turn_id"], reply="not mine")
                view = await ada.call("view", desk="desk")
            return error, [m["content"] for m in view["messages"]]

        error, view = asyncio.run(main())

        assert ("another participant's" in error, ["question"]) == (True, view)

    def test_a_client_on_the_newest_protocol_takes_and_commits_a_turn(
        self, server: tuple[str, Path]
    ) -> None:
        url, _ = server

        async def main() -> tuple[bool, list[str], dict[str, Any]]:
            http = create_mcp_http_client(headers={"Authorization": "Bearer pat-token"})
            async with http, Client(streamable_http_client(url, http_client=http)) as pat:
                async with http_desk(url, "ada-token") as ada:
                    await ada.call("post", desk="desk", content="hello")
                turn = (await pat.call_tool("turn", {"desk": "desk"})).structured_content
                arguments = {"turn_id": turn["turn_id"], "reply": "hi"}
                committed = (await pat.call_tool("commit", arguments)).structured_content
                return (
                    pat.protocol_version in MODERN_PROTOCOL_VERSIONS,
                    [m["content"] for m in turn["messages"]],
                    committed,
                )

        assert (True, ["hello"], {"sequence": 2}) == asyncio.run(main())

    def test_a_turn_belongs_to_the_mcp_session_that_took_it(self, server: tuple[str, Path]) -> None:
        url, _ = server

        async def main() -> tuple[str, dict[str, Any]]:
            async with http_desk(url, "ada-token") as ada, http_desk(url, "pat-token") as pat:
                await ada.call("post", desk="desk", content="question")
                async with http_desk(url, "pat-token") as other_session:
                    turn = await pat.call("turn", desk="desk")
                    error = await other_session.error("commit", turn_id=turn["turn_id"])
                return error, await pat.call("commit", turn_id=turn["turn_id"], reply="mine")

        error, committed = asyncio.run(main())

        assert ("another MCP session" in error, {"sequence": 2}) == (True, committed)
