"""OpenTelemetry spans of a Hub (the ``otel`` extra), after the GenAI semantic conventions.

With ``opentelemetry-api`` installed, a Hub emits, through the global tracer provider:

- ``invoke_agent {label}`` from ``hub.turn`` to ``turn.commit`` (kind ``INTERNAL``), with
  ``gen_ai.operation.name`` (``"invoke_agent"``), ``gen_ai.conversation.id`` (the desk),
  ``gen_ai.agent.id`` and ``gen_ai.agent.name`` (the viewer's id and label),
  ``sharedesk.turn.delivered`` (rows offered), ``sharedesk.turn.reason``,
  ``sharedesk.watermark.before`` (absent the first time), ``sharedesk.watermark.after``
  (the one its commit stores) and ``sharedesk.reply.sequence``; one span event
  ``sharedesk.rows.delivered`` for the rows offered (``sharedesk.row.sequences``,
  ``sharedesk.row.authors``), and a link to the span that wrote each offered row that
  carries a ``traceparent``. The rows and links are added once its commit is handed to
  the store's writer, so that a turn never committed costs no read and no per-row work.
  A commit that fails ends the span with an error status; an abandoned turn's span is
  never ended, so never exported.
- ``sharedesk.append`` around every write but a turn's commit (its turn's span is the
  commit's), with ``gen_ai.conversation.id`` and ``sharedesk.append.events``; each
  ``Text`` row written gets the W3C ``traceparent`` of the span that wrote it in its
  metadata (``metadata["traceparent"]``, kept when the caller set one), which is how a
  reader's turn, in any process and over MCP, links to the writer's. Other events (a
  run's lifecycle, tool calls) are stored as given.
- ``chat {model}`` (kind ``CLIENT``) for every run written through the Hub, whichever
  executor drives it (the Hub's run queue, ``SessionManager.run_once``,
  ``execute_run``, their async forms): from the write of its ``RunStarted`` to that of
  its ``RunFinished``, with ``gen_ai.provider.name``, ``gen_ai.request.model`` (when
  known), ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens`` and, for a run
  that did not complete, ``error.type`` and an error status. Both writes pass
  :meth:`HubTelemetry.append`, the Hub's one write path; a claim that lost to another
  writer's is dropped unexported.

Without ``opentelemetry-api``, :func:`hub_telemetry` returns ``None``, nothing of it is
imported and the Hub's hooks are one ``is None`` test each. Installed without a
configured provider, spans do not record, and nothing is stamped, read or kept.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import msgspec

from sharedesk.protocol.authors import Agent, Person, SessionAuthor, author_key
from sharedesk.protocol.errors import SharedeskError
from sharedesk.protocol.events import Event, RunFinished, RunStarted, Text
from sharedesk.protocol.ports import Completion
from sharedesk.protocol.writes import Write

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext, Tracer

    from sharedesk.projection.turns import TurnPlan

__all__ = ["MAX_LINKS", "TRACEPARENT", "HubTelemetry", "hub_telemetry"]

#: The metadata key of an event's W3C trace context.
TRACEPARENT: Final = "traceparent"
#: Most links a turn span gets to the spans that wrote its rows (the SDK's default limit).
MAX_LINKS: Final = 128
#: A W3C ``traceparent``: version, trace id, span id, flags (and, past version 00, more).
_W3C: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
#: A run's ``token_usage`` keys, as the GenAI conventions name them.
_USAGE: Final = MappingProxyType(
    {
        "input_tokens": "gen_ai.usage.input_tokens",
        "prompt_tokens": "gen_ai.usage.input_tokens",
        "output_tokens": "gen_ai.usage.output_tokens",
        "completion_tokens": "gen_ai.usage.output_tokens",
    }
)

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


def _traceparent(span: Span) -> str:
    """Return ``span``'s W3C ``traceparent`` (version 00)."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _stamped(write: Write, header: str) -> Write:
    """Return ``write``, its posted messages without a ``traceparent`` carrying ``header``."""
    # Adding one string key to a checked event's metadata keeps it valid.
    events = [
        msgspec.structs.replace(e, metadata={**e.metadata, TRACEPARENT: header})
        if isinstance(e.body, Text) and TRACEPARENT not in e.metadata
        else e
        for e in write.events
    ]
    return msgspec.structs.replace(write, events=events)


def _agent(author: SessionAuthor) -> tuple[str, str]:
    if isinstance(author, Person | Agent):
        return author.id, author.label
    return author_key(author), author_key(author)


