"""A Hub over a following store pushes what other processes commit as it pushes its own.

The store here is :class:`~tests.actors.following.FollowingMemoryStore`: another process
is played by ``append_elsewhere`` (straight to the store), its notice by ``fire``. The
rules: a notice pushes the session's subscribers exactly the events they lack,
consecutive, none twice, in order with the Hub's own pushes; a notice of the Hub's own
commit costs nothing (no message, no thread); ``(None, 0)`` re-checks every session with
subscribers; a session nobody subscribes to costs nothing; closing stops following.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedesk.actors import ActorKey, Hub, HubOptions
from sharedesk.protocol import Person
from sharedesk.protocol.constants import SCAN_LIMIT
from sharedesk.protocol.errors import HubClosed
from tests.actors.conftest import our_threads
from tests.actors.following import FollowingMemoryStore, Recorder, said

ALICE = Person(id="alice", label="Alice")


@pytest.fixture
def store() -> FollowingMemoryStore:
    return FollowingMemoryStore()


@pytest.fixture
def hub(store: FollowingMemoryStore) -> Iterator[Hub]:
    hub = Hub(store)
    yield hub
    hub.close()
    assert [] == our_threads()


class TestFollowingLifecycle:
    def test_a_hub_follows_a_following_store_once(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        assert (True, 1) == (hub.following, len(store.followers))

    def test_closing_the_hub_stops_following(self, store: FollowingMemoryStore) -> None:
        hub = Hub(store)

        hub.close()

        assert ([], 1) == (store.followers, store.stops)

    def test_a_hub_over_a_store_that_does_not_follow_does_not(self) -> None:
        with Hub.open(None) as hub:
            assert False is hub.following

    def test_a_notice_for_a_session_nobody_subscribes_to_starts_nothing(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        store.append_elsewhere("desk", [said("hi")])

        store.fire("desk", 1)

        assert [] == hub.active()

    def test_listening_on_a_closed_hub_is_hub_closed(self, store: FollowingMemoryStore) -> None:
        hub = Hub(store)
        hub.close()

        with pytest.raises(HubClosed):
            hub.listen("desk", Recorder())

    def test_adding_a_listener_starts_the_session_actor(self, hub: Hub) -> None:
        hub.listen("desk", Recorder())

        assert [ActorKey(kind="session", session_id="desk")] == hub.active()


class TestNoticesPushTheMissingEvents:
    def test_a_notice_pushes_exactly_the_events_another_process_appended(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()
        hub.listen("desk", recorder)
        store.append_elsewhere("desk", [said("a"), said("b"), said("c")])

        store.fire("desk", 3)

        assert [[1, 2, 3]] == recorder.wait_through(3)

    def test_only_events_committed_after_listen_are_pushed(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        store.append_elsewhere("desk", [said("old")])
        store.fire("desk", 1)
        recorder = Recorder()
        hub.listen("desk", recorder)
        store.append_elsewhere("desk", [said("new")])

        store.fire("desk", 2)

        assert [[2]] == recorder.wait_through(2)

    def test_a_notice_of_the_hubs_own_commit_pushes_nothing_twice(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()
        hub.listen("desk", recorder)
        hub.append("desk", [said("mine", ALICE), said("mine too", ALICE)])
        store.fire("desk", 2)
        store.append_elsewhere("desk", [said("theirs")])

        store.fire("desk", 3)

        assert [[1, 2], [3]] == recorder.wait_through(3)

    def test_events_appended_elsewhere_between_own_writes_are_pushed_before_the_next(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()
        hub.listen("desk", recorder)
        hub.append("desk", [said("one", ALICE)])
        store.append_elsewhere("desk", [said("two"), said("three")])  # notice not yet in

        hub.append("desk", [said("four", ALICE)])
        store.fire("desk", 3)  # the late notice

        assert [1, 2, 3, 4] == [s for push in recorder.wait_through(4) for s in push]

    def test_a_write_whose_gap_cannot_be_read_stands_and_is_pushed_by_a_catch_up(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()
        hub.listen("desk", recorder)
        hub.append("desk", [said("one", ALICE)])
        store.append_elsewhere("desk", [said("two")])
        store.failing_reads = 1

        (stored,) = hub.append("desk", [said("three", ALICE)])

        assert (3, [[1], [2, 3]]) == (stored.sequence, recorder.wait_pushes(2))

    def test_a_notice_told_while_a_write_runs_is_caught_up_after_it(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()
        hub.listen("desk", recorder)

        def elsewhere_meanwhile() -> None:
            store.append_elsewhere("desk", [said("theirs")])
            store.fire("desk", 2)

        store.during_append = elsewhere_meanwhile
        hub.append("desk", [said("mine", ALICE)])

        assert [1, 2] == [s for push in recorder.wait_through(2) for s in push]

    def test_a_session_far_behind_is_pushed_only_its_newest_scan_limit_events(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()
        hub.listen("desk", recorder)
        store.append_elsewhere("desk", [said(f"{n}") for n in range(SCAN_LIMIT + 5)])

        store.fire("desk", SCAN_LIMIT + 5)

        (push,) = recorder.wait_through(SCAN_LIMIT + 5)
        assert (6, SCAN_LIMIT + 5, SCAN_LIMIT) == (push[0], push[-1], len(push))

    def test_none_re_checks_every_session_with_listeners(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        first, second = Recorder(), Recorder()
        hub.listen("one", first)
        hub.listen("two", second)
        store.append_elsewhere("one", [said("a")])
        store.append_elsewhere("two", [said("b"), said("c")])

        store.fire(None, 0)

        assert ([[1]], [[1, 2]]) == (first.wait_through(1), second.wait_through(2))

    def test_a_removed_listener_is_told_nothing_more(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        gone, kept = Recorder(), Recorder()
        remove = hub.listen("desk", gone)
        hub.listen("desk", kept)
        remove()
        store.append_elsewhere("desk", [said("a")])

        store.fire("desk", 1)

        assert ([[1]], []) == (kept.wait_through(1), gone.pushes)

    def test_the_sharing_actor_is_pushed_what_another_process_appended(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()
        hub.listen("desk", recorder)
        hub.turn("desk", ALICE).commit()  # starts the sharing actor
        store.append_elsewhere("desk", [said("hello")])

        store.fire("desk", 1)
        recorder.wait_through(1)

        turn = hub.turn("desk", ALICE)
        assert ["hello"] == [m.content for m in turn.messages]

    def test_pushes_stay_consecutive_while_own_and_other_appends_interleave(
        self, hub: Hub, store: FollowingMemoryStore
    ) -> None:
        recorder = Recorder()
        hub.listen("desk", recorder)

        def other_process() -> None:
            for n in range(60):
                (event,) = store.append_elsewhere("desk", [said(f"theirs {n}")])
                store.fire("desk", event.sequence or 0)

        other = threading.Thread(target=other_process)
        other.start()
        for n in range(60):
            stored = hub.append("desk", [said(f"mine {n}", ALICE)])
            store.fire("desk", stored[0].sequence or 0)
        other.join()
        store.fire("desk", 120)

        pushed = [sequence for push in recorder.wait_through(120) for sequence in push]
        assert list(range(1, 121)) == pushed


#: One step of a run: the Hub appends, another process appends (told or not yet), a
#: notice of the newest sequence, or a re-check.
_STEPS = st.lists(
    st.sampled_from(["own", "elsewhere", "elsewhere_untold", "notice", "recheck"]),
    min_size=1,
    max_size=30,
)


class TestPushesAreConsecutiveWhateverTheOrder:
    @given(before=st.integers(min_value=0, max_value=3), steps=_STEPS)
    @settings(max_examples=60)
    def test_a_listener_is_pushed_every_event_after_listen_once_in_order(
        self, before: int, steps: list[str]
    ) -> None:
        store = FollowingMemoryStore()
        with Hub(store) as hub:
            if before:
                store.append_elsewhere("desk", [said("old") for _ in range(before)])
            recorder = Recorder()
            hub.listen("desk", recorder)
            for step in steps:
                if step == "own":
                    hub.append("desk", [said("mine", ALICE)])
                elif step.startswith("elsewhere"):
                    (event,) = store.append_elsewhere("desk", [said("theirs")])
                    if step == "elsewhere":
                        store.fire("desk", event.sequence or 0)
                elif step == "notice":
                    store.fire("desk", store.last_sequence("desk"))
                else:
                    store.fire(None, 0)
            last = store.last_sequence("desk")
            store.fire("desk", last)  # the notice of the newest commit always comes
            pushes = recorder.wait_through(last) if last > before else []

        assert list(range(before + 1, last + 1)) == [s for push in pushes for s in push]


class TestListenedSessionsKeepTheirActor:
    def test_a_session_actor_with_listeners_is_not_passivated(
        self, store: FollowingMemoryStore
    ) -> None:
        with Hub(store, HubOptions(max_active=3)) as hub:
            recorder = Recorder()
            hub.listen("desk", recorder)
            for n in range(5):  # each start needs room: the least recently used goes
                hub.append(f"other-{n}", [said("x", ALICE)])
            store.append_elsewhere("desk", [said("still pushed")])

            store.fire("desk", 1)

            assert [[1]] == recorder.wait_through(1)


class _Raising:
    def deliver(self, message: object) -> None:
        raise RuntimeError("a listener's own bug")


class TestARaisingListener:
    def test_is_logged_and_dropped_and_the_post_succeeds(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        with Hub.open(None) as hub:
            kept = Recorder()
            hub.listen("desk", _Raising())
            hub.listen("desk", kept)
            posts = [hub.session("desk").post(ALICE, f"m{n}").sequence for n in range(7)]
            pushed = kept.wait_through(7)

            assert ([1, 2, 3, 4, 5, 6, 7], list(range(1, 8)), [], 1) == (
                posts,
                [s for push in pushed for s in push],
                hub.stats().failed,
                sum("hub.listener_failed" in r.getMessage() for r in caplog.records),
            )
