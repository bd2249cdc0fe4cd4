"""What the MCP server's tools take and give: participants, argument checks, JSON shapes.

Pure helpers of :mod:`sharedesk.servers.mcp`, with no SDK in them: the participant of
``--as`` (``KIND:ID[:LABEL]``), the tools' input and output JSON schemas, the checks every
argument passes before the Hub sees it (a failed one is a :class:`ToolError`, nothing
written), and the JSON of authors and messages.
"""

from __future__ import annotations

import json
import re
import secrets
import urllib.parse
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from sharedesk.protocol import (
    Agent,
    Operator,
    Person,
    SessionAuthor,
    SessionMessage,
    SharedeskError,
    System,
    ValidationError,
)

__all__ = [
    "LONE_SURROGATE",
    "MAX_CONTENT_BYTES",
    "MAX_WAIT_S",
    "TOOLS",
    "ToolError",
    "author_json",
    "check_args",
    "desk_of_uri",
    "desk_uri",
    "mark_lone_surrogates",
    "message_json",
    "parse_participant",
    "participant_key",
    "thawed",
]

#: The most UTF-8 bytes a posted content or a reply may hold.
MAX_CONTENT_BYTES: Final = 256 * 1024
#: The longest ``wait_s`` a ``turn`` may ask for, in seconds.
MAX_WAIT_S: Final = 600.0
#: The scheme of the desk resources: ``desk://{desk}`` (the desk id percent-encoded).
SCHEME: Final = "desk://"


#: What :func:`mark_lone_surrogates` puts in place of a string holding lone surrogates.
LONE_SURROGATE: Final = f"\ue000sharedesk-lone-surrogate-{secrets.token_hex(8)}\ue000"


class ToolError(SharedeskError):
    """Raised when a tool call is refused (an MCP tool error, ``isError``); nothing was written.

    ``message`` says why; the server answers it to the client as it is.
    """

    message: str
    template = "{message}"


def parse_participant(text: str) -> Agent | Person:
    """Parse ``KIND:ID[:LABEL]`` (``agent:ada:Ada``, ``person:pat``; the label defaults to ID).

    Raises:
        ValidationError: Another kind, an empty ID, or a string that is not one.
    """
    kind, _, rest = text.partition(":")
    ident, _, label = rest.partition(":")
    if kind not in ("agent", "person") or not ident.strip():
        raise ValidationError(
            f"a participant is agent:ID[:LABEL] or person:ID[:LABEL], got {text!r}"
        )
    label = label or ident
    return Agent(id=ident, label=label) if kind == "agent" else Person(id=ident, label=label)


def participant_key(author: SessionAuthor) -> str:
    """Return ``KIND:ID``: who a pending turn belongs to (labels ignored)."""
    kind, ident, _ = _parts(author)
    return f"{kind}:{ident}"


def author_json(author: SessionAuthor) -> dict[str, str]:
    """Return ``{"kind", "id", "label"}`` of an author."""
    kind, ident, label = _parts(author)
    return {"kind": kind, "id": ident, "label": label}


def _parts(author: SessionAuthor) -> tuple[str, str, str]:
    match author:
        case Agent(id=ident, label=label):
            return "agent", ident, label
        case Person(id=ident, label=label):
            return "person", ident, label
        case System(kind=kind, label=label):
            return "system", kind, label
        case Operator():
            return "operator", "", "operator"
    raise AssertionError(f"unknown author {author!r}")  # pragma: no cover


def message_json(message: SessionMessage) -> dict[str, Any]:
    """Return ``{"sequence", "author", "content", "parent"}`` of a message."""
    return {
        "sequence": message.sequence,
        "author": author_json(message.author),
        "content": message.content,
        "parent": message.parent,
    }


def desk_uri(desk: str) -> str:
    """Return the resource URI of ``desk`` (its id percent-encoded)."""
    return SCHEME + urllib.parse.quote(desk, safe="")


def desk_of_uri(uri: str) -> str:
    """Return the desk a ``desk://`` URI names.

    Raises:
        ToolError: Another scheme, or an encoding that is not UTF-8.
    """
    if not uri.startswith(SCHEME):
        raise ToolError(f"a desk resource is desk://{{desk}}, got {uri[:200]!r}")
    try:
        return urllib.parse.unquote(uri[len(SCHEME) :], errors="strict")
    except UnicodeDecodeError:
        raise ToolError("the desk of the URI is not UTF-8") from None


# -- arguments ---------------------------------------------------------------------------


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _frozen(value: Any) -> Any:
    """Return ``value`` with every dict made read-only and every list a tuple, all the way down."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(item) for item in value)
    return value


def thawed(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of a frozen ``schema`` of :data:`TOOLS` as plain dicts and lists (JSON)."""
    return {key: _thawed(item) for key, item in schema.items()}


def _thawed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return thawed(value)
    return [_thawed(item) for item in value] if isinstance(value, tuple) else value


