"""AsyncHub: every coroutine keeps the meaning of its Hub counterpart, on both backends."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from sharedesk import (
    Agent,
    AsyncHub,
    AsyncTurn,
    ConcurrencyError,
    Conversation,
    Event,
    Hub,
    HubClosed,
    Person,
    SharingStateConflict,
    Text,
    ValidationError,
)
from tests.aio.conftest import Runner, our_threads
from tests.aio.stores import Held, held_hub

T = TypeVar("T")

ANN = Person(id="ann", label="Ann")
BOT = Agent(id="bot", label="Bot")


def texts(messages: list) -> list[str]:  # type: ignore[type-arg]
    return [m.content for m in messages]


class TestOpen:
    def test_open_is_awaitable_and_close_leaves_no_thread(self, store_path: Path | None) -> None:
        async def main() -> bool:
            hub = await AsyncHub.open(store_path)
            await hub.post("desk", ANN, "hello")
            await hub.close()
            return hub.closed

        assert asyncio.run(main())
        assert [] == our_threads()

    def test_open_is_an_async_context_manager_that_closes_the_hub(
        self, store_path: Path | None
    ) -> None:
        async def main() -> AsyncHub:
            async with AsyncHub.open(store_path) as hub:
                await hub.post("desk", ANN, "hello")
            return hub

        hub = asyncio.run(main())

        assert hub.closed and hub.hub.closed

    def test_a_bad_option_raises_validation_error_when_awaited(self) -> None:
        async def main() -> None:
            await AsyncHub.open(None, ask_timeout=-1)

        with pytest.raises(ValidationError):
            asyncio.run(main())

    def test_hub_is_the_sync_hub_over_the_same_store(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[bool, list[str]]:
            await hub.post("desk", ANN, "async")
            hub.hub.session("desk").post(ANN, "sync")
            return isinstance(hub.hub, Hub), texts([e.body for e in await hub.read("desk")])

        is_hub, contents = arun(body)

        assert is_hub
        assert ["async", "sync"] == contents

    def test_close_is_idempotent(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> bool:
            await hub.close()
            await hub.close()
            return hub.closed

        assert arun(body)

    def test_a_call_after_close_raises_hub_closed(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> None:
            await hub.close()
            await hub.post("desk", ANN, "late")

        with pytest.raises(HubClosed):
            arun(body)


class TestAppend:
    def test_append_returns_the_events_as_stored(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[int | None]:
            first = await hub.append("desk", [Event(ANN, Text("a")), Event(ANN, Text("b"))])
            second = await hub.append("desk", [Event(ANN, Text("c"))])
            return [e.sequence for e in first + second]

        assert [1, 2, 3] == arun(body)

    def test_appending_a_known_id_returns_the_stored_event_without_writing(
        self, arun: Runner
    ) -> None:
        async def body(hub: AsyncHub) -> tuple[Event, Event, int]:
            await hub.post("desk", ANN, "warm")
            first = (await hub.append("desk", [Event(ANN, Text("x"), id="k")]))[0]
            again = (await hub.append("desk", [Event(ANN, Text("y"), id="k")]))[0]
            return first, again, await hub.last_sequence("desk")

        first, again, last = arun(body)

        assert first == again
        assert 2 == last

    def test_a_stale_expected_version_raises_and_writes_nothing(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> int:
            await hub.post("desk", ANN, "one")
            await hub.post("desk", ANN, "two")
            with pytest.raises(ConcurrencyError):
                await hub.append("desk", [Event(ANN, Text("x"))], expected_version=1)
            return await hub.last_sequence("desk")

        assert 2 == arun(body)

    def test_a_matching_expected_version_appends(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> int | None:
            await hub.post("desk", ANN, "one")
            stored = await hub.append("desk", [Event(ANN, Text("x"))], expected_version=1)
            return stored[0].sequence

        assert 2 == arun(body)

    def test_bad_input_raises_validation_error_and_writes_nothing(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> int:
            await hub.post("desk", ANN, "one")
            with pytest.raises(ValidationError):
                await hub.append("desk", [Event(ANN, Text("x"), parent=7)])
            with pytest.raises(ValidationError):
                await hub.append("", [Event(ANN, Text("x"))])
            with pytest.raises(ValidationError):
                await hub.append("desk", Event(ANN, Text("x")))  # type: ignore[arg-type]
            return await hub.last_sequence("desk")

        assert 1 == arun(body)

    def test_concurrent_appends_to_one_session_get_gapless_sequences(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[int | None]:
            await asyncio.gather(*(hub.post("desk", ANN, f"m{i}") for i in range(50)))
            return [e.sequence for e in await hub.read("desk")]

        assert list(range(1, 51)) == arun(body)

    def test_concurrent_appends_to_many_sessions_are_all_stored(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[int]:
            for rounds in range(3):
                await asyncio.gather(*(hub.post(f"desk-{i}", ANN, f"r{rounds}") for i in range(40)))
            return [await hub.last_sequence(f"desk-{i}") for i in range(40)]

        assert [3] * 40 == arun(body)

    def test_an_append_is_pushed_to_the_views(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[str]:
            await hub.post("desk", ANN, "one")
            await hub.view("desk", BOT)  # starts the projector
            await hub.post("desk", ANN, "two")
            return texts((await hub.view("desk", BOT)).messages)

        assert ["one", "two"] == arun(body)


class TestPost:
    def test_post_stores_a_text_by_its_author(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> Event:
            return await hub.post("desk", ANN, "hello")

        event = arun(body)

        assert (ANN, Text("hello"), 1) == (event.author, event.body, event.sequence)

    def test_post_with_a_parent_replies_in_its_thread(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> int | None:
            root = await hub.post("desk", ANN, "root")
            return (await hub.post("desk", BOT, "reply", parent=root.sequence)).parent

        assert 1 == arun(body)

    def test_posting_the_same_id_twice_stores_it_once(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> int:
            await hub.post("desk", ANN, "hello", id="once")
            await hub.post("desk", ANN, "hello", id="once")
            return await hub.last_sequence("desk")

        assert 1 == arun(body)

    def test_post_refuses_content_that_is_not_a_str(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> None:
            await hub.post("desk", ANN, 42)  # type: ignore[arg-type]

        with pytest.raises(ValidationError):
            arun(body)


class TestRead:
    def test_read_takes_the_bounds_of_the_store(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[list[int | None], list[int | None]]:
            for i in range(6):
                await hub.post("desk", ANN, str(i))
            middle = await hub.read("desk", after=1, before=5)
            newest = await hub.read("desk", limit=2, newest_first=True)
            return [e.sequence for e in middle], [e.sequence for e in newest]

        assert ([2, 3, 4], [6, 5]) == arun(body)

    def test_last_sequence_of_an_unknown_session_is_zero(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> int:
            return await hub.last_sequence("nobody")

        assert 0 == arun(body)

    def test_a_bad_bound_raises_validation_error(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> None:
            await hub.read("desk", after=-1)

        with pytest.raises(ValidationError):
            arun(body)


class TestView:
    def test_view_is_the_viewers_projection(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[str]:
            await hub.post("desk", ANN, "one")
            await hub.post("desk", BOT, "two")
            return texts((await hub.view("desk", ANN, window=1)).messages)

        assert ["two"] == arun(body)

    def test_view_of_a_thread(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[str]:
            root = await hub.post("desk", ANN, "root")
            await hub.post("desk", BOT, "reply", parent=root.sequence)
            await hub.post("desk", ANN, "other")
            thread = Conversation(desk="desk", thread_root=root.sequence)
            return texts((await hub.view("desk", ANN, thread)).messages)

        assert ["root", "reply"] == arun(body)


class TestTurn:
    def test_first_turn_offers_the_window_and_commit_stores_the_reply(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[str | None, list[str], Event | None, list[str]]:
            await hub.post("desk", ANN, "hello")
            turn = await hub.turn("desk", BOT)
            reply = await turn.commit("hi")
            await hub.post("desk", ANN, "how are you")
            after = await hub.turn("desk", BOT)
            return turn.reason, texts(turn.messages), reply, texts(after.messages)

        reason, first, reply, second = arun(body)

        assert "initial" == reason
        assert ["hello"] == first
        assert reply is not None and (BOT, Text("hi")) == (reply.author, reply.body)
        assert ["how are you"] == second

    def test_an_async_turn_names_its_conversation_and_viewer(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> AsyncTurn:
            return await hub.turn("desk", BOT)

        turn = arun(body)

        assert (Conversation(desk="desk"), BOT, "desk") == (
            turn.conversation,
            turn.viewer,
            turn.session_id,
        )

    def test_a_second_commit_of_one_plan_raises_sharing_state_conflict(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> None:
            await hub.post("desk", ANN, "hello")
            first = await hub.turn("desk", BOT)
            second = await hub.turn("desk", BOT)
            await first.commit("a")
            await second.commit("b")

        with pytest.raises(SharingStateConflict):
            arun(body)

    def test_commit_without_a_reply_only_advances(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[Event | None, list[str]]:
            await hub.post("desk", ANN, "hello")
            reply = await (await hub.turn("desk", BOT)).commit()
            return reply, texts((await hub.turn("desk", BOT)).messages)

        assert (None, []) == arun(body)


class TestTranscript:
    def test_transcript_is_relative_to_the_viewer(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[tuple[str, str | None]]:
            await hub.post("desk", ANN, "hello")
            await hub.post("desk", BOT, "hi")
            transcript = await hub.transcript("desk", BOT)
            return [(m.role, m.content) for m in transcript.messages]

        assert [("user", "hello"), ("assistant", "hi")] == arun(body)


async def planned(store: Held) -> None:
    """Wait until the store saw a turn plan (the waiter listens by then)."""
    assert await asyncio.to_thread(store.plans.acquire, True, 10)


def run_held(body: Callable[[AsyncHub, Held], Awaitable[T]]) -> T:
    """Run ``body`` on an AsyncHub over a :class:`Held` store; no thread is left after."""

    async def main() -> T:
        hub, store = held_hub(ask_timeout=10.0)
        async with hub:
            return await body(hub, store)

    result = asyncio.run(main())
    assert [] == our_threads()
    return result


class TestWaitTurn:
    def test_returns_at_once_when_the_turn_has_messages(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[str]:
            await hub.post("desk", ANN, "hello")
            return texts((await hub.wait_turn("desk", BOT, timeout=10)).messages)

        assert ["hello"] == arun(body)

    def test_is_woken_by_an_append_from_another_task(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> list[str]:
            await hub.post("desk", ANN, "hello")
            await (await hub.turn("desk", BOT)).commit("hi")
            await planned(store)
            waiter = asyncio.create_task(hub.wait_turn("desk", BOT, timeout=10))
            await planned(store)
            await hub.post("desk", ANN, "are you there")
            return texts((await waiter).messages)

        assert ["are you there"] == run_held(body)

    def test_is_woken_by_an_append_from_a_thread_through_the_sync_hub(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> list[str]:
            waiter = asyncio.create_task(hub.wait_turn("desk", BOT, timeout=10))
            await planned(store)
            writer = threading.Thread(target=hub.hub.session("desk").post, args=(ANN, "hey"))
            writer.start()
            turn = await waiter
            writer.join()
            return texts(turn.messages)

        assert ["hey"] == run_held(body)

    def test_the_viewers_own_rows_do_not_end_the_wait(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> list[str]:
            # A first turn is the whole view, own rows included; a delta never has them.
            await (await hub.turn("desk", BOT)).commit()
            await planned(store)
            waiter = asyncio.create_task(hub.wait_turn("desk", BOT, timeout=10))
            await planned(store)
            await hub.post("desk", BOT, "talking to myself")
            await hub.post("desk", ANN, "hello")
            return texts((await waiter).messages)

        assert ["hello"] == run_held(body)

    def test_raises_timeout_error_when_nothing_arrives(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> None:
            await hub.wait_turn("desk", BOT, timeout=0.05)

        with pytest.raises(TimeoutError):
            arun(body)

    @pytest.mark.parametrize("timeout", [-1, float("nan")], ids=["negative", "nan"])
    def test_a_negative_or_nan_timeout_raises_validation_error(
        self, arun: Runner, timeout: float
    ) -> None:
        async def body(hub: AsyncHub) -> None:
            await hub.wait_turn("desk", BOT, timeout=timeout)

        with pytest.raises(ValidationError):
            arun(body)

    def test_a_waiter_in_a_thread_is_woken_by_a_reply_in_that_thread(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> list[str]:
            root = await hub.post("desk", ANN, "root")
            thread = Conversation(desk="desk", thread_root=root.sequence)
            await (await hub.turn("desk", BOT, thread)).commit()
            await planned(store)
            waiter = asyncio.create_task(hub.wait_turn("desk", BOT, thread, timeout=10))
            await planned(store)
            await hub.post("desk", ANN, "elsewhere")
            await hub.post("desk", ANN, "in the thread", parent=root.sequence)
            return texts((await waiter).messages)

        assert ["in the thread"] == run_held(body)

    def test_a_waiter_gets_hub_closed_when_the_hub_closes(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> None:
            waiter = asyncio.create_task(hub.wait_turn("desk", BOT))
            await planned(store)
            await hub.close()
            await waiter

        with pytest.raises(HubClosed):
            run_held(body)

    def test_turns_yields_each_new_message_once_committed(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[list[str]]:
            seen: list[list[str]] = []
            first = asyncio.Event()

            async def agent() -> None:
                async for turn in hub.turns("desk", BOT):
                    seen.append(texts(turn.messages))
                    await turn.commit(f"ack {len(seen)}")
                    first.set()
                    if len(seen) == 2:
                        return

            task = asyncio.create_task(agent())
            await hub.post("desk", ANN, "one")
            await first.wait()
            await hub.post("desk", ANN, "two")
            await asyncio.wait_for(task, 10)
            return seen

        assert [["one"], ["two"]] == arun(body)

    def test_turns_ends_when_the_hub_closes(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> int:
            count = 0
            first = asyncio.Event()

            async def agent() -> None:
                nonlocal count
                async for turn in hub.turns("desk", BOT):
                    count += 1
                    await turn.commit()
                    first.set()

            task = asyncio.create_task(agent())
            await hub.post("desk", ANN, "one")
            await first.wait()
            await hub.close()
            await asyncio.wait_for(task, 10)
            return count

        assert 1 == arun(body)
