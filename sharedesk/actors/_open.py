"""Opening the store a Hub runs on: in memory, LMDB at a path, or PostgreSQL at a DSN."""

from __future__ import annotations

import inspect
import os
from typing import Any

from sharedesk.actors._base import HubStore
from sharedesk.protocol._lazy import load_lazy
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.validation import check_path, is_postgres_dsn
from sharedesk.store.memory import MemoryStore


def open_store(
    path: str | os.PathLike[str] | None, options: dict[str, Any], hub_options: frozenset[str]
) -> tuple[HubStore, str | None]:
    """Open the store ``Hub.open(path, **options)`` names; return it and where it lives.

    Args:
        path: ``None`` (in memory), an LMDB path, or a PostgreSQL DSN.
        options: The store's options (the Hub's own taken out already).
        hub_options: The Hub's option names, to name them in an error.

    Raises what :meth:`Hub.open` raises.
    """
    if is_postgres_dsn(path):
        # psycopg loads here, never with ``import sharedesk`` (ImportError names the extra).
        PostgresStore = load_lazy("PostgresStore", "sharedesk")
        _check_options(PostgresStore, "dsn", options, hub_options)
        store = PostgresStore(path, **options)
        return store, store.path  # the DSN without its password
    if path is None:
        if options:
            raise ValidationError(
                f"store options {sorted(options)} need a path (an in-memory hub takes none)"
            )
        return MemoryStore(), None
    from sharedesk.store.lmdb import LmdbStore  # a memory-only Hub never loads LMDB

    check_path(path)
    _check_options(LmdbStore, "path", options, hub_options)
    return LmdbStore(path, **options), os.fspath(path)


def _check_options(
    store_class: type, first: str, options: dict[str, Any], hub_options: frozenset[str]
) -> None:
    params = inspect.signature(store_class).parameters.values()
    named = sorted(
        p.name
        for p in params
        if p.name != first and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    )
    unknown = sorted(name for name in options if name not in named)
    if unknown:
        raise ValidationError(
            f"unknown options {unknown}: Hub options are {sorted(hub_options)}, "
            f"store options {named}"
        )
