"""Google ADK sessions on desks: :class:`DeskSessionService` (``pip install 'sharedesk[adk]'``).

A ``google.adk.sessions.BaseSessionService`` whose sessions are desks: every ADK event is
an attributed row that views, turns and transcripts show, stored with its state delta in
one transaction, and the rows other participants write come back to ADK as their events.
"""

from sharedesk.integrations.google_adk._service import (
    DeskListSessionsResponse,
    DeskSessionService,
)

__all__ = ["DeskListSessionsResponse", "DeskSessionService"]
