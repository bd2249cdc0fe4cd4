"""Transcripts: a session's events folded into provider-agnostic messages.

This module is a pure fold, like the rest of ``sharedesk.projection``: it takes events
(or reads them through the store port) and returns a :class:`~sharedesk.Transcript`.
Of sharedesk it imports only ``sharedesk.protocol``; no store, clock, lock or logger.

The fold, in the order it is applied:

1. **Order.** Events with a sequence come first, by sequence; then by timestamp
   (events without one last; a naive timestamp is read as UTC); then by ``id``; then by
   position in the input.
2. **Messages.** ``Text`` and ``TextDelta`` give a message whose role is relative to the
   viewer (see :func:`TranscriptBuilder.role_of`), except that a blank ``Text``
   (``content.strip() == ""``) gives none (it closes its own stream, whose streamed text
   then stands); ``ToolCall`` gives an ``"assistant"``
   message carrying ``tool_call_id``/``tool_name``/``tool_input``; ``ToolResult`` gives
   a ``"tool"`` message carrying ``tool_call_id``/``tool_output`` (``is_error`` goes in
   its metadata). ``RunStarted`` and ``RunFinished`` give no message. Every message
   keeps its author. A message's metadata is its event's own metadata with
   ``event_id``, ``sequence`` (when stored) and ``run_id`` (when set) written over it.
3. **Streaming.** A ``TextDelta`` opens a message that stays *open* while the next
   message-giving event is a ``TextDelta`` of the same participant (labels ignored) and
   run: those deltas are appended to it. A ``Text`` of that participant and run closes
   it, its own content replacing the streamed text unless it is empty. Any other
   message (another author or run, a tool call or result) closes it as it is; a later
   delta then starts a new message. Lifecycle events give no message and so do not
   interrupt a stream. Interleaved streams of two agents therefore give alternating
   fragments: the transcript keeps the order in which things were written. A merged
   message's metadata keeps the first event's ``event_id``/``sequence``/``run_id``,
   merges in each later event's own metadata, and names the last event merged in as
   ``last_event_id`` (and ``last_sequence`` when stored).
4. **Tool pairing.** A ``ToolResult`` answers the earliest unanswered earlier
   ``ToolCall`` with its ``tool_call_id``. A result that answers no call (its call was
   not read, came later, or was already answered) gives no message: a provider would
   reject a result without its call.
5. **Truncation** keeps the longest *suffix* of the messages that fits every budget and
   does not split a call from its result: the cut starts at the oldest message the
   budgets allow and moves toward newer messages until no pair straddles it, so a pair
   is always dropped together (with what lies between them). ``max_messages`` counts
   messages; ``max_chars`` and ``max_tokens_approx`` (4 characters a token) are
   character budgets, counted by :func:`TranscriptBuilder.message_chars`, and the lower
   wins.

**Reading from the tail.** ``from_store`` with ``limit`` reads only the newest ``limit``
events. With a message or character budget it reads the session newest first, in pages
(``_FIRST_PAGE`` events, doubling to ``PAGE_SIZE`` times eight), and stops as soon as the
events read already decide the kept suffix: the budgets cut at least one message of
them and every tool result read found its call. The messages kept are then exactly
those a fold of the whole session would keep (the only message that can differ, the
oldest one read, whose stream may begin further back, is among those cut). Only
``cut_pending_calls`` may miss calls that lie beyond what was read.

``update_from_store`` continues the fold from where it stopped, without re-reading
anything at or below ``transcript.last_sequence``. What it needs beyond the messages is
kept in the transcript's private :class:`~sharedesk.protocol.transcripts.TranscriptFold`
(``Transcript.metadata`` is left to the caller). Without budgets, updating a transcript
gives exactly what a fresh ``from_store`` gives. With budgets it truncates the kept
messages plus the new ones, which gives the same result as a fresh build except in one
case: an open streamed message that had alone exceeded the character budget (and so
was cut, with everything before it) and is then closed by a shorter ``Text``; the fresh
build may keep older messages that the update no longer has. A later result to a call
that truncation cut (``TranscriptFold.cut_pending_calls``) is dropped with everything
before it, exactly as a fresh build would drop the pair.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from sharedesk.protocol.authors import (
    Agent,
    SessionAuthor,
    System,
    author_key,
    same_participant,
)
from sharedesk.protocol.codec import decode_json_as, encode_json
from sharedesk.protocol.errors import SharedeskError, ValidationError
from sharedesk.protocol.events import (
    Event,
    RunFinished,
    RunStarted,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
)
from sharedesk.protocol.ports import EventStore
from sharedesk.protocol.transcripts import Transcript, TranscriptFold, TranscriptMessage
from sharedesk.protocol.validation import (
    check_optional_author,
    check_optional_int,
    check_session_id,
)

if TYPE_CHECKING:
    from datetime import datetime

#: Characters counted as one token by ``max_tokens_approx``.
CHARS_PER_TOKEN: Final = 4


class _Budget:
    """Checked truncation budgets of one call (``None``: unbounded)."""

    __slots__ = ("chars", "messages")

    def __init__(self, max_messages: Any, max_chars: Any, max_tokens_approx: Any) -> None:
        self.messages = check_optional_int("max_messages", max_messages)
        chars = check_optional_int("max_chars", max_chars)
        tokens = check_optional_int("max_tokens_approx", max_tokens_approx)
        token_chars = None if tokens is None else tokens * CHARS_PER_TOKEN
        if chars is None:
            self.chars = token_chars
        elif token_chars is None:
            self.chars = chars
        else:
            self.chars = min(chars, token_chars)


class _Stream:
    """The open streamed message: chunks and metadata kept mutable until it closes.

    Appending to a list keeps a stream of n deltas O(n); rebuilding a frozen message
    per delta would be O(n**2).
    """

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


class _Fold:
    """The working state of one fold: messages so far, the open stream, unanswered calls.

    Local to one call of a builder method; never shared. While a stream is open its
    message is held in ``stream``, not yet in ``messages``.
    """

    __slots__ = ("messages", "orphans", "stream", "unanswered", "viewer")

    def __init__(
        self,
        viewer: SessionAuthor | None,
        messages: list[TranscriptMessage],
        stream: _Stream | None,
        unanswered: dict[str, int],
    ) -> None:
        self.viewer = viewer
        self.messages = messages
        self.stream = stream
        self.unanswered = unanswered
        #: Results that answered no call read so far (their call may lie further back).
        self.orphans = 0

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
                self.unanswered[call_id] = self.unanswered.get(call_id, 0) + 1
            case ToolResult(tool_call_id=call_id, output=output, is_error=is_error):
                waiting = self.unanswered.get(call_id, 0)
                if waiting == 0:
                    self.orphans += 1
                    return  # answers no call: no message, and the stream stays open
                self.unanswered[call_id] = waiting - 1
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
            case RunStarted() | RunFinished():
                return
            case _:  # pragma: no cover - a body kind added later gives no message
                return

    def finish(self) -> tuple[list[TranscriptMessage], TranscriptMessage | None, str | None]:
        """Return the messages, the open message (also last of them) and its run."""
        if self.stream is None:
            return self.messages, None, None
        open_text = self.stream.message()
        return [*self.messages, open_text], open_text, self.stream.run_id

    def _text(self, event: Event, content: str) -> TranscriptMessage:
        return TranscriptMessage(
            role=TranscriptBuilder.role_of(event.author, self.viewer),
            content=content,
            metadata=_event_metadata(event),
            author=event.author,
        )

    def _continued_by(self, event: Event) -> _Stream | None:
        stream = self.stream
        if (
            stream is not None
            and same_participant(stream.author, event.author)
            and stream.run_id == event.run_id
        ):
            return stream
        return None

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
    sequence = event.sequence
    timestamp = event.timestamp
    return (
        sequence is None,
        0 if sequence is None else sequence,
        timestamp is None,
        0 if timestamp is None else _timestamp_key(timestamp),
        event.id,
        position,
    )


def _ordered(events: Sequence[Event]) -> list[Event]:
    # Events read from a store come with strictly ascending sequences: already in order
    # (the full key, with its timestamp normalisation, is only needed otherwise).
    previous = 0
    for event in events:
        sequence = event.sequence
        if sequence is None or sequence <= previous:
            return [event for _, event in sorted(enumerate(events), key=_order_key)]
        previous = sequence
    return list(events)


def _latest(stamps: Iterable[datetime | None]) -> datetime | None:
    latest: datetime | None = None
    for stamp in stamps:
        if stamp is not None and (latest is None or _timestamp_key(stamp) > _timestamp_key(latest)):
            latest = stamp
    return latest


def _json_chars(value: Any, what: str) -> int:
    try:
        return len(encode_json(value).decode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationError(f"{what} cannot be counted: it is not JSON-encodable") from exc


def _check_events(events: Any) -> list[Event]:
    if isinstance(events, Event | str | bytes) or not isinstance(events, Iterable):
        raise ValidationError(f"events must be an iterable of Event, got {type(events).__name__}")
    checked = list(events)
    for index, event in enumerate(checked):
        if not isinstance(event, Event):
            raise ValidationError(f"events[{index}] must be an Event, got {type(event).__name__}")
    return checked


def _is_call(message: TranscriptMessage) -> bool:
    return message.role == "assistant" and message.tool_call_id is not None


def _is_result(message: TranscriptMessage) -> bool:
    return message.role == "tool"


def _truncate(
    messages: list[TranscriptMessage], cut_calls: Sequence[str], budget: _Budget
) -> tuple[list[TranscriptMessage], list[str]]:
    """Keep the longest suffix of ``messages`` within ``budget`` that splits no pair.

    ``cut_calls`` are unanswered calls cut earlier, older than every message here.

    Returns:
        The kept messages and the unanswered calls now cut (``cut_calls`` still
        unanswered, then those of the dropped messages), oldest first.
    """
    count = len(messages)
    # 1. The oldest start the budgets allow.
    start = count
    chars = 0
    while start > 0:
        if budget.messages is not None and count - start + 1 > budget.messages:
            break
        if budget.chars is not None:
            chars += TranscriptBuilder.message_chars(messages[start - 1])
            if chars > budget.chars:
                break
        start -= 1
    # 2. Pair results with calls (earliest unanswered first); a result pairs with its
    #    call at position -1 when that call was cut earlier (or is missing), so no cut
    #    at or before it can keep it.
    calls: list[tuple[str, int]] = [(call_id, -1) for call_id in cut_calls]
    waiting: dict[str, deque[int]] = {}
    for index, (call_id, _) in enumerate(calls):
        waiting.setdefault(call_id, deque()).append(index)
    answered: set[int] = set()
    straddled = [0] * (count + 2)  # difference array of cuts that would split a pair
    for position, message in enumerate(messages):
        if _is_call(message):
            assert message.tool_call_id is not None
            waiting.setdefault(message.tool_call_id, deque()).append(len(calls))
            calls.append((message.tool_call_id, position))
        elif _is_result(message):
            queue = waiting.get(message.tool_call_id or "")
            call_position = -1
            if queue:
                call = queue.popleft()
                answered.add(call)
                call_position = calls[call][1]
            straddled[call_position + 1] += 1
            straddled[position + 1] -= 1
    # 3. Move the cut toward newer messages until no pair straddles it.
    depth = 0
    cut = count
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


def _fold_of(transcript: Transcript) -> TranscriptFold:
    fold = transcript._fold
    if fold is None:
        return TranscriptFold()
    if not isinstance(fold, TranscriptFold):
        raise ValidationError(f"the transcript's fold state is not a TranscriptFold: {fold!r}")
    return fold


def _open_state(fold: TranscriptFold) -> tuple[TranscriptMessage | None, str | None]:
    raw = fold.open_text
    if raw is None:
        return None, None
    try:
        message = (
            raw
            if isinstance(raw, TranscriptMessage)
            else decode_json_as(encode_json(raw), TranscriptMessage)
        )
    except (SharedeskError, TypeError, ValueError) as exc:
        raise ValidationError("the transcript's open_text is not a TranscriptMessage") from exc
    if message.author is None:
        raise ValidationError("the transcript's open_text has no author")
    run = fold.open_run_id
    if run is not None and not isinstance(run, str):
        raise ValidationError(
            f"the transcript's open_run_id must be a str or None, got {type(run).__name__}"
        )
    return message, run


def _cut_calls(fold: TranscriptFold) -> list[str]:
    raw = fold.cut_pending_calls
    if not isinstance(raw, list | tuple) or not all(isinstance(item, str) for item in raw):
        raise ValidationError(
            f"the transcript's cut_pending_calls must be a list of str, got {raw!r}"
        )
    return list(raw)


def _finish(
    session_id: str,
    fold: _Fold,
    cut_calls: Sequence[str],
    budget: _Budget,
    last_sequence: int | None,
    last_timestamp: datetime | None,
) -> Transcript:
    messages, open_text, open_run = fold.finish()
    kept, still_cut = _truncate(messages, cut_calls, budget)
    return Transcript(
        session_id=session_id,
        messages=kept,
        last_sequence=last_sequence,
        last_timestamp=last_timestamp,
        _fold=TranscriptFold(
            viewer=None if fold.viewer is None else author_key(fold.viewer),
            open_text=open_text,
            open_run_id=open_run,
            cut_pending_calls=tuple(still_cut),
        ),
    )


def _build(
    session_id: str, events: Sequence[Event], viewer: SessionAuthor | None, budget: _Budget
) -> Transcript:
    fold = _Fold(viewer, [], None, {})
    for event in _ordered(events):
        fold.add(event)
    sequences = [event.sequence for event in events if event.sequence is not None]
    return _finish(
        session_id,
        fold,
        (),
        budget,
        max(sequences) if sequences else None,
        _latest(event.timestamp for event in events),
    )


#: Events asked of the store by the first page of a walk from the tail.
_FIRST_PAGE: Final = 256
#: Most events asked of the store by one page of a walk from the tail.
_MAX_PAGE: Final = 4096


def _decided(
    events_newest_first: list[Event], viewer: SessionAuthor | None, budget: _Budget
) -> bool:
    """Whether the events read so far decide the suffix a budget keeps (see the module doc)."""
    fold = _Fold(viewer, [], None, {})
    for event in reversed(events_newest_first):
        fold.add(event)
    if fold.orphans:
        return False
    messages, _, _ = fold.finish()
    count = len(messages)
    if budget.messages is not None and count > budget.messages:
        return True
    if budget.chars is not None:
        chars = 0
        for message in reversed(messages):
            chars += TranscriptBuilder.message_chars(message)
            if chars > budget.chars:
                return True
    return False


def _read_tail(
    store: EventStore,
    session_id: str,
    limit: int | None,
    viewer: SessionAuthor | None,
    budget: _Budget,
    exclude_run_id: str | None,
) -> list[Event]:
    """Read the newest events (at most ``limit``; fewer once the budget is met), oldest first."""
    kept: list[Event] = []  # newest first
    before: int | None = None
    page = _FIRST_PAGE
    bounded = budget.messages is not None or budget.chars is not None
    while limit is None or len(kept) < limit:
        want = page if limit is None else min(page, limit - len(kept))
        if limit is not None and not bounded and exclude_run_id is None:
            want = limit - len(kept)  # the newest ``limit`` events: one read
        rows = store.read(session_id, before=before, limit=want, newest_first=True)
        if not rows:
            break
        for event in rows:
            if exclude_run_id is None or event.run_id != exclude_run_id:
                kept.append(event)
        if limit is not None and len(kept) >= limit:
            del kept[limit:]
            break
        if len(rows) < want:
            break
        before = rows[-1].sequence
        if before is None or before <= 1:
            break
        if bounded and _decided(kept, viewer, budget):
            break
        page = min(page * 2, _MAX_PAGE)
    kept.reverse()
    return kept


class TranscriptBuilder:
    """Builds a session's :class:`~sharedesk.Transcript` from its events.

    A namespace of static methods; it holds no state. The rules are in the module
    docstring of :mod:`sharedesk.projection.transcript`.
    """

    @staticmethod
    def from_events(
        events: Iterable[Event],
        *,
        session_id: str | None = None,
        viewer: SessionAuthor | None = None,
        max_messages: int | None = None,
        max_chars: int | None = None,
        max_tokens_approx: int | None = None,
    ) -> Transcript:
        """Fold ``events`` into a transcript, as seen by ``viewer``.

        Events carry no session id, so ``session_id`` is required.

        Args:
            events: The events, in any order (they are ordered by sequence, timestamp,
                id and input position). Never changed.
            session_id: The session the events belong to.
            viewer: Whose transcript it is (roles are relative to it), or ``None``.
            max_messages: Keep at most this many of the newest messages.
            max_chars: Keep at most this many characters (see :meth:`message_chars`).
            max_tokens_approx: Keep at most 4 times this many characters.

        Returns:
            The transcript: the longest suffix of the messages that fits every budget
            without splitting a tool call from its result. ``last_sequence`` and
            ``last_timestamp`` are the highest and latest among all ``events`` (``None``
            when none has one), whatever the truncation cut.

        Raises:
            ValidationError: ``session_id`` missing or malformed; ``events`` not
                events; ``viewer`` not an author; a budget not a non-negative int (or
                ``None``); a tool input or output that cannot be encoded as JSON while a
                character budget is set.

        Cost: O(n log n) for n events, plus one JSON encoding of each tool input and
        output counted against a character budget; no I/O, never blocks.
        """
        if session_id is None:
            raise ValidationError(
                "session_id is required: events carry no session id, so from_events "
                "needs it as an argument"
            )
        checked_id = check_session_id(session_id)
        checked_viewer = check_optional_author(viewer, "viewer")
        budget = _Budget(max_messages, max_chars, max_tokens_approx)
        return _build(checked_id, _check_events(events), checked_viewer, budget)

    @staticmethod
    def from_store(
        store: EventStore,
        session_id: str,
        *,
        limit: int | None = None,
        viewer: SessionAuthor | None = None,
        max_messages: int | None = None,
        max_chars: int | None = None,
        max_tokens_approx: int | None = None,
        exclude_run_id: str | None = None,
    ) -> Transcript:
        """Read a session's newest events from ``store`` and fold them (see :meth:`from_events`).

        Args:
            store: The event store.
            session_id: The session.
            limit: Read only the newest ``limit`` events (``None``: all). A result whose
                call lies beyond the limit gives no message.
            viewer: Whose transcript it is, or ``None``.
            max_messages: As in :meth:`from_events`; the walk from the tail stops once
                the budget is met.
            max_chars: As in :meth:`from_events` (likewise).
            max_tokens_approx: As in :meth:`from_events` (likewise).
            exclude_run_id: Leave out the events of this run (they do not count toward
                ``limit``): a run's replay of the rest of its session.

        Returns:
            The transcript; ``last_sequence`` is the newest sequence among the events
            kept (``None`` when none is, e.g. ``limit`` is 0).

        Raises:
            ValidationError: A malformed argument, as in :meth:`from_events`.
            StoreError: Whatever the store's ``read`` raises (e.g. ``StoreClosedError``).

        Cost: with a budget or ``limit``, reads newest first and stops at ``limit``
        events or once the budgets are met (pages of 256 events, doubling; each page
        refolds what was read, so O(n) for the n events read); with neither, one read of
        the whole session. Then the fold of :meth:`from_events`; no writes.
        """
        checked_id = check_session_id(session_id)
        checked_limit = check_optional_int("limit", limit)
        checked_viewer = check_optional_author(viewer, "viewer")
        budget = _Budget(max_messages, max_chars, max_tokens_approx)
        if exclude_run_id is not None and not isinstance(exclude_run_id, str):
            raise ValidationError(
                f"exclude_run_id must be a str or None, got {type(exclude_run_id).__name__}"
            )
        bounded = budget.messages is not None or budget.chars is not None
        if checked_limit is None and not bounded:
            events = store.read(checked_id)
            if exclude_run_id is not None:
                events = [e for e in events if e.run_id != exclude_run_id]
            return _build(checked_id, events, checked_viewer, budget)
        events = _read_tail(
            store, checked_id, checked_limit, checked_viewer, budget, exclude_run_id
        )
        return _build(checked_id, events, checked_viewer, budget)

    @staticmethod
    def update_from_store(
        store: EventStore,
        transcript: Transcript,
        *,
        viewer: SessionAuthor | None = None,
        max_messages: int | None = None,
        max_chars: int | None = None,
        max_tokens_approx: int | None = None,
    ) -> Transcript:
        """Extend ``transcript`` with the session's events after its ``last_sequence``.

        An open streamed message continues across the boundary, and the budgets apply
        to the kept messages plus the new ones. Without budgets the result equals a
        fresh :meth:`from_store` (without ``limit``); the module docstring gives the one
        case where budgets make them differ. ``transcript`` must come from this
        builder (or be built by hand, without fold state) and from stored events of
        the session.

        Args:
            store: The event store holding ``transcript.session_id``.
            transcript: The transcript to extend; never changed.
            viewer: The viewer the transcript was built for.
            max_messages: As in :meth:`from_events`.
            max_chars: As in :meth:`from_events`.
            max_tokens_approx: As in :meth:`from_events`.

        Returns:
            The extended transcript; ``last_sequence``/``last_timestamp`` cover the old
            and the new events.

        Raises:
            ValidationError: ``transcript`` is not a Transcript, or was built for
                another viewer, or its fold state is malformed; a malformed
                argument, as in :meth:`from_events`.
            StoreError: Whatever the store's ``read`` raises.

        Cost: one ``store.read`` of the events after ``last_sequence`` (all events when
        it is ``None``), then a fold of those plus the kept messages; no writes.
        """
        if not isinstance(transcript, Transcript):
            raise ValidationError(
                f"transcript must be a Transcript, got {type(transcript).__name__}"
            )
        checked_id = check_session_id(transcript.session_id)
        checked_viewer = check_optional_author(viewer, "viewer")
        budget = _Budget(max_messages, max_chars, max_tokens_approx)
        viewer_key = None if checked_viewer is None else author_key(checked_viewer)
        state = _fold_of(transcript)
        if transcript._fold is not None and state.viewer != viewer_key:
            raise ValidationError(
                f"transcript was built for viewer {state.viewer!r}, not {viewer_key!r}"
            )
        open_text, open_run = _open_state(state)
        cut_calls = _cut_calls(state)
        messages = list(transcript.messages)
        if open_text is not None:
            # Truncation keeps a suffix, so the open message, being the newest, is
            # either the last kept message or was cut with everything else.
            if messages and messages[-1] != open_text:
                raise ValidationError("the transcript's open_text is not its last message")
            messages = messages[:-1]
        unanswered: dict[str, int] = {}
        for call_id in cut_calls:
            unanswered[call_id] = unanswered.get(call_id, 0) + 1
        for message in messages:
            if _is_call(message):
                assert message.tool_call_id is not None
                unanswered[message.tool_call_id] = unanswered.get(message.tool_call_id, 0) + 1
            elif _is_result(message) and unanswered.get(message.tool_call_id or "", 0) > 0:
                unanswered[message.tool_call_id or ""] -= 1
        stream = None if open_text is None else _Stream(open_text, open_run)
        fold = _Fold(checked_viewer, messages, stream, unanswered)
        events = store.read(checked_id, after=transcript.last_sequence)
        for event in _ordered(events):
            fold.add(event)
        sequences = [event.sequence for event in events if event.sequence is not None]
        last_sequence = max(sequences) if sequences else transcript.last_sequence
        last_timestamp = _latest(
            [transcript.last_timestamp, *(event.timestamp for event in events)]
        )
        return _finish(checked_id, fold, cut_calls, budget, last_sequence, last_timestamp)

    @staticmethod
    def role_of(author: SessionAuthor, viewer: SessionAuthor | None) -> str:
        """Return the role of a ``Text`` (or ``TextDelta``) by ``author`` for ``viewer``.

        Args:
            author: Who wrote the message.
            viewer: Whose transcript it is, or ``None``.

        Returns:
            ``"assistant"`` when ``author`` is the viewer (labels ignored; checked
            first, so a ``System`` viewer's own messages are ``"assistant"`` too);
            ``"system"`` for any other ``System`` author; ``"user"`` for any other
            person, agent or the operator. With no viewer: ``"assistant"`` for agents,
            ``"user"`` for people and the operator.

        Cost: O(1).
        """
        if viewer is not None and same_participant(author, viewer):
            return "assistant"
        if isinstance(author, System):
            return "system"
        if viewer is None and isinstance(author, Agent):
            return "assistant"
        return "user"

    @staticmethod
    def message_chars(message: TranscriptMessage) -> int:
        """Return the characters a message counts against a character budget.

        They are the characters of its ``content``, plus those of its ``tool_input``
        as compact JSON, plus those of its ``tool_output``: the string itself when it
        is a ``str``, else its compact JSON (``None`` counts 0). Roles, ids, tool names
        and metadata are not counted.

        Args:
            message: The message.

        Returns:
            The number of characters (code points).

        Raises:
            ValidationError: The tool input or output cannot be encoded as JSON.

        Cost: O(size of the message).
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
