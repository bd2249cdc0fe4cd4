"""Session state folded one event at a time, as events are appended.

Only a few events move a session's state: its ``SessionStarted``, ``RunStarted`` events
carrying a provider session id, a run's first input row (the run opens), its
``RunFinished`` (it closes), and any event whose metadata carries a state delta
(``STATE_DELTA_KEY``) or a clear (``STATE_CLEAR_KEY``): integrations keep key/value
state beside a desk this way, stored in the same transaction as the event. Stores fold
every event they append and keep the result beside the session, so
``SessionManager.get_session`` is one lookup however long the desk. A ``Compaction``
moves ``compactions`` (:func:`~sharedesk.projection.compaction.fold_compactions`).
"""

from __future__ import annotations

from typing import Final

import msgspec

from sharedesk.projection.compaction import fold_compactions
from sharedesk.protocol.events import (
    Compaction,
    Event,
    RunFinished,
    RunStarted,
    SessionStarted,
    Text,
)
from sharedesk.protocol.sessions import (
    SESSION_STARTED_ID,
    STATE_CLEAR_KEY,
    STATE_DELTA_KEY,
    SessionState,
)

#: The id suffix of a run's first input row (``"<hex>.input.0"``).
FIRST_INPUT_SUFFIX: Final = ".input.0"


def moves_session_state(event: Event) -> bool:
    """Return whether ``event`` can change a session's state. Cost: O(1)."""
    metadata = event.metadata
    if metadata and (STATE_DELTA_KEY in metadata or STATE_CLEAR_KEY in metadata):
        return True
    return isinstance(event.body, Compaction) or _moves_run_state(event)


def _moves_run_state(event: Event) -> bool:
    """Return whether ``event`` moves the run part of the state (metadata, providers, runs)."""
    body = event.body
    if isinstance(body, SessionStarted):
        return event.id == SESSION_STARTED_ID
    if isinstance(body, RunStarted):
        return body.provider_session_id is not None
    if event.run_id is None:
        return False
    if isinstance(body, RunFinished):
        return True
    return opens_run(event)


def opens_run(event: Event) -> bool:
    """Return whether ``event`` is a run's first input row (the run's oldest row)."""
    return isinstance(event.body, Text) and event.id.endswith(FIRST_INPUT_SUFFIX)


def fold_session_state(state: SessionState, event: Event) -> SessionState:
    """Return ``state`` (never changed) with one more stored event applied, in sequence order.

    Cost: O(open runs + providers), plus O(len(values)) for a state delta, when the
    event moves the state; else O(1).
    """
    if not moves_session_state(event):
        return state
    if isinstance(event.body, Compaction):
        state = msgspec.structs.replace(
            state, compactions=fold_compactions(state.compactions, event)
        )
    elif _moves_run_state(event):
        state = _fold_run_state(state, event)
    metadata = event.metadata
    clear = metadata.get(STATE_CLEAR_KEY) is True
    delta = metadata.get(STATE_DELTA_KEY)
    if not clear and not isinstance(delta, dict):
        return state
    values = {} if clear else dict(state.values)
    if isinstance(delta, dict):
        values.update((k, v) for k, v in delta.items() if isinstance(k, str))
    return msgspec.structs.replace(state, values=values)


def _fold_run_state(state: SessionState, event: Event) -> SessionState:
    """Return ``state`` with ``event`` applied to its metadata, providers and runs."""
    body = event.body
    if isinstance(body, SessionStarted):
        return msgspec.structs.replace(state, metadata=dict(body.metadata))
    if isinstance(body, RunStarted):
        sessions = dict(state.provider_sessions)
        sessions[body.provider] = {
            "provider_session_id": body.provider_session_id,
            "model": body.model,
        }
        return msgspec.structs.replace(state, provider_sessions=sessions)
    run_id = event.run_id
    assert run_id is not None
    open_runs = state.open_runs
    if isinstance(body, RunFinished):
        kept = tuple(r for r in open_runs if r != run_id)
    else:  # a run's first input row: it opens
        kept = open_runs if run_id in open_runs else (*open_runs, run_id)
    return state if kept == open_runs else msgspec.structs.replace(state, open_runs=kept)
