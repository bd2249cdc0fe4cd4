"""Passivation: at most max_active actors, least recently used first, idle ones stopped."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sharedesk.actors import ActorKey, Hub, HubOptions
from sharedesk.protocol import Agent, Conversation, Event, Person, Text
from tests.actors.conftest import HubFactory, our_threads
from tests.actors.faults import FaultyStore
from tests.logs import capture_logs

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Bot")


def viewed(hub: Hub) -> list[str]:
    return [key.session_id for key in hub.active() if key.kind == "projector"]


def watch(hub: Hub, *names: str) -> None:
    for name in names:
        hub.view(name, BOT)


class TestMaxActive:
    def test_at_most_max_active_actors_run(self, open_hub: HubFactory) -> None:
        hub = open_hub(max_active=4)
        watch(hub, *(f"s{n}" for n in range(20)))

        assert (4, 16) == (hub.stats().active, hub.stats().passivated)

    def test_the_least_recently_used_actor_stops_first(self, open_hub: HubFactory) -> None:
        hub = open_hub(max_active=3)
        watch(hub, "a", "b", "c", "a", "d")

        assert ["c", "a", "d"] == viewed(hub)

    def test_reactivation_is_transparent(self, open_hub: HubFactory) -> None:
        hub = open_hub(max_active=3)
        hub.session("a").post(ANA, "one")
        watch(hub, "a", "b", "c", "d")
        assert "a" not in viewed(hub)

        hub.session("a").post(ANA, "two")

        assert ["one", "two"] == [m.content for m in hub.view("a", BOT).messages]

    def test_a_passivated_projector_rebuilds_from_the_log(self, open_hub: HubFactory) -> None:
        hub = open_hub(max_active=3)
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        thread = Conversation("desk", root)
        hub.view("desk", BOT, thread)
        for viewer in ("x", "y", "z"):
            hub.view("desk", Agent(id=viewer, label=viewer))  # pushes the thread projector out
        desk.post(BOT, "reply", parent=root)

        assert ["root", "reply"] == [m.content for m in hub.view("desk", BOT, thread).messages]

    def test_an_actor_serving_a_request_is_never_passivated(self) -> None:
        store = FaultyStore()
        with Hub(store, HubOptions(max_active=3)) as hub:
            hub.view("busy", BOT)
            store.inner.append("busy", [Event(ANA, Text("behind the hub"))])
            gate = store.gate["read"] = threading.Event()
            entered = store.entered["read"] = threading.Event()
            with ThreadPoolExecutor(1) as pool:
                busy = pool.submit(hub.view, "busy", BOT)  # catches up: reads, gated
                entered.wait(10.0)
                watch(hub, "p", "q", "r", "s")
                still_there = ActorKey("projector", "busy", "agent:bot", Conversation("busy"))
                active = hub.active()
                gate.set()

                assert (True, ["behind the hub"]) == (
                    still_there in active,
                    [m.content for m in busy.result(10.0).messages],
                )


class TestIdleTimeout:
    def test_idle_actors_stop_after_the_idle_timeout(self, open_hub: HubFactory) -> None:
        with capture_logs() as logged:
            hub = open_hub(idle_timeout=0.05)
            hub.view("desk", BOT)
            hub.turn("desk", BOT)

            stopped = logged.wait_for(lambda: hub.stats().active == 0)

        assert (True, 0, 2) == (stopped, hub.stats().active, hub.stats().passivated)

    def test_a_session_touched_after_passivation_continues_its_sequence(
        self, open_hub: HubFactory
    ) -> None:
        with capture_logs() as logged:
            hub = open_hub(idle_timeout=0.05)
            hub.session("desk").post(ANA, "one")
            hub.view("desk", BOT)
            assert logged.wait_for(lambda: hub.stats().active == 0)

        assert (2, ["one", "two"]) == (
            hub.session("desk").post(ANA, "two").sequence,
            [m.content for m in hub.view("desk", BOT).messages],
        )


class TestThreadBound:
    def test_viewing_500_sessions_keeps_threads_bounded_by_max_active(
        self, open_hub: HubFactory
    ) -> None:
        hub = open_hub(max_active=16)
        baseline = threading.active_count() - len(our_threads())
        peak = 0
        for n in range(500):
            hub.session(f"session-{n}").post(ANA, "hi")
            hub.view(f"session-{n}", BOT)
            peak = max(peak, threading.active_count() - baseline)

        assert (True, True) == (2 <= peak <= 16 + 2, hub.stats().active <= 16)
