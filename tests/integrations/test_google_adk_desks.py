"""DeskSessionService beyond ADK's contract: stale writers, peers, rows, atomicity, cost.

Runs on memory, LMDB and PostgreSQL (the cost tests on a counting in-memory store).
The stale-writer tests restate upstream's ``DatabaseSessionService`` tests, checked
against ``stale="raise"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from sharedesk.actors.aio import AsyncHub
from sharedesk.actors.hub import Hub
from sharedesk.integrations.google_adk import DeskSessionService
from sharedesk.protocol.authors import Agent, Person
from sharedesk.protocol.errors import ConcurrencyError, ValidationError
from sharedesk.protocol.events import Event as DeskEvent
from sharedesk.protocol.events import Item, Text
from sharedesk.protocol.ports import WriteFuture
from sharedesk.protocol.sessions import STATE_DELTA_KEY
from sharedesk.protocol.validation import check_write
from sharedesk.store.memory import MemoryStore
from tests.integrations.adk_backends import hub, service, store_target

__all__ = ["hub", "service", "store_target"]  # the fixtures, used by name below

pytestmark = pytest.mark.asyncio

APP = "app"
PAT = Person(id="pat", label="Pat")


def delta(**state: Any) -> EventActions:
    return EventActions(state_delta=state)


def said(text: str, role: str = "user") -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=text)])


def text_of(event: Event) -> str | None:
    content = event.content
    return None if content is None or not content.parts else content.parts[0].text


async def fresh(service: DeskSessionService, session_id: str) -> Any:
    got = await service.get_session(app_name=APP, user_id="u", session_id=session_id)
    assert got is not None
    return got


class TestStaleRaise:
    async def test_a_stale_session_object_raises_and_writes_nothing(
        self, service: DeskSessionService
    ) -> None:
        original = await service.create_session(app_name=APP, user_id="u")
        await service.append_event(
            original, Event(invocation_id="inv1", author="user", actions=delta(sk1="v1"))
        )
        updated = await fresh(service, original.id)
        await service.append_event(
            updated, Event(invocation_id="inv2", author="user", actions=delta(sk2="v2"))
        )

        with pytest.raises(StaleSessionError, match="modified in storage") as raised:
            await service.append_event(
                original, Event(invocation_id="inv3", author="user", actions=delta(sk3="v3"))
            )

        final = await fresh(service, original.id)
        assert isinstance(raised.value, ValueError)
        assert ["inv1", "inv2"] == [e.invocation_id for e in final.events]
        assert {"sk1": "v1", "sk2": "v2"} == final.state

    async def test_of_two_writers_from_one_read_exactly_one_wins_each_round(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        for i in range(8):
            latest = await fresh(service, session.id)
            copies = [latest.model_copy(deep=True) for _ in range(2)]
            results = await asyncio.gather(
                *(
                    service.append_event(
                        copy, Event(author="user", actions=delta(**{f"sk{i}-{n}": n}))
                    )
                    for n, copy in enumerate(copies)
                ),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            assert 1 == len(errors) and isinstance(errors[0], StaleSessionError)

        final = await fresh(service, session.id)
        assert 8 == len(final.events)
        assert all(1 == sum(f"sk{i}-{n}" in final.state for n in (0, 1)) for i in range(8))

    async def test_a_current_session_whose_time_drifted_still_appends(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        await service.append_event(session, Event(invocation_id="inv1", author="user"))
        session.last_update_time -= 0.0001

        await service.append_event(session, Event(invocation_id="inv2", author="user"))

        assert ["inv1", "inv2"] == [e.invocation_id for e in (await fresh(service, "s1")).events]

    async def test_a_current_session_without_a_marker_still_appends(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        await service.append_event(session, Event(invocation_id="inv1", author="user"))
        session._storage_update_marker = None

        await service.append_event(session, Event(invocation_id="inv2", author="user"))

        assert ["inv1", "inv2"] == [e.invocation_id for e in (await fresh(service, "s1")).events]

    async def test_appending_to_a_deleted_session_raises_not_found(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        await service.delete_session(app_name=APP, user_id="u", session_id=session.id)

        with pytest.raises(SessionNotFoundError):
            await service.append_event(session, Event(invocation_id="inv1", author="user"))

    async def test_a_peers_post_makes_an_older_session_object_stale(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        await hub.post(service.desk_id(APP, "u", "s1"), PAT, "hello")

        with pytest.raises(StaleSessionError):
            await service.append_event(session, Event(author="user", content=said("hi")))

    async def test_stale_takes_only_raise_or_merge(self, hub: AsyncHub) -> None:
        with pytest.raises(ValidationError):
            DeskSessionService(hub, stale="ignore")


class TestStaleMerge:
    async def test_a_stale_object_takes_in_what_it_missed_then_appends(self, hub: AsyncHub) -> None:
        service = DeskSessionService(hub, stale="merge")
        stale = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        other = await fresh(service, "s1")
        await service.append_event(other, Event(author="user", actions=delta(theirs=1)))
        await hub.post(service.desk_id(APP, "u", "s1"), PAT, "hello")

        mine = Event(author="user", content=said("mine"), actions=delta(mine=2))
        await service.append_event(stale, mine)

        final = await fresh(service, "s1")
        assert [e.id for e in final.events] == [e.id for e in stale.events]
        assert ["user", "pat", "user"] == [e.author for e in final.events]
        assert {"theirs": 1, "mine": 2} == final.state == stale.state


class TestPeers:
    async def test_a_persons_post_comes_back_as_their_event(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        await service.append_event(session, Event(author="user", content=said("hi")))
        await hub.post(service.desk_id(APP, "u", "s1"), PAT, "I can help")

        got = await service.get_session(
            app_name=APP, user_id="u", session_id="s1", config=GetSessionConfig(num_recent_events=1)
        )

        assert got is not None and 1 == len(got.events)
        assert ("pat", said("I can help")) == (got.events[0].author, got.events[0].content)

    async def test_an_agent_outside_adk_sees_adk_rows_and_its_note_comes_back(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        await service.append_event(session, Event(author="user", content=said("refund please")))
        auditor = Agent(id="auditor", label="Auditor")
        desk = service.desk_id(APP, "u", "s1")

        turn = await hub.turn(desk, auditor)
        await turn.commit("approved")
        got = await fresh(service, "s1")

        assert [(Person(id="u", label="u"), "refund please")] == [
            (m.author, m.content) for m in turn.messages
        ]
        assert [("user", "refund please"), ("auditor", "approved")] == [
            (e.author, text_of(e)) for e in got.events
        ]


class TestRows:
    async def test_plain_text_is_a_text_row_by_its_author_and_the_rest_items(
        self, hub: AsyncHub
    ) -> None:
        billing = Agent(id="billing-7", label="Billing")
        service = DeskSessionService(hub, authors={"billing": billing})
        session = await service.create_session(app_name=APP, user_id="ann", session_id="s1")
        call = types.Content(
            role="model",
            parts=[types.Part(function_call=types.FunctionCall(name="lookup", args={}))],
        )
        await service.append_event(session, Event(author="user", content=said("hi")))
        await service.append_event(session, Event(author="billing", content=said("hello", "model")))
        await service.append_event(session, Event(author="triage", content=call))

        stored = await hub.read(service.desk_id(APP, "ann", "s1"), after=1)
        view = await hub.view(service.desk_id(APP, "ann", "s1"), PAT)

        assert [Text, Text, Item] == [type(e.body) for e in stored]
        assert [Person(id="ann", label="ann"), billing, Agent(id="triage", label="triage")] == [
            e.author for e in stored
        ]
        assert [("ann", "hi"), ("billing-7", "hello")] == [
            (m.author.id, m.content)  # type: ignore[union-attr]
            for m in view.messages
        ]

    async def test_each_adk_event_is_one_row_with_its_adk_id(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        event = Event(author="user", content=said("hi"), actions=delta(k=1))

        await service.append_event(session, event)

        rows = await hub.read(service.desk_id(APP, "u", "s1"), after=1)
        assert [event.id] == [r.id for r in rows]


class TestLinkedWrites:
    async def test_a_write_whose_linked_write_fails_stores_on_no_desk(self, hub: AsyncHub) -> None:
        note = DeskEvent(PAT, Text("x"), metadata={STATE_DELTA_KEY: {"k": 1}})
        linked = (check_write("b", [note]), check_write("c", [note], expected_version=9))

        with pytest.raises(ConcurrencyError):
            await asyncio.wrap_future(
                hub.hub.submit(check_write("a", [note], linked=linked), WriteFuture())
            )

        assert [0, 0, 0] == [await hub.last_sequence(d) for d in ("a", "b", "c")]
        assert {} == hub.hub.session_state("b").values

    async def test_a_write_and_its_linked_writes_land_with_their_state(self, hub: AsyncHub) -> None:
        note = DeskEvent(PAT, Text("x"), metadata={STATE_DELTA_KEY: {"k": 1}})

        await asyncio.wrap_future(
            hub.hub.submit(
                check_write("a", [note], linked=(check_write("b", [note]),)), WriteFuture()
            )
        )

        assert [1, 1] == [await hub.last_sequence(d) for d in ("a", "b")]
        assert [{"k": 1}, {"k": 1}] == [hub.hub.session_state(d).values for d in ("a", "b")]


class CountingStore(MemoryStore):
    """An in-memory store that records each read of events it serves."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, int]] = []
        self.state_reads: list[int] = []  # how many desks each state read asked

    def _session_states(self, session_ids: list[str]) -> Any:  # every state read's hook
        self.state_reads.append(len(session_ids))
        return super()._session_states(session_ids)

    def _read(
        self, session_id: str, after: int, before: int | None, limit: int | None, newest_first: bool
    ) -> list[DeskEvent]:
        rows = super()._read(session_id, after, before, limit, newest_first)
        self.reads.append((session_id, len(rows)))
        return rows


