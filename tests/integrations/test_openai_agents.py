"""DeskSession and DeskRunHooks: the Agents SDK's Session protocol on a shared desk."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from agents import Agent as SdkAgent
from agents import RunConfig, Runner
from agents.memory import Session, SessionSettings
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations.openai_agents import (
    ITEM_KEY,
    SESSION_KEY,
    DeskRunHooks,
    DeskSession,
    message_text,
)
from sharedesk.projection.transcript import TranscriptBuilder
from sharedesk.protocol.authors import Agent, Operator, Person
from sharedesk.protocol.constants import PAGE_SIZE
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, Item, Retracted, Text
from sharedesk.protocol.views import Conversation

T = TypeVar("T")

TRIAGE = Agent(id="triage", label="Triage")
BILLING = Agent(id="billing", label="Billing")
QA = Agent(id="qa", label="QA")
USER_MSG: Any = {"role": "user", "content": "I was charged twice"}
CALL: Any = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "lookup",
    "arguments": "{}",
    "id": "fc_1",
}
OUTPUT: Any = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}


def reply(text: str, item_id: str = "msg_1") -> Any:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


class TestProtocol:
    def test_a_desk_session_is_an_sdk_session(self, hub: AsyncHub) -> None:
        assert isinstance(DeskSession(hub, "desk", TRIAGE), Session)

    def test_its_session_id_is_the_desk_and_settings_default_to_the_sdks(
        self, hub: AsyncHub
    ) -> None:
        session = DeskSession(hub, "desk", TRIAGE)

        assert ("desk", SessionSettings()) == (session.session_id, session.session_settings)

    def test_a_conversation_of_another_desk_is_refused(self, hub: AsyncHub) -> None:
        with pytest.raises(ValidationError):
            DeskSession(hub, "desk", TRIAGE, conversation=Conversation("other"))

    def test_importing_sharedesk_does_not_import_the_sdk(self) -> None:
        code = "import sys, sharedesk; print('agents' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

        assert "False" == out.stdout.strip()

    def test_without_the_sdk_the_integration_names_the_extra_to_install(self) -> None:
        code = (
            "import sys; sys.modules['agents'] = None\n"
            "try:\n    import sharedesk.integrations.openai_agents\n"
            "except ImportError as exc:\n    print(exc)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

        assert "pip install 'sharedesk[agents]'" in out.stdout


class TestOwnItems:
    def test_items_come_back_exactly_in_the_order_added(self, hub: AsyncHub) -> None:
        session = DeskSession(hub, "desk", TRIAGE)
        items = [USER_MSG, CALL, OUTPUT, reply("Refunded.")]

        async def scenario() -> list[Any]:
            await session.add_items(items[:2])
            await session.add_items(items[2:])
            return await session.get_items()

        assert items == run(scenario())

    def test_limit_returns_the_newest_items_oldest_first(self, hub: AsyncHub) -> None:
        session = DeskSession(hub, "desk", TRIAGE)
        items: list[Any] = [{"role": "user", "content": str(n)} for n in range(5)]

        async def scenario() -> list[Any]:
            await session.add_items(items)
            return await session.get_items(limit=2)

        assert items[3:] == run(scenario())

    def test_session_settings_limit_is_the_default_limit(self, hub: AsyncHub) -> None:
        session = DeskSession(hub, "desk", TRIAGE, session_settings=SessionSettings(limit=1))

        async def scenario() -> list[Any]:
            await session.add_items([USER_MSG, reply("hi")])
            return await session.get_items()

        assert [reply("hi")] == run(scenario())

    def test_a_new_session_of_the_same_agent_reads_the_same_items(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Any]:
            await DeskSession(hub, "desk", TRIAGE).add_items([USER_MSG, CALL])
            return await DeskSession(hub, "desk", TRIAGE).get_items()

        assert [USER_MSG, CALL] == run(scenario())

    def test_a_desk_longer_than_a_page_is_read_whole(self, hub: AsyncHub) -> None:
        items: list[Any] = [{"role": "user", "content": str(n)} for n in range(PAGE_SIZE + 3)]

        async def scenario() -> list[Any]:
            await DeskSession(hub, "desk", TRIAGE).add_items(items)
            return await DeskSession(hub, "desk", TRIAGE).get_items()

        assert items == run(scenario())

    def test_a_later_get_items_reads_only_the_rows_appended_since(self, hub: AsyncHub) -> None:
        reads: list[int | None] = []
        sync_hub = hub.hub

        class Counting:
            hub = sync_hub  # its state reads

            async def append(self, session_id: str, events: Any, **kw: Any) -> list[Event]:
                return await hub.append(session_id, events, **kw)

            async def read(self, session_id: str, **bounds: Any) -> list[Event]:
                reads.append(bounds.get("after"))
                return await hub.read(session_id, **bounds)

        session = DeskSession(Counting(), "desk", TRIAGE)  # type: ignore[arg-type]  # a spy

        async def scenario() -> None:
            await session.add_items([USER_MSG, CALL])
            await session.get_items()
            await session.add_items([OUTPUT])
            await session.get_items()

        run(scenario())

        assert [0, 2] == reads

    def test_changing_a_returned_item_changes_nothing_stored(self, hub: AsyncHub) -> None:
        session = DeskSession(hub, "desk", TRIAGE)

        async def scenario() -> list[Any]:
            await session.add_items([reply("Refunded.")])
            (got,) = await session.get_items()
            changed: Any = got
            changed["content"][0]["text"] = "changed"
            return await session.get_items()

        assert [reply("Refunded.")] == run(scenario())

    def test_a_non_mapping_item_is_refused_and_nothing_is_stored(self, hub: AsyncHub) -> None:
        session = DeskSession(hub, "desk", TRIAGE)

        async def scenario() -> int:
            with pytest.raises(ValidationError):
                await session.add_items([USER_MSG, "not an item"])  # type: ignore[list-item]
            return len(await hub.read("desk"))

        assert 0 == run(scenario())


class TestStorage:
    def test_text_messages_are_text_rows_keeping_the_item_and_others_are_item_rows(
        self, hub: AsyncHub
    ) -> None:
        async def scenario() -> list[Event]:
            await DeskSession(hub, "desk", TRIAGE).add_items([USER_MSG, CALL, reply("Done.")])
            return await hub.read("desk")

        rows = run(scenario())

        assert [Text("I was charged twice"), Item(CALL), Text("Done.")] == [e.body for e in rows]
        assert [USER_MSG, None, reply("Done.")] == [e.metadata.get(ITEM_KEY) for e in rows]
        assert {"agent:triage"} == {e.metadata[SESSION_KEY] for e in rows}

    def test_user_messages_are_the_users_and_the_rest_the_agents(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Event]:
            await DeskSession(hub, "desk", TRIAGE).add_items([USER_MSG, reply("Done.")])
            return await hub.read("desk")

        assert [Operator(), TRIAGE] == [e.author for e in run(scenario())]

    def test_the_user_author_can_be_a_person(self, hub: AsyncHub) -> None:
        alice = Person(id="alice", label="Alice")

        async def scenario() -> list[Event]:
            await DeskSession(hub, "desk", TRIAGE, user=alice).add_items([USER_MSG])
            return await hub.read("desk")

        assert [alice] == [e.author for e in run(scenario())]

    def test_messages_reach_other_participants_turns_and_transcripts_by_their_author(
        self, hub: AsyncHub
    ) -> None:
        async def scenario() -> tuple[Any, Any]:
            await DeskSession(hub, "desk", BILLING).add_items([USER_MSG, CALL, reply("Done.")])
            turn = await hub.turn("desk", QA)
            return turn.messages, await hub.transcript("desk", QA)

        messages, transcript = run(scenario())

        assert [(Operator(), "I was charged twice"), (BILLING, "Done.")] == [
            (m.author, m.content) for m in messages
        ]
        assert [("user", BILLING)] == [
            (m.role, m.author) for m in transcript.messages if m.content == "Done."
        ]

    def test_message_text_joins_text_parts_and_refuses_other_content(self) -> None:
        image = {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}

        assert ("Done.", "hi", None, None) == (
            message_text(reply("Done.")),
            message_text({"role": "user", "content": "hi"}),
            message_text(image),
            message_text(CALL),
        )

    def test_item_rows_give_no_view_row_and_no_transcript_message(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Event]:
            session = DeskSession(hub, "desk", TRIAGE)
            await session.add_items([USER_MSG, CALL, OUTPUT])
            await session.pop_item()
            return await hub.read("desk")

        events = run(scenario())
        transcript = TranscriptBuilder.from_events(events, session_id="desk", viewer=TRIAGE)

        assert ["I was charged twice"] == [m.content for m in transcript.messages]
        assert ["I was charged twice"] == [m.content for m in hub.hub.view("desk", QA).messages]


class TestOtherAgents:
    def test_another_agents_message_reaches_an_agent_as_a_named_user_message(
        self, hub: AsyncHub
    ) -> None:
        async def scenario() -> list[Any]:
            await DeskSession(hub, "desk", BILLING).add_items([reply("Refund issued.")])
            return await DeskSession(hub, "desk", TRIAGE).get_items()

        assert [{"role": "user", "content": "[Billing] Refund issued."}] == run(scenario())

    def test_another_agents_tool_calls_and_outputs_stay_with_it(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Any]:
            await DeskSession(hub, "desk", BILLING).add_items([USER_MSG, CALL, OUTPUT])
            return await DeskSession(hub, "desk", TRIAGE).get_items()

        assert [USER_MSG] == run(scenario())

    def test_posted_messages_are_relative_to_the_viewer(self, hub: AsyncHub) -> None:
        hub.hub.session("desk").post(Person(id="alice", label="Alice"), "hello")
        hub.hub.session("desk").post(TRIAGE, "hi Alice")
        hub.hub.session("desk").post(Operator(), "ops here")

        got = run(DeskSession(hub, "desk", TRIAGE).get_items())

        assert [
            {"role": "user", "content": "[Alice] hello"},
            {"role": "assistant", "content": "hi Alice"},
            {"role": "user", "content": "ops here"},
        ] == got

    def test_a_thread_session_reads_only_its_thread(self, hub: AsyncHub) -> None:
        root = hub.hub.session("desk").post(Person(id="alice", label="Alice"), "about my bill")
        hub.hub.session("desk").post(Person(id="bob", label="Bob"), "unrelated")
        assert root.sequence is not None
        thread = Conversation("desk", thread_root=root.sequence)
        session = DeskSession(hub, "desk", BILLING, conversation=thread)

        async def scenario() -> list[Any]:
            await session.add_items([reply("Looking.")])
            return await session.get_items()

        assert [{"role": "user", "content": "[Alice] about my bill"}, reply("Looking.")] == (
            run(scenario())
        )


class TestRetraction:
    def test_pop_item_returns_the_newest_item_and_retracts_it(self, hub: AsyncHub) -> None:
        session = DeskSession(hub, "desk", TRIAGE)

        async def scenario() -> tuple[Any, list[Any]]:
            await session.add_items([USER_MSG, reply("Done.")])
            return await session.pop_item(), await session.get_items()

        assert (reply("Done."), [USER_MSG]) == run(scenario())

    def test_pop_item_of_an_empty_session_is_none(self, hub: AsyncHub) -> None:
        assert None is run(DeskSession(hub, "desk", TRIAGE).pop_item())

    def test_clear_session_retracts_every_item_so_far_but_not_later_ones(
        self, hub: AsyncHub
    ) -> None:
        session = DeskSession(hub, "desk", TRIAGE)

        async def scenario() -> list[Any]:
            await session.add_items([USER_MSG, CALL])
            await session.clear_session()
            await session.add_items([OUTPUT])
            return await session.get_items()

        assert [OUTPUT] == run(scenario())

    def test_retractions_are_appended_and_the_retracted_rows_stay_in_the_store(
        self, hub: AsyncHub
    ) -> None:
        session = DeskSession(hub, "desk", TRIAGE)

        async def scenario() -> list[Event]:
            await session.add_items([USER_MSG, CALL])
            await session.pop_item()
            await session.clear_session()
            return await hub.read("desk")

        bodies = [e.body for e in run(scenario())]

        assert Item(CALL) == bodies[1]
        assert [Retracted(target=None, through=3)] == [
            b for b in bodies if isinstance(b, Retracted) and b.through is not None
        ]
        assert 4 == len(bodies)

    def test_a_retraction_holds_for_a_new_session_of_the_retracting_agent(
        self, hub: AsyncHub
    ) -> None:
        """Both kinds of retraction belong to the agent, not to one session object."""

        async def scenario() -> tuple[list[Any], list[Any]]:
            first = DeskSession(hub, "desk", TRIAGE)
            await first.add_items([USER_MSG, CALL])
            await first.pop_item()
            popped = await DeskSession(hub, "desk", TRIAGE).get_items()
            await first.clear_session()
            return popped, await DeskSession(hub, "desk", TRIAGE).get_items()

        assert ([USER_MSG], []) == run(scenario())

    def test_clear_session_by_one_agent_leaves_another_agents_memory(self, hub: AsyncHub) -> None:
        """One agent's clear_session leaves another agent's get_items as they were."""

        async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
            billing = DeskSession(hub, "desk", BILLING)
            await billing.add_items([USER_MSG, reply("Refund issued.")])
            before = await billing.get_items()
            await DeskSession(hub, "desk", TRIAGE).clear_session()
            return (
                before,
                await billing.get_items(),
                await DeskSession(hub, "desk", BILLING).get_items(),
            )

        before, after, fresh = run(scenario())

        assert [USER_MSG, reply("Refund issued.")] == before
        assert before == after
        assert before == fresh

    def test_clear_session_empties_only_the_retracting_agents_view(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Any]:
            await DeskSession(hub, "desk", BILLING).add_items([reply("Refund issued.")])
            triage = DeskSession(hub, "desk", TRIAGE)
            await triage.clear_session()
            return await triage.get_items()

        assert [] == run(scenario())

    def test_pop_item_by_one_agent_leaves_another_agents_memory(self, hub: AsyncHub) -> None:
        async def scenario() -> tuple[Any, list[Any], list[Any], list[Any]]:
            qa = DeskSession(hub, "desk", QA)
            await qa.get_items()  # qa has folded the desk before the pop
            billing = DeskSession(hub, "desk", BILLING)
            await billing.add_items([reply("Refund issued.")])
            popped = await DeskSession(hub, "desk", TRIAGE).pop_item()
            return (
                popped,
                await qa.get_items(),
                await billing.get_items(),
                await DeskSession(hub, "desk", TRIAGE).get_items(),
            )

        named = {"role": "user", "content": "[Billing] Refund issued."}

        assert (named, [named], [reply("Refund issued.")], []) == run(scenario())

    def test_an_agents_own_pop_leaves_other_agents_seeing_the_item(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Any]:
            billing = DeskSession(hub, "desk", BILLING)
            await billing.add_items([reply("Refund issued.")])
            await billing.pop_item()
            return await DeskSession(hub, "desk", QA).get_items()

        assert [{"role": "user", "content": "[Billing] Refund issued."}] == run(scenario())


class TestLimit:
    @pytest.mark.parametrize("limit", [True, False, 2.5, "3", [1]])
    def test_a_limit_other_than_an_int_or_none_is_refused_and_nothing_is_read(
        self, hub: AsyncHub, limit: Any
    ) -> None:
        calls: list[str] = []

        class Recording:
            async def append(self, session_id: str, events: Any, **kw: Any) -> list[Event]:
                calls.append("append")
                return await hub.append(session_id, events, **kw)

            async def read(self, session_id: str, **bounds: Any) -> list[Event]:
                calls.append("read")
                return await hub.read(session_id, **bounds)

            async def last_sequence(self, session_id: str) -> int:
                calls.append("last_sequence")
                return await hub.last_sequence(session_id)

        session = DeskSession(Recording(), "desk", TRIAGE)  # type: ignore[arg-type]  # a spy

        async def scenario() -> None:
            with pytest.raises(ValidationError, match="limit"):
                await session.get_items(limit=limit)

        run(scenario())

        assert [] == calls

    def test_a_bad_session_settings_limit_is_refused_and_nothing_is_read(
        self, hub: AsyncHub
    ) -> None:
        settings = SessionSettings()
        settings.limit = "3"  # type: ignore[assignment]  # pydantic checks only __init__
        session = DeskSession(hub, "desk", TRIAGE, session_settings=settings)

        async def scenario() -> None:
            with pytest.raises(ValidationError, match=r"session_settings\.limit"):
                await session.get_items()

        run(scenario())

    def test_limit_zero_is_no_items(self, hub: AsyncHub) -> None:
        session = DeskSession(hub, "desk", TRIAGE)

        async def scenario() -> list[Any]:
            await session.add_items([USER_MSG])
            return await session.get_items(limit=0)

        assert [] == run(scenario())

    def test_a_negative_limit_is_every_item_as_in_sqlite_session(self, hub: AsyncHub) -> None:
        """The SDK's own tests hold SQLiteSession to its unlimited negative-limit read."""
        session = DeskSession(hub, "desk", TRIAGE)

        async def scenario() -> list[Any]:
            await session.add_items([USER_MSG, CALL])
            return await session.get_items(limit=-1)

        assert [USER_MSG, CALL] == run(scenario())


