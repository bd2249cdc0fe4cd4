"""Transcripts: provider-agnostic conversation history rebuilt from events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from sharedesk.protocol.authors import SessionAuthor

#: The roles a transcript message can have.
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})


class TranscriptMessage(msgspec.Struct, frozen=True):
    """One message of a transcript, with its role relative to the viewer.

    Attributes:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        content: The text, when the message has text.
        tool_call_id: Pairs a tool call with its result.
        tool_name: The tool's name (tool calls).
        tool_input: The tool's arguments (tool calls).
        tool_output: The tool's output (tool results).
        metadata: ``event_id``, ``sequence`` (when stored) and ``run_id`` (when set) of
            the source event, merged with that event's own metadata.
        author: Who wrote it (kept whatever the role).
    """

    role: str
    content: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_output: Any = None
    metadata: dict[str, Any] = {}
    author: SessionAuthor | None = None


class Transcript(msgspec.Struct, frozen=True):
    """A session's history as messages.

    Attributes:
        session_id: The session.
        messages: The messages, oldest first, after truncation.
        last_sequence: Highest sequence among the events read (not the cut).
        last_timestamp: Latest timestamp among the events read.
        metadata: Free-form data about the transcript.
    """

    session_id: str
    messages: list[TranscriptMessage]
    last_sequence: int | None
    last_timestamp: datetime | None
    metadata: dict[str, Any] = {}
