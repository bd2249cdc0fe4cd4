"""Renderers: a :class:`~sharedesk.Transcript` as the input of a provider's API.

The renderers keep attribution, which a bare (role, content) list loses: OpenAI chat
messages carry the peer in the ``name`` field; Anthropic's and the Responses API's
messages have no such field, so the peer's label prefixes the text (``"[Label] ..."``).

They pair tool calls with their results the way the APIs demand: a call is sent only
with its result, and the result comes right after the assistant turn holding the call
(a call whose result is not in the transcript, or a result whose call was cut, is left
out; the transcript builder already avoids cutting pairs). Neither emits empty content:
a text message whose content is blank (``content.strip() == ""``) is left out, since
provider APIs reject empty text blocks. They are pure functions.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from sharedesk.protocol.authors import Agent, Operator, Person, SessionAuthor, author_label
from sharedesk.protocol.transcripts import Transcript, TranscriptMessage

_NAME_FORBIDDEN: Final = re.compile(r"[^a-zA-Z0-9_-]")
_NAME_MAX: Final = 64


def openai_name(author: SessionAuthor | None) -> str | None:
    """Return the ``name`` an OpenAI message gets for ``author``, or ``None``.

    Only people and agents are named: the label (else the id) with every character
    outside ``[a-zA-Z0-9_-]`` replaced by ``_``, cut to 64 characters.

    Cost: O(len(label)).
    """
    if not isinstance(author, Person | Agent):
        return None
    for raw in (author.label, author.id):
        name = _NAME_FORBIDDEN.sub("_", raw)[:_NAME_MAX]
        if name.strip("_"):
            return name
    return None


def _peer_label(author: SessionAuthor | None) -> str | None:
    return None if author is None or isinstance(author, Operator) else author_label(author)


def _is_call(message: TranscriptMessage) -> bool:
    return message.role == "assistant" and message.tool_call_id is not None


def _is_result(message: TranscriptMessage) -> bool:
    return message.role == "tool"


def output_text(output: Any) -> str:
    """Return a tool output as the text providers take. Cost: O(size of output)."""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, default=str)


def _blank(message: TranscriptMessage) -> bool:
    """Return whether ``message`` is a text (not a tool call or result) of only whitespace."""
    return not _is_call(message) and not _is_result(message) and not (message.content or "").strip()


def _paired(messages: list[TranscriptMessage]) -> list[list[TranscriptMessage]]:
    """Group messages into turns: a plain message alone, or calls followed by results.

    A run of consecutive calls becomes one group: the calls that have a result, then
    those results in call order. Unpaired calls and results are dropped.
    """
    results: dict[str, TranscriptMessage] = {}
    for message in messages:
        if _is_result(message) and message.tool_call_id is not None:
            results.setdefault(message.tool_call_id, message)
    groups: list[list[TranscriptMessage]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if _is_call(message):
            calls: list[TranscriptMessage] = []
            while index < len(messages) and _is_call(messages[index]):
                if messages[index].tool_call_id in results:
                    calls.append(messages[index])
                index += 1
            if calls:
                groups.append(calls + [results[c.tool_call_id or ""] for c in calls])
            continue
        if not _is_result(message) and not _blank(message):
            groups.append([message])  # results travel with their calls; orphans drop
        index += 1
    return groups


def to_openai_messages(transcript: Transcript) -> list[dict[str, Any]]:
    """Render a transcript as OpenAI chat-completions messages.

    ``system``/``user``/``assistant`` messages keep their role and content; a ``user``
    message by a person or an agent (a peer) carries ``name`` (see
    :func:`openai_name`). Consecutive tool calls become one assistant message with
    ``tool_calls`` (arguments JSON-encoded), followed by one ``tool`` message per result
    (``tool_call_id``, output as text).

    Args:
        transcript: The transcript, roles already relative to the viewer.

    Returns:
        The messages, oldest first.

    Cost: O(messages); no I/O.
    """
    rendered: list[dict[str, Any]] = []
    for group in _paired(transcript.messages):
        first = group[0]
        if not _is_call(first):
            item: dict[str, Any] = {"role": first.role, "content": first.content or ""}
            name = openai_name(first.author)
            if name is not None and first.role == "user":
                item["name"] = name
            rendered.append(item)
            continue
        calls = [m for m in group if _is_call(m)]
        rendered.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.tool_call_id,
                        "type": "function",
                        "function": {
                            "name": call.tool_name or "",
                            "arguments": json.dumps(call.tool_input or {}, ensure_ascii=False),
                        },
                    }
                    for call in calls
                ],
            }
        )
        rendered.extend(
            {
                "role": "tool",
                "tool_call_id": result.tool_call_id,
                "content": output_text(result.tool_output),
            }
            for result in group[len(calls) :]
        )
    return rendered


def to_anthropic_messages(transcript: Transcript) -> tuple[str | None, list[dict[str, Any]]]:
    """Render a transcript as Anthropic Messages API input: ``(system, messages)``.

    The leading ``system`` messages become the system prompt (joined by a blank line);
    a later system message is a user turn ``"[Label] ..."`` (that API has one system
    prompt). A person's or agent's ``user`` message is prefixed with ``"[Label] "``.
    Content is always a list of blocks: ``text``, ``tool_use`` (id, name, input) and
    ``tool_result`` (tool_use_id, content). Consecutive messages of one role merge into
    one message, as the API requires, with ``tool_result`` blocks first in a user turn.
    Nothing is invented: a transcript that opens with an assistant turn is rendered as
    it is (the caller adds the run's input as the last user turn).

    Args:
        transcript: The transcript, roles already relative to the viewer.

    Returns:
        The system prompt (``None`` when there is none) and the messages, oldest first.

    Cost: O(messages); no I/O.
    """
    groups = _paired(transcript.messages)
    system_parts: list[str] = []
    while groups and groups[0][0].role == "system":
        system_parts.append(groups.pop(0)[0].content or "")
    turns: list[tuple[str, dict[str, Any]]] = []
    for group in groups:
        first = group[0]
        if _is_call(first):
            calls = [m for m in group if _is_call(m)]
            turns.extend(
                (
                    "assistant",
                    {
                        "type": "tool_use",
                        "id": call.tool_call_id,
                        "name": call.tool_name or "",
                        "input": call.tool_input or {},
                    },
                )
                for call in calls
            )
            turns.extend(
                (
                    "user",
                    {
                        "type": "tool_result",
                        "tool_use_id": result.tool_call_id,
                        "content": output_text(result.tool_output),
                    },
                )
                for result in group[len(calls) :]
            )
            continue
        text = first.content or ""
        role = "assistant" if first.role == "assistant" else "user"
        label = _peer_label(first.author)
        if role == "user" and label is not None:
            text = f"[{label}] {text}"
        turns.append((role, {"type": "text", "text": text}))
    messages: list[dict[str, Any]] = []
    for role, block in turns:
        if messages and messages[-1]["role"] == role:
            blocks: list[dict[str, Any]] = messages[-1]["content"]
            if block["type"] == "tool_result":
                at = sum(1 for b in blocks if b["type"] == "tool_result")
                blocks.insert(at, block)
            else:
                blocks.append(block)
        else:
            messages.append({"role": role, "content": [block]})
    return ("\n\n".join(system_parts) if system_parts else None), messages


def to_responses_input(transcript: Transcript) -> list[dict[str, Any]]:
    """Render a transcript as OpenAI Responses API input items.

    ``system``/``assistant`` messages keep their role; a ``user`` message by a person or
    an agent is prefixed ``"[Label] "``; a tool call is a ``function_call`` item
    (arguments JSON-encoded) right before its ``function_call_output`` item.

    Cost: O(messages); no I/O.
    """
    items: list[dict[str, Any]] = []
    for group in _paired(transcript.messages):
        first = group[0]
        if not _is_call(first):
            text = first.content or ""
            if first.role == "user" and isinstance(first.author, Person | Agent):
                text = f"[{author_label(first.author)}] {text}"
            items.append({"role": first.role, "content": text})
            continue
        calls = [m for m in group if _is_call(m)]
        for call, result in zip(calls, group[len(calls) :], strict=True):
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.tool_call_id,
                    "name": call.tool_name or "",
                    "arguments": json.dumps(call.tool_input or {}, ensure_ascii=False),
                }
            )
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": result.tool_call_id,
                    "output": output_text(result.tool_output),
                }
            )
    return items
