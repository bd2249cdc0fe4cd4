"""Passivation: at most max_active actors, least recently used first, idle ones stopped."""

from __future__ import annotations

import threading
import time

from sharedesk.actors import ActorKey, Hub
from sharedesk.protocol import Agent, Conversation, Person
from tests.actors.conftest import HubFactory, our_threads

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Bot")


def wait_until(condition: object, what: str) -> None:
    """Wait (bounded) for ``condition()``; the tests never assert on time itself."""
    deadline = time.monotonic() + 10.0
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def sessions(hub: Hub) -> list[str]:
    return [key.session_id for key in hub.active() if key.kind == "session"]


class TestMaxActive:
    def test_at_most_max_active_actors_run(self, open_hub: HubFactory) -> None:
        hub = open_hub(max_active=4)
        for n in range(20):
            hub.session(f"s{n}").post(ANA, "hi")

        assert (4, 16) == (hub.stats().active, hub.stats().passivated)

    def test_the_least_recently_used_actor_stops_first(self, open_hub: HubFactory) -> None:
        hub = open_hub(max_active=3)
        for name in ("a", "b", "c", "a", "d"):
            hub.session(name).post(ANA, "hi")

        assert ["c", "a", "d"] == sessions(hub)

    def test_reactivation_is_transparent(self, open_hub: HubFactory) -> None:
        hub = open_hub(max_active=3)
        hub.session("a").post(ANA, "one")
        hub.view("a", BOT)
        for name in ("b", "c", "d"):
            hub.session(name).post(ANA, "hi")
        assert "a" not in sessions(hub)

        hub.session("a").post(ANA, "two")

        assert (2, ["one", "two"]) == (
            hub.last_sequence("a"),
            [m.content for m in hub.view("a", BOT).messages],
        )

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

    def test_an_actor_serving_a_request_is_never_passivated(self, open_hub: HubFactory) -> None:
        hub = open_hub(max_active=3)
        desk = hub.session("busy")
        desk.post(ANA, "warm up")
        projector = ActorKey("projector", "busy", "agent:bot", Conversation("busy"))
        release = threading.Event()
        slowed = threading.Event()
        original = hub.store.last_sequence

        def slow_last_sequence(session_id: str) -> int:
            if session_id == "busy" and threading.current_thread().name.startswith(
                "sharedesk-projector"
            ):
                slowed.set()
                release.wait(10.0)
            return original(session_id)

        hub.store.last_sequence = slow_last_sequence  # type: ignore[method-assign]
        viewer = threading.Thread(target=hub.view, args=("busy", BOT))
        viewer.start()
        slowed.wait(10.0)
        for name in ("p", "q", "r", "s"):
            hub.session(name).post(ANA, "hi")
        still_there = projector in hub.active()
        release.set()
        viewer.join()

        assert still_there


class TestIdleTimeout:
    def test_idle_actors_stop_after_the_idle_timeout(self, open_hub: HubFactory) -> None:
        hub = open_hub(idle_timeout=0.05)
        hub.session("desk").post(ANA, "hi")
        hub.view("desk", BOT)

        wait_until(lambda: our_threads() == ["sharedesk-reaper"], "idle actors to stop")

        assert (0, 2) == (hub.stats().active, hub.stats().passivated)

    def test_a_session_touched_after_passivation_continues_its_sequence(
        self, open_hub: HubFactory
    ) -> None:
        hub = open_hub(idle_timeout=0.05)
        hub.session("desk").post(ANA, "one")
        wait_until(lambda: hub.stats().active == 0, "idle actors to stop")

        assert 2 == hub.session("desk").post(ANA, "two").sequence


class TestThreadBound:
    def test_touching_2000_sessions_keeps_threads_bounded_by_max_active(
        self, open_hub: HubFactory
    ) -> None:
        hub = open_hub(max_active=16)
        baseline = threading.active_count() - len(our_threads())
        peak = 0
        for n in range(2000):
            hub.session(f"session-{n}").post(ANA, "hi")
            peak = max(peak, threading.active_count() - baseline)

        assert (True, 16) == (peak <= 16 + 2, hub.stats().active)

    def test_viewing_500_sessions_keeps_threads_bounded_by_max_active(
        self, open_hub: HubFactory
    ) -> None:
        """Views run on projector threads (writes may run on the caller's thread)."""
        hub = open_hub(max_active=16)
        baseline = threading.active_count() - len(our_threads())
        peak = 0
        for n in range(500):
            hub.session(f"session-{n}").post(ANA, "hi")
            hub.view(f"session-{n}", BOT)
            peak = max(peak, threading.active_count() - baseline)

        assert (True, True) == (2 <= peak <= 16 + 2, hub.stats().active <= 16)
