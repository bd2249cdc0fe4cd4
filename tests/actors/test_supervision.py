"""Supervision: restarts after faults, ask time-outs, restart intensity, close while waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sharedesk.actors import Hub, HubOptions
from sharedesk.actors._base import ActorKey
from sharedesk.protocol import Agent, Event, Person, Text
from sharedesk.protocol.errors import ActorCrashed, ActorTimeout, HubClosed, SessionFailed
from tests.actors.conftest import our_threads
from tests.actors.faults import FaultyStore, InjectedFault

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Bot")

MakeHub = Callable[..., Hub]


@pytest.fixture
def store() -> FaultyStore:
    return FaultyStore()


@pytest.fixture
def make_hub(store: FaultyStore) -> Iterator[MakeHub]:
    hubs: list[Hub] = []

    def factory(**options: float) -> Hub:
        hub = Hub(store, HubOptions(**options))  # type: ignore[arg-type]  # FaultyStore is duck-typed
        hubs.append(hub)
        return hub

    yield factory
    for gate in store.gate.values():
        gate.set()
    for hub in hubs:
        hub.close()
    assert [] == our_threads()


def wait_until(condition: object, what: str) -> None:
    """Wait (bounded) for ``condition()``; the tests never assert on time itself."""
    deadline = time.monotonic() + 10.0
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def inbox_size(hub: Hub, key: ActorKey) -> int:
    slot = hub._slots.get(key)
    if slot is None or slot.ref is None:
        return 0
    return slot.ref.queued()


class TestRestart:
    def test_a_fault_in_a_handler_reaches_the_caller_as_actor_crashed(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        store.fail["append"] = 1

        with pytest.raises(ActorCrashed) as caught:
            hub.session("desk").post(ANA, "boom")

        assert ("session", "desk", InjectedFault) == (
            caught.value.actor,
            caught.value.session_id,
            type(caught.value.__cause__),
        )

    def test_the_restarted_actor_recovers_its_last_sequence_from_the_store(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        desk = hub.session("desk")
        desk.post(ANA, "one")
        desk.post(ANA, "two")
        store.fail["append"] = 1
        with pytest.raises(ActorCrashed):
            desk.post(ANA, "lost")

        assert (3, 1) == (desk.post(ANA, "three").sequence, hub.stats().restarts)

    def test_requests_queued_behind_a_failed_one_are_served_by_the_fresh_actor(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(inline_writes=False)
        desk = hub.session("desk")
        desk.post(ANA, "warm up")
        store.gate["append"] = threading.Event()
        store.entered["append"] = threading.Event()
        results: dict[str, object] = {}

        def post(text: str) -> None:
            try:
                results[text] = desk.post(ANA, text).sequence
            except ActorCrashed as exc:
                results[text] = exc

        first = threading.Thread(target=post, args=("first",))
        first.start()
        store.entered["append"].wait(10.0)
        others = [threading.Thread(target=post, args=(f"queued {n}",)) for n in range(3)]
        for thread in others:
            thread.start()
        wait_until(lambda: inbox_size(hub, ActorKey("session", "desk")) == 3, "queued requests")
        store.fail["append"] = 1
        del store.entered["append"]
        store.gate.pop("append").set()
        for thread in [first, *others]:
            thread.join()

        assert isinstance(results.pop("first"), ActorCrashed)
        assert [2, 3, 4] == sorted(results.values())  # type: ignore[type-var]

    def test_a_projector_fault_is_restarted_and_the_view_rebuilt(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        hub.session("desk").post(ANA, "one")
        hub.view("desk", BOT)
        store.inner.append("desk", [Event(ANA, Text("behind the hub"))])
        store.fail["read"] = 1

        with pytest.raises(ActorCrashed):
            hub.view("desk", BOT)

        assert ["one", "behind the hub"] == [m.content for m in hub.view("desk", BOT).messages]

    def test_a_sharing_fault_is_restarted_and_the_turn_planned_again(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        hub.session("desk").post(ANA, "hello")
        store.fail["get_sharing_state"] = 1
        with pytest.raises(ActorCrashed):
            hub.turn("desk", BOT)

        turn = hub.turn("desk", BOT)

        assert ("initial", ["hello"]) == (turn.reason, [m.content for m in turn.messages])


def record_append_threads(store: FaultyStore) -> list[str]:
    """Make the store record the name of the thread of each append."""
    threads: list[str] = []
    original = store.inner.append

    def append(*args: Any, **kwargs: Any) -> list[Event]:
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    store.inner.append = append  # type: ignore[method-assign]
    return threads


class TestInlineWrites:
    def test_a_write_to_an_idle_session_runs_on_the_callers_thread(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        threads = record_append_threads(store)
        hub.session("desk").post(ANA, "one")
        hub.session("desk").post(ANA, "two")

        assert [threading.current_thread().name] * 2 == threads

    def test_a_write_to_a_busy_session_queues_behind_it_on_the_actor_thread(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        hub.session("desk").post(ANA, "warm up")
        threads = record_append_threads(store)
        gate = store.gate["append"] = threading.Event()
        store.entered["append"] = threading.Event()
        sequences: dict[str, int | None] = {}

        def post(text: str) -> None:
            sequences[text] = hub.session("desk").post(ANA, text).sequence

        first = threading.Thread(target=post, args=("first",), name="first-writer")
        first.start()
        store.entered["append"].wait(10.0)
        second = threading.Thread(target=post, args=("second",), name="second-writer")
        second.start()
        wait_until(lambda: any(t.startswith("sharedesk-session") for t in our_threads()), "queue")
        gate.set()
        first.join()
        second.join()

        assert ({"first": 2, "second": 3}, "first-writer", True) == (
            sequences,
            threads[0],
            threads[1].startswith("sharedesk-session-"),
        )

    def test_without_inline_writes_every_write_runs_on_the_actor_thread(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(inline_writes=False)
        threads = record_append_threads(store)
        hub.session("desk").post(ANA, "one")

        assert [True] == [name.startswith("sharedesk-session-") for name in threads]

    def test_an_inline_fault_restarts_the_actor_and_stops_its_thread(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        desk = hub.session("desk")
        desk.post(ANA, "one")
        actor = hub._slots[ActorKey("session", "desk")].actor
        assert actor is not None and actor.ensure_running()  # as if a write had queued
        started = our_threads()
        store.fail["append"] = 1
        with pytest.raises(ActorCrashed):
            desk.post(ANA, "boom")
        wait_until(lambda: not set(started) & set(our_threads()), "the failed actor's thread")

        assert (["sharedesk-session"], 2) == (
            [name.rsplit("-", 1)[0] for name in started],
            desk.post(ANA, "two").sequence,
        )


class TestAskTimeout:
    def test_an_actor_that_does_not_answer_in_time_raises_actor_timeout(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(ask_timeout=0.2, inline_writes=False)
        store.gate["append"] = threading.Event()

        with pytest.raises(ActorTimeout) as caught:
            hub.session("desk").post(ANA, "stuck")

        assert ("session", "desk", 0.2) == (
            caught.value.actor,
            caught.value.session_id,
            caught.value.timeout,
        )

    def test_a_view_whose_projector_does_not_answer_in_time_raises_actor_timeout(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(ask_timeout=0.2)
        hub.session("desk").post(ANA, "hi")
        store.gate["last_sequence"] = threading.Event()

        with pytest.raises(ActorTimeout) as caught:
            hub.view("desk", BOT)

        assert "projector" == caught.value.actor

    def test_a_turn_whose_sharing_actor_does_not_answer_in_time_raises_actor_timeout(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(ask_timeout=0.2)
        store.gate["get_sharing_state"] = threading.Event()

        with pytest.raises(ActorTimeout) as caught:
            hub.turn("desk", BOT)

        assert "sharing" == caught.value.actor

    def test_a_timed_out_append_still_lands_once_and_a_retry_with_its_id_is_idempotent(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(ask_timeout=0.2, inline_writes=False)
        gate = store.gate["append"] = threading.Event()
        with pytest.raises(ActorTimeout):
            hub.session("desk").post(ANA, "slow", id="m1")
        gate.set()

        again = hub.session("desk").post(ANA, "slow", id="m1")

        assert (1, 1) == (again.sequence, hub.last_sequence("desk"))


class TestRestartIntensity:
    def test_past_the_restart_intensity_the_session_fails(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=2, restart_period=60.0)
        store.fail["append"] = 3
        for _ in range(3):
            with pytest.raises(ActorCrashed):
                hub.session("desk").post(ANA, "boom")

        with pytest.raises(SessionFailed) as caught:
            hub.session("desk").post(ANA, "after")

        assert ("desk", 2, 60.0) == (
            caught.value.session_id,
            caught.value.restarts,
            caught.value.period,
        )

    def test_restarts_within_the_intensity_keep_the_session_alive(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=2, restart_period=60.0)
        store.fail["append"] = 2
        for _ in range(2):
            with pytest.raises(ActorCrashed):
                hub.session("desk").post(ANA, "boom")

        assert 1 == hub.session("desk").post(ANA, "fine").sequence

    def test_a_failed_session_leaves_other_sessions_unaffected(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=0, restart_period=60.0)
        hub.session("healthy").post(ANA, "before")
        store.fail["append"] = 1
        with pytest.raises(ActorCrashed):
            hub.session("sick").post(ANA, "boom")

        assert (2, ["sick"]) == (
            hub.session("healthy").post(ANA, "after").sequence,
            hub.stats().failed,
        )

    def test_every_kind_of_call_on_a_failed_session_raises_session_failed(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=0, restart_period=60.0)
        store.fail["append"] = 1
        with pytest.raises(ActorCrashed):
            hub.session("sick").post(ANA, "boom")

        for call in (lambda: hub.view("sick", BOT), lambda: hub.turn("sick", BOT)):
            with pytest.raises(SessionFailed):
                call()

    def test_a_recovered_session_serves_calls_again(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=0, restart_period=60.0)
        store.fail["append"] = 1
        with pytest.raises(ActorCrashed):
            hub.session("sick").post(ANA, "boom")

        recovered = hub.recover("sick")

        assert (True, 1, []) == (
            recovered,
            hub.session("sick").post(ANA, "better").sequence,
            hub.stats().failed,
        )

    def test_recovering_a_healthy_session_changes_nothing(self, make_hub: MakeHub) -> None:
        hub = make_hub()

        assert not hub.recover("healthy")


class TestCloseWhileWaiting:
    def test_a_caller_waiting_on_a_stuck_actor_gets_hub_closed(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(ask_timeout=5.0, inline_writes=False)
        gate = store.gate["append"] = threading.Event()
        store.entered["append"] = threading.Event()
        outcome: list[BaseException] = []

        def post() -> None:
            try:
                hub.session("desk").post(ANA, "stuck")
            except BaseException as exc:
                outcome.append(exc)

        caller = threading.Thread(target=post)
        caller.start()
        store.entered["append"].wait(10.0)
        closer = threading.Thread(target=hub.close)
        closer.start()
        caller.join(10.0)
        gate.set()
        closer.join()

        assert [HubClosed] == [type(exc) for exc in outcome]
