"""DeskSessionService keeps ADK's session-service contract, on memory, LMDB and PostgreSQL.

Every behaviour that ADK's shared session-service tests check (google/adk-python,
``tests/unittests/sessions/test_session_service.py`` with ``_conformance.py``) is stated
here once, in our words, and run on each backend.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from sharedesk.integrations.google_adk import DeskSessionService
from sharedesk.protocol import ValidationError
from tests.integrations.adk_backends import hub, service, store_target


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run in America/New_York, whose 01:00-02:00 of 2024-11-03 happens twice."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


__all__ = ["hub", "service", "store_target"]  # the fixtures, used by name below

pytestmark = pytest.mark.asyncio

APP = "my_app"


def delta(**state: Any) -> EventActions:
    return EventActions(state_delta=state)


def said(text: str, role: str = "user") -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=text)])


class TestCreateGetDelete:
    async def test_an_unknown_session_is_none(self, service: DeskSessionService) -> None:
        assert await service.get_session(app_name=APP, user_id="u", session_id="123") is None

    async def test_a_created_session_reads_back_equal_until_deleted(
        self, service: DeskSessionService
    ) -> None:
        created = await service.create_session(app_name=APP, user_id="u", state={"key": "value"})
        assert (APP, "u", {"key": "value"}) == (created.app_name, created.user_id, created.state)
        assert created.id and created.last_update_time <= time.time()

        got = await service.get_session(app_name=APP, user_id="u", session_id=created.id)

        assert created == got
        await service.delete_session(app_name=APP, user_id="u", session_id=created.id)
        assert await service.get_session(app_name=APP, user_id="u", session_id=created.id) is None

    async def test_creating_an_existing_session_id_raises(
        self, service: DeskSessionService
    ) -> None:
        await service.create_session(app_name=APP, user_id="u", session_id="taken")

        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name=APP, user_id="u", session_id="taken")

    async def test_a_padded_session_id_is_stripped_on_create_get_and_delete(
        self, service: DeskSessionService
    ) -> None:
        created = await service.create_session(
            app_name=APP, user_id="u", session_id="order-42\n", state={"cart": "book"}
        )
        got = await service.get_session(app_name=APP, user_id="u", session_id="order-42\n")

        assert "order-42" == created.id
        assert got is not None and ("order-42", "book") == (got.id, got.state["cart"])
        await service.delete_session(app_name=APP, user_id="u", session_id="order-42\n")
        assert await service.get_session(app_name=APP, user_id="u", session_id="order-42") is None

    async def test_one_session_id_under_two_users_is_two_sessions(
        self, service: DeskSessionService
    ) -> None:
        first = await service.create_session(app_name=APP, user_id="u1", session_id="s1")
        await service.append_event(first, Event(invocation_id="inv1", author="user"))
        await service.create_session(app_name=APP, user_id="u2", session_id="s1")

        got = await service.get_session(app_name=APP, user_id="u2", session_id="s1")

        assert got is not None and ("u2", []) == (got.user_id, got.events)

    async def test_a_session_created_again_after_delete_starts_empty(
        self, service: DeskSessionService
    ) -> None:
        old = await service.create_session(
            app_name=APP, user_id="u", session_id="s", state={"a": 1}
        )
        await service.append_event(old, Event(author="user", content=said("hi")))
        await service.delete_session(app_name=APP, user_id="u", session_id="s")

        new = await service.create_session(app_name=APP, user_id="u", session_id="s")
        got = await service.get_session(app_name=APP, user_id="u", session_id="s")

        assert ({}, []) == (new.state, new.events)
        assert got is not None and ({}, []) == (got.state, got.events)


class TestListSessions:
    async def test_a_users_sessions_are_listed_with_their_state(
        self, service: DeskSessionService
    ) -> None:
        ids = [f"session{i}" for i in range(5)]
        for sid in ids:
            await service.create_session(
                app_name=APP, user_id="u", session_id=sid, state={"key": "value" + sid}
            )

        listed = (await service.list_sessions(app_name=APP, user_id="u")).sessions

        assert set(ids) == {s.id for s in listed}
        assert all({"key": "value" + s.id} == s.state for s in listed)

    async def test_sessions_are_listed_least_recently_updated_first(
        self, service: DeskSessionService
    ) -> None:
        for sid in ("a", "b", "c"):
            await service.create_session(app_name=APP, user_id="u", session_id=sid)
        a = await service.get_session(app_name=APP, user_id="u", session_id="a")
        assert a is not None

        await service.append_event(a, Event(invocation_id="inv", author="user"))
        listed = (await service.list_sessions(app_name=APP, user_id="u")).sessions

        assert ["b", "c", "a"] == [s.id for s in listed]

    async def test_no_user_lists_every_users_sessions(self, service: DeskSessionService) -> None:
        for user, sid in (("u1", "s1a"), ("u1", "s1b"), ("u2", "s2a")):
            await service.create_session(
                app_name=APP, user_id=user, session_id=sid, state={"key": sid}
            )

        one = (await service.list_sessions(app_name=APP, user_id="u1")).sessions
        two = (await service.list_sessions(app_name=APP, user_id="u2")).sessions
        every = (await service.list_sessions(app_name=APP, user_id=None)).sessions

        assert {"s1a": {"key": "s1a"}, "s1b": {"key": "s1b"}} == {s.id: s.state for s in one}
        assert [("s2a", {"key": "s2a"})] == [(s.id, s.state) for s in two]
        assert {"s1a", "s1b", "s2a"} == {s.id for s in every}

    async def test_listed_sessions_carry_merged_state_and_no_events(
        self, service: DeskSessionService
    ) -> None:
        state = {"app:a": "av", "user:u": "uv", "sk": "sv", "temp:t": "tv"}
        session = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1", state=state
        )
        await service.append_event(session, Event(author="user", actions=delta(sk2="sv2")))

        listed = (await service.list_sessions(app_name=APP, user_id="u1")).sessions

        assert [("s1", [])] == [(s.id, s.events) for s in listed]
        assert {"app:a": "av", "user:u": "uv", "sk": "sv", "sk2": "sv2"} == listed[0].state

    async def test_an_unknown_app_or_user_lists_nothing(self, service: DeskSessionService) -> None:
        await service.create_session(app_name=APP, user_id="u1", session_id="s1")

        assert [] == (await service.list_sessions(app_name="other")).sessions
        assert [] == (await service.list_sessions(app_name=APP, user_id="nobody")).sessions
        assert ["s1"] == [s.id for s in (await service.list_sessions(app_name=APP)).sessions]

    async def test_a_listing_comes_in_pages(self, service: DeskSessionService) -> None:
        for sid in ("a", "b", "c"):
            await service.create_session(app_name=APP, user_id="u", session_id=sid)

        first = await service.list_sessions(app_name=APP, user_id="u", page_size=2)
        rest = await service.list_sessions(
            app_name=APP, user_id="u", page_size=2, page_token=first.next_page_token
        )

        assert (["a", "b"], ["c"]) == (
            [s.id for s in first.sessions],
            [s.id for s in rest.sessions],
        )
        assert rest.next_page_token is None

    @pytest.mark.parametrize("token", ["abc", "-1", "1.5", " 2"])
    async def test_a_page_token_it_never_gave_is_a_validation_error(
        self, service: DeskSessionService, token: str
    ) -> None:
        await service.create_session(app_name=APP, user_id="u", session_id="a")

        with pytest.raises(ValidationError, match="page_token"):
            await service.list_sessions(app_name=APP, user_id="u", page_token=token)


class TestScopedState:
    async def test_app_state_is_shared_by_every_user_of_the_app(
        self, service: DeskSessionService
    ) -> None:
        s1 = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={"app:k1": "v1"}
        )
        await service.append_event(
            s1, Event(invocation_id="i", author="user", actions=delta(**{"app:k2": "v2"}))
        )

        s2 = await service.create_session(app_name=APP, user_id="u2", session_id="s2")
        again = await service.get_session(app_name=APP, user_id="u1", session_id="s1")

        assert {"app:k1": "v1", "app:k2": "v2"} == s2.state
        assert again is not None and ("v1", "v2") == (again.state["app:k1"], again.state["app:k2"])

    async def test_user_state_is_shared_by_that_users_sessions_only(
        self, service: DeskSessionService
    ) -> None:
        s1 = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={"user:k1": "v1"}
        )
        await service.append_event(s1, Event(author="user", actions=delta(**{"user:k2": "v2"})))

        mine = await service.create_session(app_name=APP, user_id="u1", session_id="s1b")
        theirs = await service.create_session(app_name=APP, user_id="u2", session_id="s2")

        assert ({"user:k1": "v1", "user:k2": "v2"}, {}) == (mine.state, theirs.state)

    async def test_session_state_stays_in_its_session(self, service: DeskSessionService) -> None:
        s1 = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={"sk1": "v1"}
        )
        await service.append_event(s1, Event(author="user", actions=delta(sk2="v2")))

        got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
        other = await service.create_session(app_name=APP, user_id="u1", session_id="s1b")

        assert got is not None and {"sk1": "v1", "sk2": "v2"} == got.state
        assert {} == other.state

    @pytest.mark.parametrize("key", ["profile", "app:profile"])
    async def test_a_dict_valued_delta_replaces_the_value_rather_than_merging(
        self, service: DeskSessionService, key: str
    ) -> None:
        session = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={key: {"name": "ada", "role": "x"}}
        )
        await service.append_event(
            session, Event(author="user", actions=delta(**{key: {"name": "bob"}}))
        )

        reader = await service.create_session(app_name=APP, user_id="u2", session_id="s2")
        got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")

        assert got is not None and {"name": "bob"} == got.state[key] == session.state[key]
        if key.startswith("app:"):
            assert {"name": "bob"} == reader.state[key]

    @pytest.mark.parametrize("key", ["flag", "user:flag"])
    async def test_a_none_valued_delta_stores_none_rather_than_deleting(
        self, service: DeskSessionService, key: str
    ) -> None:
        session = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={key: True}
        )
        await service.append_event(session, Event(author="user", actions=delta(**{key: None})))

        got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
        sibling = await service.create_session(app_name=APP, user_id="u1", session_id="s1b")

        assert got is not None and key in got.state and got.state[key] is None
        assert key in session.state and session.state[key] is None
        if key.startswith("user:"):
            assert key in sibling.state and sibling.state[key] is None

    async def test_a_boolean_keeps_its_type_across_an_unrelated_delta(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={"flag": False}
        )
        await service.append_event(session, Event(author="user", actions=delta(new_flag=True)))

        got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")

        assert got is not None
        assert (False, True) == (got.state["flag"], got.state["new_flag"])
        assert (False, True) == (session.state["flag"], session.state["new_flag"])

    async def test_temp_state_reaches_the_session_object_but_is_never_stored(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="s1")
        event = Event(author="agent1", actions=delta(**{"temp:k1": "v1", "sk": "v2"}))

        await service.append_event(session, event)
        got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")

        assert ("v1", "v2") == (session.state["temp:k1"], session.state["sk"])
        assert {"sk": "v2"} == event.actions.state_delta
        assert got is not None and {"sk": "v2"} == got.state
        assert {"sk": "v2"} == got.events[0].actions.state_delta

    async def test_user_state_reads_without_a_session(self, service: DeskSessionService) -> None:
        assert {} == await service.get_user_state(app_name=APP, user_id="u1")
        session = await service.create_session(app_name=APP, user_id="u1")
        state = {"user:profile": {"name": "Alice"}, "session_key": 1}
        await service.append_event(session, Event(author="system", actions=delta(**state)))
        await service.append_event(session, Event(author="system", actions=delta(**{"user:n": 1})))
        await service.append_event(session, Event(author="system", actions=delta(**{"user:n": 2})))

        assert {"profile": {"name": "Alice"}, "n": 2} == await service.get_user_state(
            app_name=APP, user_id="u1"
        )
        assert {} == await service.get_user_state(app_name=APP, user_id="u2")
        assert {} == await service.get_user_state(app_name="other_app", user_id="u1")


class TestEvents:
    async def test_binary_content_and_grounding_read_back_equal(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        content = types.Content(
            role="user", parts=[types.Part.from_bytes(data=b"image", mime_type="image/png")]
        )
        grounding = types.GroundingMetadata(
            search_entry_point=types.SearchEntryPoint(sdk_blob=b"blob")
        )
        await service.append_event(
            session, Event(author="user", content=content, grounding_metadata=grounding)
        )

        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

        assert got is not None and 1 == len(got.events)
        assert (content, grounding) == (got.events[0].content, got.events[0].grounding_metadata)

    async def test_an_event_with_every_field_reads_back_equal(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        event = Event(
            invocation_id="invocation",
            author="user",
            content=said("test_text"),
            turn_complete=True,
            partial=False,
            actions=EventActions(
                artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True
            ),
            long_running_tool_ids={"tool1"},
            error_code="error_code",
            error_message="error_message",
            interrupted=True,
            grounding_metadata=types.GroundingMetadata(web_search_queries=["query1"]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=1, candidates_token_count=1, total_token_count=2
            ),
            citation_metadata=types.CitationMetadata(),
            custom_metadata={"custom_key": "custom_value"},
            timestamp=1700000000.123,
            input_transcription=types.Transcription(text="in", finished=True),
            output_transcription=types.Transcription(text="out", finished=True),
        )
        await service.append_event(session, event)

        assert session == await service.get_session(
            app_name=APP, user_id="u", session_id=session.id
        )

    async def test_requested_tool_confirmations_read_back(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        confirmation = ToolConfirmation(hint="hint", confirmed=False, payload={"id": "album_1"})
        actions = EventActions(requested_tool_confirmations={"call_1": confirmation})
        await service.append_event(session, Event(author="user", actions=actions))

        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

        assert got is not None
        assert confirmation == got.events[0].actions.requested_tool_confirmations["call_1"]

    async def test_last_update_time_follows_the_newest_events_timestamp(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        stamp = session.last_update_time + 10

        await service.append_event(session, Event(author="user", timestamp=stamp))
        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

        assert got is not None and stamp == session.last_update_time == got.last_update_time

    async def test_get_session_keeps_the_newest_events_and_those_since_a_time(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        base = int(time.time())
        for i in range(1, 6):
            await service.append_event(session, Event(author="user", timestamp=base + i))

        async def stamps(**config: Any) -> list[float]:
            got = await service.get_session(
                app_name=APP, user_id="u", session_id=session.id, config=GetSessionConfig(**config)
            )
            assert got is not None
            return [e.timestamp for e in got.events]

        assert [base + i for i in range(1, 6)] == await stamps()
        assert [] == await stamps(num_recent_events=0)
        assert [base + 3, base + 4, base + 5] == await stamps(num_recent_events=3)
        assert [base + 4, base + 5] == await stamps(after_timestamp=base + 4)
        assert [] == await stamps(after_timestamp=base + 50)
        assert [base + 4, base + 5] == await stamps(after_timestamp=base + 4, num_recent_events=3)

    async def test_a_partial_event_is_not_stored(self, service: DeskSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u")

        await service.append_event(session, Event(author="user", partial=True))
        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

        assert got is not None and ([], []) == (session.events, got.events)

    async def test_timestamps_read_back_as_the_same_instant(
        self, service: DeskSessionService, new_york: None
    ) -> None:
        """Instants in New York's repeated hour (DST ends 2024-11-03) keep their epoch."""
        session = await service.create_session(app_name=APP, user_id="u")
        epochs = [1730613600.0, 1730615400.0]
        for epoch in epochs:
            await service.append_event(session, Event(author="user", timestamp=epoch))

        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

        assert got is not None and epochs == [e.timestamp for e in got.events]

    async def test_a_retried_event_is_stored_and_applied_once(
        self, service: DeskSessionService
    ) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="dup")
        event = Event(author="user", actions=delta(counter=1, **{"user:seen": 1}))

        await service.append_event(session, event)
        await service.append_event(session, event)
        await service.append_event(session, event.model_copy(deep=True))
        got = await service.get_session(app_name=APP, user_id="u", session_id="dup")

        assert got is not None and [event.id] == [e.id for e in got.events]
        assert [event.id] == [e.id for e in session.events]
        assert {"counter": 1, "user:seen": 1} == got.state

    async def test_concurrent_sessions_of_one_user_all_land(
        self, service: DeskSessionService
    ) -> None:
        sessions = [
            await service.create_session(app_name=APP, user_id="u", session_id=f"s{i}")
            for i in range(4)
        ]

        await asyncio.gather(
            *(
                service.append_event(s, Event(author="user", actions=delta(**{f"user:k{i}": i})))
                for i, s in enumerate(sessions)
            )
        )

        assert {f"k{i}": i for i in range(4)} == await service.get_user_state(
            app_name=APP, user_id="u"
        )


class TestNames:
    async def test_ids_longer_than_a_desk_id_still_name_their_own_session(
        self, service: DeskSessionService
    ) -> None:
        app, user = "a" * 120, "u" * 120
        for session_id in ("s" * 120, "t" * 120):
            await service.create_session(
                app_name=app, user_id=user, session_id=session_id, state={"id": session_id}
            )

        listed = (await service.list_sessions(app_name=app, user_id=user)).sessions
        got = await service.get_session(app_name=app, user_id=user, session_id="t" * 120)

        assert {"s" * 120, "t" * 120} == {s.id for s in listed}
        assert all({"id": s.id} == s.state for s in listed)
        assert got is not None and {"id": "t" * 120} == got.state
        assert len(service.desk_id(app, user, "t" * 120).encode()) <= 256
