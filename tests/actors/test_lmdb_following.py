"""Hubs in two processes on one store follow each other, on LMDB and on PostgreSQL.

What one process posts shows in the other's warm view, is pushed to its ``hub.listen``
listeners and wakes its ``AsyncHub.wait_turn``, both ways: the store's follower watches
LMDB's last transaction id, or PostgreSQL's ``LISTEN`` channel. The other process is a
real child; waits are bounded, never timed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharedesk import AsyncHub
from sharedesk.actors import Hub
from sharedesk.protocol import Person
from tests.actors.conftest import our_threads
from tests.actors.following import BOB, Recorder, said
from tests.store import conftest as store_fixtures
from tests.store.conftest import ChildFactory, run_child

ALICE = Person(id="alice", label="Alice")

#: Child processes, killed and reaped at teardown (the fixture of tests/store).
spawn = store_fixtures.spawn

#: Longest wait for the other process, in seconds (a bound on a wait, not a timing).
PATIENCE = 30.0

# The other process: a Hub on the same store that takes Bob's first turn, posts, then
# waits for Bob's next turn (the parent's reply), and prints what it saw as JSON.
CHILD = """
import asyncio, json, sys
from sharedesk import AsyncHub
from sharedesk.protocol import Person

BOB = Person(id="bob", label="Bob")

async def main(store):
    async with AsyncHub.open(store, ask_timeout=30.0) as hub:
        await (await hub.turn("desk", BOB)).commit()
        await hub.post("desk", BOB, "from the child")
        turn = await hub.wait_turn("desk", BOB, timeout=30.0)
        view = await hub.view("desk", BOB)
        print(json.dumps({
            "turn": [m.content for m in turn.messages],
            "view": [m.content for m in view.messages],
        }))

asyncio.run(main(sys.argv[1]))
"""

POST_FIVE = (
    "import sys\n"
    "from sharedesk import Hub\n"
    "from sharedesk.protocol import Event, Person, Text\n"
    "bob = Person(id='bob', label='Bob')\n"
    "with Hub.open(sys.argv[1]) as hub:\n"
    "    for n in range(5):\n"
    "        hub.append('desk', [Event(bob, Text(f'theirs {n}'))])\n"
)


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    yield
    assert [] == our_threads()


@pytest.fixture(params=["lmdb", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where two processes' Hubs meet: an LMDB path, or a PostgreSQL database."""
    if request.param == "lmdb":
        return str(tmp_path)
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


class TestTwoHubsOnOneLmdbPath:
    def test_a_hub_on_lmdb_follows_its_store(self, tmp_path: Path) -> None:
        with Hub.open(tmp_path) as hub:
            assert True is hub.following

    def test_a_hub_closed_leaves_no_follower_thread(self, tmp_path: Path) -> None:
        import threading

        hub = Hub.open(tmp_path)
        hub.listen("desk", Recorder())

        hub.close()

        assert [] == [t.name for t in threading.enumerate() if "lmdb-follower" in t.name]


class TestTwoHubsOnOneStore:
    def test_each_hub_follows_what_the_other_posts(self, shared: str, spawn: ChildFactory) -> None:
        async def parent() -> tuple[list[str], list[str], dict[str, list[str]]]:
            async with AsyncHub.open(shared, ask_timeout=PATIENCE) as hub:
                await (await hub.turn("desk", ALICE)).commit()
                await hub.view("desk", ALICE)  # warm: its projector holds the tail
                waiting = asyncio.create_task(hub.wait_turn("desk", ALICE, timeout=PATIENCE))
                child = asyncio.create_task(
                    asyncio.to_thread(run_child, spawn, CHILD, shared, timeout=PATIENCE * 2)
                )
                turn = await waiting  # woken by the child's post, well before the timeout
                view = await hub.view("desk", ALICE)
                await turn.commit("from the parent")
                seen: dict[str, list[str]] = json.loads(await child)
                return (
                    [m.content for m in turn.messages],
                    [m.content for m in view.messages],
                    seen,
                )

        turn, view, child = asyncio.run(parent())

        assert (
            ["from the child"],
            ["from the child"],
            {"turn": ["from the parent"], "view": ["from the child", "from the parent"]},
        ) == (turn, view, child)

    def test_a_listener_is_pushed_the_other_processes_events_in_order_once(
        self, shared: str, spawn: ChildFactory
    ) -> None:
        recorder = Recorder()
        with Hub.open(shared, ask_timeout=PATIENCE) as hub:
            hub.listen("desk", recorder)
            hub.session("desk").post(ALICE, "mine first")
            run_child(spawn, POST_FIVE, shared, timeout=PATIENCE)
            pushed_before = recorder.wait_through(6)
            hub.append("desk", [said("mine last", ALICE)])
            pushed = recorder.wait_through(7)

        assert ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]) == (
            [s for push in pushed_before for s in push],
            [s for push in pushed for s in push],
        )

    def test_a_warm_view_shows_the_other_processes_posts(
        self, shared: str, spawn: ChildFactory
    ) -> None:
        recorder = Recorder()
        with Hub.open(shared, ask_timeout=PATIENCE) as hub:
            hub.view("desk", ALICE)  # warm
            hub.listen("desk", recorder)
            run_child(spawn, POST_FIVE, shared, timeout=PATIENCE)
            recorder.wait_through(5)
            view = hub.view("desk", ALICE)

        assert [f"theirs {n}" for n in range(5)] == [m.content for m in view.messages]


del BOB
