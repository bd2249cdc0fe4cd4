"""OpenAI Agents SDK sessions on a shared desk: ``DeskSession`` and ``DeskRunHooks``.

``DeskSession(hub, session_id, agent)`` implements the SDK's ``agents.memory.Session``
protocol on an :class:`~sharedesk.AsyncHub`. The SDK's sessions keep a bare list of
items and lose who spoke; here every item is an attributed event on the desk
``session_id``, so several agents (and people posting with ``hub.post``) share one
conversation, each seeing it relative to itself. Needs the ``agents`` extra:
``pip install 'sharedesk[agents]'``.

How items are stored (one ``append`` per ``add_items``, so a batch is wholly stored or
not at all):

* A *message item* whose content is text (a ``str``, or only ``input_text`` /
  ``output_text`` parts) is a :class:`~sharedesk.Text` row with that text, the item
  itself kept exactly in ``metadata["sharedesk.item"]``: views, turns and transcripts
  of the desk show it like any posted message, by its author.
* Every other item (function calls and outputs, reasoning, handoff records, images) is
  an :class:`~sharedesk.Item` row, which views, turns and transcripts skip.
* Each row names the session that added it in ``metadata["sharedesk.session"]`` (the
  :func:`~sharedesk.protocol.author_key` of the session's ``agent``) and is authored by
  who said it: ``user`` (default ``Operator()``) for ``"user"`` messages,
  ``System(kind="prompt")`` for ``"system"``/``"developer"`` messages, and for
  everything else the agent that produced it as :class:`DeskRunHooks` reported it (the
  agent whose model call returned the item's ``id``/``call_id``, else the agent speaking
  now), falling back to the session's ``agent``.

How ``get_items`` reads (relative to the session's ``agent``, the *viewer*):

* Rows added through a session of the same agent, or authored by the viewer, come back
  exactly as given (equal dicts, in the order added).
* Another participant's message comes back as a ``"user"`` message naming its author,
  ``{"role": "user", "content": "[Label] text"}`` (an operator's or another session's
  user message comes back as it was given; a ``System`` row as a ``"system"`` message).
* Another agent's tool calls, tool outputs and other non-message items are left out:
  they stay with the agent that made them.
* ``pop_item`` appends ``Retracted(target=<event id>)`` for the newest item the viewer
  sees; ``clear_session`` appends ``Retracted(through=<last sequence read>)``, both
  authored by the session's ``agent``. A retraction is that agent's own: what it names
  no longer comes back from any ``DeskSession`` of the same agent on that conversation
  (a new one too), while every other agent's sessions still get what they got before
  (one agent never erases another's memory). The rows stay in the log, readable with
  ``hub.read`` (and still shown by views, which show the log as written).
* With ``conversation=Conversation(session_id, thread_root=R)`` the session lives in
  the thread of root ``R``: its rows are replies to ``R`` and it reads only ``R`` and
  the rows replying to it. Without, it lives in the desk's channel (rows without a
  parent).

Each session folds the desk incrementally (``sharedesk.integrations._fold``): a call
reads only the rows appended since the session's last read (in pages of ``PAGE_SIZE``),
so repeated ``get_items`` cost the new rows, not the history; the session keeps the
conversation's visible rows in memory. A compacted conversation (``hub.compact``) is
read through its summary: one ``Text`` row by the compactor (rendered like any row of
its author) stands in place of the rows at or below the compaction's ``through``, and
a session's first read starts there, so a desk whose compacted rows retention archived
(``hub.apply_retention``) reads the same.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

try:
    from agents import Agent as SdkAgent
    from agents.items import ModelResponse, TResponseInputItem
    from agents.lifecycle import RunHooks
    from agents.memory import SessionSettings
    from agents.run_context import AgentHookContext, RunContextWrapper
except ModuleNotFoundError as exc:
    if exc.name != "agents":
        raise
    raise ImportError(
        "sharedesk.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'sharedesk[agents]'"
    ) from exc

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations._fold import DeskFold
from sharedesk.protocol import (
    Agent,
    ConcurrencyError,
    Conversation,
    Event,
    Item,
    Operator,
    Retracted,
    SessionAuthor,
    System,
    Text,
    ValidationError,
    author_key,
    author_label,
    same_participant,
)
from sharedesk.protocol.validation import (
    check_author,
    check_conversation,
    check_session_id,
)

__all__ = ["ITEM_KEY", "SESSION_KEY", "DeskRunHooks", "DeskSession"]

#: Event metadata key holding the exact SDK item of a message stored as ``Text``.
ITEM_KEY: Final = "sharedesk.item"
#: Event metadata key naming the session (``author_key`` of its agent) that added a row.
SESSION_KEY: Final = "sharedesk.session"
#: Author of ``"system"`` and ``"developer"`` message items.
PROMPT_AUTHOR: Final = System(kind="prompt", label="system")

_TEXT_PARTS: Final = frozenset({"input_text", "output_text"})
_USER_ROLES: Final = frozenset({"user", "system", "developer"})
_POP_ATTEMPTS: Final = 64


def _check_limit(name: str, value: Any) -> int | None:
    """Return ``value`` if it is ``None`` or an ``int`` (not a ``bool``)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValidationError(f"{name} must be an int or None, got {type(value).__name__}")