def _tools() -> Mapping[str, tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """Build :data:`TOOLS`."""
    desk = {"type": "string", "description": "the desk (session id)"}
    root = {
        "type": ["integer", "null"],
        "minimum": 1,
        "description": "the sequence of a thread's root: that thread; null or absent: the channel",
    }
    author = {
        "type": "object",
        "properties": {
            "kind": {"type": "string"},
            "id": {"type": "string"},
            "label": {"type": "string"},
        },
        "required": ["kind", "id", "label"],
    }
    messages = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "sequence": {"type": "integer"},
                "author": author,
                "content": {"type": "string"},
                "parent": {"type": ["integer", "null"]},
            },
            "required": ["sequence", "author", "content", "parent"],
        },
    }
    sequence = {
        "type": "object",
        "properties": {"sequence": {"type": ["integer", "null"]}},
        "required": ["sequence"],
    }
    tools = {
        "desks": (
            "List the desks of the store, newest activity first.",
            _schema({}, []),
            {
                "type": "object",
                "properties": {
                    "desks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "last_sequence": {"type": "integer"},
                            },
                            "required": ["id", "last_sequence"],
                        },
                    }
                },
                "required": ["desks"],
            },
        ),
        "view": (
            "Your view of a desk's channel (or of one thread): its latest messages, oldest first.",
            _schema({"desk": desk, "thread_root": root}, ["desk"]),
            {"type": "object", "properties": {"messages": messages}, "required": ["messages"]},
        ),
        "post": (
            "Post a message to a desk (the desk is created by its first post).",
            _schema(
                {
                    "desk": desk,
                    "content": {"type": "string", "description": "the message's text"},
                    "parent": {
                        "type": ["integer", "null"],
                        "minimum": 1,
                        "description": "the sequence of a root message: reply in its thread",
                    },
                },
                ["desk", "content"],
            ),
            sequence,
        ),
        "turn": (
            "Take your turn at a desk: what you have not read yet (all of your view the first"
            " time). Answer it with commit(turn_id, reply); until then it is offered again.",
            _schema(
                {
                    "desk": desk,
                    "thread_root": root,
                    "wait_s": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": MAX_WAIT_S,
                        "description": "seconds to wait for at least one message (default 0: none)",
                    },
                    "start_after": {
                        "type": ["integer", "null"],
                        "minimum": 0,
                        "description": "your first turn at this desk only: start after this"
                        " sequence, and read the rows since in pages, oldest first",
                    },
                },
                ["desk"],
            ),
            {
                "type": "object",
                "properties": {
                    "turn_id": {"type": "string"},
                    "reason": {"type": ["string", "null"]},
                    "messages": messages,
                },
                "required": ["turn_id", "reason", "messages"],
            },
        ),
        "commit": (
            "Commit a turn: post the reply (if any) and mark its messages read, in one step.",
            _schema(
                {
                    "turn_id": {
                        "type": "string",
                        "description": "the turn_id that turn returned",
                    },
                    "reply": {
                        "type": ["string", "null"],
                        "description": "your reply, posted in the turn's conversation",
                    },
                },
                ["turn_id"],
            ),
            sequence,
        ),
    }
    frozen: Mapping[str, tuple[str, Mapping[str, Any], Mapping[str, Any]]] = _frozen(tools)
    return frozen


#: Each tool: (description, input schema, output schema), read-only all the way down
#: (:func:`thawed` gives a schema as JSON for the SDK).
TOOLS: Final = _tools()


def check_args(tool: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return the tool's arguments, checked against its schema, with defaults filled.

    Raises:
        ToolError: An unknown tool or argument, a missing one, a wrong type, a number out
            of range, a content too long or holding lone surrogates.
    """
    if tool not in TOOLS:
        raise ToolError(f"unknown tool {tool[:100]!r}")
    schema = TOOLS[tool][1]
    given = dict(arguments or {})
    properties: Mapping[str, Any] = schema["properties"]
    unknown = sorted(set(given) - set(properties))
    if unknown:
        raise ToolError(f"{tool} takes no argument {unknown[0][:100]!r}")
    for name in schema["required"]:
        if name not in given:
            raise ToolError(f"{tool} needs the argument {name!r}")
    checked: dict[str, Any] = {}
    for name in properties:
        checked[name] = _check(name, given.get(name))
    return checked


def _check(name: str, value: Any) -> Any:
    if name in ("desk", "turn_id"):
        return _text(name, value, limit=1024)
    if name in ("content", "reply"):
        if value is None and name == "reply":
            return None
        return _text(name, value, limit=MAX_CONTENT_BYTES)
    if name in ("thread_root", "parent", "start_after"):
        low = 0 if name == "start_after" else 1
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**63:
            raise ToolError(
                f"{name} must be a sequence (an integer >= {low}) or null, got {value!r}"
            )
        return value
    if name == "wait_s":
        if value is None:
            return 0.0
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 <= value <= MAX_WAIT_S  # NaN too
        ):
            raise ToolError(f"wait_s must be seconds in [0, {MAX_WAIT_S:g}], got {value!r}")
        return float(value)
    raise AssertionError(name)  # pragma: no cover


def _text(name: str, value: Any, *, limit: int) -> str:
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string, got {type(value).__name__}")
    if LONE_SURROGATE in value:
        raise ToolError(f"{name} holds a lone surrogate (not UTF-8 encodable)")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ToolError(f"{name} holds a lone surrogate (not UTF-8 encodable)") from None
    if size > limit:
        raise ToolError(f"{name} is {size} UTF-8 bytes; at most {limit} are taken")
    return value


_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def mark_lone_surrogates(line: str) -> str:
    """Return a JSON-RPC line with every string holding lone surrogates replaced.

    The SDK's JSON parser refuses a message whose strings escape lone surrogates and
    drops it unanswered; replaced by :data:`LONE_SURROGATE`, the call reaches the tool,
    whose checks refuse it with a tool error. Cost: a regex scan; a parse and a dump
    only for a line with a surrogate escape.
    """
    if not _SURROGATE_ESCAPE.search(line):
        return line
    try:
        message = json.loads(line)
    except ValueError:
        return line
    return json.dumps(_marked(message), ensure_ascii=False) + "\n"


def _marked(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return LONE_SURROGATE
        return value
    if isinstance(value, list):
        return [_marked(item) for item in value]
    if isinstance(value, dict):
        return {_marked(key): _marked(item) for key, item in value.items()}
    return value
