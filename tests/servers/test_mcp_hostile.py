"""Bad arguments to ``sharedesk mcp``: each is a tool error, nothing is written, it serves on.

Most go through the SDK's ``ClientSession``; lone surrogates, which the SDK's client
cannot even encode, go as raw JSON-RPC lines on the server's standard input.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sharedesk.store import LmdbStore
from tests.servers.client import CLI, stdio_desk
from tests.store.conftest import ROOT, child_env

pytestmark = pytest.mark.slow

ADA = "agent:ada:Ada"
MEGABYTE = "x" * 1_000_000

HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("view", {"desk": "nowhere"}, "unknown desk"),
    ("turn", {"desk": "nowhere"}, "unknown desk"),
    ("turn", {"desk": "desk", "wait_s": -1}, "wait_s"),
    ("turn", {"desk": "desk", "wait_s": 1e9}, "wait_s"),
    ("turn", {"desk": "desk", "wait_s": "soon"}, "wait_s"),
    ("turn", {"desk": "desk", "start_after": -1}, "start_after"),
    ("turn", {"desk": "desk", "start_after": 99}, "ValidationError"),
    ("post", {"desk": "desk", "content": MEGABYTE}, "at most"),
    ("post", {"desk": "desk", "content": 7}, "content must be a string"),
    ("post", {"desk": "desk", "content": "reply", "parent": 99}, "ValidationError"),
    ("post", {"desk": "desk", "content": "reply", "parent": True}, "parent"),
    ("post", {"desk": "", "content": "empty desk id"}, "ValidationError"),
    ("post", {"desk": "desk"}, "needs the argument 'content'"),
    ("post", {"desk": "desk", "content": "x", "extra": 1}, "no argument 'extra'"),
    ("view", {"desk": "desk", "thread_root": "one"}, "thread_root"),
    ("commit", {"turn_id": "no-such-turn"}, "unknown turn_id"),
    ("commit", {"turn_id": 12}, "turn_id must be a string"),
]


class TestHostileArguments:
    @pytest.mark.parametrize(("tool", "arguments", "says"), HOSTILE, ids=lambda v: str(v)[:30])
    def test_a_bad_argument_is_a_tool_error_that_writes_nothing(
        self, tmp_path: Path, tool: str, arguments: dict[str, Any], says: str
    ) -> None:
        async def main() -> tuple[str, dict[str, Any]]:
            async with stdio_desk(str(tmp_path), ADA) as ada:
                await ada.call("post", desk="desk", content="before")
                error = await ada.error(tool, **arguments)
                after = await ada.call("post", desk="desk", content="after")  # still serving
            return error, after

        error, after = asyncio.run(main())

        assert (True, {"sequence": 2}) == (says in error, after), error

    def test_a_reply_of_a_megabyte_is_a_tool_error_and_the_turn_stays_open(
        self, tmp_path: Path
    ) -> None:
        async def main() -> tuple[str, dict[str, Any]]:
            async with stdio_desk(str(tmp_path), ADA) as ada:
                await ada.call("post", desk="desk", content="before")
                turn = await ada.call("turn", desk="desk")
                error = await ada.error("commit", turn_id=turn["turn_id"], reply=MEGABYTE)
                return error, await ada.call("commit", turn_id=turn["turn_id"], reply="short")

        error, committed = asyncio.run(main())

        assert ("at most" in error, {"sequence": 2}) == (True, committed)


def rpc(child: subprocess.Popen[str], message: dict[str, Any] | str) -> dict[str, Any] | None:
    """Send one JSON-RPC line; return the answer line (``None`` for a notification)."""
    assert child.stdin is not None and child.stdout is not None
    line = message if isinstance(message, str) else json.dumps(message)
    child.stdin.write(line + "\n")
    child.stdin.flush()
    if isinstance(message, dict) and "id" not in message:
        return None
    answer: dict[str, Any] = json.loads(child.stdout.readline())
    return answer


class TestLoneSurrogates:
    def test_strings_with_lone_surrogates_are_tool_errors_and_the_server_serves_on(
        self, tmp_path: Path
    ) -> None:
        child = subprocess.Popen(
            [sys.executable, "-c", CLI, "mcp", str(tmp_path), "--as", ADA],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=child_env(),
            cwd=ROOT,
        )
        try:
            rpc(
                child,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "1"},
                    },
                },
            )
            rpc(child, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = (
                '{"jsonrpc":"2.0","id":%d,"method":"tools/call",'
                '"params":{"name":"post","arguments":%s}}'
            )
            answers = [
                rpc(child, call % (2, r'{"desk":"desk","content":"a\ud800b"}')),
                rpc(child, call % (3, r'{"desk":"\udfff","content":"x"}')),
                rpc(child, call % (4, r'{"desk":"desk","content":"fine"}')),
            ]
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=60)
        with LmdbStore(tmp_path) as store:
            rows = [event.sequence for event in store.read("desk")]

        assert (
            [True, True, False],
            [True, True],
            [1],
        ) == (
            [answer["result"]["isError"] for answer in answers if answer],
            [
                "holds a lone surrogate" in answers[i]["result"]["content"][0]["text"]  # type: ignore[index]
                for i in (0, 1)
            ],
            rows,
        )