class TestRunHooks:
    @pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
    def test_after_a_handoff_the_new_agents_items_carry_its_author(
        self, hub: AsyncHub, streamed: bool
    ) -> None:
        billing = SdkAgent(
            name="billing",
            model=ScriptedModel([ModelStep(output=[assistant_message("Refund issued.")])]),
        )
        triage = SdkAgent(
            name="triage",
            handoffs=[billing],
            model=ScriptedModel(
                [ModelStep(output=[function_call("transfer_to_billing", {}, call_id="c1")])]
            ),
        )
        session = DeskSession(hub, "desk", TRIAGE)

        options: Any = {
            "session": session,
            "hooks": DeskRunHooks(session),
            "run_config": RunConfig(tracing_disabled=True),
        }

        async def scenario() -> list[Event]:
            if streamed:
                result = Runner.run_streamed(triage, "refund", **options)
                async for _ in result.stream_events():
                    pass
            else:
                await Runner.run(triage, "refund", **options)
            return await hub.read("desk")

        authors = [(type(e.body).__name__, e.author) for e in run(scenario())]

        assert [
            ("Text", Operator()),
            ("Item", TRIAGE),
            ("Item", TRIAGE),
            ("Text", Agent(id="billing", label="billing")),
        ] == authors

    def test_hooks_map_sdk_agents_to_the_authors_given(self, hub: AsyncHub) -> None:
        hooks = DeskRunHooks(DeskSession(hub, "desk", TRIAGE), authors={"billing": BILLING})

        assert (BILLING, TRIAGE, Agent(id="other", label="other")) == (
            hooks.author_of(SdkAgent(name="billing")),
            hooks.author_of(SdkAgent(name="triage")),
            hooks.author_of(SdkAgent(name="other")),
        )


