"""The state of a session that stores keep beside its events (see ``projection/runstate``)."""

from __future__ import annotations

from typing import Any, Final

import msgspec

#: Id of the one ``SessionStarted`` event of a session (idempotent start).
SESSION_STARTED_ID: Final = "sharedesk.session_started"


class SessionState(msgspec.Struct, frozen=True):
    """A session's state, folded from the events that move it as they are appended.

    Attributes:
        metadata: The ``SessionStarted`` metadata (empty before the session was started).
        provider_sessions: ``provider -> {"provider_session_id", "model"}`` from the
            latest ``RunStarted`` of each provider that carried a provider session id.
        open_runs: Ids of the runs whose first input row is stored and whose
            ``RunFinished`` is not, oldest first.
    """

    metadata: dict[str, Any] = {}
    provider_sessions: dict[str, dict[str, Any]] = {}
    open_runs: tuple[str, ...] = ()


#: The state of a session with no events.
EMPTY_SESSION_STATE: Final = SessionState()
