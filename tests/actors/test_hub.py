"""The Hub's desk API: handles, the store port, views kept current, lifecycle."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from sharedesk.actors import Hub, HubOptions
from sharedesk.projection import TranscriptBuilder, project_session
from sharedesk.protocol import (
    Agent,
    ConcurrencyError,
    Conversation,
    Event,
    EventStore,
    Operator,
    Person,
    RunStarted,
    SessionQuery,
    StoreClosedError,
    Text,
    ValidationError,
)
from sharedesk.protocol.errors import HubClosed
from sharedesk.store.memory import MemoryStore
from tests.actors.conftest import HubFactory, our_threads

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Bot")
EVE = Agent(id="eve", label="Eve")


def contents(hub: Hub, session_id: str, conversation: Conversation | None = None) -> list[str]:
    return [m.content for m in hub.view(session_id, BOT, conversation).messages]


class TestSessionHandle:
    def test_post_returns_the_stored_text_with_its_sequence(self, hub: Hub) -> None:
        stored = hub.session("desk").post(ANA, "hello")

        assert (1, Text("hello"), ANA) == (stored.sequence, stored.body, stored.author)

    def test_post_with_a_known_id_stores_it_once(self, hub: Hub) -> None:
        desk = hub.session("desk")
        first = desk.post(ANA, "hello", id="m1")
        again = desk.post(ANA, "hello", id="m1")

        assert (first, 1) == (again, desk.last_sequence())

    def test_append_with_stale_expected_version_raises_concurrency_error(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")

        with pytest.raises(ConcurrencyError) as caught:
            desk.append([Event(ANA, Text("two"))], expected_version=0)

        assert (0, 1, 1) == (caught.value.expected, caught.value.actual, desk.last_sequence())

    def test_bad_input_raises_validation_error_and_the_actor_keeps_serving(self, hub: Hub) -> None:
        desk = hub.session("desk")
        with pytest.raises(ValidationError):
            desk.append([Event(ANA, Text("x"), sequence=4)])

        assert 1 == desk.post(ANA, "fine").sequence

    def test_log_serves_the_sessions_text_rows_newest_first(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        desk.append([Event(BOT, RunStarted(provider="p"))])
        desk.post(BOT, "two")

        page = desk.log().read_before(None, 10)

        assert [3, 1] == [row.sequence for row in page.messages]

    def test_read_returns_the_sessions_events_in_order(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        desk.post(BOT, "two")

        assert [2] == [e.sequence for e in desk.read(after=1)]

    def test_a_malformed_session_id_is_refused(self, hub: Hub) -> None:
        with pytest.raises(ValidationError):
            hub.session("")


class TestStorePort:
    def test_the_hub_implements_the_event_store_port(self, hub: Hub) -> None:
        assert isinstance(hub, EventStore)

    def test_appends_through_the_hub_read_back_from_the_store(self, hub: Hub) -> None:
        hub.append("desk", [Event(ANA, Text("a")), Event(BOT, Text("b"))])

        assert ["a", "b"] == [e.body.content for e in hub.read("desk") if isinstance(e.body, Text)]

    def test_text_given_as_events_is_refused_like_the_stores_refuse_it(self, hub: Hub) -> None:
        with pytest.raises(ValidationError, match="sequence of Event"):
            hub.append("desk", "not events")  # type: ignore[arg-type]

        assert 0 == hub.last_sequence("desk")

    def test_a_post_by_a_non_author_is_refused_naming_the_author(self, hub: Hub) -> None:
        with pytest.raises(ValidationError, match=r"^author must be"):
            hub.session("desk").post("ana", "hi")  # type: ignore[arg-type]

        assert 0 == hub.last_sequence("desk")

    def test_last_sequence_of_an_unknown_session_is_zero(self, hub: Hub) -> None:
        assert 0 == hub.last_sequence("nobody")


class TestViews:
    def test_channel_view_follows_appends(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "first")
        assert ["first"] == contents(hub, "desk")

        desk.post(BOT, "second")
        desk.post(EVE, "answer", parent=1)
        desk.post(ANA, "second answer", parent=1)

        assert ["first", "second", "answer"] == contents(hub, "desk")

    def test_thread_view_follows_appends(self, hub: Hub) -> None:
        desk = hub.session("desk")
        root = desk.post(ANA, "question")
        thread = Conversation("desk", root.sequence)
        assert ["question"] == contents(hub, "desk", thread)

        desk.post(BOT, "elsewhere")
        desk.post(BOT, "one", parent=root.sequence)
        desk.post(EVE, "two", parent=root.sequence)

        assert ["question", "one", "two"] == contents(hub, "desk", thread)

    def test_view_of_a_window_keeps_the_newest_messages(self, hub: Hub) -> None:
        desk = hub.session("desk")
        for n in range(10):
            desk.post(ANA, f"m{n}")

        view = hub.view("desk", BOT, window=3)

        assert ["m7", "m8", "m9"] == [m.content for m in view.messages]

    def test_view_equals_a_fresh_projection_of_the_log(self, hub: Hub) -> None:
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        hub.view("desk", BOT)
        desk.post(BOT, "   ", parent=root)
        desk.post(EVE, "first real reply", parent=root)
        desk.post(ANA, "late", parent=root)
        desk.post(BOT, "next root")

        fresh = project_session(hub.log("desk"), SessionQuery(Conversation("desk")))

        assert fresh == hub.view("desk", BOT)

    def test_view_sees_rows_appended_straight_to_the_store(self, hub: Hub) -> None:
        hub.session("desk").post(ANA, "via hub")
        hub.view("desk", BOT)
        hub.store.append("desk", [Event(EVE, Text("behind the hub's back"))])

        assert ["via hub", "behind the hub's back"] == contents(hub, "desk")

    def test_changing_a_returned_view_does_not_change_the_next_one(self, hub: Hub) -> None:
        hub.session("desk").post(ANA, "hello")
        hub.view("desk", BOT).messages.clear()

        assert ["hello"] == contents(hub, "desk")

    def test_repeated_views_without_appends_are_equal(self, hub: Hub) -> None:
        hub.session("desk").post(ANA, "hello")

        assert hub.view("desk", BOT) == hub.view("desk", BOT)

    def test_a_conversation_of_another_desk_is_refused(self, hub: Hub) -> None:
        with pytest.raises(ValidationError):
            hub.view("desk", BOT, Conversation("other"))

    def test_a_negative_window_is_refused(self, hub: Hub) -> None:
        with pytest.raises(ValidationError):
            hub.view("desk", BOT, window=-1)

    def test_a_viewer_that_is_not_an_author_is_refused(self, hub: Hub) -> None:
        with pytest.raises(ValidationError):
            hub.view("desk", "bot")  # type: ignore[arg-type]


class TestOptions:
    def test_unknown_store_options_without_a_path_are_refused(self) -> None:
        with pytest.raises(ValidationError):
            Hub.open(None, durability="relaxed")

    def test_an_unknown_option_is_refused_by_name_and_nothing_is_created(
        self, tmp_path: Path
    ) -> None:
        with pytest.raises(ValidationError) as caught:
            Hub.open(tmp_path / "desk", bogus=1)

        assert ("'bogus'" in str(caught.value), False) == (
            True,
            (tmp_path / "desk").exists(),
        )

    @pytest.mark.parametrize("path", ["", "a\x00b", 3], ids=["empty", "nul", "int"])
    def test_a_path_that_is_not_one_is_refused(self, path: Any) -> None:
        with pytest.raises(ValidationError):
            Hub.open(path)

    @pytest.mark.parametrize("url", ["mysql://db/desks", "sqlite:///desks.db", "file:///tmp/x"])
    def test_a_url_other_than_a_postgresql_dsn_is_refused_and_no_directory_is_made(
        self, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)

        with pytest.raises(ValidationError, match=r"URL with scheme .*postgresql://"):
            Hub.open(url)

        assert [] == list(tmp_path.iterdir())

    @pytest.mark.parametrize(
        "options",
        [
            {"ask_timeout": 0},
            {"max_active": 2},
            {"idle_timeout": -1.0},
            {"max_restarts": -1},
            {"ask_timeout": float("nan")},
            {"idle_timeout": float("nan")},
            {"restart_period": float("nan")},
            {"ask_timeout": float("inf")},
            {"max_active": 3.5},
        ],
        ids=repr,
    )
    def test_out_of_range_options_are_refused(self, options: dict[str, float]) -> None:
        with pytest.raises(ValidationError):
            HubOptions(**options)  # type: ignore[arg-type]


class TestClose:
    def test_close_leaves_no_thread_of_ours(self, open_hub: HubFactory) -> None:
        hub = open_hub(idle_timeout=60.0)
        for n in range(5):
            hub.session(f"s{n}").post(ANA, "hi")
            hub.view(f"s{n}", BOT)
            hub.turn(f"s{n}", BOT).commit("ok")
        assert [] != our_threads()

        hub.close()

        assert [] == our_threads()

    def test_calls_after_close_raise_hub_closed(self, memory_hub: Hub) -> None:
        desk = memory_hub.session("desk")
        memory_hub.close()

        with pytest.raises(HubClosed):
            desk.post(ANA, "late")

    def test_a_turn_committed_after_close_raises_hub_closed(self, memory_hub: Hub) -> None:
        turn = memory_hub.turn("desk", BOT)
        memory_hub.close()

        with pytest.raises(HubClosed):
            turn.commit("too late")

    def test_views_after_close_raise_hub_closed(self, memory_hub: Hub) -> None:
        memory_hub.view("desk", BOT)
        memory_hub.close()

        with pytest.raises(HubClosed):
            memory_hub.view("desk", BOT)

    def test_hub_closed_is_a_store_closed_error(self, memory_hub: Hub) -> None:
        memory_hub.close()

        with pytest.raises(StoreClosedError):
            memory_hub.last_sequence("desk")

    def test_close_is_idempotent(self, memory_hub: Hub) -> None:
        memory_hub.close()
        memory_hub.close()

        assert memory_hub.closed

    def test_context_manager_closes_the_hub(self) -> None:
        with Hub.open() as hub:
            hub.session("desk").post(Operator(), "hi")

        assert (True, []) == (hub.closed, our_threads())

    def test_many_threads_appending_to_many_sessions_get_gapless_sequences(self, hub: Hub) -> None:
        def writer(n: int) -> None:
            for i in range(20):
                hub.session(f"s{(n + i) % 4}").post(ANA, f"{n}-{i}")

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        sequences = [[e.sequence for e in hub.read(f"s{k}")] for k in range(4)]
        assert [list(range(1, 41))] * 4 == sequences


class TestTranscript:
    def test_the_transcript_takes_roles_relative_to_the_viewer(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "question")
        desk.post(BOT, "answer")

        transcript = hub.transcript("desk", BOT)

        assert [("user", "question"), ("assistant", "answer")] == [
            (m.role, m.content) for m in transcript.messages
        ]

    def test_the_transcript_follows_appends(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        hub.transcript("desk", BOT)
        desk.post(EVE, "two")

        transcript = hub.transcript("desk", BOT)

        assert (["one", "two"], 2) == (
            [m.content for m in transcript.messages],
            transcript.last_sequence,
        )

    @pytest.mark.parametrize(
        "budget",
        [
            {"limit": 3},
            {"max_messages": 2},
            {"max_chars": 5},
            {"max_tokens_approx": 1},
            {"limit": 4, "max_messages": 1},
        ],
    )
    def test_a_limited_transcript_is_what_the_builder_gives(
        self, hub: Hub, budget: dict[str, Any]
    ) -> None:
        desk = hub.session("desk")
        for n in range(6):
            desk.post(ANA if n % 2 else BOT, f"m{n}")
        hub.transcript("desk", BOT, **budget)
        desk.post(EVE, "late")

        assert TranscriptBuilder.from_store(
            hub.store, "desk", viewer=BOT, **budget
        ) == hub.transcript("desk", BOT, **budget)

    def test_a_limited_transcript_reads_only_the_newest_events(self) -> None:
        store = ReadRecordingStore()
        hub = Hub(store, HubOptions())
        try:
            hub.append("desk", [Event(ANA, Text(f"m{n}")) for n in range(2000)])
            store.reads.clear()

            transcript = hub.transcript("desk", BOT, limit=100)

            assert (100, [(100, True)]) == (len(transcript.messages), store.reads)
        finally:
            hub.close()

    def test_a_bad_limit_is_refused_before_any_actor(self, hub: Hub) -> None:
        with pytest.raises(ValidationError):
            hub.transcript("desk", BOT, limit=-1)

        assert 0 == hub.stats().active


class TestPostingCost:
    def test_a_post_starts_no_actor_per_viewer(self, hub: Hub) -> None:
        """A post wakes at most the session's publisher and sharing actor, never a projector."""
        desk = hub.session("desk")
        desk.post(ANA, "one")
        for n in range(5):
            hub.view("desk", Agent(id=f"v{n}", label=f"V{n}"))
        hub.turn("desk", BOT)
        before = sorted(key.kind for key in hub.active())
        desk.post(ANA, "two")

        assert sorted([*before, "session"]) == sorted(key.kind for key in hub.active())

    def test_views_catch_up_with_posts_made_while_nobody_looked(self, hub: Hub) -> None:
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        hub.view("desk", BOT)
        for n in range(40):
            desk.post(EVE, f"r{n}", parent=root if n % 3 == 0 else None)

        assert project_session(
            hub.log("desk"), SessionQuery(conversation=Conversation("desk"))
        ) == hub.view("desk", BOT)