def message_text(item: Mapping[str, Any]) -> str | None:
    """Return the text of a message item, or ``None`` when ``item`` is not a text message.

    A text message has ``type`` ``"message"`` (or none), a ``role`` of ``"user"``,
    ``"assistant"``, ``"system"`` or ``"developer"``, and content that is a ``str`` or a
    non-empty list of ``input_text``/``output_text`` parts (joined without separator).

    Cost: O(len(content)); no I/O.
    """
    if item.get("type", "message") != "message" or item.get("role") not in (
        *_USER_ROLES,
        "assistant",
    ):
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        return None
    texts: list[str] = []
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") not in _TEXT_PARTS:
            return None
        text = part.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return "".join(texts)


def _named(author: SessionAuthor, text: str) -> dict[str, Any] | None:
    """Return a peer's message as a ``"user"`` message naming its author (``None``: blank)."""
    if not text.strip():
        return None
    return {"role": "user", "content": f"[{author_label(author)}] {text}"}


class DeskSession:
    """An ``agents.memory.Session`` whose items are attributed events on a desk.

    See the module docstring for how items are stored and read. Safe to share between
    tasks of one event loop: concurrent ``add_items`` keep each batch together; a
    ``pop_item`` racing another write retries on the newer log (never retracting a row
    it did not see).

    Attributes:
        session_id: The desk (the SDK's session id).
        agent: The viewer: whose items come back exactly, and the default author.
        conversation: The conversation the session lives in.
        session_settings: The SDK's settings (``limit`` is the default of ``get_items``).
        user: The author of ``"user"`` message items.
    """

    def __init__(
        self,
        hub: AsyncHub,
        session_id: str,
        agent: SessionAuthor,
        *,
        conversation: Conversation | None = None,
        session_settings: SessionSettings | None = None,
        user: SessionAuthor | None = None,
    ) -> None:
        """Create the session; nothing is read or written until a method is awaited.

        Args:
            hub: The ``AsyncHub`` of the desk.
            session_id: The desk.
            agent: The participant this session speaks for and reads as.
            conversation: The desk's channel (default) or a thread of it.
            session_settings: The SDK's session settings (default ``SessionSettings()``).
            user: Author of ``"user"`` message items (default ``Operator()``).

        Raises:
            ValidationError: A bad session id, author or conversation, or a conversation
                of another desk.
        """
        self.session_id = check_session_id(session_id)
        self.agent = check_author(agent, "agent")
        self.user = Operator() if user is None else check_author(user, "user")
        self.conversation = (
            Conversation(session_id)
            if conversation is None
            else check_conversation(conversation, "conversation")
        )
        if self.conversation.desk != session_id:
            raise ValidationError(
                f"conversation.desk must be the session id {session_id!r}, "
                f"got {self.conversation.desk!r}"
            )
        self.session_settings: SessionSettings | None = (
            SessionSettings() if session_settings is None else session_settings
        )
        self._hub = hub
        self._key = author_key(self.agent)
        self._closed = False
        self._fold = DeskFold(self.conversation, self._is_own)
        # Attribution reported by DeskRunHooks.
        self._speaker: SessionAuthor | None = None
        self._made_by: dict[str, SessionAuthor] = {}

    # -- the SDK's Session protocol -------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the items this session's agent sees, oldest first.

        Args:
            limit: The newest ``limit`` items (``None``: ``session_settings.limit``, and
                when that is ``None`` too, every item; ``0``: none; negative: every
                item, as ``SQLiteSession`` reads it).

        Returns:
            Fresh dicts (changing them changes nothing stored).

        Raises:
            ValidationError: ``limit`` (or ``session_settings.limit``) is not ``None`` or
                an ``int`` (``True``, ``2.5`` and ``"3"`` are not); nothing is read.

        Cost: one ``read`` of the rows appended since this session's last read, then
        O(items returned) (O(rows kept) when most rows are another agent's tool items).
        """
        wanted = _check_limit("limit", limit)
        if wanted is None and self.session_settings is not None:
            wanted = _check_limit("session_settings.limit", self.session_settings.limit)
        rows = await self._fold.refresh(self._hub)
        if wanted == 0:
            return []
        if wanted is not None and wanted < 0:
            wanted = None
        found: list[TResponseInputItem] = []
        for event in reversed(rows):
            item = self._render(event)
            if item is None:
                continue
            found.append(item)
            if wanted is not None and len(found) >= wanted:
                break
        found.reverse()
        return found

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items`` as attributed events, in order, in one append.

        Raises:
            RuntimeError: The session was closed.
            ValidationError: An item is not a mapping, or not encodable; nothing stored.

        Cost: one ``append`` of ``len(items)`` events (one durable write on LMDB).
        """
        if self._closed:
            raise RuntimeError("DeskSession is closed")
        if not items:
            return
        events: list[Event] = []
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValidationError(
                    f"items[{index}] must be a mapping, got {type(item).__name__}"
                )
            kept = copy.deepcopy(dict(item))
            metadata: dict[str, Any] = {SESSION_KEY: self._key}
            text = message_text(kept)
            if text is not None:
                metadata[ITEM_KEY] = kept
                body: Text | Item = Text(text)
            else:
                body = Item(kept)
            events.append(
                Event(
                    self._author_of(kept),
                    body,
                    parent=self.conversation.thread_root,
                    metadata=metadata,
                )
            )
        await self._hub.append(self.session_id, events)

    async def pop_item(self) -> TResponseInputItem | None:
        """Retract the newest item this session sees and return it (``None``: none).

        The item no longer comes back to any session of this agent; other agents keep it.

        Cost: one ``read`` of new rows and one ``append`` (more when another writer
        appends in between: the retraction is appended only on the log it was chosen
        from, ``expected_version``).
        """
        for _ in range(_POP_ATTEMPTS):
            seen = self._fold.seen
            newest = self._newest(await self._fold.refresh(self._hub))
            if newest is None:
                return None
            event, item = newest
            retraction = Event(
                self.agent,
                Retracted(target=event.id),
                parent=self.conversation.thread_root,
                metadata={SESSION_KEY: self._key},
            )
            try:
                await self._hub.append(self.session_id, [retraction], expected_version=seen)
            except ConcurrencyError:
                continue
            return item
        raise ConcurrencyError(self._fold.seen, self._fold.seen + 1)

    async def clear_session(self) -> None:
        """Retract every item of the conversation so far (the rows stay in the log).

        For every session of this agent, a new one too; other agents keep their items.

        Cost: one ``read`` of new rows and one ``append`` (none when nothing is visible).
        """
        rows = await self._fold.refresh(self._hub)
        if not rows:
            return
        retraction = Event(
            self.agent,
            Retracted(through=self._fold.seen),
            parent=self.conversation.thread_root,
            metadata={SESSION_KEY: self._key},
        )
        await self._hub.append(self.session_id, [retraction])

    def close(self) -> None:
        """Refuse further ``add_items`` (as ``SQLiteSession.close``); the hub stays open.

        Cost: O(1).
        """
        self._closed = True

    # -- attribution (DeskRunHooks) --------------------------------------------------

    def note_speaker(self, author: SessionAuthor) -> None:
        """Record that ``author`` is speaking now (its items will carry it). Cost: O(1)."""
        self._speaker = check_author(author, "author")

    def note_output(self, author: SessionAuthor, item_keys: Sequence[str]) -> None:
        """Record that ``author``'s model call produced items with these ids/call ids.

        Cost: O(len(item_keys)).
        """
        checked = check_author(author, "author")
        for key in item_keys:
            self._made_by[key] = checked

    # -- internals --------------------------------------------------------------------

    def _author_of(self, item: Mapping[str, Any]) -> SessionAuthor:
        role = item.get("role")
        if item.get("type", "message") == "message" and role == "user":
            return self.user
        if item.get("type", "message") == "message" and role in ("system", "developer"):
            return PROMPT_AUTHOR
        for key in (item.get("call_id"), item.get("id")):
            if isinstance(key, str) and key in self._made_by:
                return self._made_by[key]
        return self._speaker if self._speaker is not None else self.agent

    def _is_own(self, event: Event) -> bool:
        """Whether ``event`` was written for this session's agent (any of its sessions)."""
        return event.metadata.get(SESSION_KEY) == self._key or same_participant(
            event.author, self.agent
        )

    def _newest(self, rows: list[Event]) -> tuple[Event, TResponseInputItem] | None:
        for event in reversed(rows):
            item = self._render(event)
            if item is not None:
                return event, item
        return None

    def _render(self, event: Event) -> TResponseInputItem | None:
        """Return the item ``event`` gives this session's agent, or ``None`` (not for it)."""
        body = event.body
        stored: Any = body.item if isinstance(body, Item) else event.metadata.get(ITEM_KEY)
        own = self._is_own(event)
        if isinstance(stored, Mapping):
            if own:
                return copy.deepcopy(dict(stored))  # type: ignore[return-value]
            if stored.get("type", "message") == "message" and stored.get("role") in _USER_ROLES:
                return copy.deepcopy(dict(stored))  # type: ignore[return-value]
            text = message_text(stored)
            if text is None:
                return None  # another agent's tool call, output or other item
            return _named(event.author, text)  # type: ignore[return-value]
        if not isinstance(body, Text) or not body.content.strip():
            return None
        if own:
            return {"role": "assistant", "content": body.content}
        if isinstance(event.author, System):
            return {"role": "system", "content": body.content}
        if isinstance(event.author, Operator):
            return {"role": "user", "content": body.content}
        return _named(event.author, body.content)  # type: ignore[return-value]


class DeskRunHooks(RunHooks[Any]):
    """The SDK's ``RunHooks`` that tell a :class:`DeskSession` which agent is speaking.

    Pass it with the session: ``Runner.run(agent, input, session=s,
    hooks=DeskRunHooks(s))``. Each SDK agent maps to a sharedesk author: the one given
    in ``authors`` (by agent name), else the session's ``agent`` when its id equals the
    SDK agent's name, else ``Agent(id=name, label=name)``. After a handoff the new
    agent's items carry its own author; items of a model call (matched by ``id`` and
    ``call_id``, so a tool's output goes with its call) carry the author of the agent
    whose call returned them, whenever the SDK saves them.
    """

    def __init__(
        self,
        session: DeskSession,
        *,
        authors: Mapping[str, SessionAuthor] | None = None,
    ) -> None:
        """Create hooks reporting to ``session``.

        Args:
            session: The session the run uses.
            authors: Sharedesk authors of SDK agents, by the SDK agent's ``name``.

        Raises:
            ValidationError: An author in ``authors`` is not a ``SessionAuthor``.
        """
        self.session = session
        self.authors = {
            name: check_author(author, f"authors[{name!r}]")
            for name, author in (authors or {}).items()
        }

    def author_of(self, agent: SdkAgent[Any]) -> SessionAuthor:
        """Return the sharedesk author of an SDK agent. Cost: O(1)."""
        name = agent.name
        if name in self.authors:
            return self.authors[name]
        own = self.session.agent
        if isinstance(own, Agent) and own.id == name:
            return own
        return Agent(id=name, label=name)

    async def on_agent_start(self, context: AgentHookContext[Any], agent: SdkAgent[Any]) -> None:
        """Note the agent now speaking. Cost: O(1)."""
        self.session.note_speaker(self.author_of(agent))

    async def on_handoff(
        self,
        context: RunContextWrapper[Any],
        from_agent: SdkAgent[Any],
        to_agent: SdkAgent[Any],
    ) -> None:
        """Note the agent handed to. Cost: O(1)."""
        self.session.note_speaker(self.author_of(to_agent))

    async def on_llm_end(
        self,
        context: RunContextWrapper[Any],
        agent: SdkAgent[Any],
        response: ModelResponse,
    ) -> None:
        """Note which agent produced the response's items (by ``id`` and ``call_id``).

        Cost: O(len(response.output)).
        """
        keys: list[str] = []
        for output in response.output:
            for attribute in ("id", "call_id"):
                value = getattr(output, attribute, None)
                if isinstance(value, str) and value:
                    keys.append(value)
        self.session.note_output(self.author_of(agent), keys)
