"""Pure folds over a host log: projection, continuous sharing and transcripts.

Every module here takes values (and a :class:`~sharedesk.SessionLog` to read from) and
returns values. None of them imports a store, an actor runtime, a logger, a clock or a
thread (``tests/projection/test_purity.py`` enforces it).
"""

from sharedesk.projection.session import project_session
from sharedesk.projection.sharing import initialized_state, note_present, prepare_delta
from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.projection.turns import TurnPlan, plan_turn

__all__ = [
    "TranscriptBuilder",
    "TurnPlan",
    "initialized_state",
    "note_present",
    "plan_turn",
    "prepare_delta",
    "project_session",
]
