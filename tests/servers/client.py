"""Real MCP clients of ``sharedesk mcp`` for the server tests: the SDK's ``ClientSession``.

:func:`stdio_desk` starts ``sharedesk mcp STORE --as WHO`` as a child process and yields a
:class:`Desk`: an initialized ``ClientSession`` over its standard input and output, with
helpers that call a tool and return its structured result (or its error text).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.store.conftest import ROOT, child_env

#: Runs ``sharedesk`` (the CLI) in a child Python.
CLI = "from sharedesk.cli import main; raise SystemExit(main())"
PID = "import os; open(os.environ['SHAREDESK_TEST_PID_FILE'], 'w').write(str(os.getpid())); "
#: Longest wait for one tool call, in seconds (a bound, not a timing).
CALL_TIMEOUT = 60.0


class ToolFailed(Exception):
    """A tool call answered with ``isError``; the message is its text."""


class Desk:
    """One participant's MCP session with a server."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call ``tool``; return its structured content, or raise :class:`ToolFailed`."""
        result = await self.session.call_tool(tool, arguments, read_timeout_seconds=CALL_TIMEOUT)
        if result.is_error:
            raise ToolFailed(" ".join(block.text for block in result.content))  # type: ignore[union-attr]
        structured: dict[str, Any] = result.structured_content
        return structured

    async def error(self, tool: str, **arguments: Any) -> str:
        """Call ``tool`` expecting a tool error; return its text."""
        try:
            await self.call(tool, **arguments)
        except ToolFailed as exc:
            return str(exc)
        raise AssertionError(f"{tool}({arguments}) did not fail")


def server_parameters(store: str, who: str, pid_file: Path | None = None) -> StdioServerParameters:
    """The command line of ``sharedesk mcp STORE --as WHO`` in a child Python.

    With ``pid_file``, the child writes its process id there first (to be killed).
    """
    code = CLI if pid_file is None else PID + CLI
    args = ["-c", code, "mcp", store, "--as", who]
    env = child_env() | ({} if pid_file is None else {"SHAREDESK_TEST_PID_FILE": str(pid_file)})
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=ROOT)


@contextlib.asynccontextmanager
async def http_desk(url: str, token: str) -> AsyncIterator[Desk]:
    """Yield an initialized session with the server at ``url``, as ``token``'s participant."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        with anyio.fail_after(CALL_TIMEOUT):
            await session.initialize()
        yield Desk(session)


@contextlib.asynccontextmanager
async def stdio_desk(
    store: str, who: str, *, message_handler: Any = None, pid_file: Path | None = None
) -> AsyncIterator[Desk]:
    """Start a server for ``who`` on ``store`` and yield an initialized session with it."""
    async with (
        stdio_client(server_parameters(store, who, pid_file)) as (read, write),
        ClientSession(read, write, message_handler=message_handler) as session,
    ):
        with anyio.fail_after(CALL_TIMEOUT):
            await session.initialize()
        yield Desk(session)
