"""Transcript messages: a session's events folded into provider-agnostic messages.

The rules of :class:`~sharedesk.TranscriptBuilder`, stated once, in the order the fold
applies them:

1. **Order.** Events with a sequence first, by sequence; then by timestamp (missing
   last; a naive one read as UTC); then by ``id``; then by position in the input.
2. **Messages.** ``Text`` and ``TextDelta`` give a message whose role is relative to the
   viewer (:func:`role_of`); a blank ``Text`` gives none (it closes its own stream).
   ``ToolCall`` gives an ``"assistant"`` message, ``ToolResult`` a ``"tool"`` message
   (``is_error`` in its metadata); lifecycle events give none. Every message keeps its
   author; its metadata is its event's own with ``event_id``, ``sequence`` (when stored)
   and ``run_id`` (when set) written over it.
3. **Streaming.** A ``TextDelta`` opens a message that the following deltas of the same
   participant (labels ignored) and run extend. A ``Text`` of that participant and run
   closes it, its content replacing the streamed text unless empty; any other message
   closes it as it is (lifecycle events do not). A merged message keeps the first
   event's ``event_id``/``sequence``/``run_id``, merges in each later event's metadata,
   and names the last event merged (``last_event_id``, ``last_sequence`` when stored).
4. **Tool pairing.** A ``ToolResult`` answers the latest unanswered earlier ``ToolCall``
   with its ``tool_call_id`` (so no older event can change a pair, and a tail read can
   stop); a result that answers no call gives no message.
5. **Truncation** keeps the longest suffix of the messages that fits every budget and
   splits no call from its result: the cut moves from the oldest message the budgets
   allow toward newer ones until no pair straddles it. ``max_messages`` counts messages;
   ``max_chars`` and ``max_tokens_approx`` (``CHARS_PER_TOKEN`` characters a token) are
   character budgets, counted by :func:`message_chars`, and the lower wins.
6. **Compaction.** A channel ``Compaction`` replaces the messages of the events at or
   below its ``through`` by one summary message of its author (``covers`` and
   ``through`` in its metadata); the builder folds no event at or below the newest one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypedDict

import msgspec

from sharedesk.projection.compaction import compacted_messages
from sharedesk.protocol.authors import Agent, SessionAuthor, System, author_key, same_participant
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Compaction, Event, Text, TextDelta, ToolCall, ToolResult
from sharedesk.protocol.transcripts import TranscriptMessage
from sharedesk.protocol.validation import check_optional_int

if TYPE_CHECKING:
    from datetime import datetime

#: Characters counted as one token by ``max_tokens_approx``.
CHARS_PER_TOKEN: Final = 4


def role_of(author: SessionAuthor, viewer: SessionAuthor | None) -> str:
    """Return the role of a ``Text`` (or ``TextDelta``) by ``author`` for ``viewer``.

    ``"assistant"`` when ``author`` is the viewer (labels ignored; checked first);
    ``"system"`` for any other ``System`` author; else ``"user"``, except that with no
    viewer agents are ``"assistant"``.
    """
    if viewer is not None and same_participant(author, viewer):
        return "assistant"
    if isinstance(author, System):
        return "system"
    if viewer is None and isinstance(author, Agent):
        return "assistant"
    return "user"


def message_chars(message: TranscriptMessage) -> int:
    """Return the characters (code points) a message counts against a character budget.

    Those of its ``content``, its ``tool_input`` as compact JSON and its ``tool_output``
    (a ``str`` itself, else as compact JSON); ``ValidationError`` when not JSON-encodable.
    """
    chars = len(message.content or "")
    if message.tool_input is not None:
        chars += _json_chars(message.tool_input, "tool_input")
    output = message.tool_output
    if isinstance(output, str):
        chars += len(output)
    elif output is not None:
        chars += _json_chars(output, "tool_output")
    return chars


def _json_chars(value: Any, what: str) -> int:
    try:
        return len(msgspec.json.encode(value).decode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationError(f"{what} cannot be counted: it is not JSON-encodable") from exc


class Budgets(TypedDict, total=False):
    """The keyword budgets of rule 5, as every ``TranscriptBuilder`` method takes them."""

    max_messages: int | None
    max_chars: int | None
    max_tokens_approx: int | None


class Budget:
    """The checked :class:`Budgets` of one call (``ValidationError`` for a bad one)."""

    __slots__ = ("bounded", "chars", "messages")

    def __init__(
        self, *, max_messages: Any = None, max_chars: Any = None, max_tokens_approx: Any = None
    ) -> None:
        #: Most messages kept.
        self.messages = check_optional_int("max_messages", max_messages)
        chars = check_optional_int("max_chars", max_chars)
        tokens = check_optional_int("max_tokens_approx", max_tokens_approx)
        token_chars = None if tokens is None else tokens * CHARS_PER_TOKEN
        limits = [n for n in (chars, token_chars) if n is not None]
        #: Most characters kept: the lower of the two character budgets.
        self.chars = min(limits) if limits else None
        #: Whether any budget is set.
        self.bounded = self.messages is not None or self.chars is not None

    def oldest_kept(self, messages: Sequence[TranscriptMessage]) -> int:
        """Return the index of the oldest message the budgets allow (0 when all fit)."""
        start = len(messages)
        floor = 0 if self.messages is None else max(0, start - self.messages)
        chars = 0
        while start > floor:
            if self.chars is not None:
                chars += message_chars(messages[start - 1])
                if chars > self.chars:
                    break
            start -= 1
        return start


def _is_call(message: TranscriptMessage) -> bool:
    return message.role == "assistant" and message.tool_call_id is not None


def truncate(
    messages: list[TranscriptMessage], cut_calls: Sequence[str], budget: Budget
) -> tuple[list[TranscriptMessage], list[str]]:
    """Keep the longest suffix of ``messages`` within ``budget`` that splits no pair (rule 5).

    Returns it and the unanswered calls now cut (after ``cut_calls``, cut earlier). O(n).
    """
    count = len(messages)
    start = budget.oldest_kept(messages)
    # A result pairs with its call (latest unanswered first), or with position -1 when
    # that call was cut earlier (or is missing), so no cut at or before it can keep it.
    calls: list[tuple[str, int]] = [(call_id, -1) for call_id in cut_calls]
    waiting: dict[str, list[int]] = {}  # call id -> its unanswered calls, newest last
    for index, (call_id, _) in enumerate(calls):
        waiting.setdefault(call_id, []).append(index)
    answered: set[int] = set()
    straddled = [0] * (count + 2)  # difference array of cuts that would split a pair
    for position, message in enumerate(messages):
        if _is_call(message):
            assert message.tool_call_id is not None
            waiting.setdefault(message.tool_call_id, []).append(len(calls))
            calls.append((message.tool_call_id, position))
        elif message.role == "tool":
            queue = waiting.get(message.tool_call_id or "")
            call_position = -1
            if queue:
                call = queue.pop()
                answered.add(call)
                call_position = calls[call][1]
            straddled[call_position + 1] += 1
            straddled[position + 1] -= 1
    # Move the cut toward newer messages until no pair straddles it.
    depth, cut = 0, count
    for position in range(count + 1):
        depth += straddled[position]
        if position >= start and depth == 0:
            cut = position
            break
    still_cut = [
        call_id
        for index, (call_id, position) in enumerate(calls)
        if index not in answered and position < cut
    ]
    return messages[cut:], still_cut


class _Stream:
    """The open streamed message, kept mutable until it closes (O(n) for n deltas)."""

    __slots__ = ("author", "chunks", "first", "metadata", "role", "run_id")

    def __init__(self, message: TranscriptMessage, run_id: str | None) -> None:
        assert message.author is not None
        self.role = message.role
        self.author: SessionAuthor = message.author
        self.run_id = run_id
        self.chunks = [message.content or ""]
        self.metadata = dict(message.metadata)
        # The first event's identity stays whatever later events carry.
        self.first: dict[str, Any] = {
            key: self.metadata[key]
            for key in ("event_id", "sequence", "run_id")
            if key in self.metadata
        }

    def extend(self, event: Event, chunk: str) -> None:
        """Append ``chunk`` and merge ``event``'s own metadata (the first's keys stay)."""
        self.chunks.append(chunk)
        self.metadata.update(event.metadata)
        self.metadata.update(self.first)
        self.metadata["last_event_id"] = event.id
        if event.sequence is not None:
            self.metadata["last_sequence"] = event.sequence

    def message(self, content: str | None = None) -> TranscriptMessage:
        """Return the stream as a message (with ``content`` instead, when given)."""
        return TranscriptMessage(
            role=self.role,
            content="".join(self.chunks) if content is None else content,
            metadata=dict(self.metadata),
            author=self.author,
        )


class MessageFold:
    """The working state of one fold (rules 2 to 4): messages, open stream, unanswered calls.

    It may continue an earlier fold: its kept ``messages``, the ``open_text`` message
    (of run ``open_run``) still open when it stopped, and the ``cut_calls`` truncation cut.
    """

    __slots__ = ("messages", "orphans", "stream", "unanswered", "viewer")

    def __init__(
        self,
        viewer: SessionAuthor | None,
        messages: Sequence[TranscriptMessage] = (),
        open_text: TranscriptMessage | None = None,
        open_run: str | None = None,
        cut_calls: Sequence[str] = (),
    ) -> None:
        self.viewer = viewer
        self.messages = list(messages)
        self.stream = None if open_text is None else _Stream(open_text, open_run)
        self.unanswered: Counter[str] = Counter(cut_calls)
        #: Results that answered no call read so far (their call may lie further back).
        self.orphans = 0
        for message in self.messages:
            if _is_call(message):
                assert message.tool_call_id is not None
                self.unanswered[message.tool_call_id] += 1
            elif message.role == "tool":
                self._answer(message.tool_call_id or "")

    def add_all(self, events: Sequence[Event]) -> None:
        """Fold ``events`` into the messages, in the order of rule 1."""
        for event in ordered(events):
            self.add(event)

    def add(self, event: Event) -> None:
        """Fold one event into the messages."""
        match event.body:
            case TextDelta(delta=delta):
                stream = self._continued_by(event)
                if stream is not None:
                    stream.extend(event, delta)
                else:
                    self._close()
                    self.stream = _Stream(self._text(event, delta), event.run_id)
            case Text(content=content):
                stream = self._continued_by(event)
                if stream is not None:
                    stream.extend(event, "")
                    self.stream = None
                    self.messages.append(stream.message(content if content.strip() else None))
                elif content.strip():
                    self._append(self._text(event, content))
                # a blank Text gives no message (and leaves another's stream open)
            case ToolCall(tool_call_id=call_id, tool_name=name, tool_input=tool_input):
                self._append(
                    TranscriptMessage(
                        role="assistant",
                        tool_call_id=call_id,
                        tool_name=name,
                        tool_input=dict(tool_input),
                        metadata=_event_metadata(event),
                        author=event.author,
                    )
                )
                self.unanswered[call_id] += 1
            case ToolResult(tool_call_id=call_id, output=output, is_error=is_error):
                if not self._answer(call_id):
                    self.orphans += 1
                    return  # answers no call: no message, and the stream stays open
                metadata = _event_metadata(event)
                metadata["is_error"] = is_error
                self._append(
                    TranscriptMessage(
                        role="tool",
                        tool_call_id=call_id,
                        tool_output=output,
                        metadata=metadata,
                        author=event.author,
                    )
                )
            case Compaction(thread_root=None):
                self._compact(event, event.body)
            case _:  # RunStarted, RunFinished and body kinds added later give no message
                return

    def finish(self) -> tuple[list[TranscriptMessage], TranscriptMessage | None, str | None]:
        """Return the messages, the open message (also last of them) and its run."""
        if self.stream is None:
            return self.messages, None, None
        open_text = self.stream.message()
        return [*self.messages, open_text], open_text, self.stream.run_id

    def _compact(self, event: Event, body: Compaction) -> None:
        """Replace the messages at or below ``body.through`` by its summary (``compaction.py``)."""
        if event.sequence is not None and body.through >= event.sequence:
            return  # appended by hand, reaching itself: changes nothing
        stream = self.stream
        if stream is not None and stream.first.get("sequence", body.through + 1) <= body.through:
            self.stream = None
        metadata = _event_metadata(event)
        metadata["covers"] = [author_key(author) for author in body.covers]
        metadata["through"] = body.through
        role = role_of(event.author, self.viewer)
        summary = TranscriptMessage(role, body.summary, metadata=metadata, author=event.author)
        rest = MessageFold(self.viewer, compacted_messages(self.messages, summary, body.through))
        self.messages, self.unanswered = rest.messages, rest.unanswered

    def _answer(self, call_id: str) -> bool:
        if not self.unanswered[call_id]:
            return False
        self.unanswered[call_id] -= 1
        return True

    def _text(self, event: Event, content: str) -> TranscriptMessage:
        return TranscriptMessage(
            role=role_of(event.author, self.viewer),
            content=content,
            metadata=_event_metadata(event),
            author=event.author,
        )

    def _continued_by(self, event: Event) -> _Stream | None:
        stream = self.stream
        if stream is None or stream.run_id != event.run_id:
            return None
        return stream if same_participant(stream.author, event.author) else None

    def _close(self) -> None:
        if self.stream is not None:
            self.messages.append(self.stream.message())
            self.stream = None

    def _append(self, message: TranscriptMessage) -> None:
        self._close()
        self.messages.append(message)


def _event_metadata(event: Event) -> dict[str, Any]:
    """Return the event's own metadata merged with its ``event_id``/``sequence``/``run_id``."""
    metadata = dict(event.metadata)
    metadata["event_id"] = event.id
    if event.sequence is not None:
        metadata["sequence"] = event.sequence
    if event.run_id is not None:
        metadata["run_id"] = event.run_id
    return metadata


