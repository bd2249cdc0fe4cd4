"""The follower of ``LmdbStore.follow``: one thread watching LMDB's last transaction id.

Every commit to an LMDB environment, by any process, moves its last transaction id,
which ``env.info()`` reads from the shared meta page without a transaction or a row. The
thread (``sharedesk-lmdb-follower:<path>``) reads it every 5 to 40 ms (5 right after a
commit, see ``FOLLOW_POLL``); only when it moved does it walk the ``meta`` sub-database
(each session's last sequence, 24 bytes a session) and tell the followers
``(session_id, last_sequence)`` for every session whose last sequence grew since the
previous walk. The rows themselves are read by whoever
follows (the Hub's session actors read only what they lack).

Idle, a poll costs one ``env.info()`` (microseconds); a walk costs O(sessions), and the
thread waits at least ``WALK_BACKOFF`` times a walk's duration before the next one, so
walking a large environment under constant writes takes at most about a tenth of a core.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from sharedesk.protocol._log import logger
from sharedesk.protocol.errors import SharedeskError, StoreClosedError
from sharedesk.store._follow import Followers, Watcher
from sharedesk.store._lmdb_env import SharedEnvironment
from sharedesk.store._lmdb_layout import META, session_of

__all__ = ["FOLLOW_POLL", "FOLLOW_POLL_IDLE", "FOLLOW_SLOWDOWN", "WALK_BACKOFF", "LmdbWatcher"]

_log = logger()

#: Seconds between two reads of the last transaction id right after a commit was seen;
#: each read that finds nothing new waits ``FOLLOW_SLOWDOWN`` times longer, up to
#: ``FOLLOW_POLL_IDLE``. So a busy desk is followed within milliseconds and an idle one
#: costs about 25 reads a second (half the poll: the median wake).
FOLLOW_POLL: Final = 0.005
FOLLOW_POLL_IDLE: Final = 0.04
FOLLOW_SLOWDOWN: Final = 1.25
#: After a walk of the sessions, the thread waits at least this many times its duration.
WALK_BACKOFF: Final = 9.0

#: Runs ``body(txn, dbs)`` in a read-only transaction of the store (``LmdbStore._in_read``).
InRead = Callable[[Callable[[Any, Mapping[bytes, Any]], Any]], Any]


def _lasts(txn: Any, dbs: Mapping[bytes, Any]) -> tuple[int, dict[str, int]]:
    """Return the snapshot's id and each session's last sequence (the ``meta`` walk)."""
    cursor = txn.cursor(db=dbs[b"meta"])
    return txn.id(), {session_of(key): META.unpack(raw)[0] for key, raw in cursor.iternext()}


class LmdbWatcher(Watcher):
    """The thread: poll the transaction id, walk the sessions when it moved, tell."""

    def __init__(self, shared: SharedEnvironment, in_read: InRead, followers: Followers) -> None:
        super().__init__("lmdb-follower", followers)
        self._shared = shared
        self._in_read = in_read
        self._seen_txnid = -1
        self._known: dict[str, int] = {}

    def start(self) -> None:
        """Take the first reading (what exists now is not news), then start the thread.

        Raises:
            StoreError: The environment could not be read.
        """
        self._seen_txnid, self._known = self._in_read(_lasts)
        super().start()

    def _txnid(self) -> int:
        def attempt() -> int:
            if self._shared.closed:
                raise StoreClosedError(self._path)
            last: int = self._shared.env.info()["last_txnid"]
            return last

        return self._shared.run("follow", attempt, damage=False)

    def _run(self) -> None:
        pause = FOLLOW_POLL_IDLE  # nothing seen yet: start slow
        failing = False
        while not self._stopping.wait(pause):
            pause = min(pause * FOLLOW_SLOWDOWN, FOLLOW_POLL_IDLE)
            try:
                txnid = self._txnid()
                if txnid <= self._seen_txnid:
                    continue
                started = time.monotonic()
                # The walk's own snapshot id, not ``txnid``: LMDB writes the meta page
                # (what ``env.info`` reads) before new read transactions see the commit.
                walked, lasts = self._in_read(_lasts)
            except StoreClosedError:
                return
            except SharedeskError as exc:
                if not failing:
                    _log.warning("store.lmdb_follow_failed", error=repr(exc))
                failing = True
                continue
            if failing:  # what failed to be read may have hidden commits: re-check all
                failing = False
                self._tell(None, 0)
            pause = max(FOLLOW_POLL, WALK_BACKOFF * (time.monotonic() - started))
            self._seen_txnid = walked
            known, self._known = self._known, lasts
            for session_id, last in lasts.items():
                if last > known.get(session_id, 0):
                    self._tell(session_id, last)