class ReadRecordingStore(MemoryStore):
    """A MemoryStore that records the ``limit`` and order of every ``read``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int | None, bool]] = []

    def read(self, session_id: str, **bounds: Any) -> list[Event]:
        self.reads.append((bounds.get("limit"), bounds.get("newest_first", False)))
        return super().read(session_id, **bounds)


class TestOnDisk:
    def test_views_and_sequences_continue_after_a_restart_on_disk(
        self, open_hub: HubFactory
    ) -> None:
        first = open_hub(on_disk=True)
        first.session("desk").post(ANA, "before")
        first.view("desk", BOT)
        first.close()
        second = open_hub(on_disk=True)

        stored = second.session("desk").post(ANA, "after")

        assert (2, ["before", "after"]) == (stored.sequence, contents(second, "desk"))

    def test_store_options_reach_the_lmdb_store(self, open_hub: HubFactory) -> None:
        hub = open_hub(on_disk=True, durability="relaxed")

        assert 1 == hub.session("desk").post(ANA, "hi").sequence


class TestStats:
    def test_stats_count_running_actors_by_kind(self, memory_hub: Hub) -> None:
        memory_hub.session("desk").post(ANA, "hi")
        memory_hub.view("desk", BOT)
        memory_hub.view("desk", EVE)
        memory_hub.turn("desk", BOT)
        memory_hub.session("desk").post(ANA, "for the turns")

        stats = memory_hub.stats()

        assert (4, 1, 2, 1, []) == (
            stats.active,
            stats.sessions,
            stats.projectors,
            stats.sharing,
            stats.failed,
        )

    def test_a_session_only_written_to_runs_no_actor(self, memory_hub: Hub) -> None:
        for n in range(3):
            memory_hub.session("desk").post(ANA, f"m{n}")

        assert (0, []) == (memory_hub.stats().active, our_threads())


class TestRuns:
    def test_drain_without_runs_returns_true_at_once(self, memory_hub: Hub) -> None:
        assert memory_hub.drain(0.0)

    def test_a_run_through_the_hub_writes_its_reply_and_close_leaves_no_thread(
        self, open_hub: HubFactory
    ) -> None:
        from sharedesk.runs import ScriptedAdapter

        hub = open_hub()
        future = hub.submit_run("desk", ScriptedAdapter(["hello from the run"]), "hi")
        result = future.result(timeout=10.0)
        replies = [e.body.content for e in hub.read("desk") if isinstance(e.body, Text)]
        hub.close()

        assert (["hi", "hello from the run"], []) == (replies, our_threads())
        assert "desk" == result.session_id

    def test_submit_run_after_close_raises_hub_closed(self, memory_hub: Hub) -> None:
        memory_hub.close()

        with pytest.raises(HubClosed):
            memory_hub.submit_run("desk", object(), "hello")
