"""Child process of the kill -9 test: a person posts, an agent takes and commits turns.

Every reply records what its turn delivered (``saw:1,3,...``), so the log itself, written
atomically with each sharing state, says exactly what each committed turn delivered. The
parent kills this process at random moments and checks the log.

Usage: python -m tests.actors.crash_turns PATH
"""

from __future__ import annotations

import sys

from sharedesk.actors import Hub
from sharedesk.logconfig import configure_logging
from sharedesk.protocol import Agent, Person

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Bot")


def main(path: str) -> None:
    configure_logging(level="warning")  # stdout carries only the protocol below
    with Hub.open(path) as hub:
        desk = hub.session("desk")
        print("ready", flush=True)
        n = 0
        while True:
            n += 1
            desk.post(ANA, f"post {n}")
            if n % 3 == 0:
                desk.post(ANA, f"post {n}b")
            turn = hub.turn("desk", BOT)
            seen = ",".join(str(m.sequence) for m in turn.messages)
            turn.commit(f"saw:{seen}")
            print("committed", flush=True)  # the parent may kill right here


if __name__ == "__main__":
    main(sys.argv[1])