@pytest_asyncio.fixture
async def counted() -> AsyncIterator[tuple[CountingStore, DeskSessionService]]:
    store = CountingStore()
    opened = AsyncHub(Hub(store))
    try:
        yield store, DeskSessionService(opened)
    finally:
        await opened.close()


class TestCost:
    async def test_get_session_reads_only_the_newest_events_asked(
        self, counted: tuple[CountingStore, DeskSessionService]
    ) -> None:
        store, service = counted
        session = await service.create_session(app_name=APP, user_id="u", session_id="s1")
        for i in range(300):
            await service.append_event(session, Event(author="user", content=said(f"m{i}")))
        store.reads.clear()

        got = await service.get_session(
            app_name=APP, user_id="u", session_id="s1", config=GetSessionConfig(num_recent_events=5)
        )

        assert got is not None and ["m295", "m296", "m297", "m298", "m299"] == [
            text_of(e) for e in got.events
        ]
        assert [(service.desk_id(APP, "u", "s1"), 5)] == store.reads

    async def test_list_sessions_reads_no_events(
        self, counted: tuple[CountingStore, DeskSessionService]
    ) -> None:
        store, service = counted
        for i in range(20):
            session = await service.create_session(app_name=APP, user_id=f"u{i % 3}")
            await service.append_event(session, Event(author="user", content=said("hi")))
        store.reads.clear()

        listed = await service.list_sessions(app_name=APP)

        assert 20 == len(listed.sessions)
        assert [] == store.reads

    async def test_list_sessions_reads_the_states_of_a_page_in_one_read(
        self, counted: tuple[CountingStore, DeskSessionService]
    ) -> None:
        store, service = counted
        for i in range(30):
            await service.create_session(app_name=APP, user_id="u", state={"n": i})
        store.state_reads.clear()

        listed = await service.list_sessions(app_name=APP, user_id="u", page_size=25)

        assert list(range(25)) == [s.state["n"] for s in listed.sessions]
        assert [1, 1 + 1 + 25] == store.state_reads  # the index; then app, user, the page


