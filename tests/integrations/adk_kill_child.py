"""Child of the ADK kill -9 test: appends ADK events with state in every scope, forever.

``python -m tests.integrations.adk_kill_child TARGET`` opens a hub on ``TARGET`` (an
LMDB path or a PostgreSQL DSN) and runs ``SESSIONS`` writers at once, one per session
``s<i>`` of user ``u``. Each appends event ``n = N+1, N+2, ...`` (N: its events stored
so far), setting ``n``, ``user:n<i>`` and ``app:n<i>`` to ``n``, and prints
``ack <i> <n>`` once each append returned, until the child is killed. It prints
``ready`` once every writer has loaded its session.
"""

from __future__ import annotations

import asyncio
import sys

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations.google_adk import DeskSessionService

SESSIONS = 4


async def writer(service: DeskSessionService, i: int, ready: asyncio.Barrier) -> None:
    session = await service.get_session(app_name="app", user_id="u", session_id=f"s{i}")
    if session is None:
        session = await service.create_session(app_name="app", user_id="u", session_id=f"s{i}")
    n = len(session.events)
    await ready.wait()
    while True:
        n += 1
        state = {"n": n, f"user:n{i}": n, f"app:n{i}": n}
        content = types.Content(role="user", parts=[types.Part(text=f"m{n}")])
        event = Event(author="user", content=content, actions=EventActions(state_delta=state))
        await service.append_event(session, event)
        print(f"ack {i} {n}", flush=True)


async def main(target: str) -> None:
    async with AsyncHub.open(target) as hub:
        service = DeskSessionService(hub, stale="merge")
        ready = asyncio.Barrier(SESSIONS + 1)
        writers = [asyncio.create_task(writer(service, i, ready)) for i in range(SESSIONS)]
        await ready.wait()
        print("ready", flush=True)
        await asyncio.gather(*writers)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
