"""SessionManager: sessions and runs folded from events, continuation, timeouts, cancels."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedesk.protocol.authors import Agent, Operator, Person, System
from sharedesk.protocol.errors import (
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunStateError,
    RunTimeout,
    ValidationError,
)
from sharedesk.protocol.events import (
    Event,
    RunFinished,
    RunStarted,
    SessionStarted,
    Text,
    TextDelta,
)
from sharedesk.protocol.ports import EventStore
from sharedesk.runs import ScriptedAdapter, SessionManager
from sharedesk.runs.rules import (
    SYSTEM_PROMPT_AUTHOR,
    coalesce_chunks,
    parse_run_id,
)
from sharedesk.store.memory import MemoryStore
from tests.logs import capture_logs
from tests.runs.conftest import (
    BlockingAdapter,
    CoroutineExecute,
    FailingAdapter,
    RecordingAdapter,
)


@pytest.fixture
def store(any_store: EventStore) -> EventStore:
    """Every manager test runs over MemoryStore, LmdbStore and a Hub."""
    return any_store


def bodies(store: EventStore, session_id: str) -> list[type]:
    return [type(event.body) for event in store.read(session_id)]


def finished(store: EventStore, session_id: str) -> RunFinished:
    found = [e.body for e in store.read(session_id) if isinstance(e.body, RunFinished)]
    assert len(found) == 1
    return found[0]


class TestStartSession:
    def test_start_session_stores_its_metadata_as_one_session_started_event(
        self, store: EventStore
    ) -> None:
        session = SessionManager.start_session(store, session_id="s1", metadata={"team": "a"})

        assert [SessionStarted(metadata={"team": "a"})] == [e.body for e in store.read("s1")]
        assert {"team": "a", "provider_sessions": {}} == session.metadata

    def test_session_read_back_is_the_fold_of_its_events(self, store: EventStore) -> None:
        started = SessionManager.start_session(store, metadata={"k": 1})

        assert started == SessionManager.get_session(store, started.id)

    def test_new_session_is_idle(self, store: EventStore) -> None:
        session = SessionManager.start_session(store)

        assert "idle" == session.status

    def test_starting_again_with_the_same_metadata_writes_nothing(self, store: EventStore) -> None:
        SessionManager.start_session(store, session_id="s1", metadata={"k": 1})
        SessionManager.start_session(store, session_id="s1", metadata={"k": 1})

        assert 1 == store.last_sequence("s1")

    def test_starting_again_with_other_metadata_is_refused(self, store: EventStore) -> None:
        SessionManager.start_session(store, session_id="s1", metadata={"k": 1})

        with pytest.raises(ValidationError):
            SessionManager.start_session(store, session_id="s1", metadata={"k": 2})

    def test_provider_sessions_is_a_reserved_metadata_key_and_nothing_is_written(
        self, store: EventStore
    ) -> None:
        with pytest.raises(ValidationError):
            SessionManager.start_session(store, session_id="s1", metadata={"provider_sessions": {}})

        assert 0 == store.last_sequence("s1")


class TestStartRun:
    def test_a_prompt_string_is_stored_as_an_operator_text_of_the_run(
        self, store: EventStore
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        [event] = store.read("s1")
        assert (Operator(), Text("hello"), run.id) == (event.author, event.body, event.run_id)

    def test_a_system_message_is_stored_as_a_system_prompt_text(self, store: EventStore) -> None:
        SessionManager.start_run(
            store,
            "s1",
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        )

        authors = [e.author for e in store.read("s1")]
        assert [System(kind="prompt", label="system"), Operator()] == authors

    def test_a_new_run_is_pending_and_folds_back_with_its_input(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        assert "pending" == run.status
        assert run == SessionManager.get_run(store, run.id)
        assert [{"role": "user", "content": "hello"}] == run.input

    def test_the_run_id_names_its_session(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "desk/with@odd:chars", "hello")

        assert "desk/with@odd:chars" == parse_run_id(run.id)[1]

    def test_a_session_with_a_pending_run_is_active(self, store: EventStore) -> None:
        SessionManager.start_run(store, "s1", "hello")

        assert "active" == SessionManager.get_session(store, "s1").status

    @pytest.mark.parametrize(
        "bad",
        [
            [],
            3,
            b"bytes",
            [{"role": "assistant", "content": "x"}],
            [{"role": "user"}],
            [{"role": "user", "content": 5}],
            [{"role": "user", "content": "x", "extra": 1}],
        ],
    )
    def test_malformed_input_is_refused_and_nothing_is_written(
        self, store: EventStore, bad: Any
    ) -> None:
        with pytest.raises(ValidationError):
            SessionManager.start_run(store, "s1", bad)

        assert 0 == store.last_sequence("s1")


class TestFindRun:
    @pytest.mark.parametrize("run_id", ["nope", "0" * 32 + "@s1", "z" * 32 + "@s1", ""])
    def test_an_unknown_run_id_is_not_found(self, store: EventStore, run_id: str) -> None:
        SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(RunNotFound) as info:
            SessionManager.get_run(store, run_id)

        assert run_id == info.value.run_id

    def test_a_run_is_found_under_more_than_a_page_of_later_events(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")
        store.append("s1", [Event(Operator(), Text(f"m{i}")) for i in range(1200)])

        assert run == SessionManager.get_run(store, run.id)


class TestExecuteRun:
    def test_a_run_records_started_then_the_adapters_events_then_finished(
        self, store: EventStore
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        SessionManager.execute_run(store, ScriptedAdapter(["hi"]), run.id)

        assert [Text, RunStarted, Text, RunFinished] == bodies(store, "s1")
        assert {run.id} == {e.run_id for e in store.read("s1")}

    def test_the_result_carries_output_usage_and_the_events_it_stored(
        self, store: EventStore
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        result = SessionManager.execute_run(store, RecordingAdapter(), run.id)

        assert ("ok", {"input_tokens": 3, "output_tokens": 1}) == (
            result.output,
            result.token_usage,
        )
        assert store.read("s1")[1:] == result.events
        assert (run.id, "s1") == (result.run_id, result.session_id)

    def test_a_completed_run_records_its_token_usage(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        SessionManager.execute_run(store, RecordingAdapter(), run.id)

        folded = SessionManager.get_run(store, run.id)
        assert ("completed", {"input_tokens": 3, "output_tokens": 1}) == (
            folded.status,
            folded.token_usage,
        )

    def test_run_started_names_the_provider_and_model(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        SessionManager.execute_run(store, RecordingAdapter(), run.id)

        started = [e.body for e in store.read("s1") if isinstance(e.body, RunStarted)]
        assert [RunStarted(provider="recording", model="model-x")] == started

    def test_a_finished_run_cannot_be_executed_again(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")
        SessionManager.execute_run(store, ScriptedAdapter(["hi"]), run.id)

        with pytest.raises(RunStateError) as info:
            SessionManager.execute_run(store, ScriptedAdapter(["again"]), run.id)

        assert ("completed", "execute") == (info.value.status, info.value.action)

    def test_adapter_opts_reach_execute_unchanged(self, store: EventStore) -> None:
        adapter = RecordingAdapter()
        opts = {"temperature": 0.2, "tools": ["a"], "timeout": 10.0}
        run = SessionManager.start_run(store, "s1", "hello")

        SessionManager.execute_run(store, adapter, run.id, adapter_opts=opts)

        assert opts is adapter.seen[0][2]

    def test_without_continuation_the_adapter_gets_no_transcript(self, store: EventStore) -> None:
        adapter = RecordingAdapter()
        SessionManager.run_once(store, ScriptedAdapter(["earlier"]), "first", session_id="s1")
        run = SessionManager.start_run(store, "s1", "hello")

        SessionManager.execute_run(store, adapter, run.id)

        assert {"continuation": False} == adapter.seen[0][1].context

    def test_the_input_reaches_the_adapter_with_its_roles(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["ok"])
        given = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]

        SessionManager.run_once(store, adapter, given)

        assert given == adapter.calls[0].input

    def test_a_completed_run_leaves_no_worker_thread_behind(self, store: EventStore) -> None:
        result = SessionManager.run_once(store, ScriptedAdapter(["ok"]), "hello")

        name = f"sharedesk-run-{result.run_id[:8]}"
        assert [] == [t for t in threading.enumerate() if t.name == name]

    def test_a_session_is_idle_once_its_run_finished(self, store: EventStore) -> None:
        SessionManager.run_once(store, ScriptedAdapter(["hi"]), "hello", session_id="s1")

        assert "idle" == SessionManager.get_session(store, "s1").status

    def test_an_adapter_may_not_emit_the_runs_finish(self, store: EventStore) -> None:
        class Finisher(RecordingAdapter):
            def execute(self, run: Any, session: Any, emit: Any, opts: Any) -> Any:
                emit(Event(Agent(id="f", label="f"), RunFinished(status="completed")))

        run = SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(RunFailed) as info:
            SessionManager.execute_run(store, Finisher(), run.id)

        assert "ValidationError" == info.value.error_code


class BadAuthor(RecordingAdapter):
    """An adapter whose ``author`` is not a ``SessionAuthor``."""

    author = "ada"


#: Options no adapter of these tests can be run with, by what is wrong with them.
REFUSED: dict[str, tuple[Any, dict[str, Any]]] = {
    **{f"continuation-{mode!r}": (ScriptedAdapter(["hi"]), {"continuation": mode})
       for mode in ["always", True, 1, 0, None, "Replay"]},
    "native-without-native": (ScriptedAdapter(["hi"]), {"continuation": "native"}),
    **{f"continuation_opts-{opts}": (ScriptedAdapter(["hi"]),
                                     {"continuation": "replay", "continuation_opts": opts})
       for opts in [{"max_msgs": 3}, {"limit": -1}, {"max_chars": "10"},
                    {"max_tokens_approx": True}, ["limit"]]},
    **{f"timeout-{timeout!r}": (ScriptedAdapter(["hi"]), {"adapter_opts": {"timeout": timeout}})
       for timeout in [0, -5, "10", True]},
    "adapter_opts-not-a-mapping": (ScriptedAdapter(["hi"]), {"adapter_opts": [1]}),
    "not-an-adapter": (object(), {}),
    "a-str": ("scripted", {}),
    "nameless": (RecordingAdapter(name=""), {}),
    "coroutine-execute": (CoroutineExecute(), {}),
    "bad-author": (BadAuthor(), {}),
}  # fmt: skip


class TestRefusedOptions:
    @pytest.mark.parametrize(("adapter", "options"), REFUSED.values(), ids=REFUSED.keys())
    def test_run_once_refuses_them_and_writes_nothing(
        self, store: EventStore, adapter: Any, options: dict[str, Any]
    ) -> None:
        with pytest.raises(ValidationError):
            SessionManager.run_once(store, adapter, "hello", session_id="s1", **options)

        assert 0 == store.last_sequence("s1")

    @pytest.mark.parametrize(("adapter", "options"), REFUSED.values(), ids=REFUSED.keys())
    def test_execute_run_refuses_them_writes_nothing_and_the_run_stays_pending(
        self, store: EventStore, adapter: Any, options: dict[str, Any]
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(ValidationError):
            SessionManager.execute_run(store, adapter, run.id, **options)

        assert (1, "pending") == (
            store.last_sequence("s1"),
            SessionManager.get_run(store, run.id).status,
        )

    def test_a_refused_run_leaves_nothing_for_a_later_replay(self, store: EventStore) -> None:
        with pytest.raises(ValidationError):
            SessionManager.run_once(
                store, ScriptedAdapter(["hi"]), "lost", session_id="s1", continuation="native"
            )
        adapter = ScriptedAdapter(["ok"])

        SessionManager.run_once(store, adapter, "next", session_id="s1", continuation="replay")

        assert [] == replayed(adapter)


class TestTimeout:
    def test_a_run_that_overruns_its_timeout_raises_run_timeout(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(RunTimeout) as info:
            SessionManager.execute_run(store, blocking, run.id, adapter_opts={"timeout": 0.05})

        assert (run.id, 0.05) == (info.value.run_id, info.value.timeout)

    def test_a_run_that_overruns_its_timeout_finishes_as_timeout(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(RunTimeout):
            SessionManager.execute_run(store, blocking, run.id, adapter_opts={"timeout": 0.05})

        assert "timeout" == SessionManager.get_run(store, run.id).status

    def test_an_abandoned_adapter_cannot_emit_after_the_timeout(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")
        with pytest.raises(RunTimeout):
            SessionManager.execute_run(store, blocking, run.id, adapter_opts={"timeout": 0.05})

        blocking.finish()

        assert isinstance(blocking.late_emit_error, RunStateError)
        assert [Text, RunStarted, RunFinished] == bodies(store, "s1")


class TestFailure:
    def test_an_adapter_that_raises_gives_run_failed_with_the_run_id_and_cause(
        self, store: EventStore
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(RunFailed) as info:
            SessionManager.execute_run(store, FailingAdapter(), run.id)

        assert (run.id, "RuntimeError") == (info.value.run_id, info.value.error_code)
        assert isinstance(info.value.__cause__, RuntimeError)

    def test_an_adapter_that_raises_finishes_the_run_as_failed_with_its_error(
        self, store: EventStore
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(RunFailed):
            SessionManager.execute_run(store, FailingAdapter(), run.id)

        expected = RunFinished(
            status="failed", error_code="RuntimeError", error_message="provider exploded"
        )
        assert expected == finished(store, "s1")

    def test_an_exhausted_scripted_adapter_fails_the_run(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(RunFailed):
            SessionManager.execute_run(store, ScriptedAdapter([]), run.id)

        assert "failed" == SessionManager.get_run(store, run.id).status


class TestCancel:
    def test_a_pending_run_can_be_cancelled(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        cancelled = SessionManager.cancel_run(store, run.id)

        assert "cancelled" == cancelled.status
        assert cancelled == SessionManager.get_run(store, run.id)

    def test_a_cancelled_pending_run_cannot_be_executed(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")
        SessionManager.cancel_run(store, run.id)

        with pytest.raises(RunStateError) as info:
            SessionManager.execute_run(store, ScriptedAdapter(["hi"]), run.id)

        assert "cancelled" == info.value.status

    def test_cancel_takes_the_session_id_and_the_run_id(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        assert "cancelled" == SessionManager.cancel_run(store, "s1", run.id).status

    def test_cancel_with_a_session_that_is_not_the_runs_is_not_found(
        self, store: EventStore
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")

        with pytest.raises(RunNotFound):
            SessionManager.cancel_run(store, "s2", run.id)

    def test_a_running_run_cancelled_from_another_thread_raises_run_cancelled(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")
        canceller = threading.Thread(
            target=lambda: (blocking.started.wait(10), SessionManager.cancel_run(store, run.id))
        )
        canceller.start()

        with pytest.raises(RunCancelled) as info:
            SessionManager.execute_run(store, blocking, run.id)
        canceller.join(10)

        assert run.id == info.value.run_id
        assert "cancelled" == SessionManager.get_run(store, run.id).status

    def test_a_cancelled_running_adapter_cannot_emit_afterwards(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        run = SessionManager.start_run(store, "s1", "hello")
        canceller = threading.Thread(
            target=lambda: (blocking.started.wait(10), SessionManager.cancel_run(store, run.id))
        )
        canceller.start()
        with pytest.raises(RunCancelled):
            SessionManager.execute_run(store, blocking, run.id)
        canceller.join(10)

        blocking.finish()

        assert isinstance(blocking.late_emit_error, RunStateError)
        assert [Text, RunStarted, RunFinished] == bodies(store, "s1")

    def test_a_finished_run_cannot_be_cancelled_and_nothing_is_written(
        self, store: EventStore
    ) -> None:
        result = SessionManager.run_once(store, ScriptedAdapter(["hi"]), "hello", session_id="s1")
        last = store.last_sequence("s1")

        with pytest.raises(RunStateError) as info:
            SessionManager.cancel_run(store, result.run_id)

        assert ("completed", "cancel") == (info.value.status, info.value.action)
        assert last == store.last_sequence("s1")


class TestProviderSessions:
    def test_a_native_adapter_records_its_provider_session_in_the_session_metadata(
        self, store: EventStore
    ) -> None:
        SessionManager.run_once(
            store,
            ScriptedAdapter(["hi"], name="claude", native_continuation=True),
            "hello",
            session_id="s1",
        )

        sessions = SessionManager.get_session(store, "s1").metadata["provider_sessions"]
        assert ["claude"] == list(sessions)
        assert sessions["claude"]["provider_session_id"].startswith("claude-")
        assert {"provider_session_id", "model"} == set(sessions["claude"])

    def test_each_provider_keeps_its_own_provider_session(self, store: EventStore) -> None:
        for name in ("claude", "codex"):
            SessionManager.run_once(
                store,
                ScriptedAdapter(["hi"], name=name, native_continuation=True),
                "hello",
                session_id="s1",
            )

        sessions = SessionManager.get_session(store, "s1").metadata["provider_sessions"]
        assert ["claude", "codex"] == sorted(sessions)
        assert sessions["claude"] != sessions["codex"]

    def test_native_continuation_continues_the_stored_provider_session(
        self, store: EventStore
    ) -> None:
        adapter = ScriptedAdapter(["one", "two"], name="claude", native_continuation=True)
        SessionManager.run_once(store, adapter, "hello", session_id="s1")
        before = SessionManager.get_session(store, "s1").metadata["provider_sessions"]

        result = SessionManager.run_once(
            store, adapter, "again", session_id="s1", continuation="native"
        )

        after = SessionManager.get_session(store, "s1").metadata["provider_sessions"]
        assert before == after
        started = result.events[0].body
        assert isinstance(started, RunStarted)
        assert before["claude"]["provider_session_id"] == started.provider_session_id

    def test_native_continuation_gives_the_adapter_no_transcript(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one", "two"], name="claude", native_continuation=True)
        SessionManager.run_once(store, adapter, "hello", session_id="s1")

        SessionManager.run_once(store, adapter, "again", session_id="s1", continuation="native")

        assert None is adapter.calls[1].transcript

    def test_auto_continues_natively_when_a_provider_session_is_stored(
        self, store: EventStore
    ) -> None:
        adapter = RecordingAdapter("claude", native_continuation=True)
        SessionManager.run_once(
            store,
            ScriptedAdapter(["one"], name="claude", native_continuation=True),
            "hello",
            session_id="s1",
        )

        SessionManager.run_once(store, adapter, "again", session_id="s1", continuation="auto")

        assert {"continuation": "native"} == adapter.seen[0][1].context


class TestRunOnce:
    def test_run_once_starts_a_new_session_each_time_without_a_session_id(
        self, store: EventStore
    ) -> None:
        adapter = ScriptedAdapter(["a", "b"])

        first = SessionManager.run_once(store, adapter, "x")
        second = SessionManager.run_once(store, adapter, "y")

        assert first.session_id != second.session_id

    def test_run_once_continues_the_given_session(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["a", "b"])

        SessionManager.run_once(store, adapter, "x", session_id="s1")
        SessionManager.run_once(store, adapter, "y", session_id="s1")

        texts = [e.body for e in store.read("s1") if isinstance(e.body, Text)]
        assert [Text("x"), Text("a"), Text("y"), Text("b")] == texts


def replayed(adapter: ScriptedAdapter, index: int = -1) -> list[tuple[str, str | None]]:
    transcript = adapter.calls[index].transcript
    assert transcript is not None
    return [(m.role, m.content) for m in transcript.messages]


class TestReplay:
    def test_replay_gives_the_earlier_conversation_seen_by_the_adapter(
        self, store: EventStore
    ) -> None:
        adapter = ScriptedAdapter(["one", "two"], name="bot")
        SessionManager.run_once(store, adapter, "first", session_id="s1")
        store.append("s1", [Event(Agent(id="peer", label="Peer"), Text("from a peer"))])

        SessionManager.run_once(store, adapter, "second", session_id="s1", continuation="replay")

        expected = [("user", "first"), ("assistant", "one"), ("user", "from a peer")]
        assert expected == replayed(adapter)

    def test_the_current_runs_input_is_not_in_its_own_transcript(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one"])

        SessionManager.run_once(store, adapter, "only", session_id="s1", continuation="replay")

        assert [] == replayed(adapter)
        assert [{"role": "user", "content": "only"}] == adapter.calls[0].input

    def test_a_queued_run_replays_what_earlier_runs_wrote_after_its_input(
        self, store: EventStore
    ) -> None:
        adapter = ScriptedAdapter(["reply a", "reply b"])
        run_a = SessionManager.start_run(store, "s1", "a")
        run_b = SessionManager.start_run(store, "s1", "b")
        SessionManager.execute_run(store, adapter, run_a.id)

        SessionManager.execute_run(store, adapter, run_b.id, continuation="replay")

        assert [("user", "a"), ("assistant", "reply a")] == replayed(adapter)

    def test_the_transcript_is_seen_by_the_adapters_agent(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one", "two"], name="bot")
        SessionManager.run_once(store, adapter, "first", session_id="s1")

        SessionManager.run_once(store, adapter, "second", session_id="s1", continuation="replay")

        transcript = adapter.calls[-1].transcript
        assert transcript is not None
        assert Agent(id="bot", label="bot") == transcript.messages[-1].author

    def test_limit_keeps_the_newest_earlier_events(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one", "two", "three"])
        SessionManager.run_once(store, adapter, "first", session_id="s1")
        SessionManager.run_once(store, adapter, "second", session_id="s1")

        SessionManager.run_once(
            store,
            adapter,
            "third",
            session_id="s1",
            continuation="replay",
            continuation_opts={"limit": 4},
        )

        # The newest 4 earlier events: "second", RunStarted, "two", RunFinished.
        assert [("user", "second"), ("assistant", "two")] == replayed(adapter)

    def test_max_messages_keeps_the_newest_messages(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one", "two", "three"])
        SessionManager.run_once(store, adapter, "first", session_id="s1")
        SessionManager.run_once(store, adapter, "second", session_id="s1")

        SessionManager.run_once(
            store,
            adapter,
            "third",
            session_id="s1",
            continuation="replay",
            continuation_opts={"max_messages": 3},
        )

        assert [("assistant", "one"), ("user", "second"), ("assistant", "two")] == replayed(adapter)

    @pytest.mark.parametrize(
        "opts",
        [{"max_chars": 12}, {"max_tokens_approx": 3}, {"max_chars": 12, "max_tokens_approx": 9}],
    )
    def test_character_budgets_reach_the_transcript(
        self, store: EventStore, opts: dict[str, int]
    ) -> None:
        adapter = ScriptedAdapter(["aaaaaa", "bbbbbb", "z"])
        SessionManager.run_once(store, adapter, "cccccc", session_id="s1")
        SessionManager.run_once(store, adapter, "dddddd", session_id="s1")

        SessionManager.run_once(
            store, adapter, "q", session_id="s1", continuation="replay", continuation_opts=opts
        )

        assert [("user", "dddddd"), ("assistant", "bbbbbb")] == replayed(adapter)

    def test_auto_replays_when_no_provider_session_is_stored(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one", "two"], native_continuation=False)
        SessionManager.run_once(store, adapter, "first", session_id="s1")

        SessionManager.run_once(store, adapter, "second", session_id="s1", continuation="auto")

        assert [("user", "first"), ("assistant", "one")] == replayed(adapter)

    def test_replay_context_names_the_mode_used(self, store: EventStore) -> None:
        adapter = RecordingAdapter()

        SessionManager.run_once(store, adapter, "x", session_id="s1", continuation="auto")

        assert "replay" == adapter.seen[0][1].context["continuation"]


class TestEmit:
    def test_emitted_events_get_the_runs_id(self, store: EventStore) -> None:
        result = SessionManager.run_once(store, ScriptedAdapter(["hi"]), "x", session_id="s1")

        assert {result.run_id} == {e.run_id for e in result.events}

    def test_an_event_of_another_run_is_refused_and_fails_the_run(self, store: EventStore) -> None:
        class Stray(RecordingAdapter):
            def execute(self, run: Any, session: Any, emit: Any, opts: Any) -> Any:
                emit(Event(Agent(id="s", label="s"), Text("x"), run_id="0" * 32 + "@s1"))

        with pytest.raises(RunFailed) as info:
            SessionManager.run_once(store, Stray(), "x", session_id="s1")

        assert "ValidationError" == info.value.error_code

    def test_emits_succeed_while_others_write_to_the_session(self, store: EventStore) -> None:
        class Interleaved(RecordingAdapter):
            def execute(self, run: Any, session: Any, emit: Any, opts: Any) -> Any:
                for i in range(3):
                    store.append("s1", [Event(Agent(id="peer", label="Peer"), Text(f"p{i}"))])
                    emit(Event(Agent(id="bot", label="bot"), Text(f"b{i}")))
                return None

        result = SessionManager.run_once(store, Interleaved(), "x", session_id="s1")

        texts = [e.body.content for e in store.read("s1") if isinstance(e.body, Text)]
        assert ["x", "p0", "b0", "p1", "b1", "p2", "b2"] == texts
        assert "b2" == result.output


class TestRaces:
    """Whatever the interleaving, a run finishes exactly once and every caller agrees."""

    def test_a_cancel_racing_completion_has_one_winner_that_everyone_sees(
        self, store: EventStore
    ) -> None:
        for index in range(20):
            session_id = f"race{index}"
            run = SessionManager.start_run(store, session_id, "x")
            cancel_outcome: list[str] = []

            def cancel(run_id: str = run.id, out: list[str] = cancel_outcome) -> None:
                try:
                    SessionManager.cancel_run(store, run_id)
                    out.append("cancelled")
                except RunStateError as exc:
                    out.append(exc.status)

            canceller = threading.Thread(target=cancel)
            canceller.start()
            try:
                SessionManager.execute_run(store, ScriptedAdapter(["hi"]), run.id)
                executed = "completed"
            except RunCancelled:
                executed = "cancelled"
            except RunStateError as exc:  # cancelled before execute_run looked
                executed = exc.status
            canceller.join(10)

            finishes = [e.body for e in store.read(session_id) if isinstance(e.body, RunFinished)]
            assert 1 == len(finishes)
            assert [executed] == cancel_outcome == [finishes[0].status]


class TestLogging:
    def test_a_failed_run_is_logged_at_info_with_its_ids_and_code(self, store: EventStore) -> None:
        run = SessionManager.start_run(store, "s1", "secret prompt")

        with capture_logs() as logs, pytest.raises(RunFailed):
            SessionManager.execute_run(store, FailingAdapter(), run.id)

        failed = [entry for entry in logs if entry["event"] == "run.failed"]
        assert [("info", "s1", run.id, "RuntimeError")] == [
            (e["log_level"], e["session_id"], e["run_id"], e["error_code"]) for e in failed
        ]

    def test_message_content_is_never_logged(self, store: EventStore) -> None:
        with capture_logs() as logs:
            SessionManager.run_once(store, ScriptedAdapter(["secret reply"]), "secret prompt")

        assert not any("secret" in repr(entry) for entry in logs)


class TestFoldsAgainstAModel:
    """Random sequences of run operations: the folds agree with a naive model."""

    @given(
        st.lists(
            st.tuples(
                st.sampled_from(["start", "complete", "fail", "cancel", "native"]),
                st.integers(0, 5),
                st.sampled_from(["s1", "s2"]),
            ),
            max_size=25,
        )
    )
    def test_run_and_session_folds_match_a_model_of_the_operations(
        self, operations: list[tuple[str, int, str]]
    ) -> None:
        status: dict[str, str] = {}
        session_of: dict[str, str] = {}
        providers: dict[str, dict[str, str | None]] = {"s1": {}, "s2": {}}
        order: list[str] = []
        with MemoryStore() as store:
            for action, index, session_id in operations:
                if action == "start":
                    run = SessionManager.start_run(store, session_id, "x")
                    status[run.id], session_of[run.id] = "pending", session_id
                    order.append(run.id)
                    continue
                if not order:
                    continue
                run_id = order[index % len(order)]
                pending = status[run_id] == "pending"
                if action == "cancel":
                    if status[run_id] in ("pending", "running"):
                        SessionManager.cancel_run(store, run_id)
                        status[run_id] = "cancelled"
                    else:
                        with pytest.raises(RunStateError):
                            SessionManager.cancel_run(store, run_id)
                    continue
                adapter: Any = {
                    "complete": ScriptedAdapter(["ok"]),
                    "fail": FailingAdapter(),
                    "native": ScriptedAdapter(["ok"], name="claude", native_continuation=True),
                }[action]
                if not pending:
                    with pytest.raises(RunStateError):
                        SessionManager.execute_run(store, adapter, run_id)
                    continue
                try:
                    result = SessionManager.execute_run(store, adapter, run_id)
                except RunFailed:
                    status[run_id] = "failed"
                else:
                    status[run_id] = "completed"
                    for event in result.events[1:]:
                        if isinstance(event.body, RunStarted):
                            providers[session_of[run_id]]["claude"] = event.body.provider_session_id

            for run_id, expected in status.items():
                assert expected == SessionManager.get_run(store, run_id).status
            for session_id in ("s1", "s2"):
                session = SessionManager.get_session(store, session_id)
                busy = any(status[r] == "pending" for r in status if session_of[r] == session_id)
                assert ("active" if busy else "idle") == session.status
                stored = {
                    name: entry["provider_session_id"]
                    for name, entry in session.metadata["provider_sessions"].items()
                }
                assert providers[session_id] == stored


ADA = Agent(id="ada", label="Ada")
PAT = Person(id="pat", label="Pat")


class TestParticipants:
    def test_start_run_stores_the_user_input_by_the_given_author(self, store: EventStore) -> None:
        run = SessionManager.start_run(
            store,
            "s1",
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            author=PAT,
        )

        assert [SYSTEM_PROMPT_AUTHOR, PAT] == [e.author for e in store.read("s1")]
        assert run.input == SessionManager.get_run(store, run.id).input

    def test_a_bad_author_is_refused_and_nothing_is_written(self, store: EventStore) -> None:
        with pytest.raises(ValidationError):
            SessionManager.start_run(store, "s1", "hi", author="pat")  # type: ignore[arg-type]

        assert 0 == store.last_sequence("s1")

    def test_a_scripted_adapter_replies_as_its_author(self, store: EventStore) -> None:
        result = SessionManager.run_once(
            store, ScriptedAdapter(["hello"], name="scripted", author=ADA), "hi", session_id="s1"
        )

        replies = [e for e in result.events if isinstance(e.body, Text)]
        assert [ADA] == [e.author for e in replies]

    def test_the_replay_is_relative_to_the_adapters_author(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["first", "second"], name="scripted", author=ADA)
        SessionManager.run_once(store, adapter, "one", session_id="s1", author=PAT)
        store.append("s1", [Event(BOB, Text("from bob"))])

        SessionManager.run_once(
            store, adapter, "two", session_id="s1", author=PAT, continuation="replay"
        )

        transcript = adapter.calls[-1].transcript
        assert transcript is not None
        assert [("user", "one", PAT), ("assistant", "first", ADA), ("user", "from bob", BOB)] == [
            (m.role, m.content, m.author) for m in transcript.messages
        ]


BOB = Person(id="bob", label="Bob")


class PostsBeforeEachEmit(MemoryStore):
    """A MemoryStore on which someone else posts right before each append of a run's reply."""

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        unless_stored: str | None = None,
    ) -> list[Event]:
        if events and events[0].run_id is not None and events[0].author == ADA:
            super().append(session_id, [Event(BOB, Text("meanwhile"))])
        return super().append(
            session_id, events, expected_version=expected_version, unless_stored=unless_stored
        )


