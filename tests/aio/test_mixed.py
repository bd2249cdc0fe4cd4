"""AsyncHub alongside sync writers, other event loops, and a close with writes in flight."""

from __future__ import annotations

import asyncio
import threading

from sharedesk import AsyncHub, Person, StoreClosedError
from tests.aio.conftest import Runner

ANN = Person(id="ann", label="Ann")
BOB = Person(id="bob", label="Bob")


class TestMixedWriters:
    def test_sync_threads_and_coroutines_on_one_desk_get_gapless_sequences(
        self, arun: Runner
    ) -> None:
        async def body(hub: AsyncHub) -> tuple[list[int | None], int]:
            await hub.post("desk", ANN, "warm")

            def sync_writer() -> None:
                for i in range(30):
                    hub.hub.session("desk").post(BOB, f"sync {i}")

            threads = [threading.Thread(target=sync_writer) for _ in range(3)]
            for thread in threads:
                thread.start()
            await asyncio.gather(*(hub.post("desk", ANN, f"async {i}") for i in range(90)))
            for thread in threads:
                await asyncio.to_thread(thread.join)
            events = await hub.read("desk")
            return [e.sequence for e in events], len({e.id for e in events})

        sequences, distinct = arun(body)

        assert list(range(1, 182)) == sequences
        assert 181 == distinct

    def test_a_second_event_loop_in_another_thread_shares_the_hub(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[int]:
            async def other_loop_writes() -> None:
                await asyncio.gather(*(hub.post(f"other-{i}", BOB, "x") for i in range(20)))
                await asyncio.gather(*(hub.post(f"other-{i}", BOB, "y") for i in range(20)))

            thread = threading.Thread(target=asyncio.run, args=(other_loop_writes(),))
            thread.start()
            await asyncio.gather(*(hub.post(f"mine-{i}", ANN, "x") for i in range(20)))
            await asyncio.gather(*(hub.post(f"mine-{i}", ANN, "y") for i in range(20)))
            await asyncio.to_thread(thread.join)
            mine = [await hub.last_sequence(f"mine-{i}") for i in range(20)]
            other = [await hub.last_sequence(f"other-{i}") for i in range(20)]
            return mine + other

        assert [2] * 40 == arun(body)


class TestCloseWithWritesInFlight:
    def test_every_write_in_flight_completes_or_fails_with_a_closed_error(
        self, arun: Runner
    ) -> None:
        async def body(hub: AsyncHub) -> tuple[int, int, int]:
            sessions = [f"desk-{i}" for i in range(50)]
            await asyncio.gather(*(hub.post(s, ANN, "warm") for s in sessions))
            writes = [asyncio.create_task(hub.post(s, ANN, "late")) for s in sessions]
            await asyncio.sleep(0)
            await hub.close()
            outcomes = await asyncio.gather(*writes, return_exceptions=True)
            done = sum(1 for o in outcomes if not isinstance(o, BaseException))
            closed = sum(1 for o in outcomes if isinstance(o, StoreClosedError))
            return done, closed, len(outcomes)

        done, closed, total = arun(body)

        assert total == done + closed
