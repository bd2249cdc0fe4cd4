"""ScriptedAdapter: a deterministic adapter for tests, demos and benchmarks."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sharedesk.protocol.authors import Agent, SessionAuthor
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, RunStarted, Text
from sharedesk.protocol.validation import check_author
from sharedesk.runs.types import AdapterResult, Emit, Run, ScriptedCall, Session


class ScriptedAdapter:
    """Answers each run with its next scripted reply and records every call.

    Each reply is emitted as a ``Text`` by the adapter's ``author`` (by default
    ``Agent(id=name, label=name)``); the transcript it is given is relative to that
    author (see ``SessionManager.execute_run``). With
    ``native_continuation=True`` the adapter keeps a provider session: a run continued
    natively (``session.context["continuation"] == "native"`` with a stored provider
    session id) reuses it; any other run opens a new one, announced by emitting
    ``RunStarted(provider=name, provider_session_id="<name>-<12 hex>")``.

    Thread-safe: calls may come from several worker threads at once.
    """

    def __init__(
        self,
        replies: Sequence[str],
        *,
        name: str = "scripted",
        native_continuation: bool = False,
        author: SessionAuthor | None = None,
    ) -> None:
        """Create the adapter.

        Args:
            replies: The replies, one per run, in order.
            name: The provider name (and the agent's id and label by default).
            native_continuation: Whether it claims provider-native continuation.
            author: The participant its replies are written by (default
                ``Agent(id=name, label=name)``).

        Raises:
            ValidationError: ``replies`` is not a sequence of ``str``, ``name`` is empty,
                or ``author`` is not a ``SessionAuthor``.
        """
        if isinstance(replies, str) or not all(isinstance(r, str) for r in replies):
            raise ValidationError("replies must be a sequence of str")
        if not isinstance(name, str) or not name:
            raise ValidationError("name must be a non-empty str")
        self._name = name
        self._author: SessionAuthor = (
            Agent(id=name, label=name) if author is None else check_author(author)
        )
        self._native = bool(native_continuation)
        self._replies = list(replies)
        self._lock = threading.Lock()
        self._calls: list[ScriptedCall] = []

    @property
    def name(self) -> str:
        """The provider name (``RunStarted.provider``) and the agent id of its replies."""
        return self._name

    @property
    def author(self) -> SessionAuthor:
        """The participant the adapter's replies are written by."""
        return self._author

    @property
    def native_continuation(self) -> bool:
        """Whether the adapter continues its own provider sessions."""
        return self._native

    @property
    def calls(self) -> list[ScriptedCall]:
        """A copy of the calls received so far, oldest first."""
        with self._lock:
            return list(self._calls)

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        """Emit the next reply as a ``Text`` and return it as the output.

        Args:
            run: The run (its input is recorded).
            session: The session (``context["transcript"]`` is recorded).
            emit: The run's emit.
            opts: ``adapter_opts`` (recorded as given).

        Returns:
            ``AdapterResult(output=reply)``.

        Raises:
            ValidationError: No reply is left.

        Cost: one or two emits.
        """
        transcript = session.context.get("transcript")
        with self._lock:
            self._calls.append(
                ScriptedCall(input=list(run.input), transcript=transcript, opts=dict(opts))
            )
            if not self._replies:
                raise ValidationError(
                    f"scripted adapter {self._name!r} has no reply left for call {len(self._calls)}"
                )
            reply = self._replies.pop(0)
        agent = self._author
        if self._native:
            stored = session.metadata.get("provider_sessions", {}).get(self._name, {})
            continued = stored.get("provider_session_id")
            if session.context.get("continuation") != "native" or not continued:
                fresh = f"{self._name}-{uuid.uuid4().hex[:12]}"
                emit(Event(agent, RunStarted(provider=self._name, provider_session_id=fresh)))
        emit(Event(agent, Text(reply)))
        return AdapterResult(output=reply)
