"""OpenTelemetry spans of a Hub (the ``otel`` extra), after the GenAI semantic conventions.

With ``opentelemetry-api`` installed, a Hub emits, through the global tracer provider:

- ``invoke_agent {label}`` from ``hub.turn`` to ``turn.commit`` (kind ``INTERNAL``), with
  ``gen_ai.operation.name`` (``"invoke_agent"``), ``gen_ai.conversation.id`` (the desk),
  ``gen_ai.agent.id`` and ``gen_ai.agent.name`` (the viewer's id and label),
  ``sharedesk.turn.delivered`` (rows offered), ``sharedesk.turn.reason``,
  ``sharedesk.watermark.before`` (absent the first time) and ``sharedesk.watermark.after``;
  one span event ``sharedesk.row.delivered`` per row offered (``sharedesk.row.sequence``,
  ``sharedesk.row.author``), and a link to the span that wrote each offered row that
  carries a ``traceparent``. A commit that fails ends it with an error status; an
  abandoned turn's span is never ended, so never exported.
- ``sharedesk.append`` around every write but a turn's commit (its turn's span is the
  commit's), with
  ``gen_ai.conversation.id`` and ``sharedesk.append.events``; each ``Text`` row written
  gets the W3C ``traceparent`` of the span that wrote it in its metadata
  (``metadata["traceparent"]``, kept when the caller set one), which is how a reader's
  turn, in any process and over MCP, links to the writer's. Other events (a run's
  lifecycle, tool calls) are stored as given.
- ``chat`` around every run queued with ``hub.submit_run`` (kind ``CLIENT``), with
  ``gen_ai.provider.name`` (the adapter's name), ``gen_ai.request.model`` once known,
  ``gen_ai.usage.input_tokens`` and ``gen_ai.usage.output_tokens``.

Without ``opentelemetry-api``, :func:`hub_telemetry` returns ``None``, nothing of it is
imported and the Hub's hooks are one ``is None`` test each. Installed without a
configured provider, spans do not record, and nothing is stamped or read for links.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final

import msgspec

from sharedesk.protocol.authors import Agent, Operator, Person, SessionAuthor, author_key
from sharedesk.protocol.events import Event, RunStarted, Text
from sharedesk.protocol.writes import Write

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext, Tracer

    from sharedesk.projection.turns import TurnPlan

__all__ = ["MAX_LINKS", "TRACEPARENT", "HubTelemetry", "hub_telemetry"]

#: The metadata key of an event's W3C trace context.
TRACEPARENT: Final = "traceparent"
#: Most links a turn span gets to the spans that wrote its rows (the SDK's default limit).
MAX_LINKS: Final = 128
_USAGE: Final = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "prompt_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "completion_tokens": "gen_ai.usage.output_tokens",
}

#: The store's ``read(session_id, *, after=..., before=...)``: events between two sequences.
RangeRead = Callable[..., list[Event]]


def hub_telemetry() -> HubTelemetry | None:
    """Return the Hub's telemetry, or ``None`` when ``opentelemetry-api`` is not installed.

    Cost: one import attempt.
    """
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    from sharedesk import __version__

    return HubTelemetry(trace.get_tracer("sharedesk", __version__))


def _unstamped(event: Event) -> bool:
    """Whether a write stamps ``event``: a posted message without a ``traceparent``.

    Only posted messages: they are what turns offer, and lifecycle events (a run's
    claim) are recognised by their metadata as written.
    """
    return isinstance(event.body, Text) and TRACEPARENT not in event.metadata


def _stamped(event: Event, header: str) -> Event:
    if not _unstamped(event):
        return event
    return msgspec.structs.replace(event, metadata={**event.metadata, TRACEPARENT: header})


def _traceparent(span: Span) -> str:
    """Return ``span``'s W3C ``traceparent`` (version 00)."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _agent(author: SessionAuthor) -> tuple[str, str]:
    match author:
        case Person(id=ident, label=label) | Agent(id=ident, label=label):
            return ident, label
        case Operator():
            return "operator", "operator"
    return author_key(author), getattr(author, "label", author_key(author))