class HubTelemetry:
    """The spans of one Hub; every method is a hook the Hub calls (see the module)."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import trace

        self._tracer, self._trace = tracer, trace
        #: The ``chat`` span and claim of each run claimed here, until its ``RunFinished``.
        self._runs: dict[str, tuple[Span, Event]] = {}

    # -- writes ------------------------------------------------------------------------

    def append(self, write: Write, future: Completion) -> Write:
        """Start a write's span (a child of the current span), ended when ``future`` is.

        Returns the write, its ``Text`` rows stamped; none for a commit (a write with a
        ``share``), whose reply :meth:`stamp` stamped, nor when the span does not record.
        """
        if write.share is not None:
            return write
        span = self._tracer.start_span(
            "sharedesk.append",
            attributes={
                "gen_ai.conversation.id": write.session_id,
                "sharedesk.append.events": len(write.events),
            },
        )
        if not span.is_recording():  # no provider: nothing to end, stamp or export
            return write
        for event in write.events:
            if isinstance(event.body, RunStarted) and event.run_id is not None:
                self._run_started(write.session_id, event, event.body)
        header = _traceparent(span)
        write = _stamped(write, header)

        def end(done: Any) -> None:
            error = None if done.cancelled() else done.exception()
            if error is not None:
                self.failed(span, error)
                for event in write.events:  # a claim never stored starts no run
                    if self._runs.get(event.run_id or "", (None, None))[1] is event:
                        del self._runs[event.run_id or ""]
                return
            stored = [] if done.cancelled() else done.result()
            if stored:
                span.set_attributes(
                    {
                        "sharedesk.append.first_sequence": stored[0].sequence or 0,
                        "sharedesk.append.last_sequence": stored[-1].sequence or 0,
                    }
                )
            span.end()
            for event in stored:
                self._run_written(event)

        future.add_done_callback(end)
        return write

    def stamp(self, write: Write, span: Span) -> Write:
        """Return a checked ``write``, its posted messages carrying ``span``'s ``traceparent``.

        A message that has one keeps it.
        """
        return _stamped(write, _traceparent(span))

    # -- turns -------------------------------------------------------------------------

    def turn(self, session_id: str, viewer: SessionAuthor, plan: TurnPlan) -> Span | None:
        """Start the ``invoke_agent`` span of a turn planned; ``None`` when it does not record.

        :meth:`offered` adds the rows it offered, :meth:`committed` ends it.
        """
        ident, label = _agent(viewer)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": session_id,
            "gen_ai.agent.id": ident,
            "gen_ai.agent.name": label,
            "sharedesk.turn.delivered": len(plan.messages),
            "sharedesk.turn.reason": plan.reason or "delta",
            "sharedesk.watermark.after": plan.next_state.watermark,
        }
        if plan.conversation.thread_root is not None:
            attributes["sharedesk.thread_root"] = plan.conversation.thread_root
        if plan.expected_state is not None:
            attributes["sharedesk.watermark.before"] = plan.expected_state.watermark
        span = self._tracer.start_span(f"invoke_agent {label}", attributes=attributes)
        return span if span.is_recording() else None

    def offered(self, span: Span, session_id: str, plan: TurnPlan, read: RangeRead) -> None:
        """Add the rows a turn offers to its span, and their writers' links.

        A store error reading them leaves them out. Cost: one read of the rows between
        the oldest and the newest offered (at most the newest :data:`MAX_LINKS`).
        """
        messages = plan.messages
        if not messages:
            return
        span.add_event(
            "sharedesk.rows.delivered",
            {
                "sharedesk.row.sequences": [m.sequence for m in messages],
                "sharedesk.row.authors": [author_key(m.author) for m in messages],
            },
        )
        offered = sorted({m.sequence for m in messages})[-MAX_LINKS:]
        with contextlib.suppress(SharedeskError):
            for event in read(session_id, after=offered[0] - 1, before=offered[-1] + 1):
                header = event.metadata.get(TRACEPARENT)
                linked = self._parse(header) if isinstance(header, str) else None
                if linked is not None and event.sequence in offered:
                    span.add_link(linked, {"sharedesk.row.sequence": event.sequence or 0})

    def committed(self, span: Span, reply: Event | None) -> None:
        """End a turn's span with the reply's sequence."""
        if reply is not None and reply.sequence is not None:
            span.set_attribute("sharedesk.reply.sequence", reply.sequence)
        span.end()

    # -- runs --------------------------------------------------------------------------

    def _run_started(self, session_id: str, claim: Event, body: RunStarted) -> None:
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": body.provider,
            "gen_ai.conversation.id": session_id,
            "sharedesk.run.id": claim.run_id or "",
        }
        if body.model:
            attributes["gen_ai.request.model"] = body.model
        name = f"chat {body.model}" if body.model else "chat"
        span = self._tracer.start_span(
            name, kind=self._trace.SpanKind.CLIENT, attributes=attributes
        )
        self._runs.setdefault(claim.run_id or "", (span, claim))

    def _run_written(self, event: Event) -> None:
        """End a run's span at its stored ``RunFinished``; drop it when its claim lost."""
        entry = self._runs.get(event.run_id or "")
        if entry is None:
            return
        span, claim = entry
        if isinstance(event.body, RunStarted) and event.metadata != claim.metadata:
            self._runs.pop(event.run_id or "", None)  # another writer claimed the run
        elif isinstance(event.body, RunFinished):
            self._runs.pop(event.run_id or "", None)
            usage = event.body.token_usage
            span.set_attributes(
                {_USAGE[k]: v for k, v in usage.items() if k in _USAGE and isinstance(v, int)}
            )
            if event.body.status != "completed":
                span.set_attribute("error.type", event.body.error_code or event.body.status)
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
            span.end()

    def _parse(self, header: str) -> SpanContext | None:
        """Return the span context of a W3C ``traceparent``, or ``None`` if malformed.

        As the W3C propagator reads one (version ``ff``, a version 00 with more fields, or
        an all-zero id is malformed), without building a context for it.
        """
        match = _W3C.fullmatch(header.strip(" \t"))
        if match is None or match[1] == "ff" or (match[1] == "00" and match[5]):
            return None
        trace = self._trace
        context = trace.SpanContext(
            int(match[2], 16), int(match[3], 16), True, trace.TraceFlags(int(match[4], 16))
        )
        return context if context.is_valid else None

    def failed(self, span: Span, error: BaseException) -> None:
        """End a span with ``error`` recorded and an error status."""
        span.record_exception(error)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, type(error).__name__))
        span.end()
