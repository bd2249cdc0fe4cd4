"""The Hub's OpenTelemetry spans (``sharedesk.telemetry``), read from the SDK's in-memory exporter.

OpenTelemetry lets a process set its global tracer provider once; the ``spans`` fixture
sets one for a test and resets the globals afterwards, as OpenTelemetry's own test
helpers do (``opentelemetry.test.globals_test.reset_trace_globals``), so that no other
test runs with a recording provider.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from sharedesk import (
    AdapterResult,
    Agent,
    Event,
    Hub,
    Person,
    RunFailed,
    SessionManager,
    SharingStateConflict,
    Text,
)
from sharedesk.telemetry import TRACEPARENT
from tests.ci import unavailable

try:
    from opentelemetry import trace
    from opentelemetry.sdk import trace as sdk_trace
except ImportError as exc:  # the otel extra and the dev extra's SDK; CI=true never skips
    unavailable(f"OpenTelemetry is not installed ({exc})", module=True)
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.util._once import Once

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Billing bot")
QA = Agent(id="qa", label="QA")


def reset_trace_globals() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reset_trace_globals()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        reset_trace_globals()


@pytest.fixture
def hub(spans: InMemorySpanExporter) -> Iterator[Hub]:
    with Hub.open() as hub:
        yield hub


def named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def traceparent_of(span: Any) -> str:
    """The version, trace id and span id of ``span``'s W3C traceparent (flags left out)."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}"


def ids(traceparent: str) -> str:
    return traceparent.rsplit("-", 1)[0]