SUMMARIZER = Agent(id="summarizer", label="Summarizer")


class TestCompactedDesk:
    def test_a_compacted_desk_comes_back_as_its_attributed_summary_then_newer_items(
        self, hub: AsyncHub
    ) -> None:
        async def scenario() -> tuple[list[Any], list[Any]]:
            billing = DeskSession(hub, "desk", BILLING)
            await billing.add_items([USER_MSG, reply("Refund issued.")])
            await billing.get_items()  # folded before the compaction too
            await hub.compact("desk", "A refund was issued.", through=2, author=SUMMARIZER)
            await hub.post("desk", Person(id="alice", label="Alice"), "Thanks")
            return await billing.get_items(), await DeskSession(hub, "desk", BILLING).get_items()

        folded, fresh = run(scenario())

        assert [
            {"role": "user", "content": "[Summarizer] A refund was issued."},
            {"role": "user", "content": "[Alice] Thanks"},
        ] == folded
        assert folded == fresh

    def test_the_compactors_own_summary_comes_back_as_its_reply(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Any]:
            await DeskSession(hub, "desk", BILLING).add_items([USER_MSG, reply("Refund issued.")])
            await hub.compact("desk", "A refund was issued.", through=2, author=BILLING)
            return await DeskSession(hub, "desk", BILLING).get_items()

        assert [{"role": "assistant", "content": "A refund was issued."}] == run(scenario())

    def test_a_thread_compaction_leaves_the_channel_as_it_was(self, hub: AsyncHub) -> None:
        async def scenario() -> list[Any]:
            root = await hub.post("desk", Person(id="alice", label="Alice"), "root")
            assert root.sequence is not None
            await hub.post("desk", BILLING, "in thread", parent=root.sequence)
            await hub.compact(
                "desk",
                "thread summary",
                through=2,
                author=SUMMARIZER,
                conversation=Conversation("desk", thread_root=root.sequence),
            )
            return await DeskSession(hub, "desk", QA).get_items()

        assert [{"role": "user", "content": "[Alice] root"}] == run(scenario())

    def test_pop_item_retracts_the_summary_for_its_agent_only(self, hub: AsyncHub) -> None:
        async def scenario() -> tuple[Any, list[Any], list[Any]]:
            await hub.post("desk", Person(id="alice", label="Alice"), "hello")
            await hub.compact("desk", "greeted", through=1, author=SUMMARIZER)
            billing = DeskSession(hub, "desk", BILLING)
            popped = await billing.pop_item()
            return popped, await billing.get_items(), await DeskSession(hub, "desk", QA).get_items()

        popped, billing, qa = run(scenario())

        assert {"role": "user", "content": "[Summarizer] greeted"} == popped
        assert [] == billing
        assert [popped] == qa
