"""Store backends behind the :class:`~sharedesk.EventStore` port, on one base.

Every backend subclasses :class:`~sharedesk.store.base.StoreBase`, where the store's
public methods are written and documented once.

``LmdbStore`` (with py-lmdb) and ``PostgresStore`` (with psycopg, the ``postgres`` extra)
are imported on first use, see :mod:`sharedesk.protocol._lazy`.
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
