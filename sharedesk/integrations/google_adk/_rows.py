"""How ADK sessions lie on desks: desk ids, state keys, and ADK events as desk rows.

Layout. An ADK session ``(app, user, session)`` is the desk ``adk/<app>/<user>/<session>``
(each part percent-quoted, so no part holds a ``/`` or a ``#``; an id longer than a desk
id may be is replaced by a digest). Its user's state is the desk ``adk/<app>/<user>``,
its app's ``adk/<app>``; the user's session index is ``adk/<app>/<user>/#sessions`` and
the app's user index ``adk/<app>/#users``. Each desk's key/value state is the store's
folded session state (``SessionState.values``, moved by ``metadata[STATE_DELTA_KEY]`` in
the transaction that stores the event): the session-scoped ADK state and the service's
own keys on a session desk, ``user:`` and ``app:`` state on the user's and app's desks,
an entry per session (or user) on an index. One ``append_event`` is one store write: the
session desk's event, with the index's and (for ``user:`` and ``app:`` keys) the user's
and app's state changes as linked writes of the same transaction.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from google.adk.events.event import Event as AdkEvent
from google.adk.sessions import State
from google.genai import types

from sharedesk.protocol.authors import Agent, Operator, Person, SessionAuthor, System
from sharedesk.protocol.events import Compaction, Event, Item, Text
from sharedesk.protocol.validation import MAX_SESSION_ID_BYTES

#: Metadata key of a row written by the service: the ADK event, as ADK's JSON dump.
ADK_EVENT_KEY: Final = "sharedesk.adk_event"
#: Metadata key (``True``) of an ``Item`` row holding an ADK event.
ADK_ITEM_KEY: Final = "sharedesk.adk_item"
#: ``custom_metadata`` key of a compaction's summary event: the authors it stands for.
COVERS_KEY: Final = "sharedesk.covers"
#: ``Item.item["adk"]`` of the service's bookkeeping rows (creation, deletion).
MARKER_KEY: Final = "adk"

#: Prefix of ADK state keys kept in a desk's folded values.
STATE: Final = "s:"
#: Session desk keys: whether the session exists, the sequence its events start after,
#: and its ``last_update_time``.
LIVE: Final = "adk:live"
BASE: Final = "adk:base"
UPDATED: Final = "adk:updated"
#: Key prefix of a session index (``x:<session id>`` -> update time, or ``None`` once
#: deleted) and of a user index (``u:<user id>`` -> ``True``).
SESSION_INDEX: Final = "x:"
USER_INDEX: Final = "u:"

#: ADK's prefixes of app- and user-scoped state keys.
APP_PREFIX: Final = State.APP_PREFIX
USER_PREFIX: Final = State.USER_PREFIX


#: A part that percent-quoting leaves as it is (ASCII letters, digits and ``_.-~``).
_UNQUOTED: Final = re.compile(r"[A-Za-z0-9_.~-]*")


def _quoted(part: str) -> str:
    """Return ``quote(part, safe="")``, without calling it for a part it leaves as is."""
    return part if _UNQUOTED.fullmatch(part) else quote(part, safe="")


def desk_of(*parts: str) -> str:
    """Return the desk id of the ADK scope named by ``parts`` (app, user, session).

    Cost: O(total length).
    """
    desk = "adk/" + "/".join(map(_quoted, parts))
    if len(desk.encode()) <= MAX_SESSION_ID_BYTES:
        return desk
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return f"adk/#{len(parts)}/{digest}"


def desk_under(user_desk: str, app: str, user: str, session: str) -> str:
    """Return ``desk_of(app, user, session)`` given ``user_desk == desk_of(app, user)``.

    Cost: one quote (``desk_of`` quotes every part).
    """
    desk = f"{user_desk}/{_quoted(session)}"
    # A quoted part is ASCII, so the length is the UTF-8 size of a desk of quoted parts.
    if len(desk) <= MAX_SESSION_ID_BYTES and not user_desk.startswith("adk/#"):
        return desk
    return desk_of(app, user, session)


def index_of(tag: str, *parts: str) -> str:
    """Return the desk id of the index ``tag`` (``"sessions"``, ``"users"``) of a scope."""
    desk = f"{desk_of(*parts)}/#{tag}"
    if len(desk.encode()) <= MAX_SESSION_ID_BYTES:
        return desk
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return f"adk/#{tag}/{len(parts)}/{digest}"


def split_delta(delta: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split an ADK state delta into (app, user, session) deltas of stored keys."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(APP_PREFIX):
            app[STATE + key[len(APP_PREFIX) :]] = value
        elif key.startswith(USER_PREFIX):
            user[STATE + key[len(USER_PREFIX) :]] = value
        else:
            session[STATE + key] = value
    return app, user, session


def scoped(
    values: Mapping[str, Any], prefix: str = "", over: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return the ADK state keys of a desk's ``values``, each given ``prefix``.

    With ``over``, they are added to (and replace keys of) a copy of it.
    """
    cut = len(STATE)
    found = {prefix + key[cut:]: value for key, value in values.items() if key[:cut] == STATE}
    return found if not over else {**over, **found}


