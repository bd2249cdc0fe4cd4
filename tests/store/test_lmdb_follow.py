"""``LmdbStore.follow``: another process's commits are told, as ``PostgresStore.follow`` tells.

The other process is a real child appending to the same path; what the store tells its
followers is recorded by :class:`Notices` and waited for with a bound, never timed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest

from sharedesk.protocol import Event, Person, StoreClosedError, Text, ValidationError
from sharedesk.store import LmdbStore
from tests.store.conftest import ChildFactory, run_child
from tests.store.test_lmdb import ScriptedEnvironment

BOB = Person(id="bob", label="Bob")
#: Longest wait for a notice, in seconds (a bound on a wait, not a timing).
WAIT = 30.0

APPEND = """
import sys
from sharedesk.store import LmdbStore
from sharedesk.protocol import Event, Person, Text
bob = Person(id="bob", label="Bob")
with LmdbStore(sys.argv[1], durability="relaxed") as store:
    for session, count in zip(sys.argv[2::2], sys.argv[3::2]):
        for n in range(int(count)):
            store.append(session, [Event(bob, Text(f"{session} {n}"))])
"""


class Notices:
    """A follower that records every ``(session_id, last)`` it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, int]] = []
        self._changed = threading.Condition()

    def __call__(self, session_id: str | None, last: int) -> None:
        with self._changed:
            self.calls.append((session_id, last))
            self._changed.notify_all()

    def wait_for(self, done: Callable[[dict[str | None, int]], bool]) -> dict[str | None, int]:
        """Wait (at most :data:`WAIT`) until ``done(newest last told per session)``."""
        with self._changed:
            self._changed.wait_for(lambda: done(self.newest()), timeout=WAIT)
            return self.newest()

    def newest(self) -> dict[str | None, int]:
        newest: dict[str | None, int] = {}
        for session_id, last in self.calls:
            newest[session_id] = max(last, newest.get(session_id, 0))
        return newest


def follower_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("sharedesk-lmdb-follower")]


class TestFollowingAnotherProcess:
    def test_another_processes_commits_are_told_per_session_up_to_its_last_sequence(
        self, tmp_path: Path, spawn: ChildFactory
    ) -> None:
        notices = Notices()
        with LmdbStore(tmp_path) as store:
            stop = store.follow(notices)
            run_child(spawn, APPEND, str(tmp_path), "one", "5", "two", "3", timeout=WAIT)
            told = notices.wait_for(lambda newest: newest == {"one": 5, "two": 3})
            stop()

        assert {"one": 5, "two": 3} == told

    def test_calls_for_one_session_come_in_commit_order(
        self, tmp_path: Path, spawn: ChildFactory
    ) -> None:
        notices = Notices()
        with LmdbStore(tmp_path) as store:
            store.follow(notices)
            run_child(spawn, APPEND, str(tmp_path), "desk", "40", timeout=WAIT)
            notices.wait_for(lambda newest: newest.get("desk") == 40)
        lasts = [last for session_id, last in notices.calls if session_id == "desk"]

        assert (sorted(set(lasts)), 40) == (lasts, lasts[-1])

    def test_what_the_path_held_before_following_is_not_told(
        self, tmp_path: Path, spawn: ChildFactory
    ) -> None:
        run_child(spawn, APPEND, str(tmp_path), "old", "2", timeout=WAIT)
        notices = Notices()
        with LmdbStore(tmp_path) as store:
            store.follow(notices)
            run_child(spawn, APPEND, str(tmp_path), "new", "1", timeout=WAIT)
            told = notices.wait_for(lambda newest: "new" in newest)

        assert {"new": 1} == told

    def test_this_processes_own_commits_are_told_too(self, tmp_path: Path) -> None:
        notices = Notices()
        with LmdbStore(tmp_path) as store:
            store.follow(notices)
            store.append("desk", [Event(BOB, Text("mine"))])
            told = notices.wait_for(lambda newest: "desk" in newest)

        assert {"desk": 1} == told


class TestFollowerFaults:
    def test_a_failed_reading_is_told_as_a_gap_then_the_commit_it_hid(self, tmp_path: Path) -> None:
        scripted = ScriptedEnvironment()
        notices = Notices()
        with LmdbStore(tmp_path, environment=scripted.open) as store:
            store.follow(notices)
            scripted.read_errors.append(lmdb.Error("the follower's walk fails once"))
            store.append("desk", [Event(BOB, Text("hidden by the failure"))])
            notices.wait_for(lambda newest: "desk" in newest)

        assert [(None, 0), ("desk", 1)] == notices.calls


class TestFollowerLifetime:
    def test_the_last_stop_ends_the_follower_thread(self, tmp_path: Path) -> None:
        with LmdbStore(tmp_path) as store:
            first, second = store.follow(Notices()), store.follow(Notices())
            one_thread = follower_threads()
            first()
            first()  # idempotent
            still = follower_threads()
            second()
            after = follower_threads()

        assert (1, 1, []) == (len(one_thread), len(still), after)

    def test_closing_the_store_ends_the_follower_thread(self, tmp_path: Path) -> None:
        store = LmdbStore(tmp_path)
        store.follow(Notices())

        store.close()

        assert [] == follower_threads()

    def test_following_a_closed_store_is_store_closed_error(self, tmp_path: Path) -> None:
        store = LmdbStore(tmp_path)
        store.close()

        with pytest.raises(StoreClosedError):
            store.follow(Notices())

    def test_a_follower_that_is_not_callable_is_validation_error(self, tmp_path: Path) -> None:
        with LmdbStore(tmp_path) as store, pytest.raises(ValidationError):
            store.follow("not a function")  # type: ignore[arg-type]

    def test_a_raising_follower_does_not_stop_the_others(self, tmp_path: Path) -> None:
        def broken(session_id: str | None, last: int) -> None:
            raise RuntimeError("broken follower")

        notices = Notices()
        with LmdbStore(tmp_path) as store:
            store.follow(broken)
            store.follow(notices)
            store.append("a", [Event(BOB, Text("one"))])
            notices.wait_for(lambda newest: "a" in newest)
            store.append("b", [Event(BOB, Text("two"))])
            told = notices.wait_for(lambda newest: "b" in newest)

        assert {"a": 1, "b": 1} == told
