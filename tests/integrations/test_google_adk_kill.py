"""A kill -9 never parts an ADK event from its state change, on LMDB and PostgreSQL.

A child appends ADK events to four sessions of one user at once, each event's state
delta touching its session, the user and the app (three desks, one transaction), and is
killed with SIGKILL after a random number of
acknowledged appends, again and again. After every kill the store must hold every
acknowledged event, no event twice and none missing in between, and each session's
state, and the user's and app's keys for it, must all name its newest stored event: an
event never lands without its state, nor a state without its event.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations.google_adk import DeskSessionService
from tests.store.conftest import ROOT, child_env

pytestmark = pytest.mark.slow

CYCLES = 16
SESSIONS = 4
HANG = 60.0  # seconds a child may take to print a line before the test fails


@pytest.fixture(params=["lmdb", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "lmdb":
        return str(tmp_path / "desk")
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.communicate()


def line_of(child: subprocess.Popen[bytes]) -> str:
    """Return the child's next line, failing the test if it dies first."""
    assert child.stdout is not None
    line = child.stdout.readline().decode()
    assert line, f"the child exited ({child.wait(timeout=HANG)}) before printing a line"
    return line.strip()


async def stored(target: str) -> tuple[list[list[str]], list[dict[str, object]], dict[str, object]]:
    """Return each session's stored texts and state, and the user's state."""
    async with AsyncHub.open(target) as hub:
        service = DeskSessionService(hub)
        texts: list[list[str]] = []
        states: list[dict[str, object]] = []
        for i in range(SESSIONS):
            session = await service.get_session(app_name="app", user_id="u", session_id=f"s{i}")
            events = [] if session is None else session.events
            texts.append(
                [
                    part.text or ""
                    for event in events
                    if event.content is not None and event.content.parts
                    for part in event.content.parts
                ]
            )
            states.append({} if session is None else session.state)
        return texts, states, await service.get_user_state(app_name="app", user_id="u")


def test_a_killed_writer_never_leaves_an_event_without_its_state(
    target: str, children: list[subprocess.Popen[bytes]]
) -> None:
    rng = random.Random(23)
    acknowledged = [0] * SESSIONS
    for _ in range(CYCLES):
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.integrations.adk_kill_child", target],
            stdout=subprocess.PIPE,
            env=child_env(),
            cwd=ROOT,
        )
        children.append(child)
        assert "ready" == line_of(child)
        for _ in range(rng.randrange(0, 24)):
            _, who, n = line_of(child).split()
            acknowledged[int(who)] = max(acknowledged[int(who)], int(n))
        child.send_signal(signal.SIGKILL)
        assert -signal.SIGKILL == child.wait(timeout=HANG)

        texts, states, user_state = asyncio.run(stored(target))

        for i in range(SESSIONS):
            count = len(texts[i])
            assert [f"m{k}" for k in range(1, count + 1)] == texts[i]
            assert acknowledged[i] <= count
            expected = {"n": count, f"user:n{i}": count, f"app:n{i}": count} if count else {}
            assert expected == {
                k: v for k, v in states[i].items() if k == "n" or k.endswith(str(i))
            }
            assert (count if count else None) == user_state.get(f"n{i}")
