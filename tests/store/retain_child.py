"""Child process of the retention crash test: retain a desk a few rows at a time.

Usage: ``python -m tests.store.retain_child STORE ARCHIVE DESK``

Opens the store (an LMDB directory, or a PostgreSQL DSN), prints ``ready``, then
applies retention in steps of at most seven rows (chunks of three) until
``archived_through`` reaches the desk's compaction,
printing ``removing`` and ``removed`` around each chunk's removal (its rows archived
before),
``step <archived_through>`` after each step and ``done`` at the end. The parent kills it
with SIGKILL after a random number of lines: between archiving and removing, or later.
"""

from __future__ import annotations

import os
import sys

from sharedesk import RetentionPolicy
from sharedesk.store import LmdbStore
from sharedesk.store.base import StoreBase
from sharedesk.store.postgres import PostgresStore
from sharedesk.store.retention import apply_retention


def telling(base: type[StoreBase]) -> type[StoreBase]:
    """Return ``base`` printing ``removing`` before a chunk goes and ``removed`` after."""

    class TellingStore(base):  # type: ignore[misc,valid-type]
        def remove_archived(self, session_id: str, through: int) -> int:
            os.write(1, b"removing\n")
            removed: int = super().remove_archived(session_id, through)
            os.write(1, b"removed\n")
            return removed

    return TellingStore


def main(argv: list[str]) -> None:
    path, archive, desk = argv
    base: type[StoreBase] = PostgresStore if path.startswith("postgresql://") else LmdbStore
    with telling(base)(path) as store:
        os.write(1, b"ready\n")
        while True:
            state = store.session_state(desk)
            compacted = state.compactions[-1].body
            archived = state.archived_through
            if archived >= getattr(compacted, "through", 0):
                os.write(1, b"done\n")
                return
            keep = store.last_sequence(desk) - archived - 7
            apply_retention(store, RetentionPolicy(keep_last=keep, archive=archive), desk, chunk=3)
            os.write(1, f"step {store.session_state(desk).archived_through}\n".encode())


if __name__ == "__main__":
    main(sys.argv[1:])
