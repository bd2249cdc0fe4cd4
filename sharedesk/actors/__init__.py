"""The Hub: pykka actors over a store; ``AsyncHub``/``AsyncTurn`` (asyncio) load on first use."""

from typing import TYPE_CHECKING, Any

from sharedesk.actors._base import THREAD_PREFIX, ActorKey
from sharedesk.actors._handles import SessionHandle, Turn
from sharedesk.actors._messages import Push
from sharedesk.actors._options import HubOptions, HubStats
from sharedesk.actors.hub import Hub
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
    "Push",
    "SessionHandle",
    "THREAD_PREFIX",
    "Turn",
]


def __getattr__(name: str) -> Any:  # AsyncHub and AsyncTurn load on first use
    return load_lazy(name, __name__)
