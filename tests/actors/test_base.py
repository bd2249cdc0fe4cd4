"""HubActor's mailbox: one message at a time, in order, on a lazily started named thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pykka
import pytest

from sharedesk.actors._base import THREAD_PREFIX, ActorKey, HubActor, HubStore, Slot
from sharedesk.actors._messages import Request
from sharedesk.protocol.errors import ActorCrashed, ValidationError
from sharedesk.store.memory import MemoryStore
from tests.logs import capture_logs

KEY = ActorKey(kind="session", session_id="desk")


class Say(Request[tuple[object, str]], frozen=True):
    """Answered with ``(what, the handling thread's name)``; some values fail."""

    what: object


class Hold(Request[tuple[object, str]], frozen=True):
    """Handled by waiting for ``release`` (after setting ``entered``)."""

    entered: threading.Event = msgspec.field(default_factory=threading.Event)
    release: threading.Event = msgspec.field(default_factory=threading.Event)


class FakeSupervisor:
    """Records the faults reported to it; the mailbox needs nothing else of a Hub."""

    def __init__(self) -> None:
        self.store: HubStore = MemoryStore()
        self.crashes: list[ActorKey] = []

    def _crashed(self, key: ActorKey, actor: HubActor) -> None:
        self.crashes.append(key)

    def _subscribers_of(self, session_id: str) -> tuple[HubActor, ...]:
        return ()

    def _call(self, key: ActorKey, message: Request[Any], *, inline: bool = False) -> Any:
        raise AssertionError("not used")


class EchoActor(HubActor):
    """Answers ``Say`` and ``Hold`` with (what, the handling thread's name)."""

    kind = "session"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.handled: list[object] = []

    def handle(self, message: Any) -> Any:
        match message:
            case Hold():
                message.entered.set()
                message.release.wait(10.0)
            case Say(what="bad input"):
                raise ValidationError("bad input")
            case Say(what="fault"):
                raise RuntimeError("fault")
        self.handled.append(message)
        what = message.what if isinstance(message, Say) else message
        return what, threading.current_thread().name


@pytest.fixture
def actor() -> Iterator[EchoActor]:
    echo = EchoActor.start(FakeSupervisor(), KEY, Slot(KEY, time.monotonic()))
    yield echo
    future = echo.stop_soon()
    if future is not None:
        future.get(timeout=10.0)
    thread = echo.slot.thread
    if thread is not None and thread.ident is not None:
        thread.join(10.0)
    assert thread is None or not thread.is_alive()


class TestMailbox:
    def test_an_actor_costs_no_thread_until_a_message_is_queued(self, actor: EchoActor) -> None:
        ran, answer = actor.run_inline(Say("hello"))

        assert (True, "hello", False) == (ran, answer[0], actor.slot.thread.is_alive())  # type: ignore[union-attr]

    def test_queued_messages_are_answered_in_order_on_the_actors_named_thread(
        self, actor: EchoActor
    ) -> None:
        assert actor.ensure_running()
        futures = [actor.ask(Say(n)) for n in range(5)]

        answers = [future.get(timeout=10.0) for future in futures]

        assert [0, 1, 2, 3, 4] == [message for message, _ in answers]
        assert {f"{THREAD_PREFIX}session"} == {name.rsplit("-", 1)[0] for _, name in answers}

    def test_a_busy_actor_does_not_run_a_request_inline(self, actor: EchoActor) -> None:
        hold = Hold()
        assert actor.ensure_running()
        held = actor.ask(hold)
        hold.entered.wait(10.0)

        ran = actor.run_inline(Say("meanwhile"))
        hold.release.set()
        held.get(timeout=10.0)

        assert (False, [hold]) == (ran[0], actor.handled)

    def test_a_shared_desk_error_reaches_the_caller_and_the_actor_keeps_running(
        self, actor: EchoActor
    ) -> None:
        assert actor.ensure_running()
        with pytest.raises(ValidationError):
            actor.ask(Say("bad input")).get(timeout=10.0)

        assert "after" == actor.ask(Say("after")).get(timeout=10.0)[0]

    def test_stop_soon_serves_the_queued_messages_first(self, actor: EchoActor) -> None:
        hold = Hold()
        assert actor.ensure_running()
        held = actor.ask(hold)
        hold.entered.wait(10.0)
        queued = actor.ask(Say("queued"))
        stopped = actor.stop_soon()
        hold.release.set()

        assert stopped is not None
        stopped.get(timeout=10.0)
        assert "queued" == queued.get(timeout=10.0)[0]
        held.get(timeout=10.0)

    def test_a_request_to_a_stopped_actor_raises_actor_dead_error(self, actor: EchoActor) -> None:
        assert actor.ensure_running()
        stopped = actor.stop_soon()
        assert stopped is not None
        stopped.get(timeout=10.0)

        with pytest.raises(pykka.ActorDeadError):
            actor.ask(Say("late"))

    def test_requests_queued_behind_a_fault_are_answered_actor_dead_error(
        self, actor: EchoActor
    ) -> None:
        hold = Hold()
        assert actor.ensure_running()
        held = actor.ask(hold)
        hold.entered.wait(10.0)
        failing = actor.ask(Say("fault"))
        behind = actor.ask(Say("behind"))
        hold.release.set()
        held.get(timeout=10.0)

        with pytest.raises(ActorCrashed):
            failing.get(timeout=10.0)
        with pytest.raises(pykka.ActorDeadError):
            behind.get(timeout=10.0)
        assert [KEY] == actor.hub.crashes  # type: ignore[attr-defined]

    def test_an_actor_that_never_ran_stops_without_a_thread(self, actor: EchoActor) -> None:
        assert (None, False, False) == (
            actor.stop_soon(),
            actor.is_alive(),
            actor.ensure_running(),
        )

    def test_a_told_message_that_fails_stops_the_actor_and_is_logged(
        self, actor: EchoActor
    ) -> None:
        with capture_logs() as logs:
            actor.deliver(Say("bad input"))
            actor.slot.thread.join(10.0)  # type: ignore[union-attr]

        assert (False, ["actor.tell_failed"]) == (
            actor.is_alive(),
            [e["event"] for e in logs if e["log_level"] == "error"],
        )
