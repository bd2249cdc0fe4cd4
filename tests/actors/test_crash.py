"""kill -9 between a turn's reply and the next turn loses nothing and duplicates nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from sharedesk.actors import Hub
from sharedesk.protocol import Agent, Text

BOT = Agent(id="bot", label="Bot")
ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(path: Path, rnd: random.Random, *, after_commits: int | None) -> None:
    """Run the child and SIGKILL it: after some commits (right after a reply was
    committed, before the next turn) or at a random moment."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.actors.crash_turns", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert "ready" == child.stdout.readline().strip()
        if after_commits is None:
            time.sleep(rnd.uniform(0.05, 0.4))
        else:
            for _ in range(after_commits):
                assert "committed" == child.stdout.readline().strip()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


class TestKillNine:
    def test_killed_turns_lose_nothing_and_duplicate_nothing(self, tmp_path: Path) -> None:
        rnd = random.Random(4)
        path = tmp_path / "desk"
        for cycle in range(6):
            run_and_kill(path, rnd, after_commits=rnd.randint(1, 8) if cycle % 2 else None)

        with Hub.open(path) as hub:
            final = hub.turn("desk", BOT)
            final.commit()
            events = hub.read("desk")
            delivered: list[int] = [m.sequence for m in final.messages]
            for event in events:
                if event.author == BOT and isinstance(event.body, Text):
                    seen = event.body.content.removeprefix("saw:")
                    delivered.extend(int(s) for s in seen.split(",") if s)
            others = [e.sequence for e in events if e.author != BOT]

        assert len(delivered) == len(set(delivered)), "a row was delivered twice"
        assert others == sorted(delivered), "a row was lost"
        assert len(others) >= 3, "the child hardly ran"
