"""Supervision: restarts after faults, ask time-outs, restart intensity, close while waiting.

Faults are injected through the store the Hub is given (:class:`FaultyStore`): a read
the sharing actor or a projector makes raises an unexpected error, or waits on a gate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from sharedesk.actors import Hub, HubOptions
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


def crash_a_turn(hub: Hub, store: FaultyStore, session_id: str = "desk") -> None:
    store.fail["get_sharing_state"] = 1
    with pytest.raises(ActorCrashed):
        hub.turn(session_id, BOT)


class TestRestart:
    def test_a_fault_in_a_handler_reaches_the_caller_as_actor_crashed(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        store.fail["get_sharing_state"] = 1

        with pytest.raises(ActorCrashed) as caught:
            hub.turn("desk", BOT)

        assert ("sharing", "desk", InjectedFault, 1) == (
            caught.value.actor,
            caught.value.session_id,
            type(caught.value.__cause__),
            hub.stats().restarts,
        )

    def test_a_sharing_fault_is_restarted_and_the_turn_planned_again(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        hub.session("desk").post(ANA, "hello")
        crash_a_turn(hub, store)

        turn = hub.turn("desk", BOT)

        assert ("initial", ["hello"]) == (turn.reason, [m.content for m in turn.messages])

    def test_requests_queued_behind_a_failed_one_are_served_by_the_fresh_actor(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub()
        hub.session("desk").post(ANA, "hello")
        gate = store.gate["get_sharing_state"] = threading.Event()
        entered = store.entered["get_sharing_state"] = threading.Event()
        with ThreadPoolExecutor(4) as pool:
            first = pool.submit(hub.turn, "desk", BOT)
            entered.wait(10.0)
            others = [pool.submit(hub.turn, "desk", Agent(id=f"a{n}", label="A")) for n in range(3)]
            store.fail["get_sharing_state"] = 1
            gate.set()

            assert isinstance(first.exception(10.0), ActorCrashed)
            assert [["hello"]] * 3 == [
                [m.content for m in other.result(10.0).messages] for other in others
            ]

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


class TestAskTimeout:
    def test_a_view_whose_projector_does_not_answer_in_time_raises_actor_timeout(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(ask_timeout=0.2)
        hub.session("desk").post(ANA, "hi")
        store.gate["last_sequence"] = threading.Event()

        with pytest.raises(ActorTimeout) as caught:
            hub.view("desk", BOT)

        assert ("projector", "desk", 0.2) == (
            caught.value.actor,
            caught.value.session_id,
            caught.value.timeout,
        )

    def test_a_turn_whose_sharing_actor_does_not_answer_in_time_raises_actor_timeout(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(ask_timeout=0.2)
        store.gate["get_sharing_state"] = threading.Event()

        with pytest.raises(ActorTimeout) as caught:
            hub.turn("desk", BOT)

        assert "sharing" == caught.value.actor


class TestRestartIntensity:
    def test_past_the_restart_intensity_the_session_fails(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=2, restart_period=60.0)
        for _ in range(3):
            crash_a_turn(hub, store)

        with pytest.raises(SessionFailed) as caught:
            hub.turn("desk", BOT)

        assert ("desk", 2, 60.0) == (
            caught.value.session_id,
            caught.value.restarts,
            caught.value.period,
        )

    def test_restarts_within_the_intensity_keep_the_session_alive(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=2, restart_period=60.0)
        for _ in range(2):
            crash_a_turn(hub, store)

        assert "initial" == hub.turn("desk", BOT).reason

    def test_a_failed_session_leaves_other_sessions_unaffected(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=0, restart_period=60.0)
        hub.session("healthy").post(ANA, "before")
        crash_a_turn(hub, store, "sick")

        assert (2, ["sick"]) == (
            hub.session("healthy").post(ANA, "after").sequence,
            hub.stats().failed,
        )

    def test_every_kind_of_call_on_a_failed_session_raises_session_failed(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=0, restart_period=60.0)
        hub.session("sick").post(ANA, "before")
        turn = hub.turn("sick", BOT)
        crash_a_turn(hub, store, "sick")
        calls: list[Callable[[], object]] = [
            lambda: hub.view("sick", BOT),
            lambda: hub.turn("sick", BOT),
            lambda: hub.session("sick").post(ANA, "after"),
            lambda: turn.commit("reply"),
        ]

        for call in calls:
            with pytest.raises(SessionFailed):
                call()
        assert 1 == hub.last_sequence("sick")

    def test_a_recovered_session_serves_calls_again(
        self, make_hub: MakeHub, store: FaultyStore
    ) -> None:
        hub = make_hub(max_restarts=0, restart_period=60.0)
        crash_a_turn(hub, store, "sick")

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
        hub = make_hub(ask_timeout=5.0)
        gate = store.gate["get_sharing_state"] = threading.Event()
        entered = store.entered["get_sharing_state"] = threading.Event()
        with ThreadPoolExecutor(2) as pool:
            caller = pool.submit(hub.turn, "desk", BOT)
            entered.wait(10.0)
            closer = pool.submit(hub.close)

            assert isinstance(caller.exception(10.0), HubClosed)
            gate.set()
            closer.result(10.0)
