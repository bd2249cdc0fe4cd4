"""Exactly once over MCP: three participants, each with its own server process, 200 messages.

Each participant loops ``turn(wait_s)`` then ``commit(turn_id, reply)`` through the SDK's
``ClientSession`` against its own ``sharedesk mcp`` child; all servers share one store
(an LMDB path, or one PostgreSQL database). Once 200 rows are written, each drains its
last turns. Then, for every participant, the rows of the others it received over all
its committed turns are exactly the others' rows: none missing, none twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedesk.protocol import Text
from sharedesk.store import LmdbStore, PostgresStore
from tests.servers.client import Desk, stdio_desk

pytestmark = pytest.mark.slow

PARTICIPANTS = ["agent:ada:Ada", "agent:bob:Bob", "person:cy:Cy"]
MESSAGES = 200
#: Seconds a turn waits for a message (a bound on a wait, not a timing).
WAIT_S = 2.0


async def converse(store: str) -> dict[str, list[int]]:
    """Run the conversation on ``store``; return each participant's received sequences."""
    received: dict[str, list[int]] = {who.split(":")[1]: [] for who in PARTICIPANTS}
    reasons: list[str | None] = []

    async def take(desk: Desk, me: str, *, reply: bool) -> int:
        turn = await desk.call("turn", desk="desk", wait_s=WAIT_S if reply else 0)
        mine = [m["sequence"] for m in turn["messages"] if m["author"]["id"] != me]
        text = f"{me} answers {mine[-1]}" if reply and mine else None
        committed = await desk.call("commit", turn_id=turn["turn_id"], reply=text)
        received[me].extend(mine)
        reasons.append(turn["reason"])
        return len(turn["messages"]) if committed["sequence"] is None else committed["sequence"]

    async def participant(desk: Desk, me: str) -> None:
        newest = 0
        while True:
            got = await take(desk, me, reply=newest < MESSAGES)
            newest = max(newest, got)
            if newest >= MESSAGES and got == 0:
                return

    async with (
        stdio_desk(store, PARTICIPANTS[0]) as ada,
        stdio_desk(store, PARTICIPANTS[1]) as bob,
        stdio_desk(store, PARTICIPANTS[2]) as cy,
    ):
        desks = {"ada": ada, "bob": bob, "cy": cy}
        await ada.call("post", desk="desk", content="let us begin")
        async with anyio.create_task_group() as group:
            for me, desk in desks.items():
                group.start_soon(participant, desk, me)
        for me, desk in desks.items():  # nobody writes any more: the last rows
            while await take(desk, me, reply=False):
                pass
    assert reasons.count("initial") == 3 and set(reasons) == {"initial", None}
    return received


def check(rows: list[tuple[int, str]], received: dict[str, list[int]]) -> dict[str, Any]:
    """Per participant: rows of others never received, and rows received more than once."""
    figures: dict[str, Any] = {}
    for me, sequences in received.items():
        others = {sequence for sequence, author in rows if author != me}
        counts = Counter(sequences)
        figures[me] = {
            "missing": sorted(others - set(counts)),
            "twice": sorted(s for s, n in counts.items() if n > 1),
            "own_or_unknown": sorted(set(counts) - others),
        }
    return figures


EXACTLY_ONCE: dict[str, dict[str, list[int]]] = {
    me: {"missing": [], "twice": [], "own_or_unknown": []} for me in ("ada", "bob", "cy")
}


class TestExactlyOnce:
    def test_three_participants_on_three_lmdb_server_processes(self, tmp_path: Path) -> None:
        received = asyncio.run(converse(str(tmp_path)))
        with LmdbStore(tmp_path) as store:
            events = store.read("desk")
        rows = [(e.sequence or 0, e.author.id) for e in events if isinstance(e.body, Text)]  # type: ignore[union-attr]

        assert (True, EXACTLY_ONCE) == (len(rows) >= MESSAGES, check(rows, received))

    def test_three_participants_on_three_postgres_server_processes(self, postgres_dsn: str) -> None:
        received = asyncio.run(converse(postgres_dsn))
        with PostgresStore(postgres_dsn) as store:
            events = store.read("desk")
        rows = [(e.sequence or 0, e.author.id) for e in events if isinstance(e.body, Text)]  # type: ignore[union-attr]

        assert (True, EXACTLY_ONCE) == (len(rows) >= MESSAGES, check(rows, received))
