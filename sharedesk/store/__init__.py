"""Store backends behind the :class:`~sharedesk.EventStore` port, on one base, StoreBase.

``LmdbStore`` and ``PostgresStore`` (the ``postgres`` extra) are imported on first use.
"""

from typing import TYPE_CHECKING, Any

from sharedesk.protocol._lazy import load_lazy
from sharedesk.protocol.ports import SessionInfo
from sharedesk.store.base import StoreBase
from sharedesk.store.memory import MemoryStore

if TYPE_CHECKING:
    from sharedesk.store.lmdb import LmdbStore
    from sharedesk.store.postgres import PostgresStore


def __getattr__(name: str) -> Any:
    return load_lazy(name, __name__)


__all__ = ["LmdbStore", "MemoryStore", "PostgresStore", "SessionInfo", "StoreBase"]
