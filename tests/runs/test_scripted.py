"""ScriptedAdapter: scripted replies, recorded calls, provider sessions when native."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sharedesk.protocol.authors import Agent
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import RunStarted, Text
from sharedesk.protocol.ports import EventStore
from sharedesk.runs import ScriptedAdapter, ScriptedCall, SessionManager


class TestReplies:
    def test_each_run_gets_the_next_reply(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one", "two"])

        outputs = [SessionManager.run_once(store, adapter, "x").output for _ in range(2)]

        assert ["one", "two"] == outputs

    def test_a_reply_is_a_text_by_the_adapters_agent(self, store: EventStore) -> None:
        result = SessionManager.run_once(store, ScriptedAdapter(["hi"], name="bob"), "x")

        replies = [(e.author, e.body) for e in result.events if isinstance(e.body, Text)]
        assert [(Agent(id="bob", label="bob"), Text("hi"))] == replies

    @pytest.mark.parametrize("replies", ["abc", [1, 2], ["ok", None]])
    def test_replies_must_be_a_sequence_of_strings(self, replies: Any) -> None:
        with pytest.raises(ValidationError):
            ScriptedAdapter(replies)

    def test_the_name_must_not_be_empty(self) -> None:
        with pytest.raises(ValidationError):
            ScriptedAdapter(["x"], name="")


class TestCalls:
    def test_a_call_records_input_transcript_and_opts(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["hi"])

        SessionManager.run_once(store, adapter, "hello", adapter_opts={"k": "v"})

        expected = ScriptedCall(
            input=[{"role": "user", "content": "hello"}], transcript=None, opts={"k": "v"}
        )
        assert [expected] == adapter.calls

    def test_a_replayed_transcript_is_recorded(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one", "two"])
        SessionManager.run_once(store, adapter, "first", session_id="s1")

        SessionManager.run_once(store, adapter, "second", session_id="s1", continuation="replay")

        transcript = adapter.calls[1].transcript
        assert transcript is not None
        assert ["first", "one"] == [m.content for m in transcript.messages]

    def test_calls_from_many_threads_each_get_one_reply_and_one_record(
        self, store: EventStore
    ) -> None:
        count = 16
        adapter = ScriptedAdapter([f"r{i}" for i in range(count)])
        outputs: list[Any] = []
        lock = threading.Lock()

        def run(index: int) -> None:
            result = SessionManager.run_once(store, adapter, f"m{index}", session_id=f"s{index}")
            with lock:
                outputs.append(result.output)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)

        assert sorted(f"r{i}" for i in range(count)) == sorted(outputs)
        assert count == len(adapter.calls)

    def test_calls_is_a_copy(self) -> None:
        adapter = ScriptedAdapter(["x"])

        adapter.calls.append(ScriptedCall(input=[], transcript=None, opts={}))

        assert [] == adapter.calls


class TestNativeSessions:
    def test_a_native_adapter_opens_a_provider_session_on_a_fresh_run(
        self, store: EventStore
    ) -> None:
        adapter = ScriptedAdapter(["hi"], name="claude", native_continuation=True)

        result = SessionManager.run_once(store, adapter, "x")

        announced = [e.body for e in result.events[1:] if isinstance(e.body, RunStarted)]
        assert 1 == len(announced)
        assert announced[0].provider_session_id is not None
        assert announced[0].provider_session_id.startswith("claude-")

    def test_a_native_continuation_opens_no_new_provider_session(self, store: EventStore) -> None:
        adapter = ScriptedAdapter(["one", "two"], name="claude", native_continuation=True)
        SessionManager.run_once(store, adapter, "x", session_id="s1")

        result = SessionManager.run_once(
            store, adapter, "y", session_id="s1", continuation="native"
        )

        assert [RunStarted] == [
            type(e.body) for e in result.events if isinstance(e.body, RunStarted)
        ]

    def test_a_replayed_run_of_a_native_adapter_opens_a_new_provider_session(
        self, store: EventStore
    ) -> None:
        adapter = ScriptedAdapter(["one", "two"], name="claude", native_continuation=True)
        first = SessionManager.run_once(store, adapter, "x", session_id="s1")
        SessionManager.run_once(store, adapter, "y", session_id="s1", continuation="replay")

        sessions = SessionManager.get_session(store, "s1").metadata["provider_sessions"]
        opened = first.events[1].body
        assert isinstance(opened, RunStarted)
        assert opened.provider_session_id != sessions["claude"]["provider_session_id"]
