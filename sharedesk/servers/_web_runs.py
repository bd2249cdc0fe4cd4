"""One run of a desk as the web page opens it: its status, its rows, the transcript it received.

The transcript is rebuilt the way a replaying run gets one (``TranscriptBuilder`` over
the desk's events, relative to the run's agent, its own events left out), from the
newest :data:`TRANSCRIPT_EVENTS` events before the run's first row: what the adapter
received when it ran without a tighter budget.
"""

from __future__ import annotations

from typing import Any, Final

from sharedesk.actors import Hub
from sharedesk.projection import TranscriptBuilder
from sharedesk.protocol.authors import Agent, SessionAuthor
from sharedesk.protocol.events import RunFinished, RunStarted
from sharedesk.servers._web_shapes import author_json, row_json

__all__ = ["TRANSCRIPT_EVENTS", "run_json"]

#: Most events read for a run's transcript.
TRANSCRIPT_EVENTS: Final = 200


def run_json(hub: Hub, desk: str, run_id: str) -> dict[str, Any] | None:
    """Return ``{"run_id", "status", "provider", "model", "agent", "rows", "transcript"}``.

    ``status`` is the ``RunFinished`` status, else ``"running"`` once started, else
    ``"pending"``; ``None`` for a run the desk does not hold.

    Cost: one run-index walk, and one read of at most ``TRANSCRIPT_EVENTS`` events.
    """
    events = hub.run_events(desk, run_id)
    if not events:
        return None
    status, provider, model = "pending", None, None
    agent: SessionAuthor | None = None
    for event in events:
        body = event.body
        if isinstance(body, RunStarted):
            status, provider, model = "running", body.provider, body.model
        elif isinstance(body, RunFinished):
            status = body.status
        elif agent is None and isinstance(event.author, Agent):
            agent = event.author
    first = events[0].sequence or 1
    before = hub.read(desk, before=first, limit=TRANSCRIPT_EVENTS, newest_first=True)
    transcript = TranscriptBuilder.from_events(before, session_id=desk, viewer=agent)
    return {
        "run_id": run_id,
        "status": status,
        "provider": provider,
        "model": model,
        "agent": None if agent is None else author_json(agent),
        "rows": [row_json(event) for event in events],
        "transcript": [
            {
                "role": m.role,
                "author": None if m.author is None else author_json(m.author),
                "content": m.content,
                "tool_name": m.tool_name,
            }
            for m in transcript.messages
        ],
    }
