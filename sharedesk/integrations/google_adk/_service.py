"""DeskSessionService: Google ADK's session service, on desks (layout in ``_rows``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeVar

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations.google_adk import _rows as rows
from sharedesk.projection.compaction import compacted_through, compaction_of
from sharedesk.protocol.authors import SessionAuthor, System
from sharedesk.protocol.errors import ConcurrencyError, RowsArchived, ValidationError
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import WriteFuture
from sharedesk.protocol.sessions import STATE_CLEAR_KEY, STATE_DELTA_KEY, SessionState
from sharedesk.protocol.validation import check_write
from sharedesk.protocol.views import Conversation
from sharedesk.protocol.writes import Write

__all__ = ["DeskListSessionsResponse", "DeskSessionService"]

T = TypeVar("T")

#: ADK's own words for a stale session (its database service's message).
STALE_MESSAGE: Final = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)

#: The types of a stored update time.
_NUMBER: Final = (int, float)

#: The author of the service's bookkeeping rows.
SERVICE: Final = System(kind="adk", label="ADK session service")


class DeskListSessionsResponse(ListSessionsResponse):
    """A page of :meth:`DeskSessionService.list_sessions`.

    Attributes:
        next_page_token: Pass it as ``page_token`` for the next page; ``None`` on the last.
    """

    next_page_token: str | None = None


def _values(state: SessionState) -> dict[str, Any]:
    return state.values


def _delta(**changes: Any) -> dict[str, Any]:
    return {STATE_DELTA_KEY: changes}


class DeskSessionService(BaseSessionService):
    """A ``google.adk.sessions.BaseSessionService`` whose sessions are desks of ``hub``.

    Each ADK session is the desk :meth:`desk_id` names; each appended ADK event is one
    row on it (its ADK id as the row id), stored in one transaction with its state
    delta, the ``user:`` and ``app:`` parts of it included (those live on the user's
    and the app's desks, written by the same transaction). Rows that other participants
    write on the desk come back from :meth:`get_session` as ADK events of theirs.

    Args:
        hub: The hub whose store holds the desks.
        stale: What :meth:`append_event` does with a session object older than its desk:
            ``"raise"`` ADK's ``StaleSessionError`` (nothing written), or ``"merge"``:
            fold the missed rows into the object, then append (when retention archived
            some of them, ``StaleSessionError`` all the same: reload the session).
        authors: Desk authors of ADK agent names (default ``Agent(name, name)``).

    Raises:
        ValidationError: ``stale`` is neither ``"raise"`` nor ``"merge"``.
    """

    def __init__(
        self,
        hub: AsyncHub,
        *,
        stale: Literal["raise", "merge"] | str = "raise",
        authors: Mapping[str, SessionAuthor] | None = None,
    ) -> None:
        if stale not in ("raise", "merge"):
            raise ValidationError(f"stale must be 'raise' or 'merge', got {stale!r}")
        self._hub = hub
        self._merge = stale == "merge"
        self._authors: dict[str, SessionAuthor] = dict(authors or {})

    # -- names -------------------------------------------------------------------------

    def desk_id(self, app_name: str, user_id: str, session_id: str) -> str:
        """Return the desk id of the ADK session ``(app_name, user_id, session_id)``.

        The id is the one ``create_session`` and ``get_session`` use (the session id
        stripped of surrounding whitespace, as ADK does). Cost: O(length).
        """
        return rows.desk_of(app_name, user_id, session_id.strip())

    # -- I/O helpers -----------------------------------------------------------------------

    async def _read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking store reads ``fn(hub, ...)`` on a worker thread.

        ``fn`` reads rows only above the ``archived_through`` of a state it read, so a
        ``RowsArchived`` means that retention ran in between: ``fn`` runs again.
        """
        while True:
            try:
                return await asyncio.to_thread(fn, self._hub.hub, *args, **kwargs)
            except RowsArchived:
                continue

    async def _submit(self, write: Write) -> list[Event]:
        """Hand one checked write to the store's writer and await it."""
        return await asyncio.wrap_future(self._hub.hub.submit(write, WriteFuture()))

    # -- BaseSessionService ------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create the session (as ADK says); ``AlreadyExistsError`` when it exists.

        Cost: one write spanning the session's, user's and app's desks; three key reads.
        """
        session_id = (session_id or "").strip() or uuid.uuid4().hex
        desk = self.desk_id(app_name, user_id, session_id)
        user_desk, app_desk = rows.desk_of(app_name, user_id), rows.desk_of(app_name)
        app_delta, user_delta, session_delta = rows.split_delta(
            {k: v for k, v in (state or {}).items() if not k.startswith("temp:")}
        )
        now = time.time()
        while True:
            last, values = await self._read(_last_and_values, desk)
            if values.get(rows.LIVE) is True:
                raise AlreadyExistsError(f"Session with id {session_id} already exists.")
            base = last + 1
            session_row = rows.marker(
                "created",
                SERVICE,
                f"adk.created.{base}",
                {
                    STATE_CLEAR_KEY: True,
                    STATE_DELTA_KEY: {
                        **session_delta,
                        rows.LIVE: True,
                        rows.BASE: base,
                        rows.UPDATED: now,
                    },
                },
            )
            linked = _linked(
                f"{desk}@created.{base}",
                (
                    rows.index_of("sessions", app_name, user_id),
                    {rows.SESSION_INDEX + session_id: now},
                ),
                (rows.index_of("users", app_name), {rows.USER_INDEX + user_id: True}),
                (user_desk, user_delta),
                (app_desk, app_delta),
            )
            write = check_write(desk, [session_row], expected_version=last, linked=linked)
            try:
                await self._submit(write)
            except ConcurrencyError:
                continue
            break
        app_values, user_values, values = await self._read(_all_values, app_desk, user_desk, desk)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(app_values, user_values, values),
            last_update_time=now,
        )
        session._storage_update_marker = str(base)
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """Return the session with its state and events (as ADK says), or ``None``.

        On a desk compacted (``hub.compact``) past the session's start, the events at or
        below the compaction's ``through`` come back as one event in their place: the
        summary, authored by the compactor's id, ``custom_metadata["sharedesk.covers"]``
        naming the authors it covers (counted among ``num_recent_events``). So a desk
        whose compacted rows retention archived (``hub.apply_retention``) reads the same.

        Cost: one key read and one batched read of the three states, and at most
        ``config.num_recent_events`` rows when set (else the session's rows, from the
        compaction on); never the desk's history before the session began.
        """
        session_id = session_id.strip()
        desk = self.desk_id(app_name, user_id, session_id)
        limit = None if config is None else config.num_recent_events
        found = await self._read(
            _load, desk, rows.desk_of(app_name, user_id), rows.desk_of(app_name), limit
        )
        if found is None:
            return None
        last, app_values, user_values, values, stored, summary = found
        events = [e for e in map(rows.adk_event_of, stored) if e is not None]
        if summary is not None:
            events.insert(0, rows.summary_event_of(summary))
        after = None if config is None else config.after_timestamp
        if after is not None:
            events = [e for e in events if e.timestamp >= after]
        updated = values.get(rows.UPDATED)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(app_values, user_values, values),
            last_update_time=float(updated) if isinstance(updated, _NUMBER) else 0.0,
        )
        session.events = events  # each one validated as it was rebuilt
        session._storage_update_marker = str(last)
        return session

    async def list_sessions(
        self,
        *,
        app_name: str,
        user_id: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> DeskListSessionsResponse:
        """List the sessions of a user (all users: ``None``), least recently updated first.

        Listed sessions carry their merged state and no events. With ``page_size``, at
        most that many come back, and ``next_page_token`` names the next page.

        ``ValidationError``: ``page_size`` below 1, or a ``page_token`` no listing gave.

        Cost: the app's user index (``user_id=None``) and the user's session index, then
        one batched state read (``session_states``) of the sessions listed; no events.
        """
        if page_token and not (page_token.isascii() and page_token.isdigit()):
            raise ValidationError(f"page_token {page_token!r} is not one a listing gave")
        start = int(page_token) if page_token else 0
        if page_size is not None and page_size < 1:
            raise ValidationError(f"page_size must be positive, got {page_size}")
        listed, more = await self._read(_listing, app_name, user_id, start, page_size)
        token = str(start + len(listed)) if more else None
        # One validation of the whole page (cheaper than one ``Session(...)`` each).
        return DeskListSessionsResponse.model_validate(
            {"sessions": listed, "next_page_token": token}
        )

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session (its rows stay on the desk, no longer part of a session).

        Cost: one write spanning the session's and the user's desks.
        """
        session_id = session_id.strip()
        desk = self.desk_id(app_name, user_id, session_id)
        while True:
            last, values = await self._read(_last_and_values, desk)
            if values.get(rows.LIVE) is not True:
                return
            gone = rows.marker(
                "deleted", SERVICE, f"adk.deleted.{last + 1}", {STATE_CLEAR_KEY: True}
            )
            linked = _linked(
                f"{desk}@deleted.{last + 1}",
                (
                    rows.index_of("sessions", app_name, user_id),
                    {rows.SESSION_INDEX + session_id: None},
                ),
            )
            try:
                await self._submit(check_write(desk, [gone], expected_version=last, linked=linked))
            except ConcurrencyError:
                continue
            return

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """Return the user's state, keys without ``user:`` (as ADK says). Cost: one key read."""
        values = await self._read(_values_of, rows.desk_of(app_name, user_id))
        return rows.scoped(values)

    async def append_event(self, session: Session, event: AdkEvent) -> AdkEvent:
        """Append ``event`` to ``session`` and its desk, with its state delta, atomically.

        Partial events are not stored; ``temp:`` keys are applied to the object only.
        A retried event (same id) is not stored again.

        Raises:
            StaleSessionError: ``stale="raise"`` and the desk moved past the session
                object, or retention archived rows the object missed; nothing written.
            SessionNotFoundError: The session does not exist (or was deleted).

        Cost: one write spanning the session's desk and, for ``user:``/``app:`` keys
        and the session index, the user's and app's desks; on a stale object one read
        of the rows it missed.
        """
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        desk = self.desk_id(session.app_name, session.user_id, session.id)
        data = rows.dump_event(event)
        app_delta, user_delta, session_delta = rows.split_delta(
            (data.get("actions") or {}).get("state_delta") or {}
        )
        author = rows.author_of(event.author, session.user_id, self._authors)
        row = rows.row_of(
            event, data, author, _delta(**session_delta, **{rows.UPDATED: event.timestamp})
        )
        linked = _linked(
            f"{desk}@{event.id}",
            (
                rows.index_of("sessions", session.app_name, session.user_id),
                {rows.SESSION_INDEX + session.id: event.timestamp},
            ),
            (rows.desk_of(session.app_name, session.user_id), user_delta),
            (rows.desk_of(session.app_name), app_delta),
        )
        marker = session._storage_update_marker
        expected = int(marker) if marker is not None and marker.isdigit() else None
        while True:
            if expected is None:
                last, values = await self._read(_last_and_values, desk)
                if values.get(rows.LIVE) is not True:
                    raise SessionNotFoundError(f"Session {session.id} not found.")
                expected = last
            write = check_write(desk, [row], expected_version=expected, linked=linked)
            try:
                stored = (await self._submit(write))[0]
            except ConcurrencyError:
                expected = await self._catch_up(session, desk, expected, event.id)
                if expected < 0:
                    return event  # the event was stored by an earlier attempt
                continue
            break
        assert stored.sequence is not None
        if stored.sequence > expected:  # newly stored (not a retry that had landed)
            session._storage_update_marker = str(stored.sequence)
            self._commit_event_to_session(session, event)
        session.last_update_time = event.timestamp
        return event

    async def _catch_up(self, session: Session, desk: str, expected: int, event_id: str) -> int:
        """Handle a desk that moved past ``expected``; return the new expected version.

        Returns ``-1`` when ``event_id`` is among the rows missed (stored already).
        """
        found = await self._read(_missed, desk, expected)
        last, values, missed, archived = found
        if values.get(rows.LIVE) is not True:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        base = values.get(rows.BASE)
        if any(r.id == event_id for r in missed) and isinstance(base, int) and base <= expected:
            session._storage_update_marker = str(last)
            return -1
        if not self._merge or not isinstance(base, int) or base > expected or archived > expected:
            raise StaleSessionError(STALE_MESSAGE)  # archived: only a reload reads the summary
        for stored in missed:
            adk_event = rows.adk_event_of(stored)
            if adk_event is None:
                continue
            self._commit_event_to_session(session, adk_event)
        app_values, user_values, session_values = await self._read(
            _all_values,
            rows.desk_of(session.app_name),
            rows.desk_of(session.app_name, session.user_id),
            desk,
        )
        session.state.update(_merged(app_values, user_values, session_values))
        session._storage_update_marker = str(last)
        return last


def _linked(event_id: str, *changes: tuple[str, dict[str, Any]]) -> tuple[Write, ...]:
    """Return the linked writes of state ``changes`` (desk, delta); empty deltas write nothing.

    Each is one bookkeeping row with id ``event_id``, so a retried write stores none twice.
    """
    return tuple(
        check_write(desk, [rows.marker("state", SERVICE, event_id, _delta(**change))])
        for desk, change in changes
        if change
    )


# -- reads run on a worker thread (each takes the sync Hub first) ------------------------


def _values_of(hub: Any, desk: str) -> dict[str, Any]:
    return _values(hub.session_state(desk))


def _last_and_values(hub: Any, desk: str) -> tuple[int, dict[str, Any]]:
    last: int = hub.last_sequence(desk)
    return last, _values_of(hub, desk)


def _all_values(hub: Any, *desks: str) -> tuple[dict[str, Any], ...]:
    return tuple(_values_of(hub, desk) for desk in desks)


def _merged(
    app: Mapping[str, Any], user: Mapping[str, Any], session: Mapping[str, Any]
) -> dict[str, Any]:
    return rows.scoped(
        session, over=rows.scoped(user, rows.USER_PREFIX, rows.scoped(app, rows.APP_PREFIX))
    )


def _load(
    hub: Any, desk: str, user_desk: str, app_desk: str, limit: int | None
) -> tuple[int, dict[str, Any], dict[str, Any], dict[str, Any], list[Event], Event | None] | None:
    """Read what ``get_session`` answers: marker, the three states, the newest rows.

    On a desk whose channel was compacted past the session's start, the rows come from
    above the compaction's ``through``, and the compaction (the summary that stands for
    the rows at or below it) comes back too, unless ``limit`` rows are found above it.
    """
    last: int = hub.last_sequence(desk)
    state, app_state, user_state = hub.session_states([desk, app_desk, user_desk])
    values = _values(state)
    base = values.get(rows.BASE)
    if values.get(rows.LIVE) is not True or not isinstance(base, int):
        return None
    compaction = compaction_of(state.compactions, Conversation(desk))
    through = compacted_through(compaction)
    summary = compaction if base < through <= last else None
    after = through if summary is not None else base
    stored: list[Event] = []
    if limit is None:
        stored = hub.read(desk, after=after, before=last + 1)
    elif limit > 0:
        stored = hub.read(desk, after=after, before=last + 1, limit=limit, newest_first=True)
        stored.reverse()
        if len(stored) == limit:
            summary = None
    else:
        summary = None
    return last, _values(app_state), _values(user_state), values, stored, summary


def _missed(hub: Any, desk: str, expected: int) -> tuple[int, dict[str, Any], list[Event], int]:
    """Read the rows above ``expected`` still stored, with the desk's ``archived_through``."""
    last: int = hub.last_sequence(desk)
    state = hub.session_state(desk)
    archived: int = state.archived_through
    missed: list[Event] = hub.read(desk, after=max(expected, archived), before=last + 1)
    return last, _values(state), missed, archived


def _listing(
    hub: Any, app_name: str, user_id: str | None, start: int, page_size: int | None
) -> tuple[list[dict[str, Any]], bool]:
    """Read one page of sessions from the indexes, least recently updated first.

    Returns each session's ``Session`` fields, and whether more follow the page.
    """
    if user_id is None:
        known = _values_of(hub, rows.index_of("users", app_name))
        users = sorted(k[len(rows.USER_INDEX) :] for k in known if k.startswith(rows.USER_INDEX))
    else:
        users = [user_id]
    entries: list[tuple[float, str, str]] = []
    cut = len(rows.SESSION_INDEX)
    for user in users:
        for key, updated in _values_of(hub, rows.index_of("sessions", app_name, user)).items():
            if key[:cut] == rows.SESSION_INDEX and isinstance(updated, _NUMBER):
                entries.append((float(updated), key[cut:], user))
    entries.sort()
    stop = len(entries) if page_size is None else start + page_size
    page = entries[start:stop]
    user_desks = {user: rows.desk_of(app_name, user) for user in dict.fromkeys(u for *_, u in page)}
    desks = [rows.desk_under(user_desks[user], app_name, user, sid) for _, sid, user in page]
    states = hub.session_states([rows.desk_of(app_name), *user_desks.values(), *desks])
    app_state = rows.scoped(_values(states[0]), rows.APP_PREFIX)
    shared = {
        user: rows.scoped(_values(state), rows.USER_PREFIX, app_state)
        for user, state in zip(user_desks, states[1 : 1 + len(user_desks)], strict=True)
    }
    listed = [
        {
            "id": session_id,
            "app_name": app_name,
            "user_id": user,
            "state": rows.scoped(_values(state), over=shared[user]),
            "last_update_time": updated,
        }
        for (updated, session_id, user), state in zip(
            page, states[1 + len(user_desks) :], strict=True
        )
    ]
    return listed, stop < len(entries)
