"""The protocol: msgspec types, errors, codecs and ports. Imports nothing but msgspec."""

from sharedesk.protocol import authors, errors, events, views
from sharedesk.protocol.authors import *  # noqa: F403
from sharedesk.protocol.constants import PAGE_SIZE, PRESENT_SET_LIMIT, SCAN_LIMIT, SESSION_WINDOW
from sharedesk.protocol.errors import *  # noqa: F403
from sharedesk.protocol.events import *  # noqa: F403
from sharedesk.protocol.ports import EventStore, SessionLog, SharingStateStore
from sharedesk.protocol.transcripts import Transcript, TranscriptMessage
from sharedesk.protocol.views import *  # noqa: F403

__all__ = [
    "EventStore",
    "PAGE_SIZE",
    "PRESENT_SET_LIMIT",
    "SCAN_LIMIT",
    "SESSION_WINDOW",
    "SessionLog",
    "SharingStateStore",
    "Transcript",
    "TranscriptMessage",
]
__all__ += authors.__all__
__all__ += errors.__all__
__all__ += events.__all__
__all__ += views.__all__
