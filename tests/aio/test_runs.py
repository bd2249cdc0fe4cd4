"""Async runs: SessionManager.aexecute_run / arun_once keep the rules of sync runs.

Adapters are coroutine adapters (``async def execute`` with an awaited ``emit``) or sync
ones (run on a worker thread); the store is an AsyncHub on either backend, or a plain
sync store. None of it blocks the loop: a 0.3 s adapter leaves the heartbeat running.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from sharedesk import (
    AdapterResult,
    Agent,
    AsyncHub,
    Event,
    MemoryStore,
    Person,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStateError,
    RunTimeout,
    ScriptedAdapter,
    SessionManager,
    Text,
    TextDelta,
    ValidationError,
)
from sharedesk.runs import aio
from sharedesk.runs.types import AsyncEmit, Run, Session
from tests.aio.conftest import Runner

BOT = Agent(id="coro", label="coro")
BOB = Person(id="bob", label="Bob")


class CoroutineAdapter:
    """An adapter whose ``execute`` is a coroutine: streams two deltas, then the text.

    With ``hold`` it first waits until ``release`` is set (or it is cancelled).
    """

    name = "coro"
    native_continuation = False

    def __init__(self, *, hold: bool = False, fail: bool = False) -> None:
        self.fail = fail
        self.cancelled = False
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.ended = asyncio.Event()
        if not hold:
            self.release.set()
        self.transcripts: list[Any] = []

    async def execute(
        self, run: Run, session: Session, emit: AsyncEmit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        self.transcripts.append(session.context.get("transcript"))
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.ended.set()
        if self.fail:
            raise ValueError("the model fell over")
        await emit(Event(BOT, TextDelta("he")))
        await emit(Event(BOT, TextDelta("llo")))
        await emit(Event(BOT, Text("hello")))
        return AdapterResult(output="hello", token_usage={"total_tokens": 3})


class GatedAdapter:
    """A sync adapter that blocks its thread until ``release`` is set (10 s at most)."""

    name = "gated"
    native_continuation = False

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.released = False

    def execute(self, run: Run, session: Session, emit: Any, opts: Mapping[str, Any]) -> None:
        self.started.set()
        self.released = self.release.wait(10)
        emit(Event(Agent(id="gated", label="gated"), Text("awake")))


def bodies(events: list[Event]) -> list[Any]:
    return [type(e.body).__name__ for e in events]


def squeezed(names: list[str]) -> list[str]:
    """``names`` with each run of ``"TextDelta"`` as one (chunks are stored joined per flush)."""
    return [n for i, n in enumerate(names) if not (n == "TextDelta" and names[i - 1 : i] == [n])]


class TestCoroutineAdapters:
    def test_a_coroutine_adapter_runs_and_its_events_are_the_runs(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(hub, CoroutineAdapter(), "hi")

        result = arun(body)

        # The two chunks are stored in order, joined when they come within one flush.
        assert ["RunStarted", "TextDelta", "Text", "RunFinished"] == squeezed(bodies(result.events))
        assert "he" + "llo" == "".join(
            e.body.delta for e in result.events if isinstance(e.body, TextDelta)
        )
        assert "hello" == result.output
        assert {"total_tokens": 3} == result.token_usage
        assert {result.run_id} == {e.run_id for e in result.events}

    def test_the_run_is_stored_as_a_sync_run_would_store_it(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> Any:
            result = await SessionManager.arun_once(hub, CoroutineAdapter(), "hi")
            return result, await hub.read(result.session_id)

        result, stored = arun(body)

        ours = len(result.events)
        assert result.events == stored[-ours:]
        finished = stored[-1].body
        assert isinstance(finished, RunFinished) and "completed" == finished.status
        assert RunStarted(provider="coro") == stored[-ours].body

    def test_aexecute_run_executes_a_pending_run(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> Any:
            run = await asyncio.to_thread(SessionManager.start_run, hub.hub, "desk", "hi")
            return await SessionManager.aexecute_run(hub, CoroutineAdapter(), run.id)

        assert "hello" == arun(body).output

    def test_replay_hands_the_earlier_runs_to_the_adapter(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> Any:
            adapter = CoroutineAdapter()
            first = await SessionManager.arun_once(hub, adapter, "one")
            await SessionManager.arun_once(
                hub, adapter, "two", session_id=first.session_id, continuation="replay"
            )
            return adapter.transcripts

        first, second = arun(body)

        assert first is None
        assert ["one", "hello"] == [m.content for m in second.messages]

    def test_an_adapter_that_raises_fails_the_run(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> None:
            await SessionManager.arun_once(hub, CoroutineAdapter(fail=True), "hi")

        with pytest.raises(RunFailed):
            arun(body)

    def test_a_time_out_finishes_the_run_and_cancels_the_adapter(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[bool, str, bool]:
            adapter = CoroutineAdapter(hold=True)
            run = await asyncio.to_thread(SessionManager.start_run, hub.hub, "desk", "hi")
            try:
                await SessionManager.aexecute_run(
                    hub, adapter, run.id, adapter_opts={"timeout": 0.1}
                )
                timed_out = False
            except RunTimeout:
                timed_out = True
            status = (await asyncio.to_thread(SessionManager.get_run, hub.hub, run.id)).status
            return timed_out, status, adapter.cancelled

        assert (True, "timeout", True) == arun(body)

    def test_cancel_run_from_another_task_ends_the_run_as_cancelled(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[str, bool]:
            adapter = CoroutineAdapter(hold=True)
            run = await asyncio.to_thread(SessionManager.start_run, hub.hub, "desk", "hi")
            task = asyncio.create_task(SessionManager.aexecute_run(hub, adapter, run.id))
            await adapter.started.wait()
            await asyncio.to_thread(SessionManager.cancel_run, hub.hub, run.id)
            with pytest.raises(RunCancelled):
                await task
            await asyncio.wait_for(adapter.ended.wait(), 10)
            return (await asyncio.to_thread(SessionManager.get_run, hub.hub, run.id)).status, (
                adapter.cancelled
            )

        assert ("cancelled", True) == arun(body)

    def test_cancelling_the_awaiting_task_cancels_the_run(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[bool, str, bool]:
            adapter = CoroutineAdapter(hold=True)
            run = await asyncio.to_thread(SessionManager.start_run, hub.hub, "desk", "hi")
            task = asyncio.create_task(SessionManager.aexecute_run(hub, adapter, run.id))
            await adapter.started.wait()
            task.cancel()
            try:
                await task
                raised = False
            except asyncio.CancelledError:
                raised = True
            status = (await asyncio.to_thread(SessionManager.get_run, hub.hub, run.id)).status
            return raised, status, adapter.cancelled

        assert (True, "cancelled", True) == arun(body)

    def test_an_emit_after_the_run_finished_is_refused(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> str:
            captured: list[AsyncEmit] = []

            class Keeps(CoroutineAdapter):
                async def execute(
                    self, run: Run, session: Session, emit: AsyncEmit, opts: Mapping[str, Any]
                ) -> AdapterResult:
                    captured.append(emit)
                    return AdapterResult(output="done")

            await SessionManager.arun_once(hub, Keeps(), "hi")
            try:
                await captured[0](Event(BOT, Text("too late")))
            except RunStateError as exc:
                return str(exc.status)
            return "accepted"

        assert "completed" == arun(body)


class NoContinuationFlag:
    """A coroutine adapter that forgot ``native_continuation``: not an adapter."""

    name = "forgetful"

    async def execute(
        self, run: Run, session: Session, emit: AsyncEmit, opts: Mapping[str, Any]
    ) -> None:
        raise AssertionError("never executed")


class TestAdapterChecks:
    def test_arun_once_refuses_a_coroutine_adapter_without_its_flag_and_writes_nothing(
        self, arun: Runner
    ) -> None:
        async def body(hub: AsyncHub) -> Any:
            with pytest.raises(ValidationError, match="native_continuation"):
                await SessionManager.arun_once(hub, NoContinuationFlag(), "go", session_id="s")
            return await hub.last_sequence("s")

        assert 0 == arun(body)

    def test_aexecute_run_refuses_it_writes_nothing_and_the_run_stays_pending(
        self, arun: Runner
    ) -> None:
        async def body(hub: AsyncHub) -> Any:
            run = await asyncio.to_thread(SessionManager.start_run, hub.hub, "desk", "hi")
            with pytest.raises(ValidationError, match="native_continuation"):
                await SessionManager.aexecute_run(hub, NoContinuationFlag(), run.id)
            return await hub.last_sequence("desk"), SessionManager.get_run(hub.hub, run.id).status

        assert (1, "pending") == arun(body)

    def test_arun_once_refuses_native_continuation_without_it_and_writes_nothing(
        self, arun: Runner
    ) -> None:
        async def body(hub: AsyncHub) -> Any:
            with pytest.raises(ValidationError, match="natively"):
                await SessionManager.arun_once(
                    hub, CoroutineAdapter(), "go", session_id="s", continuation="native"
                )
            return await hub.last_sequence("s")

        assert 0 == arun(body)

    def test_arun_once_writes_its_input_as_the_given_author(self, arun: Runner) -> None:
        pat = Person(id="pat", label="Pat")

        async def body(hub: AsyncHub) -> Any:
            result = await SessionManager.arun_once(hub, CoroutineAdapter(), "hi", author=pat)
            return [e.author for e in await hub.read(result.session_id) if e.body == Text("hi")]

        assert [pat] == arun(body)


class TestBusyDesk:
    def test_async_runs_complete_while_four_threads_post_to_the_desk(self, arun: Runner) -> None:
        """Rows others append never fail an async run (its emits check only the run)."""

        async def body(hub: AsyncHub) -> Any:
            await hub.post("desk", BOB, "start")
            stop = threading.Event()

            def poster(n: int) -> None:
                while not stop.is_set():
                    hub.hub.session("desk").post(Person(id=f"p{n}", label=f"P{n}"), "busy")

            threads = [threading.Thread(target=poster, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            try:
                return [
                    (
                        await SessionManager.arun_once(
                            hub, CoroutineAdapter(), "go", session_id="desk"
                        )
                    ).output
                    for _ in range(5)
                ]
            finally:
                stop.set()
                for thread in threads:
                    await asyncio.to_thread(thread.join)

        assert ["hello"] * 5 == arun(body)

    def test_a_run_on_an_async_hub_uses_the_hub_underneath_on_its_thread(
        self, arun: Runner
    ) -> None:
        """So it gets the run index, the session state and the busy-desk guard of sync runs."""

        async def body(hub: AsyncHub) -> bool:
            return aio.sync_store(hub) is hub.hub

        assert arun(body)


class TestSyncAdapters:
    def test_a_sync_adapter_runs_on_a_worker_thread(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> Any:
            return await SessionManager.arun_once(hub, ScriptedAdapter(["hi there"]), "hello")

        assert "hi there" == arun(body).output

    def test_a_plain_sync_store_works_too(self) -> None:
        async def main() -> Any:
            with MemoryStore() as store:
                return await SessionManager.arun_once(store, CoroutineAdapter(), "hi")

        assert "hello" == asyncio.run(main()).output


class TestTheLoopStaysFree:
    def test_the_loop_runs_while_a_blocking_sync_adapter_is_awaited(self, arun: Runner) -> None:
        """The test's own coroutine runs, and releases the adapter, while it blocks."""

        async def body(hub: AsyncHub) -> Any:
            adapter = GatedAdapter()
            task = asyncio.create_task(SessionManager.arun_once(hub, adapter, "hi"))
            await asyncio.to_thread(adapter.started.wait, 10)
            running = not task.done()
            adapter.release.set()
            output = (await task).output
            return running, adapter.released, output

        assert (True, True, "awake") == arun(body)

    def test_the_loop_runs_while_a_waiting_coroutine_adapter_is_awaited(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> Any:
            adapter = CoroutineAdapter(hold=True)
            task = asyncio.create_task(SessionManager.arun_once(hub, adapter, "hi"))
            await asyncio.wait_for(adapter.started.wait(), 10)
            running = not task.done()
            adapter.release.set()
            return running, (await task).output

        assert (True, "hello") == arun(body)
