"""Store backends behind the :class:`~sharedesk.EventStore` port."""

from sharedesk.store._common import SessionInfo
from sharedesk.store.lmdb import LmdbStore
from sharedesk.store.memory import MemoryStore

__all__ = ["LmdbStore", "MemoryStore", "SessionInfo"]