class CancelsBeforeEachEmit(MemoryStore):
    """A MemoryStore that cancels the run right before the adapter's first emit lands."""

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        unless_stored: str | None = None,
    ) -> list[Event]:
        first = events[0] if events else None
        if first is not None and first.run_id is not None and first.author == ADA:
            SessionManager.cancel_run(self, first.run_id)
        return super().append(
            session_id, events, expected_version=expected_version, unless_stored=unless_stored
        )


class TestBusyDesk:
    def test_a_run_completes_when_someone_posts_before_every_emit(self) -> None:
        """Rows others append between an emit's check and its append never fail the run."""
        with PostsBeforeEachEmit() as store:
            result = SessionManager.run_once(
                store, ScriptedAdapter(["done"], author=ADA), "go", session_id="s1"
            )

            assert ("done", "completed") == (
                result.output,
                SessionManager.get_run(store, result.run_id).status,
            )

    def test_runs_complete_while_four_threads_post_to_a_durable_hub(self, tmp_path: Any) -> None:
        from sharedesk.actors.hub import Hub

        with Hub.open(tmp_path / "desk") as hub:
            hub.session("desk").post(BOB, "start")
            stop = threading.Event()

            def poster(n: int) -> None:
                while not stop.is_set():
                    hub.session("desk").post(Person(id=f"p{n}", label=f"P{n}"), "busy")

            threads = [threading.Thread(target=poster, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            try:
                outputs = [
                    SessionManager.run_once(
                        hub, ScriptedAdapter([f"r{i}"], author=ADA), "go", session_id="desk"
                    ).output
                    for i in range(5)
                ]
            finally:
                stop.set()
                for thread in threads:
                    thread.join()

            assert [f"r{i}" for i in range(5)] == outputs

    def test_an_emit_after_a_cancel_landed_is_refused_and_nothing_follows_the_finish(
        self,
    ) -> None:
        with CancelsBeforeEachEmit() as store:
            run = SessionManager.start_run(store, "s1", "hello")

            with pytest.raises(RunCancelled):
                SessionManager.execute_run(store, ScriptedAdapter(["late"], author=ADA), run.id)

            assert [Text, RunStarted, RunFinished] == bodies(store, "s1")


class CountingAppends(MemoryStore):
    """A MemoryStore that records the size of every append."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = None,
        unless_stored: str | None = None,
    ) -> list[Event]:
        self.sizes.append(len(events))
        return super().append(
            session_id, events, expected_version=expected_version, unless_stored=unless_stored
        )


class Streaming(RecordingAdapter):
    """Streams ``chunks`` deltas, then the whole reply as a Text."""

    def __init__(self, chunks: int) -> None:
        super().__init__()
        self.chunks = chunks

    def execute(self, run: Any, session: Any, emit: Any, opts: Any) -> Any:
        for i in range(self.chunks):
            emit(Event(ADA, TextDelta(f"{i} ")))
        emit(Event(ADA, Text("".join(f"{i} " for i in range(self.chunks)))))
        return None


class TestStreaming:
    @pytest.fixture
    def slow_flush(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No chunk gets old enough to be flushed on its own, however slow the machine."""
        monkeypatch.setattr("sharedesk.runs.rules.STREAM_FLUSH_S", 3600.0)

    @pytest.mark.usefixtures("slow_flush")
    def test_buffered_chunks_are_stored_joined_with_the_closing_text_in_one_append(
        self,
    ) -> None:
        with CountingAppends() as store:
            result = SessionManager.run_once(store, Streaming(300), "go", session_id="s1")

            stored = [e for e in store.read("s1") if e.run_id == result.run_id]
            deltas = [e.body.delta for e in stored if isinstance(e.body, TextDelta)]
            assert ["".join(f"{i} " for i in range(300))] == deltas
            assert [1, 1, 2, 1] == store.sizes  # input, RunStarted, chunks + Text, RunFinished

    def test_a_streamed_run_replays_as_the_same_message_as_its_text(
        self, store: EventStore
    ) -> None:
        SessionManager.run_once(store, Streaming(5), "go", session_id="s1")
        adapter = ScriptedAdapter(["ok"])

        SessionManager.run_once(store, adapter, "again", session_id="s1", continuation="replay")

        assert [("user", "go"), ("user", "0 1 2 3 4 ")] == replayed(adapter)

    @pytest.mark.usefixtures("slow_flush")
    def test_the_result_lists_the_stored_events(self, store: EventStore) -> None:
        result = SessionManager.run_once(store, Streaming(3), "go", session_id="s1")

        assert [RunStarted, TextDelta, Text, RunFinished] == [type(e.body) for e in result.events]
        assert all(e.sequence is not None for e in result.events)

    def test_chunks_older_than_the_flush_age_are_stored_while_the_stream_goes_on(
        self, store: EventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("sharedesk.runs.rules.STREAM_FLUSH_S", 0.0)  # every chunk is old
        seen: list[list[str]] = []

        class Streams(RecordingAdapter):
            def execute(self, run: Any, session: Any, emit: Any, opts: Any) -> Any:
                emit(Event(ADA, TextDelta("a")))
                emit(Event(ADA, TextDelta("b")))
                seen.append(
                    [e.body.delta for e in store.read("s1") if isinstance(e.body, TextDelta)]
                )
                emit(Event(ADA, Text("ab")))
                return None

        SessionManager.run_once(store, Streams(), "go", session_id="s1")

        assert [["a", "b"]] == seen  # stored before the closing Text

    def test_a_stream_left_unclosed_is_stored_before_the_finish(self, store: EventStore) -> None:
        class Unclosed(RecordingAdapter):
            def execute(self, run: Any, session: Any, emit: Any, opts: Any) -> Any:
                emit(Event(ADA, TextDelta("half")))
                return None

        result = SessionManager.run_once(store, Unclosed(), "go", session_id="s1")

        assert [RunStarted, TextDelta, RunFinished] == [type(e.body) for e in result.events]


class TestCoalesceChunks:
    def test_consecutive_chunks_of_one_author_join_under_the_first_id(self) -> None:
        chunks = [Event(ADA, TextDelta(t), id=f"c{n}", run_id="r") for n, t in enumerate("abc")]

        assert [Event(ADA, TextDelta("abc"), id="c0", run_id="r")] == coalesce_chunks(chunks)

    def test_chunks_of_another_author_or_metadata_start_a_new_row(self) -> None:
        chunks = [
            Event(ADA, TextDelta("a"), id="1"),
            Event(ADA, TextDelta("b"), id="2"),
            Event(BOB, TextDelta("c"), id="3"),
            Event(BOB, TextDelta("d"), id="4", metadata={"k": 1}),
            Event(BOB, TextDelta("e"), id="5", metadata={"k": 1}),
        ]

        assert [("1", "ab"), ("3", "c"), ("4", "de")] == [
            (e.id, e.body.delta)  # type: ignore[union-attr]
            for e in coalesce_chunks(chunks)
        ]

    def test_no_chunks_give_no_rows(self) -> None:
        assert [] == coalesce_chunks([])


class TestReadsWhatTheAnswerNeeds:
    def test_get_session_reads_no_event(self) -> None:
        with CountingReads() as store:
            SessionManager.start_session(store, session_id="s1", metadata={"k": 1})
            store.append("s1", [Event(BOB, Text(f"m{i}")) for i in range(50)])
            store.reads.clear()

            session = SessionManager.get_session(store, "s1")

            assert ({"k": 1, "provider_sessions": {}}, []) == (session.metadata, store.reads)

    def test_a_replay_with_max_messages_reads_one_page_from_the_tail(self) -> None:
        with CountingReads() as store:
            store.append("s1", [Event(BOB, Text(f"m{i}")) for i in range(2000)])
            store.reads.clear()

            SessionManager.run_once(
                store,
                ScriptedAdapter(["ok"]),
                "go",
                session_id="s1",
                continuation="replay",
                continuation_opts={"max_messages": 20},
            )

            assert [256] == [limit for limit in store.reads]

    def test_execute_run_reads_the_runs_own_events_not_the_session(self) -> None:
        with CountingReads() as store:
            store.append("s1", [Event(BOB, Text(f"m{i}")) for i in range(100)])
            run = SessionManager.start_run(store, "s1", "go")
            store.reads.clear()

            SessionManager.execute_run(store, ScriptedAdapter(["ok"]), run.id)

            assert [] == store.reads


class CountingReads(MemoryStore):
    """A MemoryStore that records the ``limit`` of every ``read``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int | None] = []

    def read(self, session_id: str, **bounds: Any) -> list[Event]:
        self.reads.append(bounds.get("limit"))
        return super().read(session_id, **bounds)
