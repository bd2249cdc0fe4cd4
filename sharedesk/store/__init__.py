"""Store backends behind the :class:`~sharedesk.EventStore` port."""

from sharedesk.store.memory import MemoryStore

__all__ = ["MemoryStore"]
