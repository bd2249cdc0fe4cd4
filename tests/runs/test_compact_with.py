"""SessionManager.compact_with: a runtime compacts a desk with its own model, as a run."""

from __future__ import annotations

import pytest

from sharedesk import Hub, ScriptedAdapter, SessionManager
from sharedesk.protocol.authors import Agent, Person
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Compaction, Event, Text

ANN = Person(id="ann", label="Ann")
DESK = "desk"


@pytest.fixture
def hub() -> Hub:
    hub = Hub.open()
    hub.append(DESK, [Event(ANN, Text(f"m{n}")) for n in range(1, 6)])
    return hub


def test_the_adapters_output_becomes_the_summary_authored_by_the_adapter(hub: Hub) -> None:
    adapter = ScriptedAdapter(["ann said five things"], name="compactor")

    event = SessionManager.compact_with(hub, adapter, DESK)

    assert isinstance(event.body, Compaction)
    assert event.author == Agent(id="compactor", label="compactor")
    assert event.body.summary == "ann said five things"
    view = hub.view(DESK, ANN)
    assert [(m.author, m.content) for m in view.messages] == [
        (adapter.author, "ann said five things")
    ]
    hub.close()


def test_the_adapter_reads_the_desk_as_a_transcript(hub: Hub) -> None:
    adapter = ScriptedAdapter(["summary"], name="compactor")

    SessionManager.compact_with(hub, adapter, DESK)

    transcript = adapter.calls[0].transcript
    assert transcript is not None
    assert [m.content for m in transcript.messages] == ["m1", "m2", "m3", "m4", "m5"]
    hub.close()


def test_the_summary_covers_the_run_when_nobody_else_wrote_meanwhile(hub: Hub) -> None:
    adapter = ScriptedAdapter(["summary"], name="compactor")

    event = SessionManager.compact_with(hub, adapter, DESK)

    assert isinstance(event.body, Compaction)
    assert event.body.through == (event.sequence or 0) - 1
    hub.close()


def test_a_blank_summary_compacts_nothing(hub: Hub) -> None:
    adapter = ScriptedAdapter(["  "], name="compactor")

    with pytest.raises(ValidationError, match="summary"):
        SessionManager.compact_with(hub, adapter, DESK)

    assert hub.store.session_state(DESK).compactions == ()
    hub.close()
