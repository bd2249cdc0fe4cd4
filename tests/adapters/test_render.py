"""Renderers: transcripts as OpenAI and Anthropic chat messages, peers and tool pairs kept."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sharedesk.adapters.render import openai_name, to_anthropic_messages, to_openai_messages
from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol.authors import Agent, Operator, Person, System
from sharedesk.protocol.events import Event, Text, ToolCall, ToolResult
from sharedesk.protocol.transcripts import Transcript, TranscriptMessage

BOT = Agent(id="bot", label="bot")
ALICE = Person(id="p1", label="Alice Smith")
PEER = Agent(id="cc", label="Claude Code!")
PROMPT = System(kind="prompt", label="system")


def transcript(*messages: TranscriptMessage) -> Transcript:
    return Transcript(
        session_id="s1", messages=list(messages), last_sequence=None, last_timestamp=None
    )


def text(role: str, content: str, author: Any) -> TranscriptMessage:
    return TranscriptMessage(role=role, content=content, author=author)


def call(call_id: str, name: str = "search", author: Any = BOT) -> TranscriptMessage:
    return TranscriptMessage(
        role="assistant",
        tool_call_id=call_id,
        tool_name=name,
        tool_input={"q": call_id},
        author=author,
    )


def result(call_id: str, output: Any = "found") -> TranscriptMessage:
    return TranscriptMessage(role="tool", tool_call_id=call_id, tool_output=output, author=BOT)


class TestOpenAINames:
    def test_a_label_is_sanitised_to_the_allowed_characters(self) -> None:
        assert "Claude_Code_" == openai_name(PEER)

    def test_a_name_is_cut_to_64_characters(self) -> None:
        name = openai_name(Person(id="p", label="x" * 100))

        assert "x" * 64 == name

    def test_a_label_with_no_usable_character_falls_back_to_the_id(self) -> None:
        assert "p-7" == openai_name(Person(id="p-7", label="???"))

    def test_the_operator_and_system_sources_get_no_name(self) -> None:
        assert (None, None) == (openai_name(Operator()), openai_name(PROMPT))


class TestToOpenAIMessages:
    def test_peers_are_attributed_by_name_and_the_viewer_is_the_assistant(self) -> None:
        rendered = to_openai_messages(
            transcript(
                text("system", "be brief", PROMPT),
                text("user", "hi all", Operator()),
                text("user", "hello", ALICE),
                text("user", "I am here", PEER),
                text("assistant", "me too", BOT),
            )
        )

        assert [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi all"},
            {"role": "user", "content": "hello", "name": "Alice_Smith"},
            {"role": "user", "content": "I am here", "name": "Claude_Code_"},
            {"role": "assistant", "content": "me too"},
        ] == rendered

    def test_consecutive_tool_calls_become_one_assistant_message_followed_by_results(
        self,
    ) -> None:
        rendered = to_openai_messages(
            transcript(call("c1"), call("c2", "fetch"), result("c1", {"n": 1}), result("c2"))
        )

        assert [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "c1"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "fetch", "arguments": '{"q": "c2"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"n": 1}'},
            {"role": "tool", "tool_call_id": "c2", "content": "found"},
        ] == rendered

    def test_a_result_that_arrives_later_is_moved_right_after_its_call(self) -> None:
        rendered = to_openai_messages(
            transcript(call("c1"), text("user", "meanwhile", ALICE), result("c1"))
        )

        assert ["assistant", "tool", "user"] == [m["role"] for m in rendered]

    def test_a_call_without_its_result_and_a_result_without_its_call_are_left_out(
        self,
    ) -> None:
        rendered = to_openai_messages(
            transcript(text("user", "go", Operator()), call("pending"), result("orphan"))
        )

        assert [{"role": "user", "content": "go"}] == rendered


class TestToAnthropicMessages:
    def test_the_leading_system_prompt_is_separated(self) -> None:
        system, messages = to_anthropic_messages(
            transcript(
                text("system", "be brief", PROMPT),
                text("system", "use tools", PROMPT),
                text("user", "hi", Operator()),
            )
        )

        assert "be brief\n\nuse tools" == system
        assert [{"role": "user", "content": [{"type": "text", "text": "hi"}]}] == messages

    def test_no_system_message_gives_no_system_prompt(self) -> None:
        system, _ = to_anthropic_messages(transcript(text("user", "hi", Operator())))

        assert None is system

    def test_peers_are_attributed_in_the_text_and_same_role_turns_merge(self) -> None:
        _, messages = to_anthropic_messages(
            transcript(
                text("user", "hi all", Operator()),
                text("user", "hello", ALICE),
                text("user", "I am here", PEER),
                text("assistant", "me too", BOT),
                text("system", "build failed", System(kind="workflow", label="CI")),
            )
        )

        assert [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi all"},
                    {"type": "text", "text": "[Alice Smith] hello"},
                    {"type": "text", "text": "[Claude Code!] I am here"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "me too"}]},
            {"role": "user", "content": [{"type": "text", "text": "[CI] build failed"}]},
        ] == messages

    def test_tool_use_and_tool_result_blocks_are_paired_with_results_first(self) -> None:
        _, messages = to_anthropic_messages(
            transcript(
                text("user", "look it up", Operator()),
                text("assistant", "searching", BOT),
                call("c1"),
                result("c1", {"n": 1}),
                text("user", "thanks", ALICE),
                call("pending"),
            )
        )

        assert [
            {"role": "user", "content": [{"type": "text", "text": "look it up"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "searching"},
                    {"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "c1"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": '{"n": 1}'},
                    {"type": "text", "text": "[Alice Smith] thanks"},
                ],
            },
        ] == messages


class TestRenderingABuiltTranscript:
    def test_a_transcript_built_from_events_renders_with_peers_and_tool_pairs(self) -> None:
        events = [
            Event(PROMPT, Text("be brief"), sequence=1),
            Event(ALICE, Text("find x"), sequence=2),
            Event(PEER, ToolCall("c1", "search", {"q": "x"}), sequence=3),
            Event(PEER, ToolResult("c1", "x is 1"), sequence=4),
            Event(PEER, Text("x is 1"), sequence=5),
        ]
        built = TranscriptBuilder.from_events(events, session_id="s1", viewer=BOT)

        system, messages = to_anthropic_messages(built)

        assert "be brief" == system
        assert [
            {"role": "user", "content": [{"type": "text", "text": "[Alice Smith] find x"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "x"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "x is 1"},
                    {"type": "text", "text": "[Claude Code!] x is 1"},
                ],
            },
        ] == messages
        assert [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "find x", "name": "Alice_Smith"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "x is 1"},
            {"role": "user", "content": "x is 1", "name": "Claude_Code_"},
        ] == to_openai_messages(built)


AUTHORS = [Operator(), ALICE, PEER, BOT, PROMPT]


@st.composite
def transcripts(draw: st.DrawFn) -> Transcript:
    """Random transcripts: texts of any role and author, calls and results in any order."""
    ids = draw(st.permutations([f"c{i}" for i in range(4)]))
    calls = draw(st.sets(st.sampled_from(ids)))
    results = draw(st.sets(st.sampled_from(ids)))
    items: list[TranscriptMessage] = [call(c) for c in calls] + [result(r) for r in results]
    texts = draw(
        st.lists(
            st.tuples(st.sampled_from(["user", "assistant", "system"]), st.sampled_from(AUTHORS)),
            max_size=6,
        )
    )
    items += [text(role, f"t{i}", author) for i, (role, author) in enumerate(texts)]
    return transcript(*draw(st.permutations(items)))


def paired_ids(messages: list[TranscriptMessage]) -> set[str]:
    calls = {m.tool_call_id for m in messages if m.role == "assistant" and m.tool_call_id}
    results = {m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id}
    return {i for i in calls & results if i is not None}


class TestRenderedMessagesObeyTheAPIs:
    @given(transcripts())
    def test_openai_tool_messages_follow_the_assistant_message_holding_their_call(
        self, built: Transcript
    ) -> None:
        rendered = to_openai_messages(built)

        open_calls: set[str] = set()
        answered: list[str] = []
        for message in rendered:
            if message["role"] == "tool":
                assert message["tool_call_id"] in open_calls
                open_calls.discard(message["tool_call_id"])
                answered.append(message["tool_call_id"])
            else:
                assert set() == open_calls
                open_calls = {c["id"] for c in message.get("tool_calls") or []}
        assert set() == open_calls
        assert sorted(paired_ids(built.messages)) == sorted(answered)

    @given(transcripts())
    def test_openai_keeps_every_text_in_order(self, built: Transcript) -> None:
        rendered = to_openai_messages(built)

        expected = [m.content for m in built.messages if m.role != "tool" and not m.tool_call_id]
        assert expected == [
            m["content"] for m in rendered if m["content"] is not None and m["role"] != "tool"
        ]

    @given(transcripts())
    def test_anthropic_roles_alternate_and_each_tool_use_is_answered_next(
        self, built: Transcript
    ) -> None:
        _, messages = to_anthropic_messages(built)

        roles = [m["role"] for m in messages]
        assert all(a != b for a, b in itertools.pairwise(roles))
        for index, message in enumerate(messages):
            uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
            if uses:
                following = messages[index + 1]["content"]
                answered = [b["tool_use_id"] for b in following if b["type"] == "tool_result"]
                assert set(uses) <= set(answered)
            kinds = [b["type"] for b in message["content"]]
            results_first = sorted(kinds, key=lambda kind: kind != "tool_result")
            assert results_first == kinds

    @given(transcripts())
    def test_anthropic_sends_exactly_the_paired_calls(self, built: Transcript) -> None:
        _, messages = to_anthropic_messages(built)

        blocks = [b for m in messages for b in m["content"]]
        uses = sorted(b["id"] for b in blocks if b["type"] == "tool_use")
        results = sorted(b["tool_use_id"] for b in blocks if b["type"] == "tool_result")
        assert sorted(paired_ids(built.messages)) == uses == results


class TestBlankContent:
    def test_anthropic_never_sends_an_empty_text_block(self) -> None:
        system, messages = to_anthropic_messages(
            transcript(
                text("system", " ", PROMPT),
                text("user", "hi", ALICE),
                text("user", "", PEER),
                text("assistant", "\n", BOT),
            )
        )

        assert (
            None,
            [{"role": "user", "content": [{"type": "text", "text": "[Alice Smith] hi"}]}],
        ) == (
            system,
            messages,
        )

    def test_openai_leaves_out_messages_with_blank_content(self) -> None:
        rendered = to_openai_messages(
            transcript(text("user", "hi", ALICE), text("assistant", "  ", BOT))
        )

        assert [{"role": "user", "content": "hi", "name": "Alice_Smith"}] == rendered

    def test_a_blank_stored_text_reaches_no_renderer(self) -> None:
        built = TranscriptBuilder.from_events(
            [Event(ALICE, Text("hi"), sequence=1), Event(PEER, Text(""), sequence=2)],
            session_id="s1",
            viewer=BOT,
        )

        assert ["hi"] == [m.content for m in built.messages]
