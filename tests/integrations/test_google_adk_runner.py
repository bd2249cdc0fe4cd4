"""A real ADK Runner on a desk: a handoff, a peer outside ADK, attribution end to end.

Two ADK agents with scripted models (triage hands off to billing) run on a
DeskSessionService; an agent outside ADK takes a sharedesk turn on the same desk and
commits a note; billing's next model request holds that note, attributed to its author;
a person's view of the desk shows who said what.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from pydantic import PrivateAttr

from sharedesk.actors.aio import AsyncHub
from sharedesk.integrations.google_adk import DeskSessionService
from sharedesk.protocol.authors import Agent, Person
from tests.integrations.adk_backends import hub, store_target

__all__ = ["hub", "store_target"]  # the fixtures, used by name below

pytestmark = pytest.mark.asyncio

APP = "support"
AUDITOR = Agent(id="auditor", label="Auditor")
TRIAGE = Agent(id="triage", label="Triage")
BILLING = Agent(id="billing", label="Billing")
NOTE = "Audit: the second charge is a duplicate; refund approved."


class ScriptedLlm(BaseLlm):
    """A model that answers each request with its next scripted content, recording requests."""

    _replies: list[types.Content] = PrivateAttr(default_factory=list)
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)

    def script(self, *replies: types.Content) -> ScriptedLlm:
        self._replies.extend(replies)
        return self

    @property
    def requests(self) -> list[LlmRequest]:
        return self._requests

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self._requests.append(llm_request.model_copy(deep=True))
        yield LlmResponse(content=self._replies.pop(0))


def text(value: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=value)])


def handoff(agent_name: str) -> types.Content:
    call = types.FunctionCall(name="transfer_to_agent", args={"agent_name": agent_name})
    return types.Content(role="model", parts=[types.Part(function_call=call)])


def request_text(request: LlmRequest) -> str:
    return "\n".join(
        part.text for content in request.contents for part in content.parts or [] if part.text
    )


async def run(runner: Runner, user_id: str, session_id: str, message: str) -> list[Any]:
    new = types.Content(role="user", parts=[types.Part(text=message)])
    return [
        event
        async for event in runner.run_async(user_id=user_id, session_id=session_id, new_message=new)
    ]


async def test_a_peer_outside_adk_reaches_billing_attributed_and_a_person_sees_who_said_what(
    hub: AsyncHub,
) -> None:
    triage_model = ScriptedLlm(model="scripted-triage").script(handoff("billing"))
    billing_model = ScriptedLlm(model="scripted-billing").script(
        text("I see a double charge; checking with audit."),
        text("Refund issued, as the auditor approved."),
    )
    billing = LlmAgent(name="billing", model=billing_model, instruction="Handle billing.")
    triage = LlmAgent(name="triage", model=triage_model, instruction="Route.", sub_agents=[billing])
    service = DeskSessionService(hub, authors={"triage": TRIAGE, "billing": BILLING})
    runner = Runner(app_name=APP, agent=triage, session_service=service)
    session = await service.create_session(app_name=APP, user_id="ann", session_id="case-1")
    desk = service.desk_id(APP, "ann", session.id)

    await run(runner, "ann", session.id, "I was charged twice")
    turn = await hub.turn(desk, AUDITOR)
    await turn.commit(NOTE)
    await run(runner, "ann", session.id, "Any news?")

    last_request = request_text(billing_model.requests[-1])
    view = await hub.view(desk, Person(id="pat", label="Pat"))
    assert [(Person(id="ann", label="ann"), "I was charged twice")] == [
        (m.author, m.content) for m in turn.messages if isinstance(m.author, Person)
    ]
    assert 2 == len(billing_model.requests)  # billing took the second run too
    attributed = last_request.split("[auditor] said:", 1)
    assert 2 == len(attributed) and NOTE in attributed[1]
    assert [
        ("ann", "I was charged twice"),
        ("billing", "I see a double charge; checking with audit."),
        ("auditor", NOTE),
        ("ann", "Any news?"),
        ("billing", "Refund issued, as the auditor approved."),
    ] == [(m.author.id, m.content) for m in view.messages]  # type: ignore[union-attr]
