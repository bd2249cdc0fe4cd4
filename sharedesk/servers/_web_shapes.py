"""The JSON shapes of the web API: an author and a stored row."""

from __future__ import annotations

from typing import Any

from sharedesk.protocol.authors import Agent, Person, SessionAuthor, System
from sharedesk.protocol.events import Event, RunFinished, RunStarted, Text

__all__ = ["author_json", "row_json"]


def author_json(author: SessionAuthor) -> dict[str, str]:
    """Return an author as the API shows it: ``{"kind", "id", "label"}``. Cost: O(1)."""
    match author:
        case Person(id=ident, label=name):
            return {"kind": "person", "id": ident, "label": name}
        case Agent(id=ident, label=name):
            return {"kind": "agent", "id": ident, "label": name}
        case System(kind=kind, label=name):
            return {"kind": "system", "id": kind, "label": name}
    return {"kind": "operator", "id": "operator", "label": "operator"}


def row_json(event: Event) -> dict[str, Any]:
    """Return one stored event as the API shows it (see the module docstring). Cost: O(1)."""
    body = event.body
    row: dict[str, Any] = {
        "sequence": event.sequence,
        "type": type(body).__struct_config__.tag,
        "author": author_json(event.author),
        "content": body.content if isinstance(body, Text) else None,
        "parent": event.parent,
        "run_id": event.run_id,
        "timestamp": event.timestamp,
    }
    if isinstance(body, RunFinished):
        row["status"] = body.status
    elif isinstance(body, RunStarted):
        row["model"] = body.model
    return row