def _timestamp_key(value: datetime) -> datetime:
    """Return ``value`` as a naive UTC datetime, so naive and aware values compare."""
    offset = value.utcoffset()
    naive = value.replace(tzinfo=None)
    return naive if offset is None else naive - offset


def _order_key(item: tuple[int, Event]) -> tuple[Any, ...]:
    position, event = item
    sequence, timestamp = event.sequence, event.timestamp
    return (
        sequence is None,
        0 if sequence is None else sequence,
        timestamp is None,
        0 if timestamp is None else _timestamp_key(timestamp),
        event.id,
        position,
    )


def ordered(events: Sequence[Event]) -> list[Event]:
    """Return ``events`` in the order of rule 1. Cost: O(n) when already in order."""
    # Events read from a store come with strictly ascending sequences: already in order
    # (the full key, with its timestamp normalisation, is only needed otherwise).
    previous = 0
    for event in events:
        sequence = event.sequence
        if sequence is None or sequence <= previous:
            return [event for _, event in sorted(enumerate(events), key=_order_key)]
        previous = sequence
    return list(events)


def latest(stamps: Iterable[datetime | None]) -> datetime | None:
    """Return the latest of ``stamps`` (naive ones read as UTC), or ``None``."""
    return max((s for s in stamps if s is not None), key=_timestamp_key, default=None)
