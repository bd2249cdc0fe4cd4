"""The Hub: pykka actors over a store (session publishers, projectors, sharing actors).

``Hub.open(path=None, **options)`` opens one over memory, LMDB or PostgreSQL;
``AsyncHub``/``AsyncTurn`` (asyncio) are imported on first use.
"""

from typing import TYPE_CHECKING, Any

from sharedesk.actors._base import THREAD_PREFIX, ActorKey
from sharedesk.actors._messages import Push
from sharedesk.actors.hub import Hub, HubOptions, HubStats, SessionHandle, Turn
from sharedesk.actors.projector import ProjectorActor
from sharedesk.actors.session import SessionActor
from sharedesk.actors.sharing import SharingActor
from sharedesk.projection.turns import plan_turn
from sharedesk.protocol._lazy import load_lazy

if TYPE_CHECKING:
    from sharedesk.actors.aio import AsyncHub, AsyncTurn


__all__ = [
    "ActorKey",
    "AsyncHub",
    "AsyncTurn",
    "Hub",
    "HubOptions",
    "HubStats",
    "ProjectorActor",
    "Push",
    "SessionActor",
    "SessionHandle",
    "SharingActor",
    "THREAD_PREFIX",
    "Turn",
    "plan_turn",
]


def __getattr__(name: str) -> Any:  # AsyncHub and AsyncTurn load on first use
    return load_lazy(name, __name__)
