"""Transcripts: provider-agnostic conversation history rebuilt from events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from sharedesk.protocol.authors import SessionAuthor


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


class TranscriptFold(msgspec.Struct, frozen=True):
    """Where the fold that built a transcript stopped, for ``update_from_store`` to go on.

    Attributes:
        viewer: :func:`~sharedesk.protocol.author_key` of the viewer, or ``None``.
        open_text: The open streamed message (also when truncation cut it), or ``None``.
        open_run_id: The run of that open message.
        cut_pending_calls: ``tool_call_id`` of each unanswered call that truncation cut,
            oldest first.
    """

    viewer: str | None = None
    open_text: TranscriptMessage | None = None
    open_run_id: str | None = None
    cut_pending_calls: tuple[str, ...] = ()


class Transcript(msgspec.Struct, frozen=True):
    """A session's history as messages.

    Attributes:
        session_id: The session.
        messages: The messages, oldest first, after truncation.
        last_sequence: Highest sequence among the events read (not the cut).
        last_timestamp: Latest timestamp among the events read.
        metadata: Free-form data about the transcript (the builder writes none).
        _fold: Where the builder's fold stopped (``None`` for a transcript built by hand).
    """

    session_id: str
    messages: list[TranscriptMessage]
    last_sequence: int | None
    last_timestamp: datetime | None
    metadata: dict[str, Any] = {}
    _fold: TranscriptFold | None = None