class TestTurnSpans:
    def test_a_turn_to_its_commit_is_one_invoke_agent_span_with_the_genai_attributes(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.session("desk").post(ANA, "is the invoice sent?")
        hub.turn("desk", BOT).commit("sending it now")

        (span,) = named(spans, "invoke_agent Billing bot")

        assert {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": "desk",
            "gen_ai.agent.id": "bot",
            "gen_ai.agent.name": "Billing bot",
            "sharedesk.turn.delivered": 1,
            "sharedesk.turn.reason": "initial",
            "sharedesk.watermark.after": 1,
            "sharedesk.reply.sequence": 2,
        } == dict(span.attributes)

    def test_the_rows_offered_are_one_span_event_with_their_sequences_and_authors(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.session("desk").post(ANA, "one")
        hub.session("desk").post(QA, "two")
        hub.turn("desk", BOT).commit()

        (span,) = named(spans, "invoke_agent Billing bot")

        assert [("sharedesk.rows.delivered", (1, 2), ("person:ana", "agent:qa"))] == [
            (e.name, e.attributes["sharedesk.row.sequences"], e.attributes["sharedesk.row.authors"])
            for e in span.events
        ]

    def test_a_turn_with_nothing_to_offer_has_no_span_event(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.session("desk").post(ANA, "one")
        hub.turn("desk", BOT).commit()
        hub.turn("desk", BOT).commit()

        later = named(spans, "invoke_agent Billing bot")[-1]

        assert (0, ()) == (later.attributes["sharedesk.turn.delivered"], later.events)

    def test_a_later_turn_carries_the_watermark_before_and_after(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.session("desk").post(ANA, "one")
        hub.turn("desk", BOT).commit("ok")
        hub.session("desk").post(ANA, "two")
        hub.turn("desk", BOT).commit()

        later = named(spans, "invoke_agent Billing bot")[-1]

        assert (1, 3, "delta") == (
            later.attributes["sharedesk.watermark.before"],
            later.attributes["sharedesk.watermark.after"],
            later.attributes["sharedesk.turn.reason"],
        )

    def test_a_commit_that_loses_the_race_ends_its_span_with_an_error(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.session("desk").post(ANA, "one")
        first, second = hub.turn("desk", BOT), hub.turn("desk", BOT)
        first.commit("mine")
        with pytest.raises(SharingStateConflict):
            second.commit("also mine")

        statuses = [s.status.status_code for s in named(spans, "invoke_agent Billing bot")]

        assert [trace.StatusCode.UNSET, trace.StatusCode.ERROR] == statuses

    def test_a_turn_abandoned_exports_no_span(self, hub: Hub, spans: InMemorySpanExporter) -> None:
        hub.session("desk").post(ANA, "one")
        hub.turn("desk", BOT)

        assert [] == named(spans, "invoke_agent Billing bot")


class TestTraceContext:
    def test_an_append_is_a_span_and_each_event_carries_its_traceparent(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        stored = hub.append("desk", [Event(ANA, Text("a")), Event(ANA, Text("b"))])

        (span,) = named(spans, "sharedesk.append")

        assert ("desk", 2, 1, 2) == (
            span.attributes["gen_ai.conversation.id"],
            span.attributes["sharedesk.append.events"],
            span.attributes["sharedesk.append.first_sequence"],
            span.attributes["sharedesk.append.last_sequence"],
        )
        assert [traceparent_of(span)] * 2 == [ids(e.metadata[TRACEPARENT]) for e in stored]
        assert stored == hub.read("desk")

    def test_a_reply_carries_its_turns_traceparent_and_its_commit_no_span_of_its_own(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.session("desk").post(ANA, "one")
        reply = hub.turn("desk", BOT).commit("ok")
        assert reply is not None

        (turn,) = named(spans, "invoke_agent Billing bot")

        assert traceparent_of(turn) == ids(reply.metadata[TRACEPARENT])
        assert 1 == len(named(spans, "sharedesk.append"))  # the post's; the commit is the turn's

    def test_an_append_inside_a_span_of_the_caller_is_its_child(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        with trace.get_tracer("app").start_as_current_span("request") as outer:
            hub.session("desk").post(ANA, "one")

        (append,) = named(spans, "sharedesk.append")

        assert outer.get_span_context().span_id == append.parent.span_id

    @pytest.mark.parametrize(
        "header",
        [
            "00-zz-1-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",  # 00 with more
            "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
        ],
    )
    def test_a_malformed_traceparent_on_a_row_gives_no_link_and_no_error(
        self, hub: Hub, spans: InMemorySpanExporter, header: str
    ) -> None:
        hub.append("desk", [Event(ANA, Text("a"), metadata={TRACEPARENT: header})])
        hub.turn("desk", BOT).commit()

        (turn,) = named(spans, "invoke_agent Billing bot")

        assert () == tuple(turn.links)

    def test_a_readers_turn_links_to_the_span_that_wrote_each_row_it_is_offered(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.session("desk").post(ANA, "one")
        hub.turn("desk", BOT).commit("billing's answer")
        hub.turn("desk", QA).commit()

        (writer,) = named(spans, "invoke_agent Billing bot")
        (reader,) = named(spans, "invoke_agent QA")
        post = named(spans, "sharedesk.append")[0]

        linked = {
            (link.context.span_id, link.attributes["sharedesk.row.sequence"])
            for link in reader.links
        }
        assert {
            (post.get_span_context().span_id, 1),
            (writer.get_span_context().span_id, 2),
        } == linked

    def test_a_row_another_writer_stamped_links_to_the_span_its_traceparent_names(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        hub.append("desk", [Event(ANA, Text("a"), metadata={TRACEPARENT: given})])
        hub.turn("desk", QA).commit()

        (reader,) = named(spans, "invoke_agent QA")

        assert [(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1)] == [
            (link.context.trace_id, link.context.span_id, link.attributes["sharedesk.row.sequence"])
            for link in reader.links
        ]

    def test_a_turn_links_rows_its_hub_stamped_too_long_ago_to_keep(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.append("desk", [Event(ANA, Text(f"row {i}")) for i in range(4097)])
        hub.turn("desk", QA).commit()

        (post,) = named(spans, "sharedesk.append")
        (reader,) = named(spans, "invoke_agent QA")

        assert reader.links
        assert {post.get_span_context().span_id} == {link.context.span_id for link in reader.links}

    def test_a_traceparent_the_writer_set_is_kept(self, hub: Hub) -> None:
        given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        (stored,) = hub.append("desk", [Event(ANA, Text("a"), metadata={TRACEPARENT: given})])

        assert given == stored.metadata[TRACEPARENT]


class _ModelAdapter:
    name = "fake-provider"
    native_continuation = False
    model = "gpt-test"
    author = Agent(id="fake", label="Fake")

    def execute(self, run: Any, session: Any, emit: Any, opts: Any) -> AdapterResult:
        emit(Event(self.author, Text("done")))
        return AdapterResult(output="done", token_usage={"input_tokens": 7, "output_tokens": 3})


class _FailingAdapter(_ModelAdapter):
    def execute(self, run: Any, session: Any, emit: Any, opts: Any) -> AdapterResult:
        raise RuntimeError("the provider is down")


CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "fake-provider",
    "gen_ai.request.model": "gpt-test",
    "gen_ai.usage.input_tokens": 7,
    "gen_ai.usage.output_tokens": 3,
}


def genai(span: Any) -> dict[str, Any]:
    return {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.")}


class TestRunSpans:
    def test_a_queued_run_is_a_chat_span_with_model_and_token_usage(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        hub.submit_run("desk", _ModelAdapter(), "hello").result(timeout=30)

        (span,) = named(spans, "chat gpt-test")

        assert {**CHAT, "gen_ai.conversation.id": "desk"} == genai(span)
        assert trace.SpanKind.CLIENT == span.kind

    def test_a_run_outside_the_run_queue_is_a_chat_span_too(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        result = SessionManager.run_once(hub, _ModelAdapter(), "hello")

        (span,) = named(spans, "chat gpt-test")

        assert {**CHAT, "gen_ai.conversation.id": result.session_id} == genai(span)
        assert result.run_id == span.attributes["sharedesk.run.id"]

    def test_an_async_run_is_a_chat_span_too(self, hub: Hub, spans: InMemorySpanExporter) -> None:
        asyncio.run(SessionManager.arun_once(hub, _ModelAdapter(), "hello"))

        assert {"chat gpt-test"} == {span.name for span in named(spans, "chat gpt-test")}

    def test_a_failed_run_ends_its_span_with_an_error_and_its_type(
        self, hub: Hub, spans: InMemorySpanExporter
    ) -> None:
        with pytest.raises(RunFailed):
            SessionManager.run_once(hub, _FailingAdapter(), "hello")

        (span,) = named(spans, "chat gpt-test")

        assert (trace.StatusCode.ERROR, "RuntimeError") == (
            span.status.status_code,
            span.attributes["error.type"],
        )


class TestWithoutTelemetry:
    def test_without_a_configured_provider_nothing_is_stamped(self) -> None:
        reset_trace_globals()
        with Hub.open() as hub:
            hub.session("desk").post(ANA, "one")
            hub.turn("desk", BOT).commit("ok")
            stored = hub.read("desk")

        assert [{}, {}] == [event.metadata for event in stored]

    def test_without_opentelemetry_installed_nothing_of_it_is_imported(self) -> None:
        script = (
            "import sys\n"
            "class Absent:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'opentelemetry':\n"
            "            raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, Absent())\n"
            "from sharedesk import Hub, Person, Agent\n"
            "with Hub.open() as hub:\n"
            "    hub.session('d').post(Person(id='a', label='A'), 'one')\n"
            "    reply = hub.turn('d', Agent(id='b', label='B')).commit('ok')\n"
            "assert reply.metadata == {}, reply.metadata\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )

        assert 0 == done.returncode, done.stderr
        assert "[]" == done.stdout.strip()
