"""Events: the stored stream of a session, and their bodies."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any, Final

import msgspec

from sharedesk.protocol.authors import SessionAuthor

__all__ = [
    "Compaction",
    "Event",
    "EventBody",
    "Item",
    "Retracted",
    "RunFinished",
    "RunStarted",
    "SessionStarted",
    "Text",
    "TextDelta",
    "ToolCall",
    "ToolResult",
]

#: The statuses a run can finish with.
RUN_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timeout"})


class _Body(msgspec.Struct, frozen=True, tag_field="type"):
    """Tagged base of the event body kinds (tag field ``"type"``)."""


class Text(_Body, frozen=True, tag="text"):
    """A posted message; ``content`` is its text, stored exactly as given."""

    content: str


class TextDelta(_Body, frozen=True, tag="text_delta"):
    """One streamed chunk (``delta``) of a message still being written."""

    delta: str


class ToolCall(_Body, frozen=True, tag="tool_call"):
    """A tool invocation requested by an agent.

    Attributes:
        tool_call_id: Identifier pairing the call with its result.
        tool_name: Name of the tool.
        tool_input: The arguments, as a JSON-like mapping.
    """

    tool_call_id: str
    tool_name: str
    tool_input: dict[str, Any]


class ToolResult(_Body, frozen=True, tag="tool_result"):
    """The result of a tool call.

    Attributes:
        tool_call_id: The call this result answers.
        output: The tool's output (any JSON-like value).
        is_error: Whether the tool failed.
    """

    tool_call_id: str
    output: Any
    is_error: bool = False


class RunStarted(_Body, frozen=True, tag="run_started"):
    """A run began on a provider.

    Attributes:
        provider: The adapter's name.
        model: The model used, when known.
        provider_session_id: The provider's own session id, when it has one.
    """

    provider: str
    model: str | None = None
    provider_session_id: str | None = None


class RunFinished(_Body, frozen=True, tag="run_finished"):
    """A run ended.

    Attributes:
        status: ``"completed"``, ``"failed"``, ``"cancelled"`` or ``"timeout"``.
        error_code: A short machine-readable code when the run did not complete.
        error_message: A human-readable description of the failure.
        token_usage: Token counts reported by the provider.
    """

    status: str
    error_code: str | None = None
    error_message: str | None = None
    token_usage: dict[str, Any] = {}


class SessionStarted(_Body, frozen=True, tag="session_started"):
    """A session was started with ``metadata``; it gives no log row, no transcript message."""

    metadata: dict[str, Any] = {}


class Item(_Body, frozen=True, tag="item"):
    """A conversation ``item`` (JSON-like) of an agent framework, kept exactly as given.

    The OpenAI Agents SDK integration stores every non-message item (function calls and
    their outputs, reasoning, handoffs) as one; a message item with plain text is a
    ``Text`` instead (the item in ``metadata["sharedesk.item"]``). It gives no log row and
    no transcript message.
    """

    item: dict[str, Any]


class Retracted(_Body, frozen=True, tag="retracted"):
    """Earlier rows were withdrawn; the log stays append-only and they stay readable.

    Readers that honour retractions (the Agents SDK integration's ``get_items``, the
    Agent Framework integration's ``get_messages``) no longer return the rows it names to
    the retracting agent; other agents still get them. Views, turns and transcripts show
    the log as it was written: a retraction gives no log row and no transcript message.

    Attributes:
        target: The ``id`` of the one event withdrawn (``pop_item``), or ``None``.
        through: Every row at or below this sequence is withdrawn (``clear_session``),
            or ``None``.
    """

    target: str | None = None
    through: int | None = None


class Compaction(_Body, frozen=True, tag="compaction"):
    """The rows of one conversation at or below ``through`` are served as one ``summary``.

    Views, turns and transcripts of that conversation show, in their place, one summary
    row authored by the compaction's author (``projection/compaction.py``); the rows stay
    readable with ``read``. Written by ``Hub.compact``.

    Attributes:
        through: The highest sequence the summary replaces.
        summary: The summary's text.
        covers: The authors of the rows it replaces (of earlier compactions' too).
        thread_root: The thread compacted, or ``None`` for the channel.
    """

    through: int
    summary: str
    covers: tuple[SessionAuthor, ...] = ()
    thread_root: int | None = None


#: Any event body, tagged on ``"type"``.
EventBody = (
    Text
    | TextDelta
    | ToolCall
    | ToolResult
    | RunStarted
    | RunFinished
    | SessionStarted
    | Item
    | Retracted
    | Compaction
)


# A uuid4: 128 random bits with the version (bit 76) and the RFC 4122 variant (bit 62)
# set, as ``uuid.uuid4().hex`` builds it, without the ``UUID`` object (half the cost).
_UUID4_CLEAR: Final = ~((0xF << 76) | (0x3 << 62))
_UUID4_SET: Final = (0x4 << 76) | (0x2 << 62)


def new_event_id() -> str:
    """Return a fresh event id: a random (version 4) UUID as 32 lowercase hex digits."""
    return f"{int.from_bytes(os.urandom(16), 'big') & _UUID4_CLEAR | _UUID4_SET:032x}"


class _EventHead(msgspec.Struct, frozen=True):
    author: SessionAuthor
    body: EventBody


class Event(_EventHead, frozen=True, kw_only=True):
    """One event of a session's stream.

    Attributes:
        author: Who wrote it.
        body: What it is (a :data:`EventBody`).
        id: Idempotency key within the session; a fresh uuid4 hex by default.
        parent: Sequence of the thread root this row replies to, or ``None``.
        run_id: The run that produced it, if any.
        sequence: Stamped by the store on append (per session, from 1, no gaps).
        timestamp: Stamped by the store on append (UTC).
        metadata: Free-form JSON-like data kept with the event.
    """

    id: str = msgspec.field(default_factory=new_event_id)
    parent: int | None = None
    run_id: str | None = None
    sequence: int | None = None
    timestamp: datetime | None = None
    metadata: dict[str, Any] = {}