class HubTelemetry:
    """The spans of one Hub; every method is a hook the Hub calls (see the module)."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import trace

        self._tracer = tracer
        self._trace = trace

    # -- writes ------------------------------------------------------------------------

    def append(self, write: Write) -> tuple[Write, Span | None]:
        """Start a write's span (a child of the current span); none for a turn's commit.

        Returns the write with each event's ``traceparent`` stamped and the span, which
        :meth:`appended` ends; the span is ``None`` when it does not record (no
        provider), and for a commit (a write with a ``share``), which is its turn's:
        its reply was stamped by :meth:`stamp`.
        """
        if write.share is not None:
            return write, None
        span = self._tracer.start_span(
            "sharedesk.append",
            attributes={
                "gen_ai.conversation.id": write.session_id,
                "sharedesk.append.events": len(write.events),
            },
        )
        if not span.is_recording():  # no provider: nothing to end, stamp or export
            return write, None
        if any(_unstamped(event) for event in write.events):
            header = _traceparent(span)
            events = [_stamped(event, header) for event in write.events]
            # Adding one string key to a checked event's metadata keeps it valid.
            write = msgspec.structs.replace(write, events=events)
        return write, span

    def appended(self, span: Span, future: Future[list[Event]]) -> None:
        """End a write's span when its future completes (sequences, or the error)."""

        def end(done: Future[list[Event]]) -> None:
            error = None if done.cancelled() else done.exception()
            if error is not None:
                self._fail(span, error)
                return
            if not done.cancelled():
                stored = done.result()
                if stored:
                    span.set_attribute("sharedesk.append.first_sequence", stored[0].sequence or 0)
                    span.set_attribute("sharedesk.append.last_sequence", stored[-1].sequence or 0)
            span.end()

        future.add_done_callback(end)

    def stamp(self, event: Event, span: Span) -> Event:
        """Return ``event`` carrying ``span``'s ``traceparent`` (unless it has one)."""
        if not span.is_recording() or not _unstamped(event):
            return event
        return _stamped(event, _traceparent(span))

    # -- turns -------------------------------------------------------------------------

    def turn(
        self, session_id: str, viewer: SessionAuthor, plan: TurnPlan, read: RangeRead
    ) -> Span | None:
        """Start the ``invoke_agent`` span of a planned turn; :meth:`committed` ends it.

        ``None`` when the span does not record (no provider): the turn carries none.

        Cost (a recording span only): one read of the rows between the oldest and the
        newest offered, for their ``traceparent`` links.
        """
        ident, label = _agent(viewer)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": session_id,
            "gen_ai.agent.id": ident,
            "gen_ai.agent.name": label,
            "sharedesk.turn.delivered": len(plan.messages),
            "sharedesk.turn.reason": plan.reason or "delta",
        }
        if plan.conversation.thread_root is not None:
            attributes["sharedesk.thread_root"] = plan.conversation.thread_root
        if plan.expected_state is not None:
            attributes["sharedesk.watermark.before"] = plan.expected_state.watermark
        span = self._tracer.start_span(f"invoke_agent {label}", attributes=attributes)
        if not span.is_recording():
            return None
        if not plan.messages:
            return span
        self._link(span, session_id, plan, read)
        for message in plan.messages:
            span.add_event(
                "sharedesk.row.delivered",
                {
                    "sharedesk.row.sequence": message.sequence,
                    "sharedesk.row.author": author_key(message.author),
                },
            )
        return span

    def committed(self, span: Span, plan: TurnPlan, reply: Event | None) -> None:
        """End a turn's span: its watermark after, and the reply's sequence."""
        span.set_attribute("sharedesk.watermark.after", plan.next_state.watermark)
        if reply is not None and reply.sequence is not None:
            span.set_attribute("sharedesk.reply.sequence", reply.sequence)
        span.end()

    def failed(self, span: Span, error: BaseException) -> None:
        """End a span with ``error`` recorded and an error status."""
        self._fail(span, error)

    # -- runs --------------------------------------------------------------------------

    def run(self, session_id: str, adapter: Any, future: Future[Any]) -> None:
        """Span a queued run until its future completes: model and token usage."""
        provider = str(getattr(adapter, "name", type(adapter).__name__))
        span = self._tracer.start_span(
            "chat",
            kind=self._trace.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.conversation.id": session_id,
            },
        )
        if not span.is_recording():
            return
        model = getattr(adapter, "model", None)
        if isinstance(model, str):
            span.set_attribute("gen_ai.request.model", model)
            span.update_name(f"chat {model}")

        def end(done: Future[Any]) -> None:
            error = None if done.cancelled() else done.exception()
            if error is not None:
                self._fail(span, error)
                return
            if done.cancelled():
                span.end()
                return
            result = done.result()
            span.set_attribute("sharedesk.run.id", str(getattr(result, "run_id", "")))
            for event in getattr(result, "events", ()):
                if isinstance(event.body, RunStarted) and event.body.model:
                    span.set_attribute("gen_ai.request.model", event.body.model)
                    span.update_name(f"chat {event.body.model}")
            for key, value in (getattr(result, "token_usage", None) or {}).items():
                if key in _USAGE and isinstance(value, int):
                    span.set_attribute(_USAGE[key], value)
            span.end()

        future.add_done_callback(end)

    # -- internals ---------------------------------------------------------------------

    def _link(self, span: Span, session_id: str, plan: TurnPlan, read: RangeRead) -> None:
        offered = {m.sequence for m in plan.messages}
        newest = sorted(offered)[-MAX_LINKS:]
        for event in read(session_id, after=newest[0] - 1, before=newest[-1] + 1):
            header = event.metadata.get(TRACEPARENT)
            if event.sequence not in offered or not isinstance(header, str):
                continue
            linked = self._parse(header)
            if linked is not None:
                span.add_link(linked, {"sharedesk.row.sequence": event.sequence or 0})

    def _parse(self, header: str) -> SpanContext | None:
        """Return the span context of a W3C ``traceparent``, or ``None`` if malformed."""
        parts = header.split("-")
        if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or parts[0] == "ff":
            return None
        try:
            trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
        except ValueError:
            return None
        context = self._trace.SpanContext(
            trace_id, span_id, is_remote=True, trace_flags=self._trace.TraceFlags(flags & 0xFF)
        )
        return context if context.is_valid else None

    def _fail(self, span: Span, error: BaseException) -> None:
        span.record_exception(error)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, type(error).__name__))
        span.end()
