"""AsyncHub.compact and AsyncHub.turn(start_after=...) mean what they mean on the Hub."""

from __future__ import annotations

import pytest

from sharedesk import (
    Agent,
    AsyncHub,
    Compaction,
    Event,
    Person,
    RetentionPolicy,
    Text,
    ValidationError,
)
from tests.aio.conftest import Runner

ANN = Person(id="ann", label="Ann")
BOT = Agent(id="bot", label="Bot")


class TestLongLivedDesk:
    def test_turn_starts_a_late_joiner_after_start_after(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> list[str]:
            await hub.append("desk", [Event(ANN, Text(f"m{n}")) for n in range(1, 6)])
            turn = await hub.turn("desk", BOT, start_after=3)
            return [m.content for m in turn.messages]

        assert ["m4", "m5"] == arun(body)

    def test_a_bad_start_after_is_refused(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> None:
            await hub.post("desk", ANN, "one")
            await hub.turn("desk", BOT, start_after=2)

        with pytest.raises(ValidationError):
            arun(body)

    def test_compact_serves_the_summary_in_views(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[object, list[str]]:
            await hub.post("desk", ANN, "one")
            await hub.post("desk", ANN, "two")
            event = await hub.compact("desk", "first", through=1, author=BOT)
            view = await hub.view("desk", ANN)
            return event.body, [m.content for m in view.messages]

        assert (Compaction(1, "first", (ANN,)), ["first", "two"]) == arun(body)

    def test_a_bad_compaction_is_refused_and_writes_nothing(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> int:
            await hub.post("desk", ANN, "one")
            with pytest.raises(ValidationError):
                await hub.compact("desk", "", through=1, author=BOT)
            return await hub.last_sequence("desk")

        assert 1 == arun(body)

    def test_apply_retention_removes_the_compacted_rows(self, arun: Runner) -> None:
        async def body(hub: AsyncHub) -> tuple[int, int, int]:
            await hub.append("desk", [Event(ANN, Text(f"m{n}")) for n in range(1, 6)])
            await hub.compact("desk", "first", through=3, author=BOT)
            report = await hub.apply_retention(RetentionPolicy())
            rows = await hub.read("desk", after=3)
            return report.total, await hub.archived_through("desk"), len(rows)

        assert (3, 3, 3) == arun(body)
