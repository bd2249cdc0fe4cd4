"""The state of a session that stores keep beside its events (see ``projection/runstate``)."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from sharedesk.protocol.events import Event

#: Id of the one ``SessionStarted`` event of a session (idempotent start).
SESSION_STARTED_ID: Final = "sharedesk.session_started"

#: The event ``metadata`` key of a state delta: a mapping of keys to their new values,
#: folded into :attr:`SessionState.values` in the transaction that stores the event.
STATE_DELTA_KEY: Final = "sharedesk.state"

#: The event ``metadata`` key that, when ``True``, clears :attr:`SessionState.values`
#: before the event's own delta (if any) is folded in.
STATE_CLEAR_KEY: Final = "sharedesk.state_clear"


class SessionState(msgspec.Struct, frozen=True):
    """A session's state, folded from the events that move it as they are appended.

    Attributes:
        metadata: The ``SessionStarted`` metadata (empty before the session was started).
        provider_sessions: ``provider -> {"provider_session_id", "model"}`` from the
            latest ``RunStarted`` of each provider that carried a provider session id.
        open_runs: Ids of the runs whose first input row is stored and whose
            ``RunFinished`` is not, oldest first.
        values: Key/value state folded from the events' state deltas
            (``metadata[STATE_DELTA_KEY]``, each key replaced by its new value;
            ``metadata[STATE_CLEAR_KEY] is True`` empties it first). An event and its
            delta are stored in one transaction.
        compactions: The newest ``Compaction`` event of each compacted conversation
            (the one with the highest ``through``), oldest first.
        archived_through: The highest sequence retention removed (0: none); every row at
            or below it is gone, every row above it is kept.
    """

    metadata: dict[str, Any] = {}
    provider_sessions: dict[str, dict[str, Any]] = {}
    open_runs: tuple[str, ...] = ()
    values: dict[str, Any] = {}
    compactions: tuple[Event, ...] = ()
    archived_through: int = 0


#: The state of a session with no events.
EMPTY_SESSION_STATE: Final = SessionState()