def author_of(name: str, user_id: str, authors: Mapping[str, SessionAuthor]) -> SessionAuthor:
    """Return the desk author of an ADK event author name."""
    if name == "user":
        return Person(id=user_id, label=user_id)
    found = authors.get(name)
    return found if found is not None else Agent(id=name, label=name)


def plain_text(event: AdkEvent) -> str | None:
    """Return the text of an event whose content is plain text only, else ``None``."""
    content = event.content
    if content is None or not content.parts:
        return None
    texts: list[str] = []
    for part in content.parts:
        if part.text is None or part.thought or part.model_fields_set - {"text"}:
            return None
        texts.append(part.text)
    return "".join(texts)


def dump_event(event: AdkEvent) -> dict[str, Any]:
    """Return ``event`` as ADK's JSON dump (what its database service stores)."""
    data: dict[str, Any] = event.model_dump(mode="json", exclude_none=True)
    return data


def row_of(
    event: AdkEvent,
    data: dict[str, Any],
    author: SessionAuthor,
    metadata: dict[str, Any],
) -> Event:
    """Return the desk row of an ADK event: a ``Text`` row for plain text, else an ``Item``."""
    text = plain_text(event)
    if text is not None:
        return Event(author, Text(text), id=event.id, metadata={**metadata, ADK_EVENT_KEY: data})
    return Event(author, Item(data), id=event.id, metadata={**metadata, ADK_ITEM_KEY: True})


def marker(kind: str, author: SessionAuthor, event_id: str, metadata: dict[str, Any]) -> Event:
    """Return a bookkeeping row (``Item({"adk": kind})``) carrying a state change."""
    return Event(author, Item({MARKER_KEY: kind}), id=event_id, metadata=metadata)


def participant_name(author: SessionAuthor) -> str:
    """Return the ADK author name of a desk participant (its id)."""
    match author:
        case Person(id=ident) | Agent(id=ident):
            return ident
        case System(kind=kind):
            return kind
        case Operator():
            return "operator"
    raise AssertionError(author)  # pragma: no cover


def summary_event_of(compaction: Event) -> AdkEvent:
    """Return the ADK event of a ``Compaction`` row: its summary, by its author.

    It stands for the rows at or below the compaction's ``through``; its
    ``custom_metadata[COVERS_KEY]`` names their authors (``participant_name``).
    """
    body = compaction.body
    assert isinstance(body, Compaction)
    covers = {COVERS_KEY: [participant_name(a) for a in body.covers]}
    return _said_by(compaction, body.summary, covers)


def _said_by(row: Event, text: str, custom_metadata: dict[str, Any] | None = None) -> AdkEvent:
    """Return ``text`` as an ADK event of ``row``'s author (``role="user"`` content)."""
    assert row.timestamp is not None
    return AdkEvent(
        id=row.id,
        invocation_id=row.run_id or "",
        author=participant_name(row.author),
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        timestamp=row.timestamp.timestamp(),
        custom_metadata=custom_metadata,
    )


def adk_event_of(row: Event) -> AdkEvent | None:
    """Return the ADK event a stored row stands for, or ``None`` for a row that is none.

    The service's own rows come back exactly as appended; another participant's
    ``Text`` row comes back as an event authored by its id with ``role="user"`` content;
    bookkeeping rows and other kinds of rows are none.
    """
    body = row.body
    if isinstance(body, Text):
        data = row.metadata.get(ADK_EVENT_KEY)
        if isinstance(data, dict):
            return AdkEvent.model_validate(data)
        return _said_by(row, body.content)
    if isinstance(body, Item) and row.metadata.get(ADK_ITEM_KEY) is True:
        return AdkEvent.model_validate(body.item)
    return None
