"""Cancelling a task that awaits a write: the write is wholly done or not at all.

The rule (see :mod:`sharedesk.actors.aio`): cancelled before the write was handed off,
nothing is written; cancelled after, the task waits for the write to settle and then
raises ``CancelledError``. A retry with the same event ids stores nothing twice. The
sweeps cancel after every number of loop steps until the write completes first, so
every await point of ``append``, ``post`` and ``commit`` is hit; the gated tests hold a
write in flight to cancel it there for certain, and a burst holds one back from its
chunk of hand-offs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sharedesk import Agent, AsyncHub, Event, Person, Text
from sharedesk.actors.aio import CHUNK
from tests.aio.conftest import Runner, our_threads
from tests.aio.stores import Held, held_hub

ANN = Person(id="ann", label="Ann")
BOT = Agent(id="bot", label="Bot")
#: Most loop steps a sweep cancels after (a write settles well within them).
STEPS = 60


async def _outcome(task: asyncio.Task[Any]) -> str:
    try:
        await task
    except asyncio.CancelledError:
        return "cancelled"
    return "done"


async def _cancel_after(steps: int, call: Any) -> str:
    task = asyncio.ensure_future(call)
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    return await _outcome(task)


async def _stored(hub: AsyncHub, session_id: str, ids: list[str]) -> list[Event]:
    return [e for e in await hub.read(session_id) if e.id in ids]


class TestCancelledAppend:
    def test_at_every_step_the_append_is_wholly_done_or_not_at_all(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> set[tuple[str, int]]:
            await hub.post("desk", ANN, "warm")
            seen: set[tuple[str, int]] = set()
            for steps in range(STEPS):
                ids = [f"{steps}-a", f"{steps}-b"]
                events = [Event(ANN, Text(i), id=i) for i in ids]
                outcome = await _cancel_after(steps, hub.append("desk", events))
                count = len(await _stored(hub, "desk", ids))
                seen.add((outcome, count))
                retried = await hub.append("desk", events)
                assert ids == [e.id for e in retried]
                assert 2 == len(await _stored(hub, "desk", ids))
                if outcome == "done":
                    break
            return seen

        seen = arun(body)

        assert ("cancelled", 0) in seen
        assert seen <= {("cancelled", 0), ("cancelled", 2), ("done", 2)}

    def test_a_retry_after_a_cancelled_append_keeps_sequences_gapless(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[int | None]:
            await hub.post("desk", ANN, "warm")
            for steps in range(8):
                event = Event(ANN, Text("x"), id=f"e{steps}")
                await _cancel_after(steps, hub.append("desk", [event]))
                await hub.append("desk", [event])
            return [e.sequence for e in await hub.read("desk")]

        assert list(range(1, 10)) == arun(body)

    def test_the_first_append_to_a_session_is_wholly_done_or_not_at_all(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> set[tuple[str, int]]:
            seen: set[tuple[str, int]] = set()
            for steps in range(STEPS):
                session = f"fresh-{steps}"
                ids = ["a", "b"]
                events = [Event(ANN, Text(i), id=i) for i in ids]
                outcome = await _cancel_after(steps, hub.append(session, events))
                seen.add((outcome, len(await _stored(hub, session, ids))))
                await hub.append(session, events)
                assert [1, 2] == [e.sequence for e in await hub.read(session)]
                if outcome == "done":
                    break
            return seen

        seen = arun(body)

        assert ("cancelled", 0) in seen
        assert seen <= {("cancelled", 0), ("cancelled", 2), ("done", 2)}


class TestCancelledPost:
    def test_at_every_step_the_post_is_wholly_done_or_not_at_all(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> set[tuple[str, int]]:
            await hub.post("desk", ANN, "warm")
            seen: set[tuple[str, int]] = set()
            for steps in range(STEPS):
                key = f"post-{steps}"
                outcome = await _cancel_after(steps, hub.post("desk", ANN, "hi", id=key))
                seen.add((outcome, len(await _stored(hub, "desk", [key]))))
                await hub.post("desk", ANN, "hi", id=key)
                assert 1 == len(await _stored(hub, "desk", [key]))
                if outcome == "done":
                    break
            return seen

        seen = arun(body)

        assert ("cancelled", 0) in seen
        assert seen <= {("cancelled", 0), ("cancelled", 1), ("done", 1)}


class TestCancelledCommit:
    def test_at_every_step_the_commit_is_wholly_done_or_not_at_all(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> set[tuple[str, int]]:
            seen: set[tuple[str, int]] = set()
            for steps in range(STEPS):
                await hub.post("desk", ANN, f"question {steps}")
                key = f"reply-{steps}"
                reply = Event(BOT, Text("answer"), id=key)
                turn = await hub.turn("desk", BOT)
                outcome = await _cancel_after(steps, turn.commit(reply))
                count = len(await _stored(hub, "desk", [key]))
                seen.add((outcome, count))
                retry = await hub.turn("desk", BOT)
                if count == 0:
                    assert [f"question {steps}"] == [m.content for m in retry.messages]
                else:
                    assert [] == retry.messages  # the commit moved the watermark too
                await retry.commit(reply)
                assert 1 == len(await _stored(hub, "desk", [key]))
                if outcome == "done":
                    break
            return seen

        seen = arun(body)

        assert ("cancelled", 0) in seen
        assert seen <= {("cancelled", 0), ("cancelled", 1), ("done", 1)}


class TestCancelledWhileWaitingForItsChunk:
    def test_a_write_cancelled_before_its_chunk_came_is_never_written(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[str, int, int, int]:
            sessions = [f"desk-{i}" for i in range(CHUNK)]
            await asyncio.gather(*(hub.post(s, ANN, "warm") for s in [*sessions, "late"]))
            # One iteration's chunk of writes, then one more, all started at once.
            chunk = [asyncio.create_task(hub.post(s, ANN, "x")) for s in sessions]
            late = asyncio.create_task(hub.post("late", ANN, "never", id="never"))
            await asyncio.sleep(0)  # every task made its first step: the late one waits
            late.cancel()
            outcome = await _outcome(late)
            await asyncio.gather(*chunk)
            written = await hub.last_sequence("late")
            await hub.post("late", ANN, "never", id="never")
            await hub.post("late", ANN, "never", id="never")
            return (
                outcome,
                written,
                await hub.last_sequence("late"),
                sum([await hub.last_sequence(s) for s in sessions]),
            )

        assert ("cancelled", 1, 2, 2 * CHUNK) == arun(body)


async def _spin(steps: int = 20) -> None:
    """Let the loop run ``steps`` iterations (a cancelled write that did not wait is done)."""
    for _ in range(steps):
        await asyncio.sleep(0)


class TestCancelledInFlight:
    def _run(self, body: Any) -> Any:
        async def main() -> Any:
            hub, store = held_hub(ask_timeout=10.0)
            try:
                await hub.post("desk", ANN, "warm")
                return await body(hub, store)
            finally:
                store.gate.set()
                await hub.close()

        result = asyncio.run(main())
        assert [] == our_threads()
        return result

    def test_a_write_in_flight_settles_before_cancelled_error_is_raised(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> tuple[bool, str, int]:
            store.hold()
            task = asyncio.create_task(hub.post("desk", ANN, "held", id="held"))
            assert await asyncio.to_thread(store.entered.acquire, True, 10)
            task.cancel()
            await _spin()
            pending = not task.done()
            store.release()
            return pending, await _outcome(task), len(await _stored(hub, "desk", ["held"]))

        assert (True, "cancelled", 1) == self._run(body)

    def test_a_timeout_expiring_in_flight_raises_only_once_the_write_settled(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> tuple[str, int]:
            store.hold()
            task = asyncio.create_task(hub.post("desk", ANN, "held", id="held"))
            assert await asyncio.to_thread(store.entered.acquire, True, 10)
            try:
                async with asyncio.timeout(0):
                    await asyncio.shield(task)  # the timeout cancels the awaiting, not the task
            except TimeoutError:
                task.cancel()
            store.release()
            return await _outcome(task), len(await _stored(hub, "desk", ["held"]))

        assert ("cancelled", 1) == self._run(body)

    def test_cancelling_twice_still_waits_for_the_write(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> tuple[bool, str, int]:
            store.hold()
            task = asyncio.create_task(hub.post("desk", ANN, "held", id="held"))
            assert await asyncio.to_thread(store.entered.acquire, True, 10)
            task.cancel()
            await _spin()
            task.cancel()
            await _spin()
            pending = not task.done()
            store.release()
            return pending, await _outcome(task), len(await _stored(hub, "desk", ["held"]))

        assert (True, "cancelled", 1) == self._run(body)

    def test_a_commit_in_flight_settles_before_cancelled_error_is_raised(self) -> None:
        async def body(hub: AsyncHub, store: Held) -> tuple[bool, str, int, list[str]]:
            turn = await hub.turn("desk", BOT)
            store.hold()
            task = asyncio.create_task(turn.commit(Event(BOT, Text("r"), id="r")))
            assert await asyncio.to_thread(store.entered.acquire, True, 10)
            task.cancel()
            await _spin()
            pending = not task.done()
            store.release()
            outcome = await _outcome(task)
            after = await hub.turn("desk", BOT)
            return (
                pending,
                outcome,
                len(await _stored(hub, "desk", ["r"])),
                [m.content for m in after.messages],
            )

        assert (True, "cancelled", 1, []) == self._run(body)
