"""``python -m bench.pg_child REQUEST``: process B of the cross-process view latency.

REQUEST is JSON: ``{"dsn", "desk", "count", "follow"}``. The child opens its own Hub on
``dsn`` (``Hub.open("postgresql://...")``), warms the bot's view of ``desk``, prints
``ready`` and then, for ``k`` in ``0 .. count-1``, waits until post ``ping k`` (made by
the parent, process A) shows in its view and prints ``seen k NS``, ``NS`` being
``time.monotonic_ns()`` at that moment (CLOCK_MONOTONIC, one clock for every process of
the machine, so the parent subtracts its own reading taken just before it posted).

``follow`` is how the child waits:

- ``"wait_turn"``: ``AsyncHub.wait_turn(desk, bot)`` (pushed: the Hub follows the other
  process's commits through ``LISTEN``/``NOTIFY``), then the turn is committed;
- ``"view"``: ``hub.view(desk, bot)`` polled every :data:`POLL_SECONDS`, as an
  application that re-renders on a timer would.

Errors go to stderr (its last line is the message) with exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Final

#: The poll period of ``follow="view"``.
POLL_SECONDS: Final = 0.001

#: The most seconds the child waits for one post.
WAIT_SECONDS: Final = 30.0


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _shown(messages: list[Any], content: str) -> bool:
    return any(m.content == content for m in messages)


async def _wait_turns(dsn: str, desk: str, count: int) -> None:
    from sharedesk import Agent, AsyncHub

    bot = Agent(id="bot", label="Bot")
    async with AsyncHub.open(dsn) as hub:
        while (turn := await hub.turn(desk, bot)).messages:
            await turn.commit()
        _say("ready")
        for k in range(count):
            content = f"ping {k}"
            turn = await hub.wait_turn(desk, bot, timeout=WAIT_SECONDS)
            while not _shown(turn.messages, content):
                await turn.commit()
                turn = await hub.wait_turn(desk, bot, timeout=WAIT_SECONDS)
            _say(f"seen {k} {time.monotonic_ns()}")
            await turn.commit()


def _poll_views(dsn: str, desk: str, count: int) -> None:
    from sharedesk import Agent, Hub

    bot = Agent(id="bot", label="Bot")
    with Hub.open(dsn) as hub:
        hub.view(desk, bot)
        _say("ready")
        for k in range(count):
            content = f"ping {k}"
            deadline = time.monotonic() + WAIT_SECONDS
            while not _shown(hub.view(desk, bot).messages[-4:], content):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{content!r} not shown within {WAIT_SECONDS} s")
                time.sleep(POLL_SECONDS)
            _say(f"seen {k} {time.monotonic_ns()}")


def main(argv: list[str]) -> int:
    """Serve one request (see the module header); return the exit status."""
    request = json.loads(argv[0])
    try:
        if request["follow"] == "wait_turn":
            asyncio.run(_wait_turns(request["dsn"], request["desk"], int(request["count"])))
        else:
            _poll_views(request["dsn"], request["desk"], int(request["count"]))
    except Exception as error:
        sys.stderr.write(f"{type(error).__name__}: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
