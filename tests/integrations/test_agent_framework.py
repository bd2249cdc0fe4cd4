"""DeskHistoryProvider: the Agent Framework's HistoryProvider on a shared desk."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agent_framework import (
    Agent as AfAgent,
)
from agent_framework import (
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    HistoryProvider,
    Message,
    tool,
)

from sharedesk.actors.aio import AsyncHub
from sharedesk.actors.hub import Hub
from sharedesk.integrations.agent_framework import (
    MESSAGE_KEY,
    PROVIDER_KEY,
    DeskHistoryProvider,
)
from sharedesk.protocol.authors import Agent, Person, System
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, Item, Retracted, Text

T = TypeVar("T")

TRIAGE = Agent(id="triage", label="Triage")
BILLING = Agent(id="billing", label="Billing")
USER = Person(id="user", label="user")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


class ScriptedClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """A chat client that answers from a script and records every request it gets.

    The framework's own tests fake a model the same way: a ``BaseChatClient`` whose
    ``_inner_get_response`` returns canned ``ChatResponse`` s.
    """

    def __init__(self, *replies: Message) -> None:
        super().__init__()
        self.replies = list(replies)
        self.requests: list[list[Message]] = []

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Awaitable[ChatResponse]:
        async def answer() -> ChatResponse:
            self.requests.append(list(messages))
            return ChatResponse(messages=[self.replies.pop(0)])

        return answer()


def said(text: str) -> Message:
    return Message("assistant", [text])


def request_texts(request: Sequence[Message]) -> list[tuple[str, str | None, str]]:
    """``(role, author_name, text)`` of each message with text of a model request."""
    return [(m.role, m.author_name, m.text) for m in request if m.text]


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def desk_hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AsyncHub]:
    """An AsyncHub in memory, on LMDB or on a throwaway PostgreSQL, closed after the test."""
    where: str | Path | None = None
    if request.param == "lmdb":
        where = tmp_path / "desk"
    elif request.param == "postgres":
        where = request.getfixturevalue("postgres_dsn")
    opened = AsyncHub(Hub.open(where))
    try:
        yield opened
    finally:
        asyncio.run(opened.close())


async def two_agents_on_one_desk(hub: AsyncHub) -> tuple[ScriptedClient, ScriptedClient]:
    """The user asks triage, then billing answers on the same desk."""
    triage_client = ScriptedClient(said("Passing you to billing."))
    billing_client = ScriptedClient(said("Refund issued."))
    triage = AfAgent(
        client=triage_client, name="triage", context_providers=[DeskHistoryProvider(hub, TRIAGE)]
    )
    billing = AfAgent(
        client=billing_client,
        name="billing",
        context_providers=[DeskHistoryProvider(hub, BILLING)],
    )
    await triage.run("I was charged twice", session=triage.create_session(session_id="desk"))
    await billing.run("Please refund", session=billing.create_session(session_id="desk"))
    return triage_client, billing_client


class TestProtocol:
    def test_a_desk_history_provider_is_a_history_provider_with_its_flags(
        self, hub: AsyncHub
    ) -> None:
        provider = DeskHistoryProvider(hub, TRIAGE, store_inputs=False, load_messages=False)

        assert isinstance(provider, HistoryProvider)
        assert ("sharedesk", False, False, True) == (
            provider.source_id,
            provider.store_inputs,
            provider.load_messages,
            provider.store_outputs,
        )

    @pytest.mark.parametrize(
        "arguments",
        [
            {"agent": "triage"},
            {"load_messages": "no"},
            {"store_outputs": 1},
            {"source_id": ""},
            {"store_context_from": "web"},
            {"user": object()},
            {"authors": {"x": "y"}},
        ],
    )
    def test_a_bad_argument_is_a_validation_error(
        self, hub: AsyncHub, arguments: dict[str, Any]
    ) -> None:
        given: dict[str, Any] = {"agent": TRIAGE, **arguments}

        with pytest.raises(ValidationError):
            DeskHistoryProvider(hub, **given)

    def test_importing_sharedesk_does_not_import_the_framework(self) -> None:
        code = (
            "import sys, sharedesk, sharedesk.integrations; print('agent_framework' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

        assert "False" == out.stdout.strip()

    def test_without_the_framework_the_integration_names_the_extra_to_install(self) -> None:
        code = (
            "import sys; sys.modules['agent_framework'] = None\n"
            "try:\n    import sharedesk.integrations.agent_framework\n"
            "except ImportError as e:\n    print(e)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

        assert "pip install 'sharedesk[agent-framework]'" in out.stdout


class TestTwoAgents:
    def test_every_saved_message_is_attributed_to_who_said_it(self, desk_hub: AsyncHub) -> None:
        async def scenario() -> list[Event]:
            await two_agents_on_one_desk(desk_hub)
            return await desk_hub.read("desk")

        events = run(scenario())

        assert [
            (USER, "I was charged twice"),
            (TRIAGE, "Passing you to billing."),
            (USER, "Please refund"),
            (BILLING, "Refund issued."),
        ] == [(e.author, e.body.content) for e in events if isinstance(e.body, Text)]
        assert ["agent:triage", "agent:triage", "agent:billing", "agent:billing"] == [
            e.metadata[PROVIDER_KEY] for e in events
        ]

    def test_the_next_agents_model_sees_the_others_messages_as_named_user_messages(
        self, desk_hub: AsyncHub
    ) -> None:
        _, billing_client = run(two_agents_on_one_desk(desk_hub))

        assert [
            ("user", "user", "I was charged twice"),
            ("user", "Triage", "Passing you to billing."),
            ("user", None, "Please refund"),
        ] == request_texts(billing_client.requests[0])

    def test_reads_are_relative_to_each_providers_agent(self, desk_hub: AsyncHub) -> None:
        async def scenario() -> tuple[list[Message], list[Message]]:
            await two_agents_on_one_desk(desk_hub)
            return (
                await DeskHistoryProvider(desk_hub, TRIAGE).get_messages("desk"),
                await DeskHistoryProvider(desk_hub, BILLING).get_messages("desk"),
            )

        triage, billing = run(scenario())

        assert [
            ("user", None, "I was charged twice"),
            ("assistant", "triage", "Passing you to billing."),
            ("user", "user", "Please refund"),
            ("user", "Billing", "Refund issued."),
        ] == request_texts(triage)
        assert [
            ("user", "user", "I was charged twice"),
            ("user", "Triage", "Passing you to billing."),
            ("user", None, "Please refund"),
            ("assistant", "billing", "Refund issued."),
        ] == request_texts(billing)

    def test_an_agent_sees_its_own_earlier_turns_as_saved(self, hub: AsyncHub) -> None:
        client = ScriptedClient(said("Hello."), said("Still here."))
        agent = AfAgent(
            client=client, name="triage", context_providers=[DeskHistoryProvider(hub, TRIAGE)]
        )

        async def scenario() -> None:
            await agent.run("hi", session=agent.create_session(session_id="desk"))
            await agent.run("again", session=agent.create_session(session_id="desk"))

        run(scenario())

        assert [
            ("user", None, "hi"),
            ("assistant", "triage", "Hello."),
            ("user", None, "again"),
        ] == request_texts(client.requests[1])


class TestPeers:
    def test_posts_and_turn_replies_come_back_relative_to_the_viewer(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Message]:
            await hub.post("desk", Person(id="alice", label="Alice"), "hello")
            await hub.post("desk", TRIAGE, "hi Alice")
            await hub.post("desk", System(kind="note", label="note"), "run failed")
            return await DeskHistoryProvider(hub, TRIAGE).get_messages("desk")

        got = run(scenario())

        assert [("user", "Alice", "hello"), ("assistant", "Triage", "hi Alice")] == (
            request_texts(got)
        )

    def test_a_peers_message_is_shown_to_people_by_its_author(self, hub: AsyncHub) -> None:
        run(two_agents_on_one_desk(hub))

        view = hub.hub.view("desk", Person(id="pat", label="Pat"))

        assert [
            ("user", "I was charged twice"),
            ("Triage", "Passing you to billing."),
            ("user", "Please refund"),
            ("Billing", "Refund issued."),
        ] == [(m.author.label, m.content) for m in view.messages]  # type: ignore[union-attr]

    def test_an_agents_sdk_session_of_the_same_agent_shares_its_memory(self, hub: AsyncHub) -> None:
        """A ``DeskSession`` (OpenAI Agents SDK) of the agent: its rows, its retractions."""
        from sharedesk.integrations.openai_agents import DeskSession

        async def scenario() -> tuple[list[Message], list[Message]]:
            session = DeskSession(hub, "desk", TRIAGE)
            await session.add_items(
                [
                    {"role": "user", "content": "charged twice"},
                    {"role": "assistant", "content": "ok"},
                ]
            )
            before = await DeskHistoryProvider(hub, TRIAGE).get_messages("desk")
            await session.clear_session()
            return before, await DeskHistoryProvider(hub, TRIAGE).get_messages("desk")

        before, after = run(scenario())

        assert [("user", "operator", "charged twice"), ("assistant", "Triage", "ok")] == (
            request_texts(before)
        )
        assert [] == after


class TestSaving:
    def test_text_messages_are_text_rows_and_others_item_rows_read_back_as_saved(
        self, hub: AsyncHub
    ) -> None:
        call = Message("assistant", [Content.from_function_call("c1", "lookup", arguments={})])
        result = Message("tool", [Content.from_function_result("c1", result="ok")])
        provider = DeskHistoryProvider(hub, TRIAGE)

        async def scenario() -> tuple[list[Event], list[Message], list[Message]]:
            await provider.save_messages("desk", [Message("user", ["hi"]), call, result])
            return (
                await hub.read("desk"),
                await provider.get_messages("desk"),
                await DeskHistoryProvider(hub, BILLING).get_messages("desk"),
            )

        events, own, other = run(scenario())

        assert Text("hi") == events[0].body
        assert Message("user", ["hi"]).to_dict() == events[0].metadata[MESSAGE_KEY]
        assert [Item(call.to_dict()), Item(result.to_dict())] == [e.body for e in events[1:]]
        assert [m.to_dict() for m in (Message("user", ["hi"]), call, result)] == [
            m.to_dict() for m in own
        ]
        assert [("user", "user", "hi")] == request_texts(other)

    def test_a_tool_call_round_of_a_real_agent_is_stored_and_reloaded(self, hub: AsyncHub) -> None:
        @tool(approval_mode="never_require")
        def lookup(order: str) -> str:
            """Look an order up."""
            return f"order {order}: charged twice"

        client = ScriptedClient(
            Message(
                "assistant", [Content.from_function_call("c1", "lookup", arguments={"order": "7"})]
            ),
            said("You were charged twice."),
            said("Anything else?"),
        )
        agent = AfAgent(
            client=client,
            name="triage",
            tools=[lookup],
            context_providers=[DeskHistoryProvider(hub, TRIAGE)],
        )

        async def scenario() -> list[Event]:
            await agent.run("order 7?", session=agent.create_session(session_id="desk"))
            await agent.run("thanks", session=agent.create_session(session_id="desk"))
            return await hub.read("desk")

        events = run(scenario())

        assert [Text, Item, Item, Text, Text, Text] == [type(e.body) for e in events]
        assert [
            ("user", "text"),
            ("assistant", "function_call"),
            ("tool", "function_result"),
            ("assistant", "text"),
            ("user", "text"),
        ] == [(m.role, m.contents[0].type) for m in client.requests[2]]

    def test_the_running_agents_replies_are_the_providers_agents_whatever_its_name(
        self, hub: AsyncHub
    ) -> None:
        agent = AfAgent(
            client=ScriptedClient(said("Hello.")),
            name="Triage Bot",
            context_providers=[DeskHistoryProvider(hub, TRIAGE)],
        )

        async def scenario() -> list[Event]:
            await agent.run("hi", session=agent.create_session(session_id="desk"))
            return await hub.read("desk")

        assert [USER, TRIAGE] == [e.author for e in run(scenario())]

    def test_author_name_of_a_known_participant_is_that_participant(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Event]:
            await hub.post("desk", Person(id="alice", label="Alice"), "hello")
            await DeskHistoryProvider(hub, TRIAGE, authors={"bill": BILLING}).save_messages(
                "desk",
                [
                    Message("user", ["me again"], author_name="Alice"),
                    Message("assistant", ["done"], author_name="bill"),
                    Message("assistant", ["mine"], author_name="Triage"),
                    Message("user", ["new here"], author_name="bob"),
                    Message("assistant", ["hi"], author_name="qa"),
                    Message("system", ["be brief"]),
                ],
            )
            return await hub.read("desk", after=1)

        authors = [e.author for e in run(scenario())]

        assert [
            Person(id="alice", label="Alice"),
            BILLING,
            TRIAGE,
            Person(id="bob", label="bob"),
            Agent(id="qa", label="qa"),
            System(kind="prompt", label="system"),
        ] == authors

    def test_user_input_is_the_given_user(self, hub: AsyncHub) -> None:
        pat = Person(id="pat", label="Pat")

        async def scenario() -> list[Event]:
            await DeskHistoryProvider(hub, TRIAGE, user=pat).save_messages(
                "desk", [Message("user", ["hi"])]
            )
            return await hub.read("desk")

        assert [pat] == [e.author for e in run(scenario())]

    def test_a_message_saved_again_under_its_id_is_stored_once(self, hub: AsyncHub) -> None:
        provider = DeskHistoryProvider(hub, TRIAGE)
        message = Message("assistant", ["once"], message_id="resp_1")

        async def scenario() -> list[Event]:
            await provider.save_messages("desk", [message])
            await provider.save_messages("desk", [message])
            return await hub.read("desk")

        assert ["resp_1"] == [e.id for e in run(scenario())]

    def test_messages_sharing_an_id_in_one_batch_are_each_stored(self, hub: AsyncHub) -> None:
        provider = DeskHistoryProvider(hub, TRIAGE)
        batch = [Message("assistant", [t], message_id="resp_1") for t in ("a", "b")]

        async def scenario() -> list[Event]:
            await provider.save_messages("desk", batch)
            return await hub.read("desk")

        assert [Text("a"), Text("b")] == [e.body for e in run(scenario())]

    @pytest.mark.parametrize(
        "messages",
        [
            [Message("user", ["ok"]), "not a message"],
            "hello",
            [Message("user", ["ok"]), Message(7, ["x"])],  # type: ignore[arg-type]
            [Message("user", ["ok"]), Message("user", ["x"], author_name=7)],  # type: ignore[arg-type]
            [Message("user", ["ok"]), Message("user", ["\ud800"])],
        ],
    )
    def test_bad_messages_are_refused_and_nothing_is_written(
        self, hub: AsyncHub, messages: Any
    ) -> None:
        async def scenario() -> int:
            with pytest.raises(ValidationError):
                await DeskHistoryProvider(hub, TRIAGE).save_messages("desk", messages)
            return await hub.last_sequence("desk")

        assert 0 == run(scenario())

    @pytest.mark.parametrize("session_id", [None, "", 7])
    def test_a_bad_session_id_is_refused(self, hub: AsyncHub, session_id: Any) -> None:
        provider = DeskHistoryProvider(hub, TRIAGE)

        async def scenario() -> None:
            with pytest.raises(ValidationError):
                await provider.get_messages(session_id)
            with pytest.raises(ValidationError):
                await provider.save_messages(session_id, [Message("user", ["hi"])])

        run(scenario())


class TestFlags:
    def test_store_inputs_false_stores_only_the_replies(self, hub: AsyncHub) -> None:
        agent = AfAgent(
            client=ScriptedClient(said("Hello.")),
            name="triage",
            context_providers=[DeskHistoryProvider(hub, TRIAGE, store_inputs=False)],
        )

        async def scenario() -> list[Event]:
            await agent.run("hi", session=agent.create_session(session_id="desk"))
            return await hub.read("desk")

        assert [Text("Hello.")] == [e.body for e in run(scenario())]

    def test_load_messages_false_gives_the_model_no_history(self, hub: AsyncHub) -> None:
        client = ScriptedClient(said("Hello."))
        agent = AfAgent(
            client=client,
            name="triage",
            context_providers=[DeskHistoryProvider(hub, TRIAGE, load_messages=False)],
        )

        async def scenario() -> None:
            await hub.post("desk", Person(id="alice", label="Alice"), "earlier")
            await agent.run("hi", session=agent.create_session(session_id="desk"))

        run(scenario())

        assert [("user", None, "hi")] == request_texts(client.requests[0])


class TestRetractions:
    def test_the_agents_own_retraction_hides_rows_from_it_only(self, hub: AsyncHub) -> None:
        async def scenario() -> tuple[list[Message], list[Message]]:
            await hub.post("desk", Person(id="alice", label="Alice"), "old")
            await hub.append(
                "desk",
                [Event(TRIAGE, Retracted(through=1), metadata={PROVIDER_KEY: "agent:triage"})],
            )
            await hub.post("desk", Person(id="alice", label="Alice"), "new")
            return (
                await DeskHistoryProvider(hub, TRIAGE).get_messages("desk"),
                await DeskHistoryProvider(hub, BILLING).get_messages("desk"),
            )

        triage, billing = run(scenario())

        assert ["new"] == [m.text for m in triage]
        assert ["old", "new"] == [m.text for m in billing]


class ReadLog:
    """A spy over ``hub`` (what the provider calls of it) noting the ``after`` of every read."""

    def __init__(self, hub: AsyncHub) -> None:
        self.inner = hub
        self.hub = hub.hub  # the sync Hub (its state reads)
        self.afters: list[int | None] = []

    async def append(
        self, session_id: str, events: Sequence[Event], *, expected_version: int | None = None
    ) -> list[Event]:
        return await self.inner.append(session_id, events, expected_version=expected_version)

    async def read(self, session_id: str, **bounds: Any) -> list[Event]:
        self.afters.append(bounds.get("after"))
        return await self.inner.read(session_id, **bounds)


SUMMARIZER = Agent(id="summarizer", label="Summarizer")


class TestReads:
    def test_a_later_get_messages_reads_only_the_rows_appended_since(self, hub: AsyncHub) -> None:
        reads = ReadLog(hub)
        provider = DeskHistoryProvider(reads, TRIAGE)  # type: ignore[arg-type]  # a spy

        async def scenario() -> list[Message]:
            await hub.post("desk", USER, "one")
            await provider.get_messages("desk")
            await hub.post("desk", USER, "two")
            return await provider.get_messages("desk")

        got = run(scenario())

        assert [0, 1] == reads.afters
        assert [("user", "user", "one"), ("user", "user", "two")] == request_texts(got)

    def test_a_compacted_desk_comes_back_as_its_attributed_summary_then_newer_rows(
        self, hub: AsyncHub
    ) -> None:
        async def scenario() -> tuple[list[Message], list[Message]]:
            provider = DeskHistoryProvider(hub, TRIAGE)
            await hub.post("desk", USER, "I was charged twice")
            await hub.post("desk", BILLING, "Refund issued.")
            await provider.get_messages("desk")  # folded before the compaction too
            await hub.compact("desk", "A refund was issued.", through=2, author=SUMMARIZER)
            await hub.post("desk", USER, "Thanks")
            return (
                await provider.get_messages("desk"),
                await DeskHistoryProvider(hub, TRIAGE).get_messages("desk"),
            )

        folded, fresh = run(scenario())

        assert [("user", "Summarizer", "A refund was issued."), ("user", "user", "Thanks")] == (
            request_texts(folded)
        )
        assert request_texts(folded) == request_texts(fresh)
