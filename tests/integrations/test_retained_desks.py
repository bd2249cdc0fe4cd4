"""The integrations on a desk whose compacted rows retention archived: read through the summary.

``DeskSession`` (Agents SDK), ``DeskHistoryProvider`` (Agent Framework) and
``DeskSessionService`` (ADK), each on memory, LMDB and PostgreSQL: a read serves the
compactor's summary and the rows after it, never ``RowsArchived``, and a later read only
the rows appended since.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from agent_framework import Message
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations.agent_framework import DeskHistoryProvider
from sharedesk.integrations.google_adk import DeskSessionService
from sharedesk.integrations.openai_agents import DeskSession
from sharedesk.projection.retention import RetentionPolicy
from sharedesk.protocol.authors import Agent, Person
from sharedesk.protocol.errors import RowsArchived
from sharedesk.protocol.events import Event
from sharedesk.protocol.views import Conversation
from tests.integrations.adk_backends import hub, service, store_target

__all__ = ["hub", "service", "store_target"]  # the fixtures, used by name below

pytestmark = pytest.mark.asyncio

ALICE = Person(id="alice", label="Alice")
BILLING = Agent(id="billing", label="Billing")
TRIAGE = Agent(id="triage", label="Triage")
SUMMARIZER = Agent(id="summarizer", label="Summarizer")
SUMMARY = "A refund was issued."


class ReadSpy:
    """The hub as the integrations call it, noting the ``after`` of every read."""

    def __init__(self, hub: AsyncHub) -> None:
        self.inner = hub
        self.hub = hub.hub  # the sync Hub (its state reads)
        self.afters: list[int | None] = []

    async def append(self, session_id: str, events: Sequence[Event], **options: Any) -> list[Event]:
        return await self.inner.append(session_id, events, **options)

    async def read(self, session_id: str, **bounds: Any) -> list[Event]:
        self.afters.append(bounds.get("after"))
        return await self.inner.read(session_id, **bounds)


async def retain(hub: AsyncHub, desk: str, through: int) -> None:
    """Compact ``desk`` through ``through`` by SUMMARIZER, post once more, then retain."""
    await hub.compact(desk, SUMMARY, through=through, author=SUMMARIZER)
    await hub.post(desk, ALICE, "Thanks")
    await hub.apply_retention(RetentionPolicy(), desk)
    assert through == await hub.archived_through(desk)
    with pytest.raises(RowsArchived):
        await hub.read(desk, after=0)


async def complaint(hub: AsyncHub) -> None:
    """Row 1 of ``desk``: the user's complaint."""
    await hub.post("desk", Person(id="user", label="user"), "I was charged twice")


async def charged_twice(hub: AsyncHub) -> None:
    """Rows 1 and 2 of ``desk``: the user's complaint and billing's answer."""
    await complaint(hub)
    await hub.post("desk", BILLING, "Refund issued.")


SDK_READ = [
    {"role": "user", "content": f"[Summarizer] {SUMMARY}"},
    {"role": "user", "content": "[Alice] Thanks"},
]


class TestDeskSession:
    async def test_a_session_reads_the_summary_then_the_rows_after_it(self, hub: AsyncHub) -> None:
        await charged_twice(hub)
        await retain(hub, "desk", through=2)

        assert SDK_READ == await DeskSession(hub, "desk", TRIAGE).get_items()

    async def test_a_session_that_read_before_retention_reads_on_through_the_summary(
        self, hub: AsyncHub
    ) -> None:
        await complaint(hub)
        session = DeskSession(hub, "desk", TRIAGE)
        await session.get_items()  # row 1 folded
        await hub.post("desk", BILLING, "Refund issued.")
        await retain(hub, "desk", through=2)

        assert SDK_READ == await session.get_items()

    async def test_a_later_read_reads_only_the_rows_appended_since(self, hub: AsyncHub) -> None:
        await charged_twice(hub)
        await retain(hub, "desk", through=2)
        spy = ReadSpy(hub)
        session = DeskSession(spy, "desk", TRIAGE)  # type: ignore[arg-type]  # a spy
        await session.get_items()
        await hub.post("desk", ALICE, "One more thing")

        items = await session.get_items()

        assert [*SDK_READ, {"role": "user", "content": "[Alice] One more thing"}] == items
        assert [2, 4] == spy.afters  # after the compaction's through, then after row 4

    async def test_limit_counts_the_summary_among_the_newest_items(self, hub: AsyncHub) -> None:
        await charged_twice(hub)
        await retain(hub, "desk", through=2)
        session = DeskSession(hub, "desk", TRIAGE)

        assert SDK_READ[1:] == await session.get_items(limit=1)
        assert SDK_READ == await session.get_items(limit=5)

    async def test_pop_item_retracts_the_newest_item_above_the_archived_rows(
        self, hub: AsyncHub
    ) -> None:
        await charged_twice(hub)
        await retain(hub, "desk", through=2)
        session = DeskSession(hub, "desk", TRIAGE)

        popped = await session.pop_item()

        assert (SDK_READ[1], SDK_READ[:1]) == (popped, await session.get_items())

    async def test_a_thread_whose_compaction_was_archived_reads_through_its_summary(
        self, hub: AsyncHub
    ) -> None:
        root = await hub.post("desk", ALICE, "root")
        assert root.sequence == 1
        thread = Conversation("desk", thread_root=1)
        await hub.post("desk", BILLING, "in thread", parent=1)
        await hub.compact(
            "desk", "thread summary", through=2, author=SUMMARIZER, conversation=thread
        )
        await hub.post("desk", ALICE, "channel")
        await hub.post("desk", ALICE, "after", parent=1)
        await retain(hub, "desk", through=4)  # the channel's: the thread's compaction goes

        items = await DeskSession(hub, "desk", TRIAGE, conversation=thread).get_items()

        assert [
            {"role": "user", "content": "[Summarizer] thread summary"},
            {"role": "user", "content": "[Alice] after"},
        ] == items


