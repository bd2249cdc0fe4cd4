"""Microsoft Agent Framework history on a shared desk: ``DeskHistoryProvider``.

``DeskHistoryProvider(hub, agent)`` is an ``agent_framework.HistoryProvider``: give it to
an ``agent_framework.Agent`` in ``context_providers=[...]`` and the agent's history lives
on a desk. The framework's ``session_id`` (``agent.create_session(session_id=...)``) is
the desk id, so several agents (each with its own provider), people posting with
``hub.post`` and agents of other frameworks share one conversation, each reading it
relative to itself. The framework's own history stores (``InMemoryHistoryProvider``,
``FileHistoryProvider``) keep one agent's list of messages; here every message is an
attributed event. Needs the ``agent-framework`` extra:
``pip install 'sharedesk[agent-framework]'``.

How messages are stored (one ``append`` per ``save_messages``, so a batch is wholly
stored or not at all):

* A message whose contents are all text is a :class:`~sharedesk.Text` row with its
  text, the message itself (``Message.to_dict()``) kept in ``metadata["sharedesk.message"]``:
  views, turns and transcripts of the desk show it like any posted message, by its
  author. Any other message (function calls and results, images) is an
  :class:`~sharedesk.Item` row holding ``Message.to_dict()``, which views skip.
* Each row names the provider's agent in ``metadata["sharedesk.provider"]`` (its
  :func:`~sharedesk.protocol.author_key`) and is authored by who said it: a message whose
  ``author_name`` names a known participant (the provider's ``agent``, by id or label or
  as the framework agent that ran, one of ``authors``, or an author already on the desk,
  by id or label) is that participant's;
  otherwise a ``"user"`` message is ``user``'s (default ``Person("user", "user")``) or,
  with an ``author_name``, ``Person(author_name, author_name)``; a ``"system"`` message
  is ``System(kind="prompt")``'s; every other message (the agent's replies, its tool
  results) is ``agent``'s.
* A message with a ``message_id`` is stored under that id as its event id, so saving
  it again (a retried run, a replayed transcript) writes nothing twice.

How ``get_messages`` reads (relative to the provider's ``agent``):

* Rows saved by a provider of the same agent come back as they were saved
  (``Message.from_dict`` of the stored message).
* Every other row with text (another agent's reply, a person's post, a user message
  another agent's provider saved, a ``DeskSession`` item) comes back as
  ``Message("user", [text], author_name=<its author's label>, message_id=<event id>)``;
  the rows authored by the agent itself (a turn's reply, its ``DeskSession`` replies) as
  ``"assistant"`` messages. Another participant's non-text rows (tool calls and results)
  and ``System`` rows stay with it.
* ``Retracted`` rows written for the same agent (a ``DeskSession`` of it) are honoured.
* A compacted channel (``hub.compact``) is read through its summary: one row by the
  compactor, rendered like any row of its author, in place of the rows at or below the
  compaction's ``through``.

Cost: the provider folds each desk incrementally (``sharedesk.integrations._fold``, the
newest ``FOLDS`` desks kept): ``get_messages`` reads only the rows appended since its
last read of that desk (on the first, those since its newest compaction, so a desk
retention has archived reads through its summary), in pages of ``PAGE_SIZE``;
``save_messages`` is one ``append`` (plus a read of the rows the desk still holds when an
``author_name`` is unknown).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence, Set
from typing import Any, Final

try:
    from agent_framework import (
        AgentSession,
        HistoryProvider,
        Message,
        SessionContext,
        SupportsAgentRun,
    )
except ModuleNotFoundError as exc:
    if exc.name != "agent_framework":
        raise
    raise ImportError(
        "sharedesk.integrations.agent_framework needs the Microsoft Agent Framework: "
        "pip install 'sharedesk[agent-framework]'"
    ) from exc

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations._fold import DeskFold, compaction_state
from sharedesk.protocol import (
    PAGE_SIZE,
    Agent,
    Compaction,
    Conversation,
    Event,
    Item,
    Person,
    SessionAuthor,
    System,
    Text,
    ValidationError,
    author_key,
    author_label,
    same_participant,
)
from sharedesk.protocol.errors import RowsArchived
from sharedesk.protocol.events import new_event_id
from sharedesk.protocol.validation import check_author, check_bool, check_session_id, check_text

__all__ = ["FOLDS", "MESSAGE_KEY", "PROVIDER_KEY", "SPEAKER_STATE_KEY", "DeskHistoryProvider"]

#: Event metadata key holding ``Message.to_dict()`` of a message stored as ``Text``.
MESSAGE_KEY: Final = "sharedesk.message"
#: Event metadata key naming the agent (``author_key``) whose provider saved a row.
PROVIDER_KEY: Final = "sharedesk.provider"
#: Key of the provider-scoped session state naming the framework agent that ran last.
SPEAKER_STATE_KEY: Final = "sharedesk.speaker"
#: How many desks' folds a provider keeps (a desk read again after that is read anew).
FOLDS: Final = 256
#: Author of ``"system"`` messages.
PROMPT_AUTHOR: Final = System(kind="prompt", label="system")

# Metadata key of the OpenAI Agents SDK integration (a ``DeskSession`` of the same agent).
_SESSION_KEY: Final = "sharedesk.session"
_FLAGS: Final = ("load_messages", "store_inputs", "store_context_messages", "store_outputs")


class DeskHistoryProvider(HistoryProvider):
    """An Agent Framework ``HistoryProvider`` whose sessions are desks of ``hub``.

    The framework calls ``get_messages`` before a run (unless ``load_messages=False``)
    and ``save_messages`` after it with the run's inputs and replies, as the flags say
    (``HistoryProvider`` documents them). The provider itself keeps nothing between
    calls but a cache of what it read (the desk holds the history; the session's provider
    state holds only the name of the framework agent that ran), so one provider may
    serve any number of sessions and event loops.

    Attributes:
        agent: The viewer: whose messages come back as saved, and the author of replies.
        user: The author of ``"user"`` messages without an ``author_name``.
        authors: Sharedesk authors by ``author_name``.
    """

    def __init__(
        self,
        hub: AsyncHub,
        agent: SessionAuthor,
        *,
        source_id: str = "sharedesk",
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: Set[str] | None = None,
        store_outputs: bool = True,
        user: SessionAuthor | None = None,
        authors: Mapping[str, SessionAuthor] | None = None,
    ) -> None:
        """Create the provider; nothing is read or written until the framework calls it.

        Args:
            hub: The ``AsyncHub`` of the desk.
            agent: The participant this provider reads as and speaks for.
            source_id: The framework's provider id (attribution of loaded messages).
            load_messages: Load the desk before each run.
            store_inputs: Store the run's input messages.
            store_context_messages: Store messages other context providers added.
            store_context_from: Only from these providers' ``source_id`` s.
            store_outputs: Store the run's replies.
            user: Author of ``"user"`` messages without ``author_name``
                (default ``Person(id="user", label="user")``).
            authors: Sharedesk authors of ``author_name`` s (e.g. other agents' names).

        Raises:
            ValidationError: A bad author, flag, ``source_id`` or ``store_context_from``.
        """
        flags = {
            "load_messages": load_messages,
            "store_inputs": store_inputs,
            "store_context_messages": store_context_messages,
            "store_outputs": store_outputs,
        }
        for name in _FLAGS:
            check_bool(name, flags[name])
        if store_context_from is not None:
            if isinstance(store_context_from, str) or not isinstance(store_context_from, Set):
                raise ValidationError(
                    "store_context_from must be a set of str or None, "
                    f"got {type(store_context_from).__name__}"
                )
            for source in store_context_from:
                check_text("store_context_from item", source, empty=False)
        super().__init__(
            check_text("source_id", source_id, empty=False),
            store_context_from=None if store_context_from is None else set(store_context_from),
            **flags,
        )
        self.agent = check_author(agent, "agent")
        self.user = Person(id="user", label="user") if user is None else check_author(user, "user")
        if authors is not None and not isinstance(authors, Mapping):
            raise ValidationError(f"authors must be a mapping, got {type(authors).__name__}")
        self.authors = {
            check_text("authors key", name, empty=False): check_author(a, f"authors[{name!r}]")
            for name, a in (authors or {}).items()
        }
        self._hub = hub
        self._key = author_key(self.agent)
        self._folds: dict[str, DeskFold] = {}  # by desk, least recently read first
        self._lock = threading.Lock()

    async def after_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Store the run's messages as ``HistoryProvider`` does, its agent's as ``agent``'s.

        The framework agent's ``name`` (which the framework puts in the ``author_name`` of
        its replies) is noted in ``state[SPEAKER_STATE_KEY]`` first, so its replies are
        ``agent``'s whatever the agent is called.
        """
        if isinstance(agent.name, str) and agent.name:
            state[SPEAKER_STATE_KEY] = agent.name
        await super().after_run(agent=agent, session=session, context=context, state=state)

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """Return the desk ``session_id`` as this provider's agent sees it, oldest first.

        Raises:
            ValidationError: ``session_id`` is not a valid desk id; nothing is read.
        """
        desk = check_session_id(session_id)
        messages: list[Message] = []
        for event in await self._fold_of(desk).refresh(self._hub):
            message = self._render(event)
            if message is not None:
                messages.append(message)
        return messages

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Store ``messages`` on the desk ``session_id`` as attributed events, in one append.

        Raises:
            ValidationError: A bad ``session_id``, a non-``Message`` element, a message
                with a non-``str`` role, ``author_name`` or ``message_id``, or one that
                does not encode; nothing is written.
        """
        desk = check_session_id(session_id)
        if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
            raise ValidationError(f"messages must be a sequence, got {type(messages).__name__}")
        checked = [_check_message(index, m) for index, m in enumerate(messages)]
        if not checked:
            return
        speaker = None if state is None else state.get(SPEAKER_STATE_KEY)
        known: list[SessionAuthor] | None = None
        if any(self._named(m, speaker) is None and m.author_name for m in checked):
            known = await self._known(desk)
        events: list[Event] = []
        ids: set[str] = set()
        for message in checked:
            stored = message.to_dict()
            metadata: dict[str, Any] = {PROVIDER_KEY: self._key}
            if _is_text(message):
                metadata[MESSAGE_KEY] = stored
                body: Text | Item = Text(message.text)
            else:
                body = Item(stored)
            event_id = message.message_id
            if event_id is None or not event_id or event_id in ids:
                event_id = new_event_id()
            ids.add(event_id)
            author = self._author_of(message, speaker, known or [])
            events.append(Event(author, body, id=event_id, metadata=metadata))
        await self._hub.append(desk, events)

    # -- internals --------------------------------------------------------------------

    def _named(self, message: Message, speaker: object) -> SessionAuthor | None:
        """Return the author ``author_name`` names among the agent and ``authors``, if any."""
        name = message.author_name
        if not name:
            return None
        if name in self.authors:
            return self.authors[name]
        if name == speaker or _names(self.agent, name):
            return self.agent
        return None

    def _author_of(
        self, message: Message, speaker: object, known: Sequence[SessionAuthor]
    ) -> SessionAuthor:
        named = self._named(message, speaker)
        if named is not None:
            return named
        name = message.author_name
        if name:
            for author in reversed(known):
                if _names(author, name):
                    return author
            if message.role == "user":
                return Person(id=name, label=name)
            return Agent(id=name, label=name)
        if message.role == "user":
            return self.user
        if message.role == "system":
            return PROMPT_AUTHOR
        return self.agent

    def _is_own(self, event: Event) -> bool:
        """Return whether ``event`` was written for this agent (its retractions hold)."""
        metadata = event.metadata
        return (
            metadata.get(PROVIDER_KEY) == self._key
            or metadata.get(_SESSION_KEY) == self._key
            or same_participant(event.author, self.agent)
        )

    async def _known(self, desk: str) -> list[SessionAuthor]:
        """Return the authors on ``desk``, oldest first (the channel's compaction's first).

        The newest channel compaction's ``covers`` name the authors of rows retention may
        have archived; the stored rows' authors follow.
        """
        compaction, after = await compaction_state(self._hub, Conversation(desk))
        body = None if compaction is None else compaction.body
        known = list(body.covers) if isinstance(body, Compaction) else []
        while True:
            try:
                page = await self._hub.read(desk, after=after, limit=PAGE_SIZE)
            except RowsArchived as gone:  # retention ran since the state was read
                after = gone.archived_through
                continue
            known.extend(e.author for e in page)
            if len(page) < PAGE_SIZE:
                return known
            last = page[-1].sequence
            assert last is not None
            after = last

    def _fold_of(self, desk: str) -> DeskFold:
        """Return the desk's fold (the newest ``FOLDS`` desks' are kept, least recent out)."""
        with self._lock:
            fold = self._folds.pop(desk, None)
            if fold is None:
                fold = DeskFold(Conversation(desk), self._is_own)
            self._folds[desk] = fold
            while len(self._folds) > FOLDS:
                self._folds.pop(next(iter(self._folds)))
            return fold

    def _render(self, event: Event) -> Message | None:
        body = event.body
        stored: Any = body.item if isinstance(body, Item) else event.metadata.get(MESSAGE_KEY)
        if event.metadata.get(PROVIDER_KEY) == self._key and isinstance(stored, Mapping):
            return Message.from_dict(dict(stored))
        if not isinstance(body, Text) or not body.content.strip():
            return None  # another participant's tool call, result or other item
        if same_participant(event.author, self.agent):
            return Message(
                "assistant",
                [body.content],
                author_name=author_label(self.agent),
                message_id=event.id,
            )
        if isinstance(event.author, System):
            return None
        return Message(
            "user", [body.content], author_name=author_label(event.author), message_id=event.id
        )


def _names(author: SessionAuthor, name: str) -> bool:
    """Whether ``name`` is ``author``'s label or id."""
    if isinstance(author, Person | Agent):
        return name in (author.label, author.id)
    return name == author_label(author)


def _is_text(message: Message) -> bool:
    return bool(message.contents) and all(c.type == "text" for c in message.contents)


def _check_message(index: int, message: Any) -> Message:
    where = f"messages[{index}]"
    if not isinstance(message, Message):
        raise ValidationError(
            f"{where} must be an agent_framework.Message, got {type(message).__name__}"
        )
    if not isinstance(message.role, str) or not message.role:
        raise ValidationError(f"{where}.role must be a non-empty str, got {message.role!r}")
    for field in ("author_name", "message_id"):
        value = getattr(message, field)
        if value is not None:
            check_text(f"{where}.{field}", value)
    try:
        stored = message.to_dict()
        Message.from_dict(dict(stored))
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValidationError(f"{where} does not encode: {exc}") from exc
    return message