SUMMARIZER = Agent(id="summarizer", label="Summarizer")


async def compacted(hub: AsyncHub, service: DeskSessionService) -> str:
    """Session s1: two events compacted into a summary by SUMMARIZER, then one more."""
    session = await service.create_session(app_name=APP, user_id="u", session_id="s1")
    await service.append_event(session, Event(author="user", content=said("charged twice")))
    await service.append_event(
        session, Event(author="billing", content=said("Refund issued.", "model"))
    )
    desk = service.desk_id(APP, "u", "s1")
    await hub.compact(desk, "A refund was issued.", through=3, author=SUMMARIZER)
    await hub.post(desk, PAT, "Thanks")
    return desk


class TestCompactedDesk:
    async def test_get_session_serves_the_attributed_summary_in_place_of_the_covered_events(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        await compacted(hub, service)

        got = await fresh(service, "s1")

        assert [("summarizer", "A refund was issued."), ("pat", "Thanks")] == [
            (e.author, text_of(e)) for e in got.events
        ]
        assert {"sharedesk.covers": ["u", "billing"]} == got.events[0].custom_metadata

    async def test_recent_events_take_the_summary_only_when_it_is_among_them(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        await compacted(hub, service)

        wide, narrow = [
            await service.get_session(
                app_name=APP,
                user_id="u",
                session_id="s1",
                config=GetSessionConfig(num_recent_events=n),
            )
            for n in (5, 1)
        ]

        assert wide is not None and narrow is not None
        assert ["A refund was issued.", "Thanks"] == [text_of(e) for e in wide.events]
        assert ["Thanks"] == [text_of(e) for e in narrow.events]

    async def test_the_covered_events_stay_readable_on_the_desk(
        self, hub: AsyncHub, service: DeskSessionService
    ) -> None:
        desk = await compacted(hub, service)

        rows = await hub.read(desk, after=1, before=4)

        assert ["charged twice", "Refund issued."] == [
            r.body.content for r in rows if isinstance(r.body, Text)
        ]