AF_READ = [("user", "Summarizer", SUMMARY), ("user", "Alice", "Thanks")]


def texts(messages: Sequence[Message]) -> list[tuple[str, str | None, str]]:
    return [(m.role, m.author_name, m.text) for m in messages]


class TestDeskHistoryProvider:
    async def test_get_messages_reads_the_summary_then_the_rows_after_it(
        self, hub: AsyncHub
    ) -> None:
        await charged_twice(hub)
        await retain(hub, "desk", through=2)

        assert AF_READ == texts(await DeskHistoryProvider(hub, TRIAGE).get_messages("desk"))

    async def test_a_provider_that_read_before_retention_reads_on_through_the_summary(
        self, hub: AsyncHub
    ) -> None:
        await complaint(hub)
        provider = DeskHistoryProvider(hub, TRIAGE)
        await provider.get_messages("desk")  # row 1 folded
        await hub.post("desk", BILLING, "Refund issued.")
        await retain(hub, "desk", through=2)

        assert AF_READ == texts(await provider.get_messages("desk"))

    async def test_a_later_read_reads_only_the_rows_appended_since(self, hub: AsyncHub) -> None:
        await charged_twice(hub)
        await retain(hub, "desk", through=2)
        spy = ReadSpy(hub)
        provider = DeskHistoryProvider(spy, TRIAGE)  # type: ignore[arg-type]  # a spy
        await provider.get_messages("desk")
        await hub.post("desk", ALICE, "One more thing")

        messages = await provider.get_messages("desk")

        assert [*AF_READ, ("user", "Alice", "One more thing")] == texts(messages)
        assert [2, 4] == spy.afters

    async def test_an_author_name_of_archived_rows_names_their_author(self, hub: AsyncHub) -> None:
        await charged_twice(hub)
        await retain(hub, "desk", through=2)  # Billing's only row is archived

        await DeskHistoryProvider(hub, TRIAGE).save_messages(
            "desk", [Message("assistant", ["Refund sent."], author_name="Billing")]
        )

        assert BILLING == (await hub.read("desk", after=4))[-1].author


APP = "app"


def said(text: str, role: str = "user") -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=text)])


def adk_texts(events: Sequence[AdkEvent]) -> list[tuple[str, str | None]]:
    return [
        (e.author, e.content.parts[0].text if e.content and e.content.parts else None)
        for e in events
    ]


async def loaded(service: DeskSessionService, config: GetSessionConfig | None = None) -> Any:
    got = await service.get_session(app_name=APP, user_id="u", session_id="s1", config=config)
    assert got is not None
    return got


async def retained_session(hub: AsyncHub, service: DeskSessionService) -> str:
    """Session s1 (state ``k=1``): two events, compacted and retained, then Alice's."""
    session = await service.create_session(
        app_name=APP, user_id="u", session_id="s1", state={"k": 1}
    )
    await service.append_event(session, AdkEvent(author="user", content=said("charged twice")))
    await service.append_event(
        session, AdkEvent(author="billing", content=said("Refund issued.", "model"))
    )
    desk = service.desk_id(APP, "u", "s1")
    await retain(hub, desk, through=3)  # the creation marker and both events
    return desk


ADK_READ = [("summarizer", SUMMARY), ("alice", "Thanks")]


class TestDeskSessionService:
    async def test_get_session_serves_the_summary_then_the_events_after_it(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        await retained_session(hub, service)

        got = await loaded(service)

        assert ADK_READ == adk_texts(got.events)
        assert {"sharedesk.covers": ["u", "billing"]} == got.events[0].custom_metadata
        assert {"k": 1} == got.state

    async def test_recent_events_take_the_summary_only_when_it_is_among_them(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        await retained_session(hub, service)

        wide = await loaded(service, GetSessionConfig(num_recent_events=5))
        narrow = await loaded(service, GetSessionConfig(num_recent_events=1))

        assert (ADK_READ, ADK_READ[1:]) == (adk_texts(wide.events), adk_texts(narrow.events))

    async def test_list_sessions_lists_the_session_with_its_state(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        await retained_session(hub, service)

        listed = await service.list_sessions(app_name=APP, user_id="u")

        assert [("s1", {"k": 1}, [])] == [(s.id, s.state, s.events) for s in listed.sessions]

    async def test_an_event_appended_after_retention_comes_back_after_the_rest(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        await retained_session(hub, service)

        await service.append_event(
            await loaded(service), AdkEvent(author="user", content=said("ok"))
        )

        assert [*ADK_READ, ("user", "ok")] == adk_texts((await loaded(service)).events)

    async def test_a_stale_object_missing_archived_rows_raises_even_when_merging(
        self, hub: AsyncHub
    ) -> None:
        service = DeskSessionService(hub, stale="merge")
        stale = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        other = await loaded(service)
        await service.append_event(other, AdkEvent(author="user", content=said("charged twice")))
        desk = service.desk_id(APP, "u", "s1")
        await retain(hub, desk, through=2)
        last = await hub.last_sequence(desk)

        with pytest.raises(StaleSessionError):
            await service.append_event(stale, AdkEvent(author="user", content=said("mine")))

        assert last == await hub.last_sequence(desk)
